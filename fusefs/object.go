package fusefs

import (
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/ramcache"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// object is an object with open handles: what they share.
type object struct {
	fs   *FS
	id   core.ID
	refs int // GUARDED_BY(fs.objects.mu)

	mu sync.Mutex
	// GUARDED_BY(mu). handles are the open handles, so an inode with no
	// name left can still be reached through one of their files.
	handles []*handle
	// backing is the passthrough backing file the kernel serves every
	// passthrough handle of the object from (it takes one per inode):
	// the first one's stored file, registered, and how many handles
	// use it. GUARDED_BY(mu).
	backing     int32
	backingRefs int
	// cached: a plain reader has been open while the object had
	// handles, so the kernel may hold pages of it that a write makes
	// stale (see handle.existing for the rest of the time). Plain
	// writers use direct I/O and passthrough handles share the store's
	// page cache: without plain readers there is nothing to invalidate.
	cached atomic.Bool
}

// withAnyFile runs fn on the stored file of some open handle, under
// ob.mu so that the handle's release cannot close the file (and free its
// descriptor number for reuse) meanwhile; fn must not take ob.mu. It
// reports false, without calling fn, when no handle is open.
func (ob *object) withAnyFile(fn func(*os.File)) bool {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if len(ob.handles) == 0 {
		return false
	}
	fn(ob.handles[0].File())
	return true
}

// reopener opens the stored file of object id when it has no name left,
// through a file one of its open handles holds (core.Open's via).
func (f *FS) reopener(id core.ID) func(flags int) (*os.File, error) {
	return func(flags int) (file *os.File, err error) {
		err = core.ErrStale
		if ob := f.objects.get(id); ob != nil {
			ob.withAnyFile(func(held *os.File) {
				file, err = os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(held.Fd())), flags|unix.O_CLOEXEC, 0)
			})
		}
		return file, err
	}
}

// fileAttr reads an object's attributes: through h when given, else
// through an open handle (a writer's when there is one, which has the
// ledger see what it wrote), else by the object's name.
func (f *FS) fileAttr(id core.ID, h *handle) (core.Attr, error) {
	if h != nil {
		return h.Attr()
	}
	if ob := f.objects.get(id); ob != nil {
		if a, err, ok := ob.attr(); ok {
			return a, err
		}
	}
	return f.core.Getattr(id, nil)
}

// attr reads the object's attributes through one of its handles, under
// ob.mu so that the handle's release cannot close its file meanwhile; ok
// is false when none is open.
func (ob *object) attr() (a core.Attr, err error, ok bool) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if len(ob.handles) == 0 {
		return a, nil, false
	}
	h := ob.handles[0]
	for _, x := range ob.handles {
		if x.Writable() {
			h = x
			break
		}
	}
	a, err = h.Attr()
	return a, err, true
}

// adopt makes the FUSE handle of a core handle; existing says that the
// object was there before the open. A writer's object may change from
// now on, so the RAM tier's copies of it go: the core counts the writer
// before this runs, and attachRAM makes no copy while it does.
func (f *FS) adopt(ch *core.Handle, existing bool, flags uint32) *handle {
	ob := f.objects.hold(f, ch.ID())
	h := &handle{Handle: ch, ob: ob, existing: existing}
	ob.mu.Lock()
	defer ob.mu.Unlock()
	h.passthrough = ob.passthroughLocked(ch, flags, existing)
	if ch.Writable() && existing {
		f.rewritten.mark(ch.ID())
		if h.passthrough && flags&syscall.O_APPEND == 0 {
			// (A passthrough appender appends whatever it does after:
			// see passthroughLocked.)
			ch.WritesBypass()
		}
	}
	// A plain reader the daemon serves beside a writer, or of an object
	// changed in place before, reads with direct I/O: from the page
	// cache it could read zeros the object never held. The kernel fills
	// the part of a page past a read that a rewrite had just cut short
	// with zeros, and keeps the file's old size over them when the
	// rewrite changed its attributes meanwhile (an outside tester: with
	// a writer that truncates a 1 MB file and appends it again, 22-45 of
	// 2000 reads had a tail of NUL bytes on a default mount; an appender
	// is served by the daemon, see passthroughLocked). Objects stored
	// once and read many times, what connectors make, keep the page
	// cache.
	h.uncached = !ch.Writable() && !h.passthrough && (ob.writingLocked() || f.rewritten.has(ch.ID()))
	ob.handles = append(ob.handles, h)
	if ch.Writable() {
		ob.dropRAMLocked()
	}
	return h
}

