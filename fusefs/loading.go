package fusefs

import (
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/internal/stats"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Loading is the file system of a mount whose index is still being built
// (a start over millions of objects takes a minute; see
// docs/restart.md). It serves what a cache must serve at once, loads,
// from the store's files as they lie (core.Preview): lookups, attributes,
// read-only opens and reads, listings; and stores of new names, deletes,
// moves and mkdir, which the Preview takes (loading_stores.go). Every other
// request (a store over a stored name, a link of one, kvfs's own
// attributes) waits until Ready hands it the FS built over the loaded
// core, and from then on every request goes to that FS.
//
// The names it answers get node IDs and handle numbers of their own, from
// LoadBase up, so they never meet the core's. Its lookups tell the kernel
// to keep no file's name (timeouts of zero) and a directory's for a
// second (loadDirTimeout), so once the FS serves, the next use of each
// file's name looks it up again and gets the core's ID; until the kernel
// forgets a name of the load, a request on it is handed to the FS under
// the core's ID for the same path. A handle opened while loading is read
// to its release from the file it opened: by the kernel itself where the
// mount has passthrough, as the FS's readers are.
type Loading struct {
	pre  *core.Preview
	log  *zap.Logger
	reqs *requests
	cfg  LoadingConfig
	// noBacking: the kernel refused a backing file; the daemon serves
	// the load's handles from then on.
	noBacking atomic.Bool

	ready  chan struct{}      // closed by Ready
	failed chan struct{}      // closed by Fail
	fs     atomic.Pointer[FS] // set by Ready

	nodes kernelNodes[*loadNode]
	next  atomic.Uint64 // the next node ID
	mu    sync.Mutex
	// used: the paths read while loading, with the order of their last
	// read, for Ready to note in the LRU order; GUARDED_BY(mu).
	used  map[string]int
	reads int // GUARDED_BY(mu)
	// open: the load's handles by node; GUARDED_BY(mu).
	open map[core.ID]int
	// backings: the backing file each node's handles are served from
	// (the kernel takes one a node), and how many use it; GUARDED_BY(mu).
	backings map[core.ID]*loadBacking
	// writers: the stores' writers open while loading, until their
	// release; GUARDED_BY(mu).
	writers map[*core.EarlyFile]*early
	// creates is held shared by each create while loading, from the
	// Preview's create to its writer's entry in writers, and
	// exclusively by takeEarly: every writer TakeEarly hands on is in
	// writers by then.
	creates sync.RWMutex
	files   handleTable[*loadFile] // numbered from LoadBase
	dirs    handleTable[*loadDir]  // numbered from LoadBase
	server  atomic.Pointer[fuse.Server]
}

// loadDirTimeout is how long the kernel may keep a directory's name the
// load found, and its attributes, so that a path walk through it asks
// again at most this often (a load of d/obj is one LOOKUP, not two). A
// directory's node leads only to names (the FS's, once Ready, through
// the node's path) and is never the inode of a file. A file's name is
// not kept: after Ready its next use must find the core's node, as the
// kernel refuses a second backing file for the load's inode of a file
// the load has open. Absent names are never kept.
const loadDirTimeout = time.Second

// LoadBase is the first node ID and handle number Loading gives. The
// core's IDs count up from 1 and never come near: a kernel inode
// numbered from it is a load's, not an object's (see the guard's
// mount.heldObjects).
const LoadBase = 1 << 62

// loadNode is a name Loading answered: under a parent of its own or the
// root.
type loadNode struct {
	id core.ID
	// at is its parent and name; a rename of a name stored while
	// loading moves it (see kernelNodes.moved).
	at      atomic.Pointer[nameKey]
	ino     uint64 // the stored inode it stood for
	dir     bool
	lookups uint64
}

func newLoadNode(id core.ID, at nameKey, ino uint64, dir bool) *loadNode {
	n := &loadNode{id: id, ino: ino, dir: dir}
	n.at.Store(&at)
	return n
}

func (n *loadNode) nodeID() core.ID      { return n.id }
func (n *loadNode) key() nameKey         { return *n.at.Load() }
func (n *loadNode) lookupCount() *uint64 { return &n.lookups }

// loadDir is a directory listing while loading: the stored directory's
// own, less what the load would not keep.
type loadDir struct {
	mu   sync.Mutex
	f    *os.File
	pos  uint64 // offset of the next entry in ents
	ents []loadEnt
	buf  []byte
}

// loadFile is a file opened while loading, the node it was opened by,
// and whether the kernel serves it from the node's backing file.
type loadFile struct {
	*os.File
	node   core.ID
	backed bool
	early  *early // a store's writer (see loading_stores.go)
}

// loadBacking is a backing file the kernel serves a node's handles from.
type loadBacking struct {
	id   int32
	refs int
}

type loadEnt struct {
	name string
	ino  uint64
	typ  uint32 // S_IFMT bits
	off  uint64
}

var _ fuse.RawFileSystem = (*Loading)(nil)

// LoadingConfig is how a mount serves while it loads.
type LoadingConfig struct {
	// Passthrough: the load's handles are served by the kernel from
	// their stored files, as Config's.
	Passthrough bool
	// Stats is what the root's stats.Xattr holds while loading (nil:
	// it waits for the index, as kvfs's other attributes do).
	Stats  func() ([]byte, error)
	Logger *zap.Logger
}

// NewLoading serves pre until Ready.
func NewLoading(pre *core.Preview, cfg LoadingConfig) *Loading {
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	l := &Loading{pre: pre, log: log, cfg: cfg, reqs: new(requests), ready: make(chan struct{}), failed: make(chan struct{}),
		used: map[string]int{}, open: map[core.ID]int{}, backings: map[core.ID]*loadBacking{},
		writers: map[*core.EarlyFile]*early{}}
	l.nodes.init()
	l.next.Store(LoadBase)
	return l
}

// Instrument is FS.Instrument for the mount while loading; the counts
// and the handover gate pass to the FS at Ready.
func (l *Loading) Instrument(timed func(op stats.Op, took time.Duration)) fuse.RawFileSystem {
	return instrument(l, l.reqs, timed)
}

// Ready hands every request from now on, and those waiting, to fs (not
// yet serving anything else), and tells the kernel to drop the names it
// holds from the load, so that its next use of each finds the core's.
func (l *Loading) Ready(fs *FS) {
	fs.reqs = l.reqs
	if s := l.server.Load(); s != nil {
		fs.Init(s)
	}
	// What was read while loading is the most recently used, in the
	// order of its reads, before any use the FS notes.
	l.mu.Lock()
	used := slices.SortedFunc(maps.Keys(l.used), func(a, b string) int { return l.used[a] - l.used[b] })
	l.used = nil
	l.mu.Unlock()
	// Found in the index alone: a lookup through the core stats the
	// stored name, and took one moved or removed while loading, after
	// the load had indexed it, for an object vanished behind kvfs's back
	// before takeEarly settled the move (and counted a lookup no client
	// made).
	for _, p := range used {
		fs.core.UsedPath(p)
	}
	l.takeEarly(fs)
	l.fs.Store(fs)
	close(l.ready)
	l.mu.Lock()
	l.nodes.mu.Lock()
	var drop []nameKey
	for k, n := range l.nodes.byName {
		if l.open[n.id] == 0 { // an open file's name stays: dropping it shows the file deleted in /proc
			drop = append(drop, k)
		}
	}
	l.nodes.mu.Unlock()
	l.mu.Unlock()
	for _, n := range drop {
		fs.queue(notice{node: n.parent, name: n.name})
	}
}

// Removed is how many stored or made names clients removed or moved away
// while loading.
func (l *Loading) Removed() int { return l.pre.Removed() }

// Held is how many of the load's names the kernel still holds and how
// many of its handles are open: a handover waits until both are none,
// as the successor would know neither.
func (l *Loading) Held() (names, handles int) {
	return int(l.nodes.n.Load()), l.files.count() + l.dirs.count()
}

// HeldNames are the paths of up to n of the names Held counts (where a
// name's directory is itself held, or the root), for a refusal to name.
func (l *Loading) HeldNames(n int) []string {
	var out []string
	nodes, lookups := l.nodes.some(n)
	for i, x := range nodes {
		p, ok := l.path(uint64(x.id))
		if !ok {
			p = "?"
		}
		if x.dir {
			p += "/"
		}
		out = append(out, p+" ("+strconv.FormatUint(lookups[i], 10)+" lookups)")
	}
	return out
}

// loaded is the FS once Ready, or nil.
func (l *Loading) loaded() *FS {
	select {
	case <-l.ready:
		return l.fs.Load()
	default:
		return nil
	}
}

// wait is the FS, once Ready; EIO if the load failed. An interrupt does
// not end the wait: the kernel sends one for any signal the caller gets
// (a Go runtime's preemption, a program's timer), and a create or a
// delete of a local file is not expected to fail with EINTR; a fatal
// signal ends the caller's wait in the kernel without us.
func (l *Loading) wait() (*FS, fuse.Status) {
	select {
	case <-l.ready:
		return l.fs.Load(), fuse.OK
	case <-l.failed:
		return nil, fuse.EIO
	}
}

// Fail answers the requests waiting for the index, and those to come,
// with EIO: the load failed.
func (l *Loading) Fail() { close(l.failed) }

// indexed is wait, then the core's node ID put in h.
func (l *Loading) indexed(h *fuse.InHeader) (*FS, fuse.Status) {
	fs, st := l.wait()
	if st.Ok() {
		st = l.header(fs, h)
	}
	return fs, st
}

// real is the core's ID for node id, once Ready: a node of the load is
// looked up again by its path.
func (l *Loading) real(fs *FS, id uint64) (uint64, fuse.Status) {
	if id < LoadBase {
		return id, fuse.OK
	}
	p, ok := l.path(id)
	if !ok {
		return 0, fuse.Status(syscall.ESTALE)
	}
	rid, err := fs.lookupPath(p)
	if errors.Is(err, core.ErrNotFound) {
		// The name the kernel holds from the load is gone (evicted,
		// deleted): ESTALE has it walk the path again, so an open with
		// O_CREAT creates rather than fails.
		return 0, fuse.Status(syscall.ESTALE)
	}
	if err != nil {
		return 0, fs.status("lookup", err)
	}
	return uint64(rid), fuse.OK
}

// handleNode puts in *node the core's ID of the object the FS's handle
// fh is open on: a handle the FS opened, once Ready, on a name the load
// answered is used by the kernel under the load's node.
func (l *Loading) handleNode(fs *FS, node *uint64, fh uint64) {
	if *node >= LoadBase {
		if h, put, ok := fs.files.get(fh); ok {
			*node = uint64(h.ID())
			put()
		}
	}
}

// header is h with its node ID the core's.
func (l *Loading) header(fs *FS, h *fuse.InHeader) fuse.Status {
	id, st := l.real(fs, h.NodeId)
	h.NodeId = id
	return st
}

// noParent is the parent of a load's node whose name was removed: no
// node has it, so the node has no path.
const noParent core.ID = 0

// path is the path of node id under data/; false: not a directory of
// the load's or the root.
func (l *Loading) path(id uint64) (string, bool) {
	var parts []string
	for id != uint64(core.RootID) {
		n := l.nodes.get(core.ID(id))
		if n == nil {
			return "", false
		}
		at := n.key()
		parts = append(parts, at.name)
		id = uint64(at.parent)
	}
	slices.Reverse(parts)
	return strings.Join(parts, "/"), true
}

// errno is FS.errno's, for the load's requests.
func (l *Loading) errno(op string, err error) fuse.Status {
	return fuse.Status(errnoOf(l.log, op, err))
}

func (l *Loading) String() string           { return "kvfs" }
func (l *Loading) SetDebug(debug bool)      {}
func (l *Loading) OnUnmount()               {}
func (l *Loading) Init(server *fuse.Server) { l.server.Store(server) }

// Panic is FS.Panic's answer before there is an FS.
func (l *Loading) Panic(r any) fuse.Status {
	if fs := l.loaded(); fs != nil {
		return fs.Panic(r)
	}
	l.log.Error("panic while loading", zap.Any("panic", r), zap.Stack("stack"))
	return fuse.EIO
}

// The requests the load serves itself.

func (l *Loading) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if fs := l.loaded(); fs != nil {
		parent := header.NodeId
		if st := l.header(fs, header); !st.Ok() {
			return st
		}
		st := fs.Lookup(cancel, header, name, out)
		l.dirBelow(fs, parent, name, st, out)
		l.under(fs, parent, name)
		return st
	}
	if name == "." || name == ".." {
		return fuse.Status(syscall.ESTALE)
	}
	if err := checkName(name); err != nil {
		return l.errno("lookup", err)
	}
	dir, ok := l.path(header.NodeId)
	if !ok {
		return fuse.Status(syscall.ESTALE)
	}
	a, err := l.pre.Attr(path.Join(dir, name))
	if errors.Is(err, core.ErrNotFound) {
		out.NodeId = 0 // absent, and not to be remembered
		return fuse.OK
	}
	if err != nil {
		return l.errno("lookup", err)
	}
	if testHookLoadLookup != nil {
		testHookLoadLookup()
	}
	parent := core.ID(header.NodeId)
	l.entry(parent, name, a, out)
	if fs := l.loaded(); fs != nil {
		// Ready came after this lookup began, and may have listed the
		// names to drop before its node was made: the kernel is told
		// to forget this one too, or it would hold it, and a handover
		// would wait for it, until a client looked it up again (found
		// reading the code for an outside tester's refused handovers,
		// whose cause was the one under describes). The notice waits
		// in the kernel for the directory's lock, which the lookup
		// holds until its answer is in.
		fs.queue(notice{node: parent, name: name})
	}
	return fuse.OK
}

