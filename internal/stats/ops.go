package stats

// Op is a type of FUSE request, named as go-fuse's debug log names it:
// the keys of fuse_requests, and the op label of the metrics' request
// latency.
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
