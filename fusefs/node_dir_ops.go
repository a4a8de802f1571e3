package fusefs

import (
	"context"
	"os"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
	"golang.org/x/sys/unix"
)

// owner is who a new inode belongs to: the caller, when the daemon runs
// as root and can give it away; otherwise the daemon.
func owner(ctx context.Context) core.Owner {
	if c, ok := fuse.FromContext(ctx); ok && os.Geteuid() == 0 {
		return core.Owner{UID: int(c.Uid), GID: int(c.Gid)}
	}
	return core.Owner{UID: -1, GID: -1}
}

// Create is open(2) with O_CREAT; the core creates the file, or opens
// the one the name holds (see core.CreateOrOpen).
func (n *dirNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if err := checkName(name); err != nil {
		return nil, nil, 0, n.fs.errno("create", err)
	}
	if t := mode & syscall.S_IFMT; t != 0 && t != syscall.S_IFREG {
		return nil, nil, 0, n.fs.errno("create", errNotStored)
	}
	ch, how, err := n.fs.core.CreateOrOpen(n.id, name, int(flags), fileMode(mode), owner(ctx))
	if err != nil {
		return nil, nil, 0, n.fs.errno("create", err)
	}
	a, err := ch.Attr()
	if err != nil {
		ch.Release()
		return nil, nil, 0, n.fs.errno("create", err)
	}
	fillAttr(&out.Attr, ch.ID(), a)
	child := n.entryInode(ctx, name, core.Entry{ID: ch.ID()})
	fn, _ := fileOf(child.Operations()) // the core opened a file
	if how == core.Truncated {
		fn.truncated()
	}
	var h *handle
	if how == core.Created {
		h = fn.adopt(ch)
	} else {
		h = fn.opened(ch)
	}
	return child, h.served(), h.fuseFlags(), 0
}

// Mknod makes empty regular files, as POSIX allows; kvfs stores nothing
// else.
func (n *dirNode) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, n.fs.errno("mknod", errNotStored)
	}
	ch, h, _, errno := n.Create(ctx, name, syscall.O_EXCL|syscall.O_RDWR, mode, out)
	if errno != 0 {
		return nil, errno
	}
	h.(fs.FileFlusher).Flush(ctx)
	h.(fs.FileReleaser).Release(ctx)
	return ch, 0
}

// Symlink is refused: kvfs stores objects, and a link could point out of
// the store.
func (n *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, n.fs.errno("symlink", errNotStored)
}

func (n *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if err := checkName(name); err != nil {
		return nil, n.fs.errno("mkdir", err)
	}
	id, st, err := n.fs.core.Mkdir(n.id, name, mode&07777, owner(ctx))
	if err != nil {
		return nil, n.fs.errno("mkdir", err)
	}
	fillAttr(&out.Attr, id, core.Attr{Stat_t: st})
	return n.child(ctx, core.Entry{ID: id, Dir: true}), 0
}

func (n *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.fs.errno("rmdir", n.fs.core.Rmdir(n.id, name))
}

// Unlink removes a name; with a shared tier, from the bucket too (see
// removedRemote).
func (n *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.fs.remote == nil {
		return n.fs.errno("unlink", n.fs.core.Unlink(n.id, name))
	}
	path, ok := n.fs.core.PathOf(n.id, name)
	err := n.fs.core.Unlink(n.id, name)
	if err == nil && ok {
		n.fs.removedRemote(path)
	}
	return n.fs.errno("unlink", err)
}

func (n *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if err := checkName(newName); err != nil {
		return n.fs.errno("rename", err)
	}
	to, ok := newParent.(*dirNode)
	if !ok {
		return n.fs.errno("rename", errNotDir)
	}
	path, remote := n.remoteFile(name)
	err := n.fs.core.Rename(n.id, name, to.id, newName, flags)
	if err == nil && remote && flags&unix.RENAME_EXCHANGE == 0 {
		// The old name is gone, as after an rm.
		n.fs.removedRemote(path)
	}
	return n.fs.errno("rename", err)
}

// Link gives an object another name; EEXIST when the name is taken is
// how LMCache learns another writer published first.
func (n *dirNode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if err := checkName(name); err != nil {
		return nil, n.fs.errno("link", err)
	}
	fn, ok := fileOf(target)
	if !ok {
		return nil, n.fs.errno("link", errNotStored)
	}
	release, err := localize(target)
	if err != nil {
		return nil, n.fs.errno("link", err)
	}
	defer release()
	a, err := n.fs.core.Link(fn.id, n.id, name)
	if err != nil {
		return nil, n.fs.errno("link", err)
	}
	fillAttr(&out.Attr, fn.id, a)
	return fn.EmbeddedInode(), 0
}