// under has the kernel forget name in directory parent, where parent is
// a directory node of the load's and the load is done (fs): the name a
// request just made there, found or absent or made. Ready had the
// kernel forget the load's names, but a path walk that had reached
// such a directory before goes on through it, and every name it then
// looks up or makes there, absent ones too, is a name the kernel keeps
// under that directory, which keeps the directory: a node of the load's
// that no client can reach again (a new walk finds the directory's new
// node), so no lookup ever revalidates it, and every handover was
// refused for it (an outside tester: 5 starts of 6 under lookups from
// 5 threads, "1 names"/"2 names" held past 100 s, a full `find` did not
// help; replayed here, the names held were top directories). The notice
// waits in the kernel for the directory's lock, which the request holds
// until its answer is in.
func (l *Loading) under(fs *FS, parent uint64, name string) {
	if parent >= LoadBase {
		fs.queue(notice{node: core.ID(parent), name: name})
	}
}

// testHookLoadLookup, when set, runs in a lookup while loading between
// its look at the store and the node it makes.
var testHookLoadLookup func()

// entry answers a lookup of name in parent that found a.
func (l *Loading) entry(parent core.ID, name string, a core.Attr, out *fuse.EntryOut) {
	n := l.nodes.lookedUp(nameKey{parent, name}, func(n *loadNode) bool { return n.ino == a.Ino }, func() *loadNode {
		return newLoadNode(core.ID(l.next.Add(1)-1), nameKey{parent, name}, a.Ino, a.Mode&syscall.S_IFMT == syscall.S_IFDIR)
	})
	out.NodeId, out.Generation = uint64(n.id), 0
	fillAttr(&out.Attr, core.ID(out.NodeId), a)
	if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		out.SetEntryTimeout(loadDirTimeout)
		out.SetAttrTimeout(loadDirTimeout)
	}
}

