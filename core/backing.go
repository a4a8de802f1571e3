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
	// ErrNoSearch: every name of the object is in a directory the caller
	// may not search (EACCES).
	ErrNoSearch = fmt.Errorf("no name of the object is in directories the caller may search: %w", syscall.EACCES)
)

// DirectPath is the absolute path of an object's stored file, for
// loaders that read it directly while they hold a handle on the mount
// (package gpudirect), and write it with passthrough. Without passthrough
// the core does not poll writers' stored files (every byte is to pass
// through it), so it names none while a writer has the object open: a
// direct write would bypass the ledger.
//
// The stored file is named by a name whose every directory, from the
// root down, the caller may search (search): the loader opens it with
// its own rights, and the stored tree has the mount's modes. An object
// with one name, which the caller reached, is named by it; of a hard
// link's names the first such. The first name alone leaked the path of
// a name in another user's 0700 directory to a user who reads the
// object by a link in a public one, and failed that user's direct load
// (an outside tester). None such: ErrNoSearch.
func (c *Core) DirectPath(id ID, search func(dir ID) bool) (string, error) {
	if !c.cfg.Passthrough && c.Writers(id) > 0 {
		return "", ErrDirectWrite
	}
	c.mu.RLock()
	names := c.store.Names(id)
	rel, ok := c.store.Path(id)
	var rels []string
	var dirs [][]ID
	if len(names) > 1 {
		for _, n := range names {
			if p, ok := c.store.NamePath(n.Parent, n.Name); ok {
				rels = append(rels, p)
				dirs = append(dirs, c.store.Ancestors(n.Parent))
			}
		}
	}
	c.mu.RUnlock()
	if !ok {
		return "", ErrNoBacking
	}
	if len(names) <= 1 {
		return c.store.BackingPath(rel), nil
	}
	for i, p := range rels {
		if searchable(dirs[i], search) {
			return c.store.BackingPath(p), nil
		}
	}
	return "", ErrNoSearch
}

// searchable says whether the caller may search every directory of dirs.
func searchable(dirs []ID, search func(dir ID) bool) bool {
	for _, d := range dirs {
		if !search(d) {
			return false
		}
	}
	return len(dirs) > 0
}
