package fusefs

import (
	"context"
	"encoding/json"
	"errors"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/ledger"
	"golang.org/x/sys/unix"
)

// dirNode is a directory. Its children come from the store's index, never
// from go-fuse's own tree, so eviction and restarts cannot leave the two
// disagreeing.
type dirNode struct {
	fs.Inode
	fs *FS
	id ledger.ID
}

// StatsXattr is the root's extended attribute that holds the ledger's
// snapshot as JSON; `kvfs stats` reads it.
const StatsXattr = "user.kvfs.stats"

func (n *dirNode) OnAdd(ctx context.Context) {
	if n.id == blob.RootID {
		n.fs.dirs.Store(n.id, n.EmbeddedInode())
	}
}

func (n *dirNode) OnForget() {
	n.fs.dirs.CompareAndDelete(n.id, n.EmbeddedInode())
}

// child makes (or finds) the go-fuse inode for an entry of n.
func (n *dirNode) child(ctx context.Context, e blob.Entry) *fs.Inode {
	if e.Dir {
		ch := n.NewInode(ctx, &dirNode{fs: n.fs, id: e.ID}, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: uint64(e.ID)})
		n.fs.dirs.Store(e.ID, ch)
		return ch
	}
	return n.NewInode(ctx, &fileNode{fs: n.fs, id: e.ID}, fs.StableAttr{Mode: syscall.S_IFREG, Ino: uint64(e.ID)})
}

// entryOut fills a lookup answer for e, reconciling a file whose bytes
// vanished from the store.
func (n *dirNode) entryOut(e blob.Entry, out *fuse.EntryOut) error {
	if e.Dir {
		st, err := n.fs.store.Stat(e.ID)
		if err != nil {
			return err
		}
		fillAttr(&out.Attr, &st, e.ID, 0)
		return nil
	}
	return n.fs.fileAttr(e.ID, nil, &out.Attr)
}

func (n *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.fs.guard("lookup", &errno)
	if e := checkName(name); e != 0 {
		return nil, e
	}
	e, err := n.fs.store.Lookup(n.id, name)
	if err == nil {
		err = n.entryOut(e, out)
	}
	if errors.Is(err, ledger.ErrGone) {
		// Evicted, its names about to go: this lookup is the kernel's
		// retry after an ESTALE, and must not answer ESTALE again.
		return nil, syscall.ENOENT
	}
	if err != nil {
		return nil, n.fs.errno("lookup", err)
	}
	if ch := n.GetChild(name); ch != nil && ch.StableAttr().Ino == uint64(e.ID) {
		// Known already (READDIRPLUS looks up every entry again):
		// go-fuse would keep this inode and drop a new one, which
		// must not replace it in fs.dirs, or eviction's notices for
		// names in it would reach no inode the kernel knows.
		if e.Dir {
			n.fs.dirs.Store(e.ID, ch)
		}
		return ch, 0
	}
	return n.child(ctx, e), 0
}

func (n *dirNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno) {
	defer n.fs.guard("getattr", &errno)
	st, err := n.fs.store.Stat(n.id)
	if err != nil {
		return n.fs.errno("getattr", err)
	}
	fillAttr(&out.Attr, &st, n.id, 0)
	return 0
}

func (n *dirNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) (errno syscall.Errno) {
	defer n.fs.guard("setattr", &errno)
	if _, ok := in.GetSize(); ok {
		return syscall.EISDIR
	}
	f, err := n.fs.store.Open(n.id, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return n.fs.errno("setattr", err)
	}
	defer f.Close()
	if err := applyAttrs(f, in); err != nil {
		return n.fs.errno("setattr", err)
	}
	return n.Getattr(ctx, fh, out)
}

func (n *dirNode) Readdir(ctx context.Context) (_ fs.DirStream, errno syscall.Errno) {
	defer n.fs.guard("readdir", &errno)
	list, err := n.fs.store.List(n.id)
	if err != nil {
		return nil, n.fs.errno("readdir", err)
	}
	out := make([]fuse.DirEntry, 0, len(list)+2)
	out = append(out, fuse.DirEntry{Name: ".", Ino: uint64(n.id), Mode: syscall.S_IFDIR},
		fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR})
	for _, e := range list {
		mode := uint32(syscall.S_IFREG)
		if e.Dir {
			mode = syscall.S_IFDIR
		}
		out = append(out, fuse.DirEntry{Name: e.Name, Ino: uint64(e.ID), Mode: mode})
	}
	return fs.NewListDirStream(out), 0
}

// Fsync makes the directory's entries durable (fsync on a directory).
func (n *dirNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	return n.fs.errno("fsyncdir", n.fs.store.SyncDir(n.id))
}

func (n *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	st := n.fs.ledger.Stats()
	out.Bsize, out.Frsize, out.NameLen = ledger.BlockSize, ledger.BlockSize, 255
	out.Blocks = uint64(st.CapacityBytes / ledger.BlockSize)
	out.Bfree = uint64(max(st.CapacityBytes-st.UsedBytes, 0) / ledger.BlockSize)
	out.Bavail = out.Bfree
	out.Files = uint64(st.Objects) + 1<<20
	out.Ffree = 1 << 20
	return 0
}

func (n *dirNode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if n.id != blob.RootID || attr != StatsXattr {
		return 0, syscall.ENODATA
	}
	data, _ := json.Marshal(n.fs.Stats())
	return copyXattr(data, dest)
}

// Setxattr is refused, as on files (see fileNode.Setxattr).
func (n *dirNode) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return syscall.ENOTSUP
}

func (n *dirNode) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return syscall.ENOTSUP
}

// copyXattr answers a getxattr, or its size query when dest is empty.
func copyXattr(data, dest []byte) (uint32, syscall.Errno) {
	if len(dest) < len(data) {
		return uint32(len(data)), syscall.ERANGE
	}
	return uint32(copy(dest, data)), 0
}
