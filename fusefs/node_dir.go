package fusefs

import (
	"context"
	"errors"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
	"golang.org/x/sys/unix"
)

// dirNode is a directory. Its children come from the core, never from
// go-fuse's own tree, so eviction and restarts cannot leave the two
// disagreeing.
type dirNode struct {
	fs.Inode
	fs *FS
	id core.ID
}

// StatsXattr is the root's extended attribute that holds the mount's
// figures as JSON (Config.Stats); `kvfs stats` reads it.
const StatsXattr = "user.kvfs.stats"

// WritesXattr is every directory's extended attribute that says how
// writers' bytes reach the store: WritesPassthrough (straight to the
// stored file, the daemon polling its size, so direct writes are admitted
// like any other) or WritesDaemon (every byte through the daemon; the
// stored file of an object open for writing is not named). Package
// gpudirect asks the directory it is to create an object in, which also
// tells it that the directory is kvfs's.
const (
	WritesXattr       = "user.kvfs.writes"
	WritesPassthrough = "passthrough"
	WritesDaemon      = "daemon"
)

func (n *dirNode) OnAdd(ctx context.Context) {
	if n.id == core.RootID {
		n.fs.dirs.Store(n.id, n.EmbeddedInode())
	}
}

func (n *dirNode) OnForget() {
	n.fs.dirs.CompareAndDelete(n.id, n.EmbeddedInode())
}

// child makes (or finds) the go-fuse inode for an entry of n.
func (n *dirNode) child(ctx context.Context, e core.Entry) *fs.Inode {
	if e.Dir {
		ch := n.NewInode(ctx, &dirNode{fs: n.fs, id: e.ID}, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: uint64(e.ID)})
		n.fs.dirs.Store(e.ID, ch)
		return ch
	}
	return n.NewInode(ctx, &fileNode{fs: n.fs, id: e.ID}, fs.StableAttr{Mode: syscall.S_IFREG, Ino: uint64(e.ID)})
}

func (n *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if err := checkName(name); err != nil {
		return nil, n.fs.errno("lookup", err)
	}
	e, a, err := n.fs.core.Lookup(n.id, name)
	if errors.Is(err, core.ErrNotFound) && n.fs.remote != nil {
		return n.lookupRemote(ctx, name, out)
	}
	if err != nil {
		return nil, n.fs.errno("lookup", err)
	}
	fillAttr(&out.Attr, e.ID, a)
	return n.entryInode(ctx, name, e), 0
}

// entryInode is the go-fuse inode for entry e at name in n: the one the
// kernel knows there already (READDIRPLUS looks up every entry again),
// or a new one.
func (n *dirNode) entryInode(ctx context.Context, name string, e core.Entry) *fs.Inode {
	if ch := n.GetChild(name); ch != nil && ch.StableAttr().Ino == uint64(e.ID) {
		// go-fuse would keep this inode and drop a new one, which must
		// not replace it in fs.dirs, or notices for names in it would
		// reach no inode the kernel knows.
		if e.Dir {
			n.fs.dirs.Store(e.ID, ch)
		}
		return ch
	}
	return n.child(ctx, e)
}

func (n *dirNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	st, err := n.fs.core.DirAttr(n.id)
	if err != nil {
		return n.fs.errno("getattr", err)
	}
	fillAttr(&out.Attr, n.id, core.Attr{Stat_t: st})
	return 0
}

func (n *dirNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if _, ok := in.GetSize(); ok {
		return n.fs.errno("setattr", core.ErrIsDir)
	}
	f, err := n.fs.core.OpenStored(n.id, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return n.fs.errno("setattr", err)
	}
	defer f.Close()
	if err := applyAttrs(f, in, false); err != nil {
		return n.fs.errno("setattr", err)
	}
	return n.Getattr(ctx, fh, out)
}

// Fsync makes the directory's entries durable (fsync on a directory).
func (n *dirNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	return n.fs.errno("fsyncdir", n.fs.core.SyncDir(n.id))
}

func (n *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	st := n.fs.core.Statfs()
	out.Bsize, out.Frsize, out.NameLen = st.BlockSize, st.BlockSize, st.NameMax
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Free, st.Avail
	out.Files, out.Ffree = st.Files, st.FreeFiles
	return 0
}

func (n *dirNode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	switch {
	case n.id == core.RootID && attr == StatsXattr && n.fs.cfg.Stats != nil:
		data, err := n.fs.cfg.Stats()
		if err != nil {
			return 0, n.fs.errno("getxattr", err)
		}
		return n.fs.copyXattr(data, dest)
	case attr == WritesXattr:
		return n.fs.copyXattr([]byte(n.fs.writes()), dest)
	}
	return 0, n.fs.errno("getxattr", errNoAttr)
}

// writes is the root's WritesXattr. The core polls writers' stored files
// exactly when the adapter serves passthrough (mount configures both
// from one setting).
func (f *FS) writes() string {
	if f.cfg.Passthrough {
		return WritesPassthrough
	}
	return WritesDaemon
}

func (n *dirNode) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return n.fs.errno("setxattr", errNoSetAttr)
}

func (n *dirNode) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return n.fs.errno("removexattr", errNoSetAttr)
}

// copyXattr answers a getxattr, or its size query when dest is empty.
func (f *FS) copyXattr(data, dest []byte) (uint32, syscall.Errno) {
	if len(dest) < len(data) {
		return uint32(len(data)), f.errno("getxattr", syscall.ERANGE)
	}
	return uint32(copy(dest, data)), 0
}
