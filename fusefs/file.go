package fusefs

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/ramcache"
	"golang.org/x/sys/unix"
)

// fsyncDataOnly is FUSE_FSYNC_FDATASYNC in FSYNC's flags.
const fsyncDataOnly = 1

// handle is an open object as go-fuse sees it: the core's handle (the
// stored file, the pin, a writer's reservation and crash marker) and what
// only the kernel's side needs.
type handle struct {
	*core.Handle
	n *fileNode
	// passthrough: the kernel serves h's reads and writes from the
	// stored file itself.
	passthrough bool
	// ram, for a plain reader, is the RAM tier's copy of the object it
	// serves reads from; fill, failing that, collects what its reads
	// return into a copy. Both are set by attachRAM and cleared by
	// dropRAM when the object's bytes are about to change.
	ram  atomic.Pointer[[]byte]
	fill atomic.Pointer[ramcache.Fill]
}

// passthroughHandle is a handle whose reads and writes the kernel serves
// from the stored file directly. go-fuse registers the first one's file
// for the inode and shares it with every later one, so all stored files
// are opened read-write (see FS.openFlags).
type passthroughHandle struct{ *handle }

func (h *passthroughHandle) PassthroughFd() (int, bool) { return int(h.File().Fd()), true }

// handleOf is the handle behind a go-fuse file handle, or nil.
func handleOf(fh fs.FileHandle) *handle {
	switch h := fh.(type) {
	case *handle:
		return h
	case *passthroughHandle:
		return h.handle
	}
	return nil
}

// served is h as go-fuse is to see it: with or without passthrough.
func (h *handle) served() fs.FileHandle {
	if h.passthrough {
		return &passthroughHandle{h}
	}
	return h
}

// fuseFlags: readers skip the FLUSH round trip at close, which has
// nothing to do for them. Without passthrough, writers use direct I/O so
// every byte passes the ledger, and readers keep the page cache across
// opens.
func (h *handle) fuseFlags() uint32 {
	switch {
	case h.Writable() && !h.passthrough:
		return fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES
	case h.Writable():
		return 0
	case h.passthrough:
		return fuse.FOPEN_NOFLUSH
	}
	return fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if data := h.ram.Load(); data != nil {
		b := *data
		if off >= int64(len(b)) {
			return fuse.ReadResultData(nil), 0
		}
		return fuse.ReadResultData(b[off:min(off+int64(len(dest)), int64(len(b)))]), 0
	}
	if fill := h.fill.Load(); fill != nil {
		n, err := h.File().ReadAt(dest, off)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, h.n.fs.errno("read", err)
		}
		fill.Add(off, dest[:n])
		return fuse.ReadResultData(dest[:n]), 0
	}
	return fuse.ReadResultFd(h.File().Fd(), off, len(dest)), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, err := h.Handle.Write(data, off)
	return uint32(n), h.n.fs.errno("write", err)
}

// Flush runs on every close(2) of a descriptor of the handle, before
// close returns. A descriptor may have been duplicated (a shell's
// redirect, a child's stdout, dd), so it is not the end of writing (that
// is Release): a writer's object is admitted at what it holds so far, or
// removed with ENOSPC when it cannot fit.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	if !h.Writable() {
		return 0
	}
	err := h.Handle.Flush()
	// The charge st_blocks reports has just settled (an open writer's is
	// at least its reservation): the kernel's cached attributes go before
	// close(2) returns. Dropping attributes alone (offset -1) takes no
	// lock a closing caller holds, so it is safe from this handler.
	h.n.EmbeddedInode().NotifyContent(-1, 0)
	if h.n.cached.Load() {
		h.n.fs.queue(notice{inode: h.n.EmbeddedInode()})
	}
	return h.n.fs.errno("flush", err)
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.n.fs.errno("fsync", h.Handle.Fsync(flags&fsyncDataOnly != 0))
}

// Release drops the handle; the kernel ignores its result, so nothing
// here can fail. The node forgets the handle first, so no one reaches its
// file after the core closes it.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.n.forget(h)
	h.fill.Swap(nil).Abandon()
	h.Handle.Release()
	return 0
}

// Allocate supports what the core can charge (see core.Handle.Allocate).
func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	h.n.dropRAM()
	return h.n.fs.errno("fallocate", h.Handle.Allocate(int64(off), int64(size), mode))
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	n, err := unix.Seek(int(h.File().Fd()), int64(off), int(whence))
	return uint64(n), h.n.fs.errno("lseek", err)
}
