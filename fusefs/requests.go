package fusefs

import (
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Op is a type of FUSE request, named as go-fuse's debug log names it.
type Op uint8

// The requests go-fuse hands a file system (fuse.RawFileSystem). FORGET
// counts every inode a BATCH_FORGET names; RENAME includes RENAME2;
// WRITE includes go-fuse's vectored writes.
const (
	OpLookup Op = iota
	OpForget
	OpGetattr
	OpSetattr
	OpMknod
	OpMkdir
	OpUnlink
	OpRmdir
	OpRename
	OpLink
	OpSymlink
	OpReadlink
	OpAccess
	OpGetxattr
	OpListxattr
	OpSetxattr
	OpRemovexattr
	OpCreate
	OpTmpfile
	OpOpen
	OpRead
	OpLseek
	OpGetlk
	OpSetlk
	OpSetlkw
	OpRelease
	OpWrite
	OpCopyFileRange
	OpIoctl
	OpFlush
	OpFsync
	OpFallocate
	OpOpendir
	OpReaddir
	OpReaddirplus
	OpReleasedir
	OpFsyncdir
	OpStatfs
	OpStatx
	NumOps // how many there are
)

var opNames = [NumOps]string{
	"LOOKUP", "FORGET", "GETATTR", "SETATTR", "MKNOD", "MKDIR", "UNLINK", "RMDIR", "RENAME", "LINK",
	"SYMLINK", "READLINK", "ACCESS", "GETXATTR", "LISTXATTR", "SETXATTR", "REMOVEXATTR", "CREATE",
	"TMPFILE", "OPEN", "READ", "LSEEK", "GETLK", "SETLK", "SETLKW", "RELEASE", "WRITE",
	"COPY_FILE_RANGE", "IOCTL", "FLUSH", "FSYNC", "FALLOCATE", "OPENDIR", "READDIR", "READDIRPLUS",
	"RELEASEDIR", "FSYNCDIR", "STATFS", "STATX",
}

func (o Op) String() string {
	if o < NumOps {
		return opNames[o]
	}
	return "UNKNOWN"
}

// requests counts the FUSE requests a mount answered, by type.
type requests struct{ n [NumOps]atomic.Int64 }

// counts are the types seen so far and how many of each were answered:
// Stats.FuseRequests.
func (r *requests) counts() map[string]int64 {
	out := map[string]int64{}
	for op := range NumOps {
		if n := r.n[op].Load(); n > 0 {
			out[op.String()] = n
		}
	}
	return out
}

// Instrument wraps the raw file system that fs.NewNodeFS built over
// f.Root(): every request is counted by type (Stats.FuseRequests) once
// it is answered, and, when timed is set, timed from the call into
// go-fuse's node layer until it returns (a READ's reply data may be
// produced after that). timed must be quick and safe for concurrent use.
func (f *FS) Instrument(raw fuse.RawFileSystem, timed func(op Op, took time.Duration)) fuse.RawFileSystem {
	return &counted{raw: raw, reqs: &f.reqs, timed: timed}
}
