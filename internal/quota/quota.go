// Package quota caps a directory tree with a project quota (ext4 with
// the project feature mounted with prjquota, XFS with pquota), so that
// the kernel bounds what may be written under it even when no process
// watches. kvfs caps its store with it: a FUSE passthrough writer keeps
// writing straight into the stored file after the daemon dies.
//
// The directory gets a project ID that nothing on its file system uses.
// It and every file and directory under it are given the project,
// directories with FS_XFLAG_PROJINHERIT so that what is created later
// inherits it; then the project is recorded in an extended attribute on
// the directory (RecordXattr) with its inode number, so that a later run
// finds it and skips the walk, and a copy of the directory does not share
// it; then the project's block hard limit is set.
package quota

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"github.com/kvfs/kvfs/internal/mountinfo"
	"golang.org/x/sys/unix"
)

// RecordXattr is the directory's extended attribute that records its
// project ID and its inode number ("ID INODE").
const RecordXattr = "user.kvfs.quota-project"

// ErrUnsupported: the directory's file system enforces no project quota
// (none at all, or mounted without it, or a kernel without it).
var ErrUnsupported = errors.New("no project quota is enforced on this file system")

// From linux/fs.h, linux/quota.h and linux/dqblk_xfs.h.
const (
	fsIocFsgetxattr  = 0x801c581f // _IOR('X', 31, struct fsxattr)
	fsIocFssetxattr  = 0x401c5820 // _IOW('X', 32, struct fsxattr)
	xflagProjinherit = 0x00000200
	prjQuota         = 2
	qGetQuota        = 0x800007
	qSetQuota        = 0x800008
	qXGetQStat       = 'X'<<8 + 5
	qifBLimits       = 1
	fsQuotaPdqEnfd   = 1 << 5
	dqBlockSize      = 1024 // the unit of if_dqblk's block limits
)

// fsxattr is struct fsxattr.
type fsxattr struct {
	Xflags, Extsize, Nextents, Projid, Cowextsize uint32
	Pad                                           [8]byte
}

// dqblk is struct if_dqblk.
type dqblk struct {
	BHardlimit, BSoftlimit, CurSpace  uint64
	IHardlimit, ISoftlimit, CurInodes uint64
	BTime, ITime                      uint64
	Valid                             uint32
	_                                 uint32
}

// Status is a directory's project quota.
type Status struct {
	Project    uint32
	LimitBytes int64 // the block hard limit; 0: none
	UsedBytes  int64 // what the project holds
	// Tagged is how many files and directories Apply gave the project
	// (0 when the tree had it already).
	Tagged int
}

// Enforced says why not (ErrUnsupported, wrapped) if dir's file system
// does not enforce project quotas.
func Enforced(dir string) error {
	f, err := openFS(dir)
	if err != nil {
		return err
	}
	defer f.close()
	return f.enforced()
}

// Apply gives dir a project of its own (the recorded one if any), gives
// it to everything under dir, and sets the project's block hard limit to
// limit bytes. It needs root.
func Apply(dir string, limit int64) (Status, error) {
	f, err := openFS(dir)
	if err != nil {
		return Status{}, err
	}
	defer f.close()
	if err := f.enforced(); err != nil {
		return Status{}, err
	}
	id, recorded, err := f.choose(dir)
	if err != nil {
		return Status{}, err
	}
	st := Status{Project: id}
	if done, err := tagged(f.fd, id, true); err != nil {
		return st, err
	} else if !recorded || !done {
		// No limit while the tree moves into the project: moving a file
		// into a project over its limit fails.
		if err := f.setLimit(id, 0); err != nil {
			return st, err
		}
		if st.Tagged, err = tagTree(dir, id); err != nil {
			return st, err
		}
		// The record says the whole tree has the project: a walk cut
		// short leaves none, and the next Apply starts over.
		val := fmt.Sprintf("%d %d", id, f.ino)
		if err := unix.Fsetxattr(f.fd, RecordXattr, []byte(val), 0); err != nil {
			return st, fmt.Errorf("quota: recording the project of %s: %w", dir, err)
		}
	}
	if err := f.setLimit(id, limit); err != nil {
		return st, err
	}
	q, err := f.get(id)
	if err != nil {
		return st, err
	}
	st.LimitBytes, st.UsedBytes = int64(q.BHardlimit)*dqBlockSize, int64(q.CurSpace)
	return st, nil
}

