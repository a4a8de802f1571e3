package fusefs

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
	"go.uber.org/zap"
)

// errno is the one place Go errors become errnos (errnoOf).
func (f *FS) errno(op string, err error) syscall.Errno { return errnoOf(f.log, op, err) }

// errnoOf is the errno of err. Unknown errors are EIO, logged to log with
// the operation that met them.
func errnoOf(log *zap.Logger, op string, err error) syscall.Errno {
	var en syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.Is(err, core.ErrNotFetched):
		// A miss, before any errno the network's failure may carry.
		return syscall.ENOENT
	case errors.As(err, &en):
		return en
	case errors.Is(err, core.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, core.ErrStale):
		// The kernel retries a path walk that meets ESTALE with a fresh
		// lookup, which then sees what the name holds now.
		return syscall.ESTALE
	case errors.Is(err, core.ErrNoSpace):
		return syscall.ENOSPC
	case errors.Is(err, core.ErrTooLarge):
		return syscall.EFBIG
	case errors.Is(err, core.ErrExists):
		return syscall.EEXIST
	}
	log.Error("unexpected error", zap.String("op", op), zap.Error(err))
	return syscall.EIO
}

// status is errno as a FUSE reply's status.
func (f *FS) status(op string, err error) fuse.Status { return fuse.Status(f.errno(op, err)) }

// The adapter's own refusals, as errors for errno.
var (
	// errNotStored: kvfs stores directories and regular files only.
	errNotStored = fmt.Errorf("kvfs stores only directories and regular files: %w", syscall.EPERM)
	// errNoAttr: kvfs keeps no extended attributes but its own.
	errNoAttr = fmt.Errorf("no such attribute: %w", syscall.ENODATA)
	// errNoSetAttr: extended attributes cannot be set; ENOTSUP (not
	// ENODATA) is what lets cp -a, rsync -X and the like carry on.
	errNoSetAttr = fmt.Errorf("kvfs keeps no extended attributes: %w", syscall.ENOTSUP)
	// errLinkedOutside: the stored file has links kvfs did not make
	// (core.LinkedOutside).
	errLinkedOutside = fmt.Errorf("the stored file has links kvfs did not make: %w", syscall.EPERM)
	// errNotDir: the name is not a directory.
	errNotDir = fmt.Errorf("not a directory: %w", syscall.ENOTDIR)
)

// checkName refuses names kvfs cannot store.
func checkName(name string) error {
	if len(name) > core.NameMax {
		return syscall.ENAMETOOLONG
	}
	return nil
}