func (l *Loading) Forget(nodeid, nlookup uint64) {
	if nodeid < LoadBase {
		if fs := l.loaded(); fs != nil {
			fs.Forget(nodeid, nlookup)
		}
		return
	}
	l.nodes.forget(core.ID(nodeid), nlookup)
}

// dirBelow keeps a directory the FS answered (LOOKUP, MKDIR), once
// Ready, under a directory node of the load's a node of the load's: the
// kernel gives a directory inode one name, and a directory is two inodes
// across the switch (the load's node and the core's), so one reached
// under both nodes of its parent would be one inode under two parents,
// which the kernel answers ESTALE when it cannot take the locks to move
// its name. A directory reached through a node of the load's stays one
// (its listings, too, are the load's: OpenDir), and its requests go to
// the FS under the core's ID for its path, as every load node's do.
func (l *Loading) dirBelow(fs *FS, parent uint64, name string, st fuse.Status, out *fuse.EntryOut) {
	if !st.Ok() || parent < LoadBase || out.NodeId == 0 || out.Attr.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return
	}
	fs.Forget(out.NodeId, 1) // the kernel holds no node of the FS's from this answer
	n := l.nodes.lookedUp(nameKey{core.ID(parent), name}, func(n *loadNode) bool { return n.dir }, func() *loadNode {
		return newLoadNode(core.ID(l.next.Add(1)-1), nameKey{core.ID(parent), name}, out.Attr.Ino, true)
	})
	out.NodeId, out.Attr.Ino = uint64(n.id), uint64(n.id)
}

