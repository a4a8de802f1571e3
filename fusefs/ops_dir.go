package fusefs

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
	"golang.org/x/sys/unix"
)

// owner is who a new inode belongs to: the caller, when the daemon runs
// as root and can give it away; otherwise the daemon.
func (f *FS) owner(c *fuse.Caller) core.Owner { return ownerOf(c, f.root) }

// ownerOf is who a file created for caller c belongs to: c, where the
// daemon is root and may give it; else the daemon.
func ownerOf(c *fuse.Caller, root bool) core.Owner {
	if root {
		return core.Owner{UID: int(c.Uid), GID: int(c.Gid)}
	}
	return core.Owner{UID: -1, GID: -1}
}

// Create is open(2) with O_CREAT; the core creates the file, or opens
// the one the name holds (see core.CreateOrOpen).
func (f *FS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	ch, how, err := f.create(in.NodeId, name, in.Flags, in.Mode, &in.Caller)
	if err != nil {
		return f.status("create", err)
	}
	a, err := ch.Attr()
	if err != nil {
		ch.Release()
		return f.status("create", err)
	}
	f.entry(&out.EntryOut, ch.ID(), a)
	if how == core.Truncated {
		f.truncated(ch.ID())
	}
	var h *handle
	if how == core.Created {
		h = f.adopt(ch, false, in.Flags)
	} else {
		h = f.opened(ch, in.Flags)
	}
	f.serve(h, &out.OpenOut)
	return fuse.OK
}

func (f *FS) create(parent uint64, name string, flags, mode uint32, c *fuse.Caller) (*core.Handle, core.How, error) {
	if err := checkName(name); err != nil {
		return nil, 0, err
	}
	if t := mode & syscall.S_IFMT; t != 0 && t != syscall.S_IFREG {
		return nil, 0, errNotStored
	}
	return f.core.CreateOrOpenBy(core.Client(c.Pid), core.ID(parent), name, int(flags), fileMode(mode), f.owner(c))
}

// Mknod makes empty regular files, as POSIX allows; kvfs stores nothing
// else.
func (f *FS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	if in.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return f.status("mknod", errNotStored)
	}
	ch, _, err := f.create(in.NodeId, name, syscall.O_EXCL|syscall.O_RDWR, in.Mode, &in.Caller)
	if err != nil {
		return f.status("mknod", err)
	}
	// Its attributes once closed: before, they carried the reservation
	// its open took, and the kernel kept that st_blocks for the cache
	// timeout (an outside tester: 2048 blocks for an empty file, a
	// minute, where ext4 shows 0).
	err = ch.Flush()
	var a core.Attr
	if err == nil {
		a, err = ch.Attr()
	}
	ch.Release()
	if err != nil {
		return f.status("mknod", err)
	}
	f.entry(out, ch.ID(), a)
	return fuse.OK
}

// Symlink is refused: kvfs stores objects, and a link could point out of
// the store.
func (f *FS) Symlink(cancel <-chan struct{}, header *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	return f.status("symlink", errNotStored)
}

// Tmpfile (O_TMPFILE) is not offered: an object is published by name.
func (f *FS) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	return fuse.ENOTSUP
}

func (f *FS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	if err := checkName(name); err != nil {
		return f.status("mkdir", err)
	}
	id, st, err := f.core.Mkdir(core.ID(in.NodeId), name, in.Mode&07777, f.owner(&in.Caller))
	if err != nil {
		return f.status("mkdir", err)
	}
	f.entry(out, id, core.Attr{Stat_t: st})
	return fuse.OK
}

func (f *FS) Rmdir(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	id, st, err := f.core.Rmdir(core.ID(header.NodeId), name)
	if err == nil {
		f.gone.add(id, st)
	}
	return f.status("rmdir", err)
}

// Unlink removes a name; with a shared tier, from the bucket too (see
// removedRemote).
func (f *FS) Unlink(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	parent := core.ID(header.NodeId)
	if f.remote == nil {
		return f.status("unlink", f.core.Unlink(parent, name))
	}
	path, ok := f.core.PathOf(parent, name)
	err := f.core.Unlink(parent, name)
	if err == nil && ok {
		f.removedRemote(path)
	}
	return f.status("unlink", err)
}

func (f *FS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, name, newName string) fuse.Status {
	if err := checkName(newName); err != nil {
		return f.status("rename", err)
	}
	from, to := nameKey{core.ID(in.NodeId), name}, nameKey{core.ID(in.Newdir), newName}
	exchange := in.Flags&unix.RENAME_EXCHANGE != 0
	if f.movesRemoteDir(from, to, exchange) {
		return f.status("rename", syscall.EXDEV)
	}
	release, err := f.localize(from, to, exchange)
	if err != nil {
		return f.status("rename", err)
	}
	defer release()
	renamed := f.renamingRemote(from, to, exchange)
	f.core.PublishedBy(core.Client(in.Caller.Pid))
	gone, err := f.core.RenameOver(from.parent, from.name, to.parent, to.name, in.Flags)
	if err == nil {
		renamed()
		if gone.ID != 0 {
			f.gone.add(gone.ID, gone.St)
		}
	}
	return f.status("rename", err)
}

// Link gives an object another name; EEXIST when the name is taken is
// how LMCache learns another writer published first.
func (f *FS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	if err := checkName(name); err != nil {
		return f.status("link", err)
	}
	id := core.ID(in.Oldnodeid)
	if f.core.IsDir(id) {
		return f.status("link", errNotStored)
	}
	if r := f.remotes.get(id); r != nil {
		// The object must be local to take another name.
		release, err := r.local(false)
		if err != nil {
			return f.status("link", err)
		}
		defer release()
	}
	f.core.PublishedBy(core.Client(in.Caller.Pid))
	a, err := f.core.Link(id, core.ID(in.NodeId), name)
	if err != nil {
		return f.status("link", err)
	}
	f.entry(out, id, a)
	return fuse.OK
}
