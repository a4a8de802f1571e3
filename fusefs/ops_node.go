package fusefs

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/internal/procstat"
	"github.com/kvfs/kvfs/internal/stats"
	"golang.org/x/sys/unix"
)

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

// BackingXattr is a file's extended attribute that names its stored file,
// for loaders that read it directly while holding a handle on the mount.
const BackingXattr = "user.kvfs.backing"

// entry answers a request that names an inode: its node ID is its ID,
// and the kernel may keep the name and the attributes for the cache
// timeout.
func (f *FS) entry(out *fuse.EntryOut, id core.ID, a core.Attr) {
	out.NodeId, out.Generation = uint64(id), 0
	fillAttr(&out.Attr, id, a)
	if out.EntryTimeout() == 0 {
		out.SetEntryTimeout(f.cfg.CacheTimeout)
	}
	out.SetAttrTimeout(f.attrTimeout(a))
}

// attrTimeout is how long the kernel may keep attributes a: not at all
// while the file has writers, whose charge the core changes with no
// request to tell the kernel by (a reservation kept at a close and
// shown again after it: an outside tester's `exec 3<>f` shell, after
// each command it ran, read st_blocks without the reservation for the
// cache timeout while du, df and used showed it).
func (f *FS) attrTimeout(a core.Attr) time.Duration {
	if a.Writing {
		return 0
	}
	return f.cfg.CacheTimeout
}

func (f *FS) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	parent := core.ID(header.NodeId)
	switch name {
	case ".":
		// Only an export's reconnect asks: the node itself.
		a, err := f.attr(parent, nil)
		if err != nil {
			return f.status("lookup", err)
		}
		f.entry(out, parent, a)
		return fuse.OK
	case "..":
		return fuse.Status(syscall.ESTALE)
	}
	if err := checkName(name); err != nil {
		return f.status("lookup", err)
	}
	e, a, err := f.core.Lookup(parent, name)
	if errors.Is(err, core.ErrNotFound) && f.remote != nil {
		err = f.lookupRemote(&header.Caller, parent, name, out)
		if err == nil {
			return fuse.OK
		}
	}
	if err != nil {
		return f.absent("lookup", err, out)
	}
	f.entry(out, e.ID, a)
	return fuse.OK
}

// absent answers a lookup that failed. A name that is not there is
// remembered by the kernel for the cache timeout, unless the answer
// already says for how long (the remote tier's absent names).
func (f *FS) absent(op string, err error, out *fuse.EntryOut) fuse.Status {
	errno := f.errno(op, err)
	if errno == syscall.ENOENT && out.EntryTimeout() == 0 {
		out.NodeId = 0
		out.SetEntryTimeout(f.cfg.CacheTimeout)
		return fuse.OK
	}
	return fuse.Status(errno)
}

// Forget: only the remote tier's placeholders and removed directories
// live as long as the kernel's lookups of them. (The kernel forgets an
// inode once, with all its lookups, when it lets it go.)
func (f *FS) Forget(nodeid, nlookup uint64) {
	f.remotes.forget(core.ID(nodeid), nlookup)
	f.gone.forget(core.ID(nodeid))
}

// attr reads the attributes of node id, through file handle h when given.
func (f *FS) attr(id core.ID, h *handle) (core.Attr, error) {
	if h == nil {
		if r := f.remotes.get(id); r != nil && !r.installed.Load() {
			return r.attr(), nil
		}
		if f.core.IsDir(id) {
			st, err := f.core.DirAttr(id)
			return core.Attr{Stat_t: st}, err
		}
		if st, ok := f.gone.get(id); ok {
			return core.Attr{Stat_t: st}, nil
		}
	}
	return f.fileAttr(id, h)
}

func (f *FS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	var h *handle
	if fh := in.Fh(); fh != 0 {
		if hh, put, ok := f.handle(in.NodeId, fh); ok {
			defer put()
			h = hh
		}
	}
	a, err := f.attr(core.ID(in.NodeId), h)
	if err != nil {
		return f.status("getattr", err)
	}
	fillAttr(&out.Attr, core.ID(in.NodeId), a)
	out.SetTimeout(f.attrTimeout(a))
	return fuse.OK
}