// Read is dir's project and that project's limit and use, as the kernel
// has them.
func Read(dir string) (Status, error) {
	f, err := openFS(dir)
	if err != nil {
		return Status{}, err
	}
	defer f.close()
	x, err := getFsx(f.fd)
	if err != nil {
		return Status{}, err
	}
	q, err := f.get(x.Projid)
	if err != nil {
		return Status{Project: x.Projid}, err
	}
	return Status{Project: x.Projid, LimitBytes: int64(q.BHardlimit) * dqBlockSize, UsedBytes: int64(q.CurSpace)}, nil
}

// fsRef is an open directory and the block device of its file system.
type fsRef struct {
	fd  int
	ino uint64
	dev string // from mountinfo, for kernels before quotactl_fd (5.14)
}

func openFS(dir string) (*fsRef, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("quota: %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("quota: %s: %w", dir, err)
	}
	return &fsRef{fd: fd, ino: st.Ino, dev: device(st.Dev)}, nil
}

func (f *fsRef) close() { unix.Close(f.fd) }

// device is the source of the mount whose device number is dev.
func device(dev uint64) string {
	want := fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev))
	src := ""
	for _, e := range mountinfo.Read() {
		if e.Dev == want && strings.HasPrefix(e.Source, "/dev/") {
			src = e.Source
		}
	}
	return src
}

func qcmd(cmd, typ int) uintptr { return uintptr(cmd<<8 | typ&0xff) }

// quotactl runs a project quota command on f's file system.
func (f *fsRef) quotactl(cmd int, id uint32, addr unsafe.Pointer) error {
	_, _, e := unix.Syscall6(unix.SYS_QUOTACTL_FD, uintptr(f.fd), qcmd(cmd, prjQuota), uintptr(id), uintptr(addr), 0, 0)
	if e == unix.ENOSYS && f.dev != "" {
		p, err := unix.BytePtrFromString(f.dev)
		if err != nil {
			return err
		}
		_, _, e = unix.Syscall6(unix.SYS_QUOTACTL, qcmd(cmd, prjQuota), uintptr(unsafe.Pointer(p)), uintptr(id), uintptr(addr), 0, 0)
	}
	if e != 0 {
		return e
	}
	return nil
}

func (f *fsRef) enforced() error {
	// struct fs_quota_stat: s8 version, u16 flags, ...; the kernel writes
	// well under 256 bytes.
	var buf [256]byte
	if err := f.quotactl(qXGetQStat, 0, unsafe.Pointer(&buf[0])); err != nil {
		return fmt.Errorf("%w (quotactl: %v)", ErrUnsupported, err)
	}
	if flags := *(*uint16)(unsafe.Pointer(&buf[2])); flags&fsQuotaPdqEnfd == 0 {
		return fmt.Errorf("%w (project quota not enforced: mount ext4 with prjquota, XFS with pquota)", ErrUnsupported)
	}
	return nil
}

func (f *fsRef) get(id uint32) (dqblk, error) {
	var q dqblk
	err := f.quotactl(qGetQuota, id, unsafe.Pointer(&q))
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return dqblk{}, nil // XFS: no dquot for an ID nothing ever used
	}
	if err != nil {
		return q, fmt.Errorf("quota: reading project %d: %w", id, err)
	}
	return q, nil
}

