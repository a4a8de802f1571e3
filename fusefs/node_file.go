package fusefs

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
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
	id core.ID

	mu sync.Mutex
	// GUARDED_BY(mu). handles are the open handles, so an inode with no
	// name left can still be reached through one of their files.
	handles []*handle
	// cached: a plain reader has been open, so the kernel may hold pages
	// of the object that a later write makes stale. Plain writers use
	// direct I/O and passthrough handles share the store's page cache:
	// without plain readers there is nothing to invalidate.
	cached atomic.Bool
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
	n.changed()
	return nil
}

// truncated is told that the core cut the object's bytes (an O_TRUNC
// that CreateOrOpen carried out): the RAM tier's copy goes, and what the
// kernel caches of it.
func (n *fileNode) truncated() {
	n.dropRAM()
	n.changed()
}

// changed has the kernel drop the pages it may cache of the object, from
// the notifier's goroutine.
func (n *fileNode) changed() { n.fs.queue(notice{inode: n.EmbeddedInode()}) }

func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ch, err := n.fs.core.Open(n.id, n.fs.core.StoredFlags(int(flags)), writable(flags), n.reopen)
	if err != nil {
		return nil, 0, n.fs.errno("open", err)
	}
	h := n.opened(ch)
	return h.served(), h.fuseFlags(), 0
}

// opened makes the FUSE handle of a core handle that opened an existing
// object: a plain reader may have the kernel cache its pages, and may be
// served from the RAM tier.
func (n *fileNode) opened(ch *core.Handle) *handle {
	h := n.adopt(ch)
	if !ch.Writable() && !h.passthrough {
		n.cached.Store(true)
		n.attachRAM(h)
	}
	return h
}

// adopt makes the FUSE handle of a core handle. A writer's object may
// change from now on, so the RAM tier's copies of it go: the core counts
// the writer before this runs, and attachRAM makes no copy while it does.
func (n *fileNode) adopt(ch *core.Handle) *handle {
	h := &handle{Handle: ch, n: n, passthrough: n.fs.cfg.Passthrough}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.handles = append(n.handles, h)
	if ch.Writable() {
		n.dropRAMLocked()
	}
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

// attachRAM gives a plain reader the RAM tier's copy of the object, or a
// fill that makes one from its reads. It runs under n.mu while the core
// counts no writer of the object, so the copy is of the bytes as they
// are; a writer is counted by the core before adopt takes n.mu, so one
// that opens later finds the handle in n.handles and the fill
// registered, and cancels both (dropRAMLocked).
func (n *fileNode) attachRAM(h *handle) {
	if n.fs.ram == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fs.core.Writers(n.id) > 0 {
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
	// The core says whether the stored file may be named (see
	// core.DirectPath).
	path, err := n.fs.core.DirectPath(n.id)
	if err != nil {
		return 0, n.fs.errno("getxattr", err)
	}
	return n.fs.copyXattr([]byte(path), dest)
}

func (n *fileNode) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return n.fs.errno("setxattr", errNoSetAttr)
}

func (n *fileNode) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return n.fs.errno("removexattr", errNoSetAttr)
}
