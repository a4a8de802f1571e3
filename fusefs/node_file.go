package fusefs

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/ledger"
	"github.com/kvfs/kvfs/ramcache"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// BackingXattr is a file's extended attribute that names its stored file,
// for loaders that read it directly while holding a handle on the mount.
const BackingXattr = "user.kvfs.backing"

// fileNode is an object: one inode, any number of names.
type fileNode struct {
	fs.Inode
	fs *FS
	id ledger.ID

	mu sync.Mutex
	// GUARDED_BY(mu). handles are the open handles, so an inode with no
	// name left can still be reached through one of their files.
	handles []*handle
	// GUARDED_BY(mu). INVARIANT: writers counts handles with active set,
	// and the store's writing marker exists while it is above zero.
	writers int
	// cached: a plain reader has been open, so the kernel may hold pages
	// of the object that a later write makes stale. Writers use direct
	// I/O and passthrough readers share the store's page cache: without
	// plain readers there is nothing to invalidate.
	cached atomic.Bool
	// touched is when an open last recorded itself in the stored file's
	// atime, in unix seconds.
	touched atomic.Int64
}

// fileAttr reads an object's attributes: through f when given, else from
// the store. A size that disagrees with the ledger while no writer is
// open means the store changed behind kvfs's back: the ledger follows the
// store, and evicts if that put it over capacity.
func (f *FS) fileAttr(id ledger.ID, file *os.File, out *fuse.Attr) error {
	var st unix.Stat_t
	var err error
	if file != nil {
		st, err = fstat(file)
	} else if st, err = f.store.Stat(id); errors.Is(err, syscall.ENOENT) {
		f.vanished(id, err)
		return blob.ErrNotFound
	}
	if err != nil {
		return err
	}
	size, charge, ok := f.ledger.Size(id)
	if !ok {
		return ledger.ErrGone
	}
	if size != st.Size && f.ledger.Writers(id) == 0 && f.ledger.Reconcile(id, st.Size) {
		f.ram.Drop(uint64(id))
		f.log.Warn("object size changed behind kvfs; ledger reconciled",
			zap.Uint64("id", uint64(id)), zap.Int64("ledger", size), zap.Int64("store", st.Size))
		f.evict(f.ledger.Trim())
		charge = ledger.Charge(st.Size)
	}
	fillAttr(out, &st, id, charge)
	out.Nlink = uint32(f.store.Links(id))
	return nil
}

// withAnyFile runs fn on the stored file of some open handle, under n.mu
// so that the handle's release cannot close the file (and free its
// descriptor number for reuse) meanwhile; fn must not take n.mu. It
// reports false, without calling fn, when no handle is open.
func (n *fileNode) withAnyFile(fn func(*os.File)) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.handles) == 0 {
		return false
	}
	fn(n.handles[0].f)
	return true
}

func (n *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno) {
	defer n.fs.guard("getattr", &errno)
	// go-fuse keeps fh from being released while this call runs.
	switch h := fh.(type) {
	case *handle:
		return n.fs.errno("getattr", n.fs.fileAttr(n.id, h.f, &out.Attr))
	case *passthroughHandle:
		return n.fs.errno("getattr", n.fs.fileAttr(n.id, h.f, &out.Attr))
	}
	var err error
	if !n.withAnyFile(func(f *os.File) { err = n.fs.fileAttr(n.id, f, &out.Attr) }) {
		err = n.fs.fileAttr(n.id, nil, &out.Attr)
		if errors.Is(err, blob.ErrNotFound) {
			// No name and no handle left: the kernel reached the
			// inode by a path that has changed since (see Open).
			return syscall.ESTALE
		}
	}
	return n.fs.errno("getattr", err)
}

func (n *fileNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) (errno syscall.Errno) {
	defer n.fs.guard("setattr", &errno)
	h, _ := fh.(*handle)
	if size, ok := in.GetSize(); ok {
		if errno := n.truncate(ctx, h, int64(size)); errno != 0 {
			return errno
		}
	}
	if h != nil {
		if err := applyAttrs(h.f, in); err != nil {
			return n.fs.errno("setattr", err)
		}
		return n.Getattr(ctx, fh, out)
	}
	f, err := n.openStored(unix.O_RDONLY)
	if err != nil {
		return n.fs.errno("setattr", err)
	}
	defer f.Close()
	if err := applyAttrs(f, in); err != nil {
		return n.fs.errno("setattr", err)
	}
	return n.Getattr(ctx, nil, out)
}