// attr is a node's attributes while loading.
func (l *Loading) attr(id uint64) (core.Attr, fuse.Status) {
	p, ok := l.path(id)
	if !ok {
		return core.Attr{}, fuse.Status(syscall.ESTALE)
	}
	a, err := l.pre.Attr(p)
	if err != nil {
		return core.Attr{}, l.errno("getattr", err)
	}
	return a, fuse.OK
}

func (l *Loading) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	id := in.NodeId
	if fh := in.Fh(); fh >= LoadBase && in.Flags()&fuse.FUSE_GETATTR_FH != 0 {
		f, put, ok := l.files.get(fh - LoadBase)
		if !ok {
			return fuse.EBADF
		}
		defer put()
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			return l.errno("getattr", err)
		}
		fillAttr(&out.Attr, core.ID(id), core.StoredAttr(st))
		return fuse.OK
	}
	if n := l.nodes.get(core.ID(id)); id >= LoadBase && n != nil && n.key().parent == noParent {
		return l.removedAttr(core.ID(id), out)
	}
	if fs := l.loaded(); fs != nil {
		if st := l.header(fs, &in.InHeader); !st.Ok() {
			return st
		}
		if in.Fh() >= LoadBase {
			in.Flags_ &^= fuse.FUSE_GETATTR_FH
		}
		st := fs.GetAttr(cancel, in, out)
		if st.Ok() && id >= LoadBase {
			out.Attr.Ino = id // the kernel's inode is the load's
		}
		return st
	}
	a, st := l.attr(id)
	if !st.Ok() {
		return st
	}
	fillAttr(&out.Attr, core.ID(id), a)
	return fuse.OK
}