func (f *fsRef) setLimit(id uint32, limit int64) error {
	q := dqblk{BHardlimit: uint64((limit + dqBlockSize - 1) / dqBlockSize), Valid: qifBLimits}
	if err := f.quotactl(qSetQuota, id, unsafe.Pointer(&q)); err != nil {
		return fmt.Errorf("quota: setting project %d's limit: %w", id, err)
	}
	return nil
}

// choose is dir's recorded project (recorded), or a new one that
// nothing uses.
func (f *fsRef) choose(dir string) (id uint32, recorded bool, err error) {
	if id, ok := record(f.fd, f.ino); ok {
		return id, true, nil
	}
	// Start from the inode number, so two stores on one file system start
	// apart, in the upper half of the 31-bit range, away from the small
	// IDs administrators hand out.
	const base, span = 1 << 30, 1 << 30
	c := uint32(f.ino % span)
	for i := uint32(0); i < 4096; i++ {
		id := base + (c+i)%span
		q, err := f.get(id)
		if err != nil {
			return 0, false, err
		}
		if q.CurSpace == 0 && q.CurInodes == 0 && q.BHardlimit == 0 && q.BSoftlimit == 0 &&
			q.IHardlimit == 0 && q.ISoftlimit == 0 {
			return id, false, nil
		}
	}
	return 0, false, fmt.Errorf("quota: no unused project ID found for %s", dir)
}

// record is the project RecordXattr names, if it was written for this
// very directory.
func record(fd int, ino uint64) (uint32, bool) {
	buf := make([]byte, 64)
	n, err := unix.Fgetxattr(fd, RecordXattr, buf)
	if err != nil {
		return 0, false
	}
	fields := strings.Fields(string(buf[:n]))
	if len(fields) != 2 {
		return 0, false
	}
	id, err1 := strconv.ParseUint(fields[0], 10, 32)
	got, err2 := strconv.ParseUint(fields[1], 10, 64)
	if err1 != nil || err2 != nil || id == 0 || got != ino {
		return 0, false
	}
	return uint32(id), true
}

func getFsx(fd int) (fsxattr, error) {
	var x fsxattr
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fsIocFsgetxattr, uintptr(unsafe.Pointer(&x))); e != 0 {
		return x, fmt.Errorf("quota: FS_IOC_FSGETXATTR: %w", e)
	}
	return x, nil
}

// tagged says whether fd has project id (and, a directory, passes it on).
func tagged(fd int, id uint32, dir bool) (bool, error) {
	x, err := getFsx(fd)
	return err == nil && x.Projid == id && (!dir || x.Xflags&xflagProjinherit != 0), err
}

// tag gives fd project id, and a directory PROJINHERIT.
func tag(fd int, id uint32, dir bool) (bool, error) {
	x, err := getFsx(fd)
	if err != nil {
		return false, err
	}
	if x.Projid == id && (!dir || x.Xflags&xflagProjinherit != 0) {
		return false, nil
	}
	x.Projid = id
	if dir {
		x.Xflags |= xflagProjinherit
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fsIocFssetxattr, uintptr(unsafe.Pointer(&x))); e != 0 {
		return false, fmt.Errorf("quota: FS_IOC_FSSETXATTR: %w", e)
	}
	return true, nil
}

// tagTree gives every file and directory under dir, and dir, project
// id. A directory is tagged before its entries are listed, so what is
// created in it meanwhile inherits the project or is listed.
func tagTree(dir string, id uint32) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || !d.Type().IsDir() && !d.Type().IsRegular() {
			return err
		}
		done, err := tagPath(p, id, d.IsDir())
		if done {
			n++
		}
		return err
	})
	return n, err
}

func tagPath(p string, id uint32, dir bool) (bool, error) {
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOATIME
	if dir {
		flags |= unix.O_DIRECTORY
	}
	fd, err := unix.Open(p, flags, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("quota: %s: %w", p, err)
	}
	defer unix.Close(fd)
	done, err := tag(fd, id, dir)
	if err != nil {
		return false, fmt.Errorf("%s: %w", p, err)
	}
	return done, nil
}