// writingLocked says whether a writer has the object open; ob.mu held.
func (ob *object) writingLocked() bool {
	for _, h := range ob.handles {
		if h.Writable() {
			return true
		}
	}
	return false
}

// passthroughLocked says whether the kernel is to serve handle ch
// through the object's backing file. A writer the core admitted no
// reservation writes through the daemon, which admits each write before
// it lands. But the kernel holds one I/O mode per inode: a passthrough
// open beside a cached one (a plain writer's shared mmap makes one) fails
// with EIO. So the first handle decides for the object, and the others
// open while it has any follow it; ob.mu held.
//
// An appending writer (O_APPEND in flags, the open's) writes through the
// daemon too: the kernel opens its backing file with the open's flags
// and passes no later fcntl(F_SETFL) on, so a passthrough handle whose
// O_APPEND was cleared, or a pwritev2 with RWF_NOAPPEND, still appended
// (an outside tester: `XY23NA6789` on ext4, `0123456789XYNA` here).
// The open of an appender waited in the core for the RELEASE of a writer
// that had just closed (core's appending), so only a handle really open
// makes it passthrough. Without passthrough the kernel places every
// write itself.
//
// So does a writer of an existing object that did not cut it (no
// O_TRUNC: `dd conv=notrunc`, an in-place rewrite): the core sees where
// each write lands, and a refused writer that wrote over the object's
// bytes takes the object down, where one that only wrote past them
// leaves it as it was. A passthrough writer's bytes are not seen
// (core's WritesBypass): its refusal takes the object down whatever it
// wrote. Connectors store new objects, and rewrite, if ever, with
// O_TRUNC.
func (ob *object) passthroughLocked(ch *core.Handle, flags uint32, existing bool) bool {
	if len(ob.handles) > 0 {
		return ob.handles[0].passthrough
	}
	appending := ch.Writable() && flags&syscall.O_APPEND != 0
	inPlace := ch.Writable() && existing && flags&syscall.O_TRUNC == 0
	return ob.fs.cfg.Passthrough && !ch.Unreserved() && !appending && !inPlace
}

// opened makes the FUSE handle of a core handle that opened an existing
// object: a plain reader may have the kernel cache its pages, and may be
// served from the RAM tier.
func (f *FS) opened(ch *core.Handle, flags uint32) *handle {
	h := f.adopt(ch, true, flags)
	if !ch.Writable() && !h.passthrough && !h.uncached {
		h.ob.cached.Store(true)
		h.ob.attachRAM(h)
	}
	return h
}

// serve numbers h for the kernel and says how the kernel is to use it:
// with passthrough, the object's backing file.
func (f *FS) serve(h *handle, out *fuse.OpenOut) {
	out.Fh = f.files.add(h)
	out.OpenFlags = h.fuseFlags()
	if h.passthrough && h.ob.attachBacking(h) {
		out.BackingID = h.ob.backing
		out.OpenFlags |= fuse.FOPEN_PASSTHROUGH
		out.OpenFlags &^= fuse.FOPEN_KEEP_CACHE
	}
}

// attachBacking has h served from the object's backing file, registered
// from h's stored file if the object has none. Where the kernel refuses
// (not root, no passthrough), handles are served by the daemon from then
// on.
func (ob *object) attachBacking(h *handle) bool {
	f := ob.fs
	if f.noBacking.Load() {
		return false
	}
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if ob.backing == 0 {
		id := registerBacking(f.server, h.File(), &f.noBacking, f.log, "the daemon serves every handle")
		if id == 0 {
			return false
		}
		ob.backing = id
	}
	ob.backingRefs++
	h.backed = true
	return true
}

