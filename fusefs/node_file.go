package fusefs

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/ramcache"
	"golang.org/x/sys/unix"
)

// BackingXattr is a file's extended attribute that names its stored file,
// for loaders that read it directly while holding a handle on the mount.
const BackingXattr = "user.kvfs.backing"

// fileNode is an object: one inode, any number of names.
type fileNode struct {
	fs.Inode
	fs *FS
	id blob.ID

	mu sync.Mutex
	// GUARDED_BY(mu). handles are the open handles, so an inode with no
	// name left can still be reached through one of their files.
	handles []*handle
	// GUARDED_BY(mu). writers counts handles that may be writing (from
	// open to their writer's close): while there is one, no RAM copy is
	// made or served.
	writers int
	// cached: a plain reader has been open, so the kernel may hold pages
	// of the object that a later write makes stale. Plain writers use
	// direct I/O and passthrough handles share the store's page cache:
	// without plain readers there is nothing to invalidate.
	cached atomic.Bool
	// touched is when an open last recorded itself in the stored file's
	// atime, in unix seconds.
	touched atomic.Int64
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
	fn(n.handles[0].File())
	return true
}

// reopen opens the stored file of an inode with no name left through a
// file one of its handles holds.
func (n *fileNode) reopen(flags int) (f *os.File, err error) {
	err = core.ErrStale
	n.withAnyFile(func(held *os.File) {
		f, err = os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(held.Fd())), flags|unix.O_CLOEXEC, 0)
	})
	return f, err
}

func (n *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var a core.Attr
	var err error
	if h := handleOf(fh); h != nil {
		// go-fuse keeps fh from being released while this call runs.
		a, err = h.Attr()
	} else if !n.withAnyFile(func(f *os.File) { a, err = n.fs.core.Getattr(n.id, f) }) {
		a, err = n.fs.core.Getattr(n.id, nil)
	}
	if err != nil {
		return n.fs.errno("getattr", err)
	}
	fillAttr(&out.Attr, n.id, a)
	return 0
}

func (n *fileNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	h := handleOf(fh)
	if size, ok := in.GetSize(); ok {
		if err := n.truncate(h, int64(size)); err != nil {
			return n.fs.errno("setattr", err)
		}
	}
	f, err := n.attrFile(h)
	if err == nil {
		err = applyAttrs(f, in, true)
		if h == nil {
			f.Close()
		}
	}
	if err != nil {
		return n.fs.errno("setattr", err)
	}
	return n.Getattr(ctx, fh, out)
}

// attrFile is the stored file a SETATTR changes: the handle's, or one
// opened for it.
func (n *fileNode) attrFile(h *handle) (*os.File, error) {
	if h != nil {
		return h.File(), nil
	}
	return n.fs.core.OpenStored(n.id, unix.O_RDONLY)
}

// truncate sets the size through a writer's handle, or by name.
func (n *fileNode) truncate(h *handle, size int64) error {
	var f *os.File
	if h != nil && h.Writable() {
		f = h.File()
	}
	n.dropRAM()
	if err := n.fs.core.Truncate(n.id, f, size); err != nil {
		return err
	}
	n.fs.queue(notice{inode: n.EmbeddedInode()})
	return nil
}

func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	write := writable(flags)
	if write {
		n.startWrite()
	}
	ch, err := n.fs.core.Open(n.id, n.fs.openFlags(flags), write, n.reopen)
	if err != nil {
		if write {
			n.endWrite()
		}
		return nil, 0, n.fs.errno("open", err)
	}
	h := n.adopt(ch)
	if !write {
		n.touch(ch.File())
		if !h.passthrough {
			n.cached.Store(true)
			n.attachRAM(h)
		}
	}
	return h.served(), h.fuseFlags(), 0
}

// touch records an open in the stored file's atime, which is how LRU
// order survives a crash; at most once a touchEvery, since each costs the
// store's file system a journalled inode update.
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
// after a crash recovers.
const touchEvery = 1

// adopt makes the FUSE handle of a core handle; a writer has been counted
// by startWrite.
func (n *fileNode) adopt(ch *core.Handle) *handle {
	h := &handle{Handle: ch, n: n, passthrough: n.fs.cfg.Passthrough, writing: ch.Writable()}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.handles = append(n.handles, h)
	return h
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

// startWrite counts a writer about to open: the object's bytes may change
// from now on, so RAM copies go and none is made until it closes. adopt
// makes the count the handle's (writing), or endWrite takes it back.
func (n *fileNode) startWrite() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.writers++
	n.dropRAMLocked()
}

func (n *fileNode) endWrite() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.writers--
}

// doneWriting uncounts h as it is released.
func (n *fileNode) doneWriting(h *handle) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if h.writing {
		h.writing = false
		n.writers--
	}
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
	var st unix.Stat_t
	if unix.Fstat(int(h.File().Fd()), &st) != nil {
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

func (n *fileNode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if attr != BackingXattr {
		return 0, n.fs.errno("getxattr", errNoAttr)
	}
	if !n.fs.cfg.Passthrough && n.beingWritten() {
		return 0, n.fs.errno("getxattr", errDirectWrite)
	}
	path, ok := n.fs.core.BackingPath(n.id)
	if !ok {
		return 0, n.fs.errno("getxattr", errNoAttr)
	}
	return n.fs.copyXattr([]byte(path), dest)
}

// beingWritten says whether a writer has the object open. Without
// passthrough the core does not poll writers' stored files (every byte
// is to pass through it), so it names no stored file while one is open:
// a direct write (package gpudirect) would bypass the ledger.
func (n *fileNode) beingWritten() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.writers > 0
}

func (n *fileNode) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return n.fs.errno("setxattr", errNoSetAttr)
}

func (n *fileNode) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return n.fs.errno("removexattr", errNoSetAttr)
}
