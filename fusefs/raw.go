package fusefs

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/internal/stats"
)

// counted is a fuse.RawFileSystem that counts, and may time, every
// request before handing it on. It embeds nothing, so a method go-fuse
// adds to the interface fails the build here instead of going uncounted.
type counted struct {
	raw   fuse.RawFileSystem
	reqs  *requests
	timed func(stats.Op, time.Duration) // nil: count only
}

var _ fuse.RawFileSystem = (*counted)(nil)

// start lets a request through the gate (see FS.Quiesce), and is when
// it began, if requests are timed.
func (c *counted) start() time.Time {
	c.reqs.gate.enter()
	if c.timed == nil {
		return time.Time{}
	}
	return time.Now()
}

// done counts a request answered, and times it.
func (c *counted) done(op stats.Op, start time.Time) {
	c.reqs.gate.leave()
	c.reqs.n[op].Add(1)
	if c.timed != nil {
		c.timed(op, time.Since(start))
	}
}

// Not requests: handed on as they are.

func (c *counted) String() string           { return c.raw.String() }
func (c *counted) SetDebug(debug bool)      { c.raw.SetDebug(debug) }
func (c *counted) Init(server *fuse.Server) { c.raw.Init(server) }
func (c *counted) OnUnmount()               { c.raw.OnUnmount() }

// Requests.

func (c *counted) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer c.done(stats.OpLookup, c.start())
	return c.raw.Lookup(cancel, header, name, out)
}

func (c *counted) Forget(nodeid, nlookup uint64) {
	defer c.done(stats.OpForget, c.start())
	c.raw.Forget(nodeid, nlookup)
}

func (c *counted) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer c.done(stats.OpGetattr, c.start())
	return c.raw.GetAttr(cancel, in, out)
}

func (c *counted) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer c.done(stats.OpSetattr, c.start())
	return c.raw.SetAttr(cancel, in, out)
}

func (c *counted) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer c.done(stats.OpMknod, c.start())
	return c.raw.Mknod(cancel, in, name, out)
}

func (c *counted) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer c.done(stats.OpMkdir, c.start())
	return c.raw.Mkdir(cancel, in, name, out)
}

func (c *counted) Unlink(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	defer c.done(stats.OpUnlink, c.start())
	return c.raw.Unlink(cancel, header, name)
}

func (c *counted) Rmdir(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	defer c.done(stats.OpRmdir, c.start())
	return c.raw.Rmdir(cancel, header, name)
}

func (c *counted) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	defer c.done(stats.OpRename, c.start())
	return c.raw.Rename(cancel, in, oldName, newName)
}

func (c *counted) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	defer c.done(stats.OpLink, c.start())
	return c.raw.Link(cancel, in, name, out)
}

func (c *counted) Symlink(cancel <-chan struct{}, header *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	defer c.done(stats.OpSymlink, c.start())
	return c.raw.Symlink(cancel, header, target, name, out)
}

func (c *counted) Readlink(cancel <-chan struct{}, header *fuse.InHeader) ([]byte, fuse.Status) {
	defer c.done(stats.OpReadlink, c.start())
	return c.raw.Readlink(cancel, header)
}

func (c *counted) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	defer c.done(stats.OpAccess, c.start())
	return c.raw.Access(cancel, in)
}

func (c *counted) GetXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	defer c.done(stats.OpGetxattr, c.start())
	return c.raw.GetXAttr(cancel, header, attr, dest)
}

func (c *counted) ListXAttr(cancel <-chan struct{}, header *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	defer c.done(stats.OpListxattr, c.start())
	return c.raw.ListXAttr(cancel, header, dest)
}

func (c *counted) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	defer c.done(stats.OpSetxattr, c.start())
	return c.raw.SetXAttr(cancel, in, attr, data)
}

func (c *counted) RemoveXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string) fuse.Status {
	defer c.done(stats.OpRemovexattr, c.start())
	return c.raw.RemoveXAttr(cancel, header, attr)
}

func (c *counted) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer c.done(stats.OpCreate, c.start())
	return c.raw.Create(cancel, in, name, out)
}

func (c *counted) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	defer c.done(stats.OpTmpfile, c.start())
	return c.raw.Tmpfile(cancel, in, out)
}

func (c *counted) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer c.done(stats.OpOpen, c.start())
	return c.raw.Open(cancel, in, out)
}

func (c *counted) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer c.done(stats.OpRead, c.start())
	return c.raw.Read(cancel, in, buf)
}

func (c *counted) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	defer c.done(stats.OpLseek, c.start())
	return c.raw.Lseek(cancel, in, out)
}

func (c *counted) GetLk(cancel <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	defer c.done(stats.OpGetlk, c.start())
	return c.raw.GetLk(cancel, in, out)
}

func (c *counted) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	defer c.done(stats.OpSetlk, c.start())
	return c.raw.SetLk(cancel, in)
}

func (c *counted) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	defer c.done(stats.OpSetlkw, c.start())
	return c.raw.SetLkw(cancel, in)
}

func (c *counted) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	defer c.done(stats.OpRelease, c.start())
	c.raw.Release(cancel, in)
}

func (c *counted) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer c.done(stats.OpWrite, c.start())
	return c.raw.Write(cancel, in, data)
}

func (c *counted) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	defer c.done(stats.OpWrite, c.start())
	return c.raw.Writev(cancel, in, data)
}

func (c *counted) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	defer c.done(stats.OpCopyFileRange, c.start())
	return c.raw.CopyFileRange(cancel, in)
}

func (c *counted) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	defer c.done(stats.OpIoctl, c.start())
	return c.raw.Ioctl(cancel, in, inbuf, out, outbuf)
}

func (c *counted) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer c.done(stats.OpFlush, c.start())
	return c.raw.Flush(cancel, in)
}

func (c *counted) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer c.done(stats.OpFsync, c.start())
	return c.raw.Fsync(cancel, in)
}

func (c *counted) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	defer c.done(stats.OpFallocate, c.start())
	return c.raw.Fallocate(cancel, in)
}

func (c *counted) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer c.done(stats.OpOpendir, c.start())
	return c.raw.OpenDir(cancel, in, out)
}

func (c *counted) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer c.done(stats.OpReaddir, c.start())
	return c.raw.ReadDir(cancel, in, out)
}

func (c *counted) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer c.done(stats.OpReaddirplus, c.start())
	return c.raw.ReadDirPlus(cancel, in, out)
}

func (c *counted) ReleaseDir(in *fuse.ReleaseIn) {
	defer c.done(stats.OpReleasedir, c.start())
	c.raw.ReleaseDir(in)
}

func (c *counted) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer c.done(stats.OpFsyncdir, c.start())
	return c.raw.FsyncDir(cancel, in)
}

func (c *counted) StatFs(cancel <-chan struct{}, header *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer c.done(stats.OpStatfs, c.start())
	return c.raw.StatFs(cancel, header, out)
}

func (c *counted) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	defer c.done(stats.OpStatx, c.start())
	return c.raw.Statx(cancel, in, out)
}