// registerBacking registers f with the kernel as a passthrough backing
// file: its ID, or 0 where the kernel refuses, after which (refused) no
// backing file is asked for again and the daemon serves: the first
// refusal is logged, saying so (serves).
func registerBacking(server *fuse.Server, f *os.File, refused *atomic.Bool, log *zap.Logger, serves string) int32 {
	id, errno := server.RegisterBackingFd(&fuse.BackingMap{Fd: int32(f.Fd())})
	if errno != 0 {
		if !refused.Swap(true) {
			log.Info("passthrough refused; "+serves, zap.Error(errno))
		}
		return 0
	}
	return id
}

// unregisterBacking gives a backing file's ID back to the kernel. Once
// the connection is gone (the handles a stop released, ReleaseLeft) the
// kernel dropped its backing files with it, and the ioctl's EBADF or
// ENODEV says only that (an outside tester: a warning at every detached
// stop).
func unregisterBacking(server *fuse.Server, id int32, log *zap.Logger) {
	switch errno := server.UnregisterBackingFd(id); errno {
	case 0:
	case syscall.EBADF, syscall.ENODEV, syscall.ENOTCONN:
		log.Debug("unregistering a passthrough backing file of a connection gone", zap.Error(errno))
	default:
		log.Warn("unregistering a passthrough backing file", zap.Error(errno))
	}
}

// releaseBacking ends h's use of the backing file; the last one
// unregisters it (the kernel keeps the file while a handle uses it) and
// says so.
func (ob *object) releaseBacking(h *handle) (last bool) {
	if !h.backed {
		return false
	}
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if ob.backingRefs--; ob.backingRefs == 0 {
		unregisterBacking(ob.fs.server, ob.backing, ob.fs.log)
		ob.backing = 0
		return true
	}
	return false
}

// forget removes a released handle.
func (ob *object) forget(h *handle) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	for i, x := range ob.handles {
		if x == h {
			ob.handles = append(ob.handles[:i], ob.handles[i+1:]...)
			return
		}
	}
}

// attachRAM gives a plain reader the RAM tier's copy of the object, or a
// fill that makes one from its reads. It runs under ob.mu while the core
// counts no writer of the object, so the copy is of the bytes as they
// are; a writer is counted by the core before adopt takes ob.mu, so one
// that opens later finds the handle in ob.handles and the fill
// registered, and cancels both (dropRAMLocked).
func (ob *object) attachRAM(h *handle) {
	ram := ob.fs.ram
	if ram == nil {
		return
	}
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if ob.fs.core.Writers(ob.id) > 0 {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(int(h.File().Fd()), &st) != nil {
		return
	}
	stamp := ramcache.Stamp{Size: st.Size, Mtime: st.Mtim.Nano()}
	if data, ok := ram.Get(uint64(ob.id), stamp); ok {
		h.ram.Store(&data)
		return
	}
	if fill := ram.StartFill(uint64(ob.id), stamp); fill != nil {
		h.fill.Store(fill)
	}
}

// dropRAM forgets the RAM tier's copy of object id and stops every open
// handle serving or filling one: its bytes are about to change.
func (f *FS) dropRAM(id core.ID) {
	if f.ram == nil {
		return
	}
	ob := f.objects.get(id)
	if ob == nil {
		f.ram.Drop(uint64(id))
		return
	}
	ob.mu.Lock()
	defer ob.mu.Unlock()
	ob.dropRAMLocked() // drops the copy too
}

func (ob *object) dropRAMLocked() {
	if ob.fs.ram == nil {
		return
	}
	ob.fs.ram.Drop(uint64(ob.id))
	for _, h := range ob.handles {
		h.ram.Store(nil)
		h.fill.Swap(nil).Abandon()
	}
}

// truncated is told that the core cut object id's bytes (a truncate, or
// an O_TRUNC that CreateOrOpen carried out): the RAM tier's copy goes,
// and what the kernel caches of it.
func (f *FS) truncated(id core.ID) {
	f.dropRAM(id)
	f.changed(id)
}
