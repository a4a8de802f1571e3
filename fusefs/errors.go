package fusefs

import (
	"errors"
	"runtime/debug"
	"syscall"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/ledger"
	"go.uber.org/zap"
)

// errno is the one place Go errors become errnos. Unknown errors are
// EIO, logged with the operation that met them.
func (f *FS) errno(op string, err error) syscall.Errno {
	var en syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &en):
		return en
	case errors.Is(err, blob.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, ledger.ErrNoSpace), errors.Is(err, ledger.ErrTooLarge):
		return syscall.ENOSPC
	case errors.Is(err, ledger.ErrGone):
		// The kernel retries a path walk that meets ESTALE with a fresh
		// lookup, which then sees the object is gone.
		return syscall.ESTALE
	case errors.Is(err, ledger.ErrExists):
		return syscall.EEXIST
	}
	f.log.Error("unexpected error", zap.String("op", op), zap.Error(err))
	return syscall.EIO
}

// guard turns a panic in a handler into EIO with the stack logged, so one
// bad request cannot take the mount down. Use as
// `defer f.guard("op", &errno)`.
func (f *FS) guard(op string, errno *syscall.Errno) {
	if r := recover(); r != nil {
		f.log.Error("panic in handler", zap.String("op", op), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
		*errno = syscall.EIO
	}
}

// checkName refuses names kvfs cannot store.
func checkName(name string) syscall.Errno {
	if len(name) > 255 {
		return syscall.ENAMETOOLONG
	}
	return 0
}
