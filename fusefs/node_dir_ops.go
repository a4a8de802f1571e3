package fusefs

import (
	"context"
	"errors"
	"os"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/blob"
	"go.uber.org/zap"
)

// owner is who a new inode belongs to: the caller, when the daemon runs
// as root and can give it away; otherwise the daemon.
func owner(ctx context.Context) blob.Owner {
	if c, ok := fuse.FromContext(ctx); ok && os.Geteuid() == 0 {
		return blob.Owner{UID: int(c.Uid), GID: int(c.Gid)}
	}
	return blob.Owner{UID: -1, GID: -1}
}

func (n *dirNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (_ *fs.Inode, _ fs.FileHandle, _ uint32, errno syscall.Errno) {
	defer n.fs.guard("create", &errno)
	if e := checkName(name); e != 0 {
		return nil, nil, 0, e
	}
	if t := mode & syscall.S_IFMT; t != 0 && t != syscall.S_IFREG {
		return nil, nil, 0, syscall.EPERM
	}
	id, f, err := n.fs.store.Create(n.id, name, mode&07777, owner(ctx))
	if errors.Is(err, syscall.EEXIST) && flags&syscall.O_EXCL == 0 {
		return n.openExisting(ctx, name, flags, out)
	}
	if err != nil {
		return nil, nil, 0, n.fs.errno("create", err)
	}
	write := writable(flags)
	n.fs.ledger.Create(id, write)
	if !write {
		// Born marked incomplete, but no writer will ever finish it:
		// an empty file created read-only (open(O_CREAT|O_RDONLY)) is
		// complete now.
		if err := n.fs.store.ClearWriting(id); err != nil {
			n.fs.log.Warn("create: clearing the writing marker", zap.Uint64("id", uint64(id)), zap.Error(err))
		}
	}
	if err := n.fs.fileAttr(id, f, &out.Attr); err != nil {
		f.Close()
		return nil, nil, 0, n.fs.errno("create", err)
	}
	ch := n.child(ctx, blob.Entry{ID: id})
	h := ch.Operations().(*fileNode).adopt(f, flags, true, callerPid(ctx))
	return ch, h.served(), h.fuseFlags(), 0
}

// openExisting answers an O_CREAT without O_EXCL that lost a race with
// another creator: it opens what is there, as open(2) would.
func (n *dirNode) openExisting(ctx context.Context, name string, flags uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ch, errno := n.Lookup(ctx, name, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	fn, ok := ch.Operations().(*fileNode)
	if !ok {
		return nil, nil, 0, syscall.EISDIR
	}
	if flags&syscall.O_TRUNC != 0 {
		if errno := fn.truncate(ctx, nil, 0); errno != 0 {
			return nil, nil, 0, errno
		}
	}
	h, fuseFlags, errno := fn.Open(ctx, flags)
	return ch, h, fuseFlags, errno
}

// Mknod makes empty regular files, as POSIX allows; kvfs stores nothing
// else.
func (n *dirNode) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.fs.guard("mknod", &errno)
	if mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, syscall.EPERM
	}
	ch, h, _, errno := n.Create(ctx, name, syscall.O_EXCL|syscall.O_RDWR, mode, out)
	if errno != 0 {
		return nil, errno
	}
	fh := h.(fs.FileFlusher)
	fh.Flush(ctx)
	h.(fs.FileReleaser).Release(ctx)
	return ch, 0
}

// Symlink is refused: kvfs stores objects, and a link could point out of
// the store.
func (n *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (n *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.fs.guard("mkdir", &errno)
	if e := checkName(name); e != 0 {
		return nil, e
	}
	id, err := n.fs.store.Mkdir(n.id, name, mode&07777, owner(ctx))
	e := blob.Entry{ID: id, Dir: true}
	if err == nil {
		err = n.entryOut(e, out)
	}
	if err != nil {
		return nil, n.fs.errno("mkdir", err)
	}
	return n.child(ctx, e), 0
}

func (n *dirNode) Rmdir(ctx context.Context, name string) (errno syscall.Errno) {
	defer n.fs.guard("rmdir", &errno)
	_, err := n.fs.store.Rmdir(n.id, name)
	return n.fs.errno("rmdir", err)
}

// Unlink of a name kvfs no longer holds succeeds: delete is idempotent
// (an eviction may have removed it under a stale kernel entry).
func (n *dirNode) Unlink(ctx context.Context, name string) (errno syscall.Errno) {
	defer n.fs.guard("unlink", &errno)
	id, err := n.fs.store.Unlink(n.id, name)
	if errors.Is(err, blob.ErrNotFound) {
		return 0
	}
	if err != nil {
		return n.fs.errno("unlink", err)
	}
	n.fs.ledger.Unlink(id)
	return 0
}

func (n *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) (errno syscall.Errno) {
	defer n.fs.guard("rename", &errno)
	if e := checkName(newName); e != 0 {
		return e
	}
	to, ok := newParent.(*dirNode)
	if !ok {
		return syscall.ENOTDIR
	}
	replaced, err := n.fs.store.Rename(n.id, name, to.id, newName, flags)
	if err != nil {
		return n.fs.errno("rename", err)
	}
	if replaced != 0 {
		n.fs.ledger.Unlink(replaced)
	}
	return 0
}

// Link gives an object another name; EEXIST when the name is taken is
// how LMCache learns another writer published first.
func (n *dirNode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.fs.guard("link", &errno)
	if e := checkName(name); e != 0 {
		return nil, e
	}
	fn, ok := target.(*fileNode)
	if !ok {
		return nil, syscall.EPERM
	}
	if err := n.fs.store.Link(fn.id, n.id, name); err != nil {
		return nil, n.fs.errno("link", err)
	}
	if err := n.fs.ledger.Link(fn.id); err != nil {
		// Evicted meanwhile: the eviction drops every name, this one too.
		return nil, syscall.ENOENT
	}
	if err := n.fs.fileAttr(fn.id, nil, &out.Attr); err != nil {
		return nil, n.fs.errno("link", err)
	}
	return fn.EmbeddedInode(), 0
}
