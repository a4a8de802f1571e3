// Package fusefs is the kernel side of kvfs: a FUSE file system, served
// through go-fuse's raw API, that turns requests into calls on the core
// (package core, which owns the namespace and the accounting), and the
// core's dropped names into kernel notices.
//
// It keeps no node tree. A node ID is the core's ID of the inode (IDs are
// never reused while a store is open, and the root's is FUSE's root ID),
// so the kernel's view needs no table here: a name the kernel looked up
// costs the daemon nothing. What fusefs keeps is only what is the
// kernel's business while it lasts: the open handles (handleTable), the
// objects that have some (objects: their handles, the passthrough backing
// file they share, whether plain readers may have cached pages), and the
// remote tier's placeholders, which are counted by the kernel's lookups
// and forgotten with them. Those tables, with the core's checkpoint, are
// all a successor needs to take the live mount over (handover.go; every
// request passes a gate that a handover closes, gate.go).
package fusefs

import (
	"context"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/ramcache"
	"github.com/kvfs/kvfs/remote"
	"go.uber.org/zap"
)

// Config tunes the adapter.
type Config struct {
	// Passthrough: every handle is served by the kernel straight from
	// the stored file (FUSE passthrough), reads and writes; the daemon
	// sees neither. Otherwise every byte passes through the daemon.
	Passthrough bool
	// CacheTimeout is how long the kernel may keep names, absent names
	// and attributes without asking again.
	CacheTimeout time.Duration
	// RAM, when set, keeps copies of objects that plain (not
	// passthrough) readers load, and serves later loads from memory.
	// Its owner closes it after the server stops.
	RAM    *ramcache.Cache
	Logger *zap.Logger
	// Remote, when set, is the shared remote tier: names the store
	// misses are looked up there and installed at open (see remoteNode).
	// Its owner closes it after the server stops.
	Remote *remote.Tier
	// Stats is what the root's stats.Xattr holds: the mount's figures as
	// JSON, gathered where the parts are wired (package mount); nil: the
	// root has no such attribute.
	Stats func() ([]byte, error)
}

// FS is one mounted kvfs: the core, and the kernel-facing bookkeeping
// of its open handles. It is the fuse.RawFileSystem the server calls
// (ops_node.go, ops_dir.go, file.go, dirstream.go).
type FS struct {
	core *core.Core
	cfg  Config
	log  *zap.Logger
	ram  *ramcache.Cache // nil: no RAM tier
	// remote is the remote tier; nil: none. Its requests are bound to
	// life, which ends at Close, not to the FUSE request that needed
	// them (see lookupRemote).
	remote  *remote.Tier
	life    context.Context
	endLife context.CancelFunc

	// server is set by Init, before any request.
	server *fuse.Server

	files   handleTable[*handle]
	dirs    handleTable[*dirStream]
	objects objects
	// rewritten are the objects whose bytes a writer changed in place
	// (see object.adopt).
	rewritten rewrites
	remotes   placeholders
	gone      goneDirs
	// root: the daemon runs as root, so new inodes go to their callers.
	root bool
	// noBacking: the kernel refused a passthrough backing file; the
	// daemon serves every handle from then on.
	noBacking atomic.Bool

	reqs *requests // counted by Instrument's wrapper; shared with the Loading before it (see Loading.Ready)

	notices notifier
	done    chan struct{}
	wg      sync.WaitGroup
}

// notice is a kernel cache invalidation, sent from a goroutine of its own
// because sending it from inside a handler can deadlock against the lock
// the kernel holds on the directory being operated on (see notify.go).
type notice struct {
	// node is the directory that held name, or, with content, the
	// inode whose cached pages and attributes go.
	node    core.ID
	name    string
	content bool
}

// New builds the file system over a loaded core. Start the core with
// Dropped before serving.
func New(c *core.Core, cfg Config) *FS {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	f := &FS{
		core:   c,
		cfg:    cfg,
		log:    cfg.Logger,
		ram:    cfg.RAM,
		remote: cfg.Remote,
		reqs:   new(requests),
		done:   make(chan struct{}),
		root:   os.Geteuid() == 0,
	}
	f.objects.init()
	f.remotes.init()
	f.notices.init()
	f.life, f.endLife = context.WithCancel(context.Background())
	f.wg.Add(1)
	go f.notifyLoop()
	return f
}

// Close stops the notifier. Call it after the server has stopped.
func (f *FS) Close() {
	f.endLife()
	close(f.done)
	f.wg.Wait()
}

// Requests counts the requests answered so far by type (see
// Instrument; a request still being answered is not in it).
func (f *FS) Requests() map[string]int64 { return f.reqs.counts() }

// Dropped tells the kernel and the RAM tier about an object whose names
// the core dropped. The core calls it without locks held.
func (f *FS) Dropped(d core.Drop) {
	f.ram.Drop(uint64(d.ID))
	for _, n := range d.Names {
		f.queue(notice{node: n.Parent, name: n.Name})
	}
}

// AttrsChanged has the kernel drop the attributes it caches of file id,
// whose charge changed where no reply carries it (an open's reservation,
// a close's settle, core.Config.Reshown), at once: dropping attributes
// alone takes no lock a client holds, so it is safe from a request's
// handler and needs no notice queue. A stat in the same clock tick as
// the last reply would reuse that reply's attributes, their timeout of
// 0 for a file with writers notwithstanding (an outside tester:
// st_blocks a reservation short of used_bytes for a sample, 1-4 in
// 500-800).
func (f *FS) AttrsChanged(id core.ID) {
	if f.server != nil {
		f.server.InodeNotify(uint64(id), -1, 0)
	}
}

// changed has the kernel drop the pages and attributes it may cache of
// object id, from the notifier's goroutine.
func (f *FS) changed(id core.ID) { f.queue(notice{node: id, content: true}) }

// Panic is go-fuse's PanicHandler: one bad request answers EIO, with its
// stack logged, and the mount keeps serving.
func (f *FS) Panic(r any) fuse.Status {
	f.log.Error("panic in handler", zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
	return fuse.EIO
}

// Not requests: what the server asks of a file system besides them.

func (f *FS) String() string           { return "kvfs" }
func (f *FS) SetDebug(debug bool)      {}
func (f *FS) Init(server *fuse.Server) { f.server = server }
func (f *FS) OnUnmount()               {}