func (f *FS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	id := core.ID(in.NodeId)
	var h *handle
	if fh, ok := in.GetFh(); ok {
		if hh, put, ok := f.handle(in.NodeId, fh); ok {
			defer put()
			h = hh
		}
	}
	if h == nil {
		if r := f.remotes.get(id); r != nil {
			// A truncate, chmod or utimes changes the local object:
			// it is installed first (empty for a truncate to 0).
			release, err := r.local(in.Valid&fuse.FATTR_SIZE != 0 && in.Size == 0)
			if err != nil {
				return f.status("setattr", err)
			}
			defer release()
		}
	}
	var err error
	if h == nil && f.core.IsDir(id) {
		err = f.setDirAttr(id, in)
	} else if gone, gerr := f.gone.set(id, in); h == nil && gone {
		err = gerr
	} else {
		err = f.setFileAttr(interruptOf(cancel, &in.Caller), id, h, in)
	}
	if err != nil {
		return f.status("setattr", err)
	}
	a, err := f.attr(id, h)
	if err != nil {
		return f.status("setattr", err)
	}
	fillAttr(&out.Attr, id, a)
	return fuse.OK
}

func (f *FS) setDirAttr(id core.ID, in *fuse.SetAttrIn) error {
	if _, ok := in.GetSize(); ok {
		return core.ErrIsDir
	}
	file, err := f.core.OpenStored(id, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer file.Close()
	return applyAttrs(file, in, false)
}

// attrsNotSize are a SETATTR's changes other than the size.
const attrsNotSize = fuse.FATTR_MODE | fuse.FATTR_UID | fuse.FATTR_GID | fuse.FATTR_ATIME | fuse.FATTR_MTIME | fuse.FATTR_ATIME_NOW | fuse.FATTR_MTIME_NOW

// setFileAttr sets the size through a writer's handle, or by name, and
// the rest through the handle's stored file or one opened for it.
func (f *FS) setFileAttr(intr core.Interrupt, id core.ID, h *handle, in *fuse.SetAttrIn) error {
	if size, ok := in.GetSize(); ok {
		var w *os.File
		if h != nil && h.Writable() {
			w = h.File()
		}
		f.dropRAM(id)
		f.rewritten.mark(id)
		if err := f.core.Truncate(intr, id, w, int64(size)); err != nil {
			return err
		}
		f.changed(id)
		if !f.core.BeingWritten(id) {
			// A truncate by name of a complete object; a writer's is
			// part of its writing (see FS.replaced).
			f.replaced(id)
		}
	}
	if in.Valid&(fuse.FATTR_MTIME|fuse.FATTR_MTIME_NOW) != 0 {
		f.core.MtimeSet(id)
	}
	apply := func(file *os.File) error {
		if in.Valid&attrsNotSize != 0 && f.core.LinkedOutside(id, file) {
			return errLinkedOutside
		}
		return applyAttrs(file, in, true)
	}
	if h != nil {
		return apply(h.File())
	}
	// chmod and utimes come without a handle (only a truncate carries
	// one): through an open one's file when there is one, which reaches
	// an object whose names are all gone (fchmod of an unlinked file).
	if ob := f.objects.get(id); ob != nil {
		var err error
		if ob.withAnyFile(func(held *os.File) { err = apply(held) }) {
			return err
		}
	}
	file, err := f.core.OpenStored(id, unix.O_RDONLY)
	if err != nil {
		return err
	}
	defer file.Close()
	return apply(file)
}

// Access answers access(2) for the mounter, the only one let in without
// --allow-other (with it, the kernel checks modes itself and never asks):
// from the inode's mode, as go-fuse's node API does.
func (f *FS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	a, err := f.attr(core.ID(in.NodeId), nil)
	if err != nil {
		return f.status("access", err)
	}
	if !hasAccess(&in.Caller, a.Uid, a.Gid, a.Mode, in.Mask) {
		return fuse.EACCES
	}
	return fuse.OK
}

// hasAccess is the permission check of mode bits for the caller.
func hasAccess(c *fuse.Caller, uid, gid, mode, mask uint32) bool {
	mask &= 7
	switch {
	case mask == 0:
		return true
	case c.Uid == 0:
		// Root reads and writes anything; it executes what has an
		// execute bit, and searches any directory.
		return mask&1 == 0 || mode&0o111 != 0 || mode&unix.S_IFMT == unix.S_IFDIR
	}
	bits := mode
	switch {
	case c.Uid == uid:
		bits = mode >> 6
	case c.Gid == gid || (mode>>3)&mask != mode&mask && inGroup(c.Pid, gid):
		bits = mode >> 3
	}
	return bits&mask == mask
}

// inGroup says whether process pid has gid among its supplementary
// groups.
func inGroup(pid, gid uint32) bool {
	b, err := procstat.Status(int(pid))
	if err != nil {
		return false
	}
	return slices.Contains(strings.Fields(procstat.StatusLine(b, "Groups")), strconv.Itoa(int(gid)))
}

func (f *FS) StatFs(cancel <-chan struct{}, header *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	st := f.core.Statfs()
	out.Bsize, out.Frsize, out.NameLen = st.BlockSize, st.BlockSize, st.NameMax
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Free, st.Avail
	out.Files, out.Ffree = st.Files, st.FreeFiles
	return fuse.OK
}

func (f *FS) GetXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	id := core.ID(header.NodeId)
	if r := f.remotes.get(id); r != nil && !r.installed.Load() {
		return 0, f.status("getxattr", errNoAttr)
	}
	var data []byte
	switch {
	case !f.core.IsDir(id):
		if attr != BackingXattr {
			return 0, f.status("getxattr", errNoAttr)
		}
		// The core says whether the stored file may be named (see
		// core.DirectPath).
		path, err := f.core.DirectPath(id, func(dir core.ID) bool {
			a, err := f.attr(dir, nil)
			return err == nil && hasAccess(&header.Caller, a.Uid, a.Gid, a.Mode, 1)
		})
		if err != nil {
			return 0, f.status("getxattr", err)
		}
		data = []byte(path)
	case id == core.RootID && attr == stats.Xattr && f.cfg.Stats != nil:
		var err error
		if data, err = f.cfg.Stats(); err != nil {
			return 0, f.status("getxattr", err)
		}
	case attr == WritesXattr:
		data = []byte(f.writes())
	default:
		return 0, f.status("getxattr", errNoAttr)
	}
	return xattrReply(data, dest)
}