// removedAttr is the attributes of node id, whose name was removed while
// loading, read from a handle still open on it (an fstat of a deleted
// file, which the kernel asks without the handle); ESTALE with none.
func (l *Loading) removedAttr(id core.ID, out *fuse.AttrOut) fuse.Status {
	var fhs []uint64
	l.files.each(func(fh uint64, f *loadFile) {
		if f.node == id {
			fhs = append(fhs, fh)
		}
	})
	for _, fh := range fhs {
		f, put, ok := l.files.get(fh)
		if !ok || f.node != id {
			continue // released meanwhile, its number maybe reused
		}
		var st unix.Stat_t
		err := unix.Fstat(int(f.Fd()), &st)
		put()
		if err != nil {
			return l.errno("getattr", err)
		}
		fillAttr(&out.Attr, id, core.StoredAttr(st))
		return fuse.OK
	}
	return fuse.Status(syscall.ESTALE)
}

func (l *Loading) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	if fs := l.loaded(); fs != nil {
		if st := l.header(fs, &in.InHeader); !st.Ok() {
			return st
		}
		return fs.Access(cancel, in)
	}
	a, st := l.attr(in.NodeId)
	if !st.Ok() {
		return st
	}
	if !hasAccess(&in.Caller, a.Uid, a.Gid, a.Mode, in.Mask) {
		return fuse.EACCES
	}
	return fuse.OK
}

func (l *Loading) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	fs := l.loaded()
	if fs == nil && (writable(in.Flags) || in.Flags&syscall.O_TRUNC != 0) {
		var st fuse.Status
		if fs, st = l.wait(); !st.Ok() {
			return st
		}
	}
	if fs != nil {
		if st := l.header(fs, &in.InHeader); !st.Ok() {
			return st
		}
		return fs.Open(cancel, in, out)
	}
	p, ok := l.path(in.NodeId)
	if !ok {
		return fuse.Status(syscall.ESTALE)
	}
	f, err := l.pre.Open(p, false)
	if err != nil {
		return l.errno("open", err)
	}
	lf := &loadFile{File: f, node: core.ID(in.NodeId)}
	l.mu.Lock()
	if l.used != nil { // nil once Ready has noted them
		l.reads++
		l.used[p] = l.reads
	}
	l.open[lf.node]++
	l.mu.Unlock()
	if id := l.backing(lf); id != 0 {
		out.BackingID = id
		out.OpenFlags |= fuse.FOPEN_PASSTHROUGH
	}
	out.Fh = LoadBase + l.files.add(lf)
	return fuse.OK
}

// backing has the kernel serve f's reads from its node's backing file,
// registered from f if the node has none, where the mount has
// passthrough and the kernel takes it: the backing ID, or 0 (the daemon
// serves f). A node's handles all use one: the kernel refuses a second.
func (l *Loading) backing(f *loadFile) int32 {
	s := l.server.Load()
	if !l.cfg.Passthrough || s == nil || l.noBacking.Load() {
		return 0
	}
	l.mu.Lock()
	b := l.backings[f.node]
	if b != nil {
		b.refs++
	}
	l.mu.Unlock()
	if b == nil {
		// Registered without the lock; an open of the same node that
		// registered meanwhile wins, and this one is given back.
		id := registerBacking(s, f.File, &l.noBacking, l.log, "the daemon serves the load's reads")
		if id == 0 {
			return 0
		}
		l.mu.Lock()
		if b = l.backings[f.node]; b == nil {
			b = &loadBacking{id: id}
			l.backings[f.node] = b
		}
		b.refs++
		l.mu.Unlock()
		if b.id != id {
			unregisterBacking(s, id, l.log)
		}
	}
	f.backed = true
	return b.id
}

// releaseBacking ends f's use of its node's backing file; the last user
// unregisters it.
func (l *Loading) releaseBacking(f *loadFile) {
	if !f.backed {
		return
	}
	l.mu.Lock()
	b := l.backings[f.node]
	last := b.refs == 1
	if b.refs--; last {
		delete(l.backings, f.node)
	}
	l.mu.Unlock()
	if last {
		unregisterBacking(l.server.Load(), b.id, l.log)
	}
}

func (l *Loading) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	if in.Fh < LoadBase {
		fs, st := l.wait()
		if !st.Ok() {
			return nil, st
		}
		l.handleNode(fs, &in.NodeId, in.Fh)
		return fs.Read(cancel, in, buf)
	}
	f, put, ok := l.files.get(in.Fh - LoadBase)
	if !ok {
		return nil, fuse.EBADF
	}
	defer put()
	n, err := f.ReadAt(buf[:min(len(buf), int(in.Size))], int64(in.Offset))
	if err != nil && n == 0 && !errors.Is(err, io.EOF) {
		return nil, l.errno("read", err)
	}
	return fuse.ReadResultData(buf[:n]), fuse.OK
}

func (l *Loading) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	if in.Fh < LoadBase {
		fs, st := l.wait()
		if !st.Ok() {
			return st
		}
		l.handleNode(fs, &in.NodeId, in.Fh)
		return fs.Lseek(cancel, in, out)
	}
	f, put, ok := l.files.get(in.Fh - LoadBase)
	if !ok {
		return fuse.EBADF
	}
	defer put()
	off, err := unix.Seek(int(f.Fd()), int64(in.Offset), int(in.Whence))
	if err != nil {
		return l.errno("lseek", err)
	}
	out.Offset = uint64(off)
	return fuse.OK
}