// truncate sets the size, admitted by the ledger first. The inode is
// pinned as written meanwhile, so it is neither evicted nor reconciled
// half-way.
func (n *fileNode) truncate(ctx context.Context, h *handle, size int64) syscall.Errno {
	if err := n.fs.ledger.Open(n.id, true); err != nil {
		return n.fs.errno("truncate", err)
	}
	defer n.fs.ledger.Close(n.id, true)
	var f *os.File
	if h != nil && h.write {
		f = h.f
	} else {
		var err error
		if f, err = n.openStored(unix.O_WRONLY); err != nil {
			return n.fs.errno("truncate", err)
		}
		defer f.Close()
	}
	if err := n.fs.setSize(ctx, n.id, size); err != nil {
		return n.fs.errno("truncate", err)
	}
	n.dropRAM()
	if err := f.Truncate(size); err != nil {
		n.fs.settle(n.id, f)
		return n.fs.errno("truncate", err)
	}
	n.fs.queue(notice{inode: n.EmbeddedInode()})
	return 0
}

// openStored opens the stored file: by name, or, for an inode with no
// name left, through a file an open handle holds.
func (n *fileNode) openStored(flags int) (*os.File, error) {
	f, err := n.fs.store.Open(n.id, flags)
	if !errors.Is(err, blob.ErrNotFound) {
		return f, err
	}
	n.withAnyFile(func(held *os.File) {
		f, err = os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(held.Fd())), flags|unix.O_CLOEXEC, 0)
	})
	return f, err
}

func (n *fileNode) Open(ctx context.Context, flags uint32) (_ fs.FileHandle, _ uint32, errno syscall.Errno) {
	defer n.fs.guard("open", &errno)
	write := writable(flags)
	if err := n.fs.ledger.Open(n.id, write); err != nil {
		return nil, 0, n.fs.errno("open", err)
	}
	f, err := n.openStored(openFlags(flags))
	if err != nil {
		n.fs.ledger.Close(n.id, write)
		if errors.Is(err, syscall.ENOENT) {
			n.fs.vanished(n.id, err)
		}
		if errors.Is(err, blob.ErrNotFound) {
			// The inode lost its last name after the kernel resolved
			// the path (a rename replaced it): ESTALE makes the kernel
			// look the name up again and open what it names now.
			return nil, 0, syscall.ESTALE
		}
		return nil, 0, n.fs.errno("open", err)
	}
	h := n.adoptWaiting(ctx, f, flags)
	if h == nil {
		f.Close()
		n.fs.ledger.Close(n.id, write)
		return nil, 0, syscall.ETXTBSY
	}
	if !write {
		n.touch(f)
		if !h.passthrough {
			n.cached.Store(true)
			n.attachRAM(h)
		}
	}
	return h.served(), h.fuseFlags(), 0
}

// touch records an open in the stored file's atime, which is how LRU
// order survives a restart; at most once a touchEvery, since each costs
// the store's file system a journalled inode update.
func (n *fileNode) touch(f *os.File) {
	now := time.Now()
	if last := n.touched.Load(); now.Unix()-last < touchEvery && last != 0 {
		return
	}
	n.touched.Store(now.Unix())
	ts := []unix.Timespec{timespec(now), {Nsec: unix.UTIME_OMIT}}
	unix.UtimesNanoAt(int(f.Fd()), "", ts, unix.AT_EMPTY_PATH)
}

// touchEvery is the resolution, in seconds, of the LRU order a restart
// recovers.
const touchEvery = 1

// adopt makes a handle of an opened stored file for the calling thread
// opener, or returns nil for a writer that must wait (see mayJoin).
// marked says the store's writing marker is already set for it (a fresh
// create).
func (n *fileNode) adopt(f *os.File, flags uint32, marked bool, opener uint32) *handle {
	h := &handle{n: n, f: f, write: writable(flags), opener: opener}
	n.mu.Lock()
	if !n.mayJoin(h) {
		n.mu.Unlock()
		return nil
	}
	n.handles = append(n.handles, h)
	n.mu.Unlock()
	if h.write {
		n.beginWrite(h, marked)
	}
	return h
}

