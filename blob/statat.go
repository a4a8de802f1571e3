package blob

import "golang.org/x/sys/unix"

// statAt reads the attributes of name in directory dirfd, not following
// a symlink (fstatat with AT_SYMLINK_NOFOLLOW), and without asking a file
// system mounted on it for fresh ones (AT_STATX_DONT_SYNC): a stat of a
// stored directory a user's FUSE server is mounted on sent that server a
// GETATTR, and one that never answered held the lookup, and the kernel's
// lock of the directory, for good (an outside tester's finding). The
// store's own file system (ext4, xfs) answers the same either way.
func statAt(dirfd int, name string, st *unix.Stat_t) error {
	var x unix.Statx_t
	const flags = unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_DONT_SYNC | unix.AT_NO_AUTOMOUNT
	if err := unix.Statx(dirfd, name, flags, unix.STATX_BASIC_STATS, &x); err != nil {
		return err
	}
	*st = unix.Stat_t{
		Dev:    unix.Mkdev(x.Dev_major, x.Dev_minor),
		Ino:    x.Ino,
		Mode:   uint32(x.Mode),
		Uid:    x.Uid,
		Gid:    x.Gid,
		Rdev:   unix.Mkdev(x.Rdev_major, x.Rdev_minor),
		Size:   int64(x.Size),
		Blocks: int64(x.Blocks),
		Atim:   unix.Timespec{Sec: x.Atime.Sec, Nsec: int64(x.Atime.Nsec)},
		Mtim:   unix.Timespec{Sec: x.Mtime.Sec, Nsec: int64(x.Mtime.Nsec)},
		Ctim:   unix.Timespec{Sec: x.Ctime.Sec, Nsec: int64(x.Ctime.Nsec)},
	}
	// Their types differ by architecture (uint32 and int32 on arm64,
	// which did not build before).
	setNum(&st.Nlink, x.Nlink)
	setNum(&st.Blksize, x.Blksize)
	return nil
}

// setNum sets a number of whichever integer type unix.Stat_t gives it on
// this architecture.
func setNum[T ~int32 | ~int64 | ~uint32 | ~uint64](dst *T, v uint32) { *dst = T(v) }
