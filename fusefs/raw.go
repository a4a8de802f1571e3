package fusefs

import (
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// RawFS is what to serve: go-fuse's bridge over the root, with the opens
// and releases of each inode kept from interleaving.
//
// go-fuse shares one registered backing file among the passthrough
// handles of an inode and counts them, but it drops that count at the
// release of every handle, passthrough or not, after kvfs's Release has
// returned. An open that decided in between that it may use passthrough
// (mayJoin: no plain handle left) would have its backing file
// unregistered under it, and that open, or the next, fails with EIO.
func (f *FS) RawFS(opts *fs.Options) fuse.RawFileSystem {
	return &orderedRaw{RawFileSystem: fs.NewNodeFS(f.Root(), opts)}
}

type orderedRaw struct {
	fuse.RawFileSystem
	// Striped by node ID: distinct inodes rarely share a lock.
	stripes [64]sync.Mutex
}

func (r *orderedRaw) lock(node uint64) *sync.Mutex {
	mu := &r.stripes[node%uint64(len(r.stripes))]
	mu.Lock()
	return mu
}

// Open orders read-only opens, the only ones that may use passthrough;
// a writer must not hold the lock, since it may wait in Open for the
// release of passthrough readers (adoptWaiting).
func (r *orderedRaw) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if in.Flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		defer r.lock(in.NodeId).Unlock()
	}
	return r.RawFileSystem.Open(cancel, in, out)
}

func (r *orderedRaw) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	defer r.lock(in.NodeId).Unlock()
	r.RawFileSystem.Release(cancel, in)
}