func (l *Loading) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	if in.Fh >= LoadBase {
		return l.flushEarly(cancel, in)
	}
	fs, st := l.wait()
	if !st.Ok() {
		return st
	}
	l.handleNode(fs, &in.NodeId, in.Fh)
	return fs.Flush(cancel, in)
}

func (l *Loading) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if in.Fh >= LoadBase {
		return l.fsyncEarly(cancel, in)
	}
	fs, st := l.wait()
	if !st.Ok() {
		return st
	}
	l.handleNode(fs, &in.NodeId, in.Fh)
	return fs.Fsync(cancel, in)
}

func (l *Loading) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	if in.Fh >= LoadBase {
		if f, ok := l.files.take(in.Fh - LoadBase); ok {
			l.releaseBacking(f)
			if f.early != nil {
				l.releaseEarly(cancel, f.early)
			}
			l.mu.Lock()
			last := false
			if l.open[f.node]--; l.open[f.node] == 0 {
				delete(l.open, f.node)
				last = true
			}
			l.mu.Unlock()
			f.Close()
			if fs := l.loaded(); fs != nil && last {
				// Ready kept this name for its open file: it goes now,
				// or a handover would wait for a lookup of it forever.
				if k, ok := l.nodes.nameOf(f.node); ok {
					fs.queue(notice{node: k.parent, name: k.name})
				}
			}
		}
		return
	}
	if fs := l.loaded(); fs != nil {
		fs.Release(cancel, in)
	}
}

func (l *Loading) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if fs := l.loaded(); fs != nil && in.NodeId < LoadBase {
		if st := l.header(fs, &in.InHeader); !st.Ok() {
			return st
		}
		return fs.OpenDir(cancel, in, out)
	}
	p, ok := l.path(in.NodeId)
	if !ok {
		return fuse.Status(syscall.ESTALE)
	}
	f, err := l.pre.Open(p, true)
	if err != nil {
		return l.errno("opendir", err)
	}
	out.Fh = LoadBase + l.dirs.add(&loadDir{f: f})
	return fuse.OK
}

func (l *Loading) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if in.Fh < LoadBase {
		fs, st := l.wait()
		if !st.Ok() {
			return st
		}
		return fs.ReadDir(cancel, in, out)
	}
	return l.readDir(in, out, false)
}

func (l *Loading) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if in.Fh < LoadBase {
		fs, st := l.wait()
		if !st.Ok() {
			return st
		}
		return fs.ReadDirPlus(cancel, in, out)
	}
	return l.readDir(in, out, true)
}

// readDir lists a directory of the load from its stored listing, at the
// stored directory's own offsets. With plus, each entry goes without
// attributes (node ID 0: the kernel makes no entry of it, and a use of
// the name looks it up).
func (l *Loading) readDir(in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	d, put, ok := l.dirs.get(in.Fh - LoadBase)
	if !ok {
		return fuse.EBADF
	}
	defer put()
	d.mu.Lock()
	defer d.mu.Unlock()
	if in.Offset != d.pos || d.buf == nil {
		if _, err := unix.Seek(int(d.f.Fd()), int64(in.Offset), 0); err != nil {
			return l.errno("readdir", err)
		}
		d.pos, d.ents = in.Offset, nil
		if d.buf == nil {
			d.buf = make([]byte, 32<<10)
		}
	}
	for {
		if len(d.ents) == 0 {
			n, err := unix.Getdents(int(d.f.Fd()), d.buf)
			if err != nil {
				return l.errno("readdir", err)
			}
			if n == 0 {
				return fuse.OK
			}
			d.ents = parseDirents(d.buf[:n], d.ents[:0])
		}
		e := d.ents[0]
		if e.name == "." || e.name == ".." || l.pre.Shown(e.typ, e.ino) {
			de := fuse.DirEntry{Name: e.name, Mode: e.typ, Ino: e.ino, Off: e.off}
			if plus {
				if out.AddDirLookupEntry(de) == nil {
					return fuse.OK
				}
			} else if !out.AddDirEntry(de) {
				return fuse.OK
			}
		}
		d.ents, d.pos = d.ents[1:], e.off
	}
}

// parseDirents appends the entries of a getdents64 buffer.
func parseDirents(buf []byte, ents []loadEnt) []loadEnt {
	for len(buf) >= 19 {
		reclen := int(buf[16]) | int(buf[17])<<8
		if reclen < 19 || reclen > len(buf) {
			break
		}
		name := buf[19:reclen]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		ents = append(ents, loadEnt{
			ino:  binary.NativeEndian.Uint64(buf[0:8]),
			off:  binary.NativeEndian.Uint64(buf[8:16]),
			typ:  uint32(buf[18]) << 12,
			name: string(name),
		})
		buf = buf[reclen:]
	}
	return ents
}

