package core

import (
	"fmt"
	"syscall"
)

// Why a stored file is not named (see DirectPath).
var (
	// ErrNoBacking: the object has no name left in the store (ENODATA,
	// as for an extended attribute it does not have).
	ErrNoBacking = fmt.Errorf("the object has no stored name: %w", syscall.ENODATA)
	// ErrDirectWrite: writers' bytes all pass through the daemon here
	// (no passthrough), and the object is open for writing (EPERM).
	ErrDirectWrite = fmt.Errorf("every written byte passes through the daemon on this mount; no direct writes: %w", syscall.EPERM)
)

// DirectPath is the absolute path of an object's stored file, for
// loaders that read it directly while they hold a handle on the mount
// (package gpudirect), and write it with passthrough. Without passthrough
// the core does not poll writers' stored files (every byte is to pass
// through it), so it names none while a writer has the object open: a
// direct write would bypass the ledger.
func (c *Core) DirectPath(id ID) (string, error) {
	if !c.cfg.Passthrough && c.Writers(id) > 0 {
		return "", ErrDirectWrite
	}
	path, ok := c.BackingPath(id)
	if !ok {
		return "", ErrNoBacking
	}
	return path, nil
}
