package fusefs

import (
	"os"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/ledger"
	"golang.org/x/sys/unix"
)

// fillAttr copies a stored inode's attributes, with kvfs's own inode
// number and, for st_blocks, exactly the ledger's charge.
func fillAttr(out *fuse.Attr, st *unix.Stat_t, id ledger.ID, charge int64) {
	out.Ino = uint64(id)
	out.Size = uint64(st.Size)
	out.Blocks = uint64(charge / 512)
	out.Atime, out.Atimensec = uint64(st.Atim.Sec), uint32(st.Atim.Nsec)
	out.Mtime, out.Mtimensec = uint64(st.Mtim.Sec), uint32(st.Mtim.Nsec)
	out.Ctime, out.Ctimensec = uint64(st.Ctim.Sec), uint32(st.Ctim.Nsec)
	out.Mode = st.Mode
	out.Nlink = uint32(st.Nlink)
	out.Uid, out.Gid = st.Uid, st.Gid
	out.Blksize = ledger.BlockSize
}

// fstat reads the attributes of an open stored file.
func fstat(f *os.File) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstat(int(f.Fd()), &st)
	return st, err
}

// applyAttrs carries out chmod, chown and utimes from a SETATTR on an
// open stored file or directory. Size is the caller's: it needs the
// ledger.
func applyAttrs(f *os.File, in *fuse.SetAttrIn) error {
	fd := int(f.Fd())
	if mode, ok := in.GetMode(); ok {
		if err := unix.Fchmod(fd, mode&07777); err != nil {
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

func timespec(t time.Time) unix.Timespec {
	return unix.NsecToTimespec(t.UnixNano())
}

// openFlags are the flags kvfs opens a stored file with for a handle
// opened with flags: the kernel already did creation, truncation and
// append positioning, and O_DIRECT alignment is the client's business
// with the mount, not the store's.
func openFlags(flags uint32) int {
	f := int(flags) &^ (syscall.O_CREAT | syscall.O_EXCL | syscall.O_TRUNC | syscall.O_APPEND | syscall.O_DIRECT | syscall.O_NOCTTY)
	if f&syscall.O_ACCMODE == syscall.O_WRONLY {
		f = f&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return f
}

func writable(flags uint32) bool { return flags&syscall.O_ACCMODE != syscall.O_RDONLY }