func (l *Loading) ReleaseDir(in *fuse.ReleaseIn) {
	if in.Fh >= LoadBase {
		if d, ok := l.dirs.take(in.Fh - LoadBase); ok {
			d.f.Close()
		}
		return
	}
	if fs := l.loaded(); fs != nil {
		fs.ReleaseDir(in)
	}
}

func (l *Loading) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if in.Fh >= LoadBase {
		return fuse.OK
	}
	fs, st := l.indexed(&in.InHeader)
	if !st.Ok() {
		return st
	}
	return fs.FsyncDir(cancel, in)
}

// StatFs while loading is the store's disk's: the ledger's figures come
// with the index.
func (l *Loading) StatFs(cancel <-chan struct{}, header *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	if fs := l.loaded(); fs != nil {
		return fs.StatFs(cancel, header, out)
	}
	st, err := l.pre.Statfs()
	if err != nil {
		return l.errno("statfs", err)
	}
	out.Bsize, out.Frsize, out.NameLen = uint32(st.Bsize), uint32(st.Frsize), uint32(core.NameMax)
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Bfree, st.Bavail
	out.Files, out.Ffree = st.Files, st.Ffree
	return fuse.OK
}

// GetXAttr: kvfs's own attributes wait for the index; no other kind is
// kept (ls -l asks for ACLs and labels of every name).
func (l *Loading) GetXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	fs := l.loaded()
	if fs == nil && header.NodeId == fuse.FUSE_ROOT_ID && attr == stats.Xattr && l.cfg.Stats != nil {
		// `kvfs stats` is answered at once: the load's own figures.
		data, err := l.cfg.Stats()
		if err != nil {
			return 0, l.errno("getxattr", err)
		}
		return xattrReply(data, dest)
	}
	if fs == nil && len(attr) > len(kvfsXattrs) && attr[:len(kvfsXattrs)] == kvfsXattrs {
		var st fuse.Status
		if fs, st = l.wait(); !st.Ok() {
			return 0, st
		}
	}
	if fs == nil {
		return 0, fuse.Status(syscall.ENODATA)
	}
	if st := l.header(fs, header); !st.Ok() {
		return 0, st
	}
	return fs.GetXAttr(cancel, header, attr, dest)
}

// kvfsXattrs prefixes kvfs's own extended attributes.
const kvfsXattrs = "user.kvfs."

// ListXAttr lists none while loading (ls -l asks it of every name).
func (l *Loading) ListXAttr(cancel <-chan struct{}, header *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	fs := l.loaded()
	if fs == nil {
		return 0, fuse.OK
	}
	if st := l.header(fs, header); !st.Ok() {
		return 0, st
	}
	return fs.ListXAttr(cancel, header, dest)
}

func (l *Loading) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	return fuse.ENOSYS // as FS's
}

func (l *Loading) Readlink(cancel <-chan struct{}, header *fuse.InHeader) ([]byte, fuse.Status) {
	return nil, fuse.ENOTSUP // as FS's
}

func (l *Loading) GetLk(cancel <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	return fuse.ENOTSUP // as FS's
}
func (l *Loading) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status  { return fuse.ENOTSUP }
func (l *Loading) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status { return fuse.ENOTSUP }

// The requests that wait for the index.

func (l *Loading) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	id := in.NodeId
	fs, st := l.indexed(&in.InHeader)
	if !st.Ok() {
		return st
	}
	if in.Valid&fuse.FATTR_FH != 0 && in.Fh >= LoadBase {
		in.Valid &^= fuse.FATTR_FH // a handle of the load's: read-only
	}
	st = fs.SetAttr(cancel, in, out)
	if st.Ok() && id >= LoadBase {
		out.Attr.Ino = id
	}
	return st
}

func (l *Loading) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	parent := in.NodeId
	fs, st := l.indexed(&in.InHeader)
	if !st.Ok() {
		return st
	}
	defer l.under(fs, parent, name)
	return fs.Mknod(cancel, in, name, out)
}

func (l *Loading) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	if l.loaded() == nil {
		if st, done := l.mkdirEarly(in, name, out); done {
			return st
		}
	}
	parent := in.NodeId
	fs, st := l.indexed(&in.InHeader)
	if !st.Ok() {
		return st
	}
	st = fs.Mkdir(cancel, in, name, out)
	l.dirBelow(fs, parent, name, st, out)
	l.under(fs, parent, name)
	return st
}

func (l *Loading) Unlink(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	if l.loaded() == nil {
		if st, done := l.unlinkEarly(header, name); done {
			return st
		}
	}
	fs, st := l.indexed(header)
	if !st.Ok() {
		return st
	}
	return fs.Unlink(cancel, header, name)
}

