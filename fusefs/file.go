package fusefs

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/ledger"
	"github.com/kvfs/kvfs/ramcache"
	"golang.org/x/sys/unix"
)

// fsyncDataOnly is FUSE_FSYNC_FDATASYNC in FSYNC's flags.
const fsyncDataOnly = 1

// handle is an open object. Its pin in the ledger lives exactly as long
// as the handle: taken at open or create, dropped at release.
type handle struct {
	n     *fileNode
	f     *os.File
	write bool
	// opener is the thread that opened h, as FUSE reports callers; see
	// Flush.
	opener uint32
	// active: h may have written since its last flush; see beginWrite.
	active atomic.Bool
	// passthrough: reads of h are served by the kernel from f; set once
	// by mayJoin.
	passthrough bool
	// ram, for a plain reader, is the RAM tier's copy of the object it
	// serves reads from; fill, failing that, collects what its reads
	// return into a copy. Both are set by attachRAM and cleared by
	// dropRAM when the object's bytes are about to change.
	ram  atomic.Pointer[[]byte]
	fill atomic.Pointer[ramcache.Fill]
}

// passthroughHandle is a read-only handle whose reads the kernel serves
// from the stored file directly.
type passthroughHandle struct{ *handle }

func (h *passthroughHandle) PassthroughFd() (int, bool) { return int(h.f.Fd()), true }

// served is h as go-fuse is to see it: with or without passthrough.
func (h *handle) served() fs.FileHandle {
	if h.passthrough {
		return &passthroughHandle{h}
	}
	return h
}

// fuseFlags: writers use direct I/O, so every byte passes the ledger and
// the inode never enters the kernel's cached mode, which would refuse
// passthrough readers; readers keep the page cache across opens, and
// their close skips the FLUSH round trip, which has nothing to do for
// them.
func (h *handle) fuseFlags() uint32 {
	if h.write {
		return fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES
	}
	return fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (_ fuse.ReadResult, errno syscall.Errno) {
	if data := h.ram.Load(); data != nil {
		b := *data
		if off >= int64(len(b)) {
			return fuse.ReadResultData(nil), 0
		}
		return fuse.ReadResultData(b[off:min(off+int64(len(dest)), int64(len(b)))]), 0
	}
	if fill := h.fill.Load(); fill != nil {
		defer h.n.fs.guard("read", &errno)
		n, err := h.f.ReadAt(dest, off)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, h.n.fs.errno("read", err)
		}
		fill.Add(off, dest[:n])
		return fuse.ReadResultData(dest[:n]), 0
	}
	return fuse.ReadResultFd(h.f.Fd(), off, len(dest)), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (_ uint32, errno syscall.Errno) {
	fs := h.n.fs
	defer fs.guard("write", &errno)
	if err := fs.grow(ctx, h.n.id, off+int64(len(data))); err != nil {
		return 0, fs.errno("write", err)
	}
	if err := h.n.beginWrite(h, false); err != nil {
		return 0, fs.errno("write", err)
	}
	n, err := h.f.WriteAt(data, off)
	if err != nil {
		fs.settle(h.n.id, h.f)
		return uint32(n), fs.errno("write", err)
	}
	return uint32(n), 0
}

// Flush runs on every close(2) of the handle, before close returns: the
// object is complete once its last writer flushes. A close by another
// process is only a copy of the descriptor going away (a child closing
// what it inherited, at exec or exit) while the writer may go on writing:
// the object stays incomplete until the writer's own close, or release.
func (h *handle) Flush(ctx context.Context) (errno syscall.Errno) {
	defer h.n.fs.guard("flush", &errno)
	if !h.write || !sameProcess(callerPid(ctx), h.opener) {
		return 0
	}
	return h.n.fs.errno("flush", h.n.endWrite(h))
}

// callerPid is the thread that made a request; 0 when unknown.
func callerPid(ctx context.Context) uint32 {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Pid
	}
	return 0
}

// sameProcess says whether two calling threads belong to one process;
// unknown callers count as the same, as before there was a check.
func sameProcess(a, b uint32) bool {
	if a == b || a == 0 || b == 0 {
		return true
	}
	ta, tb := tgid(a), tgid(b)
	return ta != 0 && ta == tb
}

// tgid is the process a thread belongs to, or 0 once it is gone.
func tgid(tid uint32) int {
	data, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(data), "\nTgid:")
	line, _, _ := strings.Cut(rest, "\n")
	n, _ := strconv.Atoi(strings.TrimSpace(line))
	return n
}

func (h *handle) Fsync(ctx context.Context, flags uint32) (errno syscall.Errno) {
	defer h.n.fs.guard("fsync", &errno)
	var err error
	if flags&fsyncDataOnly != 0 {
		err = unix.Fdatasync(int(h.f.Fd()))
	} else {
		err = h.f.Sync()
	}
	return h.n.fs.errno("fsync", err)
}

// Release drops the pin; the kernel ignores its result, so nothing here
// can fail. Closing the file before unpinning means an unlinked inode's
// bytes are gone from the store before its charge is.
func (h *handle) Release(ctx context.Context) (errno syscall.Errno) {
	fs := h.n.fs
	defer fs.guard("release", &errno)
	if h.write {
		h.n.endWrite(h)
	}
	h.n.forget(h)
	h.fill.Swap(nil).Abandon()
	h.f.Close()
	fs.ledger.Close(h.n.id, h.write)
	return 0
}

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) (errno syscall.Errno) {
	defer h.n.fs.guard("getattr", &errno)
	return h.n.fs.errno("getattr", h.n.fs.fileAttr(h.n.id, h.f, &out.Attr))
}

// Allocate supports plain preallocation, charged like a write, hole
// punching, and preallocation that keeps the size within the blocks
// already charged.
func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) (errno syscall.Errno) {
	fs := h.n.fs
	defer fs.guard("fallocate", &errno)
	h.n.dropRAM()
	switch mode {
	case 0:
		if err := fs.grow(ctx, h.n.id, int64(off+size)); err != nil {
			return fs.errno("fallocate", err)
		}
	case unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE:
	case unix.FALLOC_FL_KEEP_SIZE:
		// Blocks within the charge (the size rounded up to a block) are
		// paid for already; past it they would be store bytes that no
		// charge covers.
		if _, charge, _ := fs.ledger.Size(h.n.id); ledger.Charge(int64(off+size)) > charge {
			return syscall.EOPNOTSUPP
		}
	default:
		return syscall.EOPNOTSUPP
	}
	if err := unix.Fallocate(int(h.f.Fd()), mode, int64(off), int64(size)); err != nil {
		fs.settle(h.n.id, h.f)
		return fs.errno("fallocate", err)
	}
	return 0
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	n, err := unix.Seek(int(h.f.Fd()), int64(off), int(whence))
	return uint64(n), h.n.fs.errno("lseek", err)
}
