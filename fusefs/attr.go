package fusefs

import (
	"os"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
	"golang.org/x/sys/unix"
)

// fillAttr copies an inode's attributes, with kvfs's own inode number
// and, for st_blocks, exactly the ledger's charge (directories cost 0).
// Modes are the store's, all of them: nothing adds permission bits to a
// mode that has none (chmod 000), which the kernel then enforces for
// other users. But a file shows no set-ID bits (fileMode), even where
// its owner set them on the stored copy directly.
func fillAttr(out *fuse.Attr, id core.ID, a core.Attr) {
	st := &a.Stat_t
	out.Ino = uint64(id)
	out.Size = uint64(st.Size)
	out.Blocks = uint64(a.Charge / 512)
	out.Atime, out.Atimensec = uint64(st.Atim.Sec), uint32(st.Atim.Nsec)
	out.Mtime, out.Mtimensec = uint64(st.Mtim.Sec), uint32(st.Mtim.Nsec)
	out.Ctime, out.Ctimensec = uint64(st.Ctim.Sec), uint32(st.Ctim.Nsec)
	out.Mode = st.Mode
	out.Nlink = uint32(st.Nlink)
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		out.Nlink = uint32(a.Links)
		out.Mode = unix.S_IFREG | fileMode(st.Mode)
	}
	out.Uid, out.Gid = st.Uid, st.Gid
	out.Blksize = core.BlockSize
}

// fileMode is the mode a stored file gets: a cache keeps no set-user-ID
// or set-group-ID bits, which is what lets the mount negotiate
// HANDLE_KILLPRIV_V2 (the kernel then stops asking for security.capability
// on every write) without clearing them itself.
func fileMode(mode uint32) uint32 { return mode & 07777 &^ (unix.S_ISUID | unix.S_ISGID) }

// applyAttrs carries out chmod, chown and utimes from a SETATTR on an
// open stored file or directory. Size is the caller's: it needs the
// ledger.
func applyAttrs(f *os.File, in *fuse.SetAttrIn, file bool) error {
	fd := int(f.Fd())
	if mode, ok := in.GetMode(); ok {
		mode &= 07777
		if file {
			mode = fileMode(mode)
		}
		if err := unix.Fchmod(fd, mode); err != nil {
			return err
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		u, g := -1, -1
		if uok {
			u = int(uid)
		}
		if gok {
			g = int(gid)
		}
		if err := unix.Fchown(fd, u, g); err != nil {
			return err
		}
	}
	return applyTimes(fd, in)
}

func applyTimes(fd int, in *fuse.SetAttrIn) error {
	atime, aok := in.GetATime()
	mtime, mok := in.GetMTime()
	if !aok && !mok {
		return nil
	}
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
	if aok {
		ts[0] = timespec(atime)
	}
	if mok {
		ts[1] = timespec(mtime)
	}
	return unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH)
}

// timespec is t as the kernel takes it, seconds and nanoseconds apart:
// through UnixNano a time past 2262 (int64 nanoseconds' end) wrapped to
// 1901 (an outside tester's `touch -d 2300-01-01`; ext4 keeps times to
// 2446).
func timespec(t time.Time) unix.Timespec {
	return unix.Timespec{Sec: t.Unix(), Nsec: int64(t.Nanosecond())}
}