func (l *Loading) Rmdir(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	fs, st := l.indexed(header)
	if !st.Ok() {
		return st
	}
	return fs.Rmdir(cancel, header, name)
}

func (l *Loading) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	if l.loaded() == nil {
		if st, done := l.renameEarly(in, oldName, newName); done {
			return st
		}
	}
	parent, newdir := in.NodeId, in.Newdir
	fs, st := l.indexed(&in.InHeader)
	if !st.Ok() {
		return st
	}
	if in.Newdir, st = l.real(fs, in.Newdir); !st.Ok() {
		return st
	}
	if st = fs.Rename(cancel, in, oldName, newName); st.Ok() && (parent >= LoadBase || newdir >= LoadBase) {
		// The kernel moves the name, and a node of the load's found
		// through it goes with it.
		l.nodes.moved(nameKey{core.ID(parent), oldName}, nameKey{core.ID(newdir), newName},
			func(n *loadNode, at nameKey) { n.at.Store(&at) })
	}
	l.under(fs, newdir, newName)
	return st
}

func (l *Loading) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	if l.loaded() == nil {
		if st, done := l.linkEarly(in, name, out); done {
			return st
		}
	}
	parent := in.NodeId
	fs, st := l.indexed(&in.InHeader)
	if !st.Ok() {
		return st
	}
	if in.Oldnodeid, st = l.real(fs, in.Oldnodeid); !st.Ok() {
		return st
	}
	defer l.under(fs, parent, name)
	return fs.Link(cancel, in, name, out)
}

func (l *Loading) Symlink(cancel <-chan struct{}, header *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	parent := header.NodeId
	fs, st := l.indexed(header)
	if !st.Ok() {
		return st
	}
	defer l.under(fs, parent, name)
	return fs.Symlink(cancel, header, target, name, out)
}

func (l *Loading) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	fs, st := l.indexed(&in.InHeader)
	if !st.Ok() {
		return st
	}
	return fs.SetXAttr(cancel, in, attr, data)
}

func (l *Loading) RemoveXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string) fuse.Status {
	fs, st := l.indexed(header)
	if !st.Ok() {
		return st
	}
	return fs.RemoveXAttr(cancel, header, attr)
}

func (l *Loading) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if l.loaded() == nil {
		if st, done := l.createEarly(in, name, out); done {
			return st
		}
	}
	parent := in.NodeId
	fs, st := l.indexed(&in.InHeader)
	if !st.Ok() {
		return st
	}
	defer l.under(fs, parent, name)
	return fs.Create(cancel, in, name, out)
}

func (l *Loading) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	return fuse.ENOTSUP // as FS's
}

func (l *Loading) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if in.Fh >= LoadBase {
		return l.writeEarly(cancel, in, data)
	}
	fs, st := l.wait()
	if !st.Ok() {
		return 0, st
	}
	l.handleNode(fs, &in.NodeId, in.Fh)
	return fs.Write(cancel, in, data)
}

func (l *Loading) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	if in.Fh >= LoadBase {
		return l.writeEarly(cancel, in, data...)
	}
	fs, st := l.wait()
	if !st.Ok() {
		return 0, st
	}
	l.handleNode(fs, &in.NodeId, in.Fh)
	return fs.Writev(cancel, in, data)
}

func (l *Loading) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	if in.Fh >= LoadBase {
		return l.fallocateEarly(cancel, in)
	}
	fs, st := l.wait()
	if !st.Ok() {
		return st
	}
	l.handleNode(fs, &in.NodeId, in.Fh)
	return fs.Fallocate(cancel, in)
}

// CopyFileRange from or to a handle of the load's: EXDEV, so the kernel
// copies by reading and writing.
func (l *Loading) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	if in.FhIn >= LoadBase || in.FhOut >= LoadBase {
		return 0, fuse.Status(syscall.EXDEV)
	}
	fs, st := l.indexed(&in.InHeader)
	if !st.Ok() {
		return 0, st
	}
	if in.NodeIdOut, st = l.real(fs, in.NodeIdOut); !st.Ok() {
		return 0, st
	}
	return fs.CopyFileRange(cancel, in)
}

func (l *Loading) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	if in.Fh >= LoadBase {
		return fuse.Status(syscall.ENOTTY)
	}
	fs, st := l.indexed(&in.InHeader)
	if !st.Ok() {
		return st
	}
	return fs.Ioctl(cancel, in, inbuf, out, outbuf)
}

// lookupPath is the core's ID of a path under the root ("" is the root).
func (f *FS) lookupPath(p string) (core.ID, error) {
	id := core.RootID
	if p == "" {
		return id, nil
	}
	for _, name := range strings.Split(p, "/") {
		e, _, err := f.core.Lookup(id, name)
		if err != nil {
			return 0, err
		}
		id = e.ID
	}
	return id, nil
}
