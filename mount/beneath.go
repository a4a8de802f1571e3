package mount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/internal/failpoint"
	"github.com/kvfs/kvfs/internal/mountinfo"
	"github.com/kvfs/kvfs/internal/usageerr"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Replacing a dead mount. After a crash the mount point holds the dead
// daemon's mount, which answers everything with ENOTCONN. Detaching it
// before the new mount is in place shows the bare directory under it for
// as long as the start takes (a minute at ten million objects), and a
// connector that kept running stores into that directory, on whatever
// disk holds it: measured, a Python loop creating files there through a
// kill -9 and restart put 148 files under the mount point between the
// detach and the new daemon's emptiness check (which then refused to
// mount) and 77,000 more after. So, as root, the new mount is made with
// the new mount API beneath the dead one (MOVE_MOUNT_BENEATH, Linux 6.5),
// its INIT answered, and only then the dead one detached: a client sees
// ENOTCONN, then kvfs, never the directory. Where that cannot be done
// (not root, an older kernel) the dead mount is detached just before the
// new mount instead of before the start.

// moveMountBeneath is MOVE_MOUNT_BENEATH, which x/sys does not name yet.
const moveMountBeneath = 0x200

// newServer mounts the file system at the mount point and answers INIT,
// replacing a mount a crashed daemon left dead there (see above).
func (m *Mount) newServer(fs fuse.RawFileSystem) (*fuse.Server, error) {
	if m.deadMount && isDeadMount(m.Mountpoint) {
		if os.Geteuid() == 0 {
			server, err := m.replaceDead(fs)
			if err == nil || errors.Is(err, usageerr.ErrUsage) {
				return server, err
			}
			m.log.Warn("cannot mount beneath the dead mount; detaching it first", zap.Error(err))
		}
		if err := prepareMountpoint(m.Mountpoint, m.log); err != nil {
			return nil, err
		}
	}
	return fuse.NewServer(fs, m.Mountpoint, m.mountOptions())
}

// replaceDead mounts beneath the dead mount, answers INIT, and detaches
// the dead mount.
func (m *Mount) replaceDead(fs fuse.RawFileSystem) (*fuse.Server, error) {
	mp := m.Mountpoint
	// Checked at the start too (checkMountpoint); the store's load may
	// have taken a minute since.
	if err := coveredEmpty(mp); err != nil {
		return nil, err
	}
	// A start killed between its mount beneath and its detach left two
	// dead mounts stacked here; the top ones go first (each uncovers
	// another dead mount, never the directory), so that the new mount
	// ends up alone.
	if err := detachDead(mp, 1, "detaching a dead mount stacked on another", m.log); err != nil {
		return nil, err
	}
	opts := m.mountOptions()
	fd, err := mountBeneath(mp, opts)
	if err != nil {
		return nil, err
	}
	// Nothing reaches the new mount until the dead one goes: INIT is
	// the only request on the connection now. A failure leaves the new
	// mount under the dead one, aborted (its descriptor closed), and
	// prepareMountpoint detaches both.
	server, err := fuse.NewMountedServer(fs, fd, mp, opts)
	if err != nil {
		return nil, err
	}
	failpoint.Hit("beneath-mounted")
	if err := detach(mp); err != nil {
		server.Detach()
		return nil, fmt.Errorf("detaching the dead mount above the new one: %w", err)
	}
	m.log.Info("replaced the dead mount without uncovering the mount point", zap.String("mountpoint", mp))
	return server, nil
}

// mountBeneath opens a FUSE connection and mounts it beneath the mount
// on top of mp, with what go-fuse's direct mount would give mount(2),
// and returns its /dev/fuse descriptor with INIT not yet answered.
func mountBeneath(mp string, o *fuse.MountOptions) (fd int, err error) {
	fd, err = unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	fsfd, err := unix.Fsopen("fuse", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen: %w", err)
	}
	mfd, err := fsmountFuse(fsfd, fd, o)
	unix.Close(fsfd) // its context would keep the connection alive after an unmount
	if err != nil {
		return -1, err
	}
	err = unix.MoveMount(mfd, "", unix.AT_FDCWD, mp, unix.MOVE_MOUNT_F_EMPTY_PATH|moveMountBeneath)
	unix.Close(mfd) // an open descriptor of its root would keep the mount busy
	if err != nil {
		return -1, fmt.Errorf("move_mount beneath %s: %w", mp, err)
	}
	return fd, nil
}

// fsmountFuse configures a FUSE superblock on connection fd in the file
// system context fsfd and returns a detached mount of it.
func fsmountFuse(fsfd, fd int, o *fuse.MountOptions) (int, error) {
	params := [][2]string{
		{"fd", strconv.Itoa(fd)},
		{"rootmode", strconv.FormatUint(unix.S_IFDIR, 8)},
		{"user_id", strconv.Itoa(os.Geteuid())},
		{"group_id", strconv.Itoa(os.Getegid())},
		{"max_read", strconv.Itoa(maxRead)},
		{"source", o.FsName},
		{"subtype", o.Name},
	}
	var flags []string
	if o.AllowOther {
		flags = append(flags, "allow_other")
	}
	for _, opt := range o.Options {
		if k, v, ok := strings.Cut(opt, "="); ok {
			params = append(params, [2]string{k, v})
		} else {
			flags = append(flags, opt)
		}
	}
	for _, p := range params {
		if err := unix.FsconfigSetString(fsfd, p[0], p[1]); err != nil {
			return -1, fmt.Errorf("fsconfig %s=%s: %w", p[0], p[1], err)
		}
	}
	for _, f := range flags {
		if err := unix.FsconfigSetFlag(fsfd, f); err != nil {
			return -1, fmt.Errorf("fsconfig %s: %w", f, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("fsconfig create: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount: %w", err)
	}
	return mfd, nil
}

// coveredEmpty requires the directory under the dead mount at mp to be
// empty (a usage error if not: kvfs would hide what it holds).
func coveredEmpty(mp string) error {
	n, err := coveredEntries(mp)
	switch {
	case err != nil:
		return fmt.Errorf("reading the directory under the dead mount: %w", err)
	case n > 0:
		return usagef("mount point %s is not empty under its dead mount (%s); kvfs would hide them", mp, usageerr.Entries(n))
	}
	return nil
}

// detachDead detaches the dead mounts on top of mp, one at a time, while
// more than keep mounts are stacked there; why is what it logs.
func detachDead(mp string, keep int, why string, log *zap.Logger) error {
	for n := len(mountinfo.Stack(mp)); n > keep && isDeadMount(mp); n-- {
		log.Warn(why, zap.String("mountpoint", mp))
		if err := detach(mp); err != nil {
			return fmt.Errorf("cleaning up dead mount %s: %w", mp, err)
		}
	}
	return nil
}

// coveredEntries counts the entries of the directory that the mount at
// mp covers, read through a private clone of the mount holding mp's
// parent (open_tree), in which nothing is mounted on it.
func coveredEntries(mp string) (int, error) {
	tfd, err := unix.OpenTree(unix.AT_FDCWD, filepath.Dir(mp), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return 0, fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tfd)
	dfd, err := unix.Openat(tfd, filepath.Base(mp), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	dir := os.NewFile(uintptr(dfd), mp)
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if errors.Is(err, unix.ENOENT) {
		err = nil
	}
	return len(names), err
}