// adoptWaiting is adopt for Open: a writer that passthrough handles hold
// off waits for them, up to the wait limit, since readers that clients
// have closed reach kvfs as releases only a moment after close(2).
func (n *fileNode) adoptWaiting(ctx context.Context, f *os.File, flags uint32) *handle {
	deadline := time.Now().Add(n.fs.cfg.WaitLimit)
	for {
		if h := n.adopt(f, flags, false, callerPid(ctx)); h != nil || time.Now().After(deadline) {
			return h
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Millisecond):
		}
	}
}

// mayJoin decides, with n.mu held, whether reader h is served by
// passthrough, and refuses writer h while passthrough handles are open.
// The open handles of an inode are all passthrough or none is: the
// kernel fails (EIO) a plain open of an inode that has passthrough ones,
// and go-fuse drops the inode's shared backing file at the release of
// any handle, passthrough or not, after which the next passthrough open
// fails (EIO) until every handle is closed.
func (n *fileNode) mayJoin(h *handle) bool {
	pt := 0
	for _, x := range n.handles {
		if x.passthrough {
			pt++
		}
	}
	if h.write {
		return pt == 0
	}
	h.passthrough = n.fs.cfg.Passthrough && pt == len(n.handles)
	return true
}

func (n *fileNode) forget(h *handle) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, x := range n.handles {
		if x == h {
			n.handles = append(n.handles[:i], n.handles[i+1:]...)
			return
		}
	}
}

// beginWrite records that h may change the object, so a crash from now
// until the matching endWrite leaves it marked incomplete.
func (n *fileNode) beginWrite(h *handle, marked bool) error {
	if h.active.Load() {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if h.active.Swap(true) {
		return nil
	}
	n.writers++
	n.dropRAMLocked()
	if n.writers == 1 && !marked {
		return n.fs.store.MarkWriting(h.f, n.id)
	}
	return nil
}

// attachRAM gives a plain reader the RAM tier's copy of the object, or a
// fill that makes one from its reads. It runs under n.mu with no writer
// open, so the copy is of the bytes as they are, and a writer that comes
// later finds the handle in n.handles and the fill registered, and
// cancels both (dropRAMLocked).
func (n *fileNode) attachRAM(h *handle) {
	if n.fs.ram == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.writers > 0 {
		return
	}
	st, err := fstat(h.f)
	if err != nil {
		return
	}
	stamp := ramcache.Stamp{Size: st.Size, Mtime: st.Mtim.Nano()}
	if data, ok := n.fs.ram.Get(uint64(n.id), stamp); ok {
		h.ram.Store(&data)
		return
	}
	if fill := n.fs.ram.StartFill(uint64(n.id), stamp); fill != nil {
		h.fill.Store(fill)
	}
}

// dropRAM forgets the RAM tier's copy of the object and stops every open
// handle serving or filling one: its bytes are about to change.
func (n *fileNode) dropRAM() {
	if n.fs.ram == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropRAMLocked()
}

func (n *fileNode) dropRAMLocked() {
	if n.fs.ram == nil {
		return
	}
	n.fs.ram.Drop(uint64(n.id))
	for _, h := range n.handles {
		h.ram.Store(nil)
		h.fill.Swap(nil).Abandon()
	}
}

// endWrite is the close of a writer: when no writer is left the object
// is complete, and cached pages of it may be stale.
func (n *fileNode) endWrite(h *handle) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !h.active.Swap(false) {
		return nil
	}
	n.writers--
	if n.writers > 0 {
		return nil
	}
	if n.cached.Load() {
		n.fs.queue(notice{inode: n.EmbeddedInode()})
	}
	return n.fs.store.ClearWriting(n.id)
}

func (n *fileNode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if attr != BackingXattr {
		return 0, syscall.ENODATA
	}
	rel, ok := n.fs.store.Path(n.id)
	if !ok {
		return 0, syscall.ENODATA
	}
	return copyXattr([]byte(n.fs.store.BackingPath(rel)), dest)
}

// Setxattr is refused: kvfs keeps no extended attributes of its own, and
// ENOTSUP (not go-fuse's default ENODATA) is what lets cp -a, rsync -X
// and the like carry on without them.
func (n *fileNode) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return syscall.ENOTSUP
}

func (n *fileNode) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return syscall.ENOTSUP
}

// settle sets the ledger to what the store holds after a failed write or
// truncate left less than was admitted.
func (f *FS) settle(id ledger.ID, file *os.File) {
	st, err := fstat(file)
	if size, _, _ := f.ledger.Size(id); err == nil && st.Size < size {
		f.ledger.SetSize(id, st.Size)
	}
}