// xattrReply answers a GETXATTR of data into dest: its size where dest is
// too small (or empty: a query of the size).
func xattrReply(data, dest []byte) (uint32, fuse.Status) {
	if len(dest) < len(data) {
		return uint32(len(data)), fuse.Status(syscall.ERANGE)
	}
	return uint32(copy(dest, data)), fuse.OK
}

// writes is the directories' WritesXattr. The core polls writers' stored
// files exactly when the adapter serves passthrough (mount configures
// both from one setting).
func (f *FS) writes() string {
	if f.cfg.Passthrough {
		return WritesPassthrough
	}
	return WritesDaemon
}

// ListXAttr lists none: kvfs's own attributes are asked for by name.
func (f *FS) ListXAttr(cancel <-chan struct{}, header *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	return 0, fuse.OK
}

func (f *FS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	return f.status("setxattr", errNoSetAttr)
}

func (f *FS) RemoveXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string) fuse.Status {
	return f.status("removexattr", errNoSetAttr)
}

// Statx is left to GETATTR: the kernel falls back to it for good.
func (f *FS) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	return fuse.ENOSYS
}

// Readlink: kvfs stores no symbolic links.
func (f *FS) Readlink(cancel <-chan struct{}, header *fuse.InHeader) ([]byte, fuse.Status) {
	return nil, fuse.ENOTSUP
}
