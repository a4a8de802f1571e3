package core

import (
	"errors"
	"os"
	"syscall"

	"github.com/kvfs/kvfs/blob"
	"golang.org/x/sys/unix"
)

// Attr is what the mount shows of an inode: the stored file's attributes,
// the ledger's charge (st_blocks reports exactly it) and its names.
type Attr struct {
	unix.Stat_t
	Charge int64
	Links  int
}

// Lookup resolves a name. A file whose stored bytes vanished or changed
// size behind kvfs's back is reconciled first.
func (c *Core) Lookup(parent blob.ID, name string) (blob.Entry, Attr, error) {
	e, a, stale, err := c.lookup(parent, name)
	if stale {
		c.reconcile(e.ID)
		e, a, _, err = c.lookup(parent, name)
	}
	switch {
	case e.Dir:
	case err == nil:
		c.counters.lookupHits.Add(1)
	case errors.Is(err, ErrNotFound):
		c.counters.lookupMisses.Add(1)
	}
	return e, a, err
}

// lookup is Lookup under the shared lock; stale says the stored file
// disagrees with the ledger and must be reconciled.
func (c *Core) lookup(parent blob.ID, name string) (e blob.Entry, a Attr, stale bool, err error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if e, err = c.store.Lookup(parent, name); err != nil {
		return e, a, false, err
	}
	if e.Dir {
		a.Stat_t, err = c.store.Stat(e.ID)
		return e, a, false, err
	}
	a, stale, err = c.fileAttrLocked(e.ID, nil)
	return e, a, stale, err
}

// fileAttrLocked reads a file's attributes, through f when given; mu held
// (shared at least). stale: the stored size or presence disagrees with
// the ledger while no writer is open.
func (c *Core) fileAttrLocked(id blob.ID, f *os.File) (a Attr, stale bool, err error) {
	if f != nil {
		err = unix.Fstat(int(f.Fd()), &a.Stat_t)
	} else {
		a.Stat_t, err = c.store.Stat(id)
	}
	switch {
	case errors.Is(err, syscall.ENOENT):
		return a, true, ErrNotFound
	case errors.Is(err, ErrNotFound):
		// No name left, and no handle to read it through.
		return a, false, ErrStale
	case err != nil:
		return a, false, err
	}
	size, charge, ok := c.ledger.Size(id)
	if !ok {
		return a, false, ErrStale
	}
	if size != a.Size && c.ledger.Writers(id) == 0 {
		return a, true, nil
	}
	a.Charge, a.Links = charge, c.store.Links(id)
	return a, false, nil
}

// Getattr reads a file's attributes, through f (an open handle's stored
// file) when given.
func (c *Core) Getattr(id blob.ID, f *os.File) (Attr, error) {
	a, stale, err := c.getattr(id, f)
	if stale {
		c.reconcile(id)
		a, _, err = c.getattr(id, f)
	}
	return a, err
}

func (c *Core) getattr(id blob.ID, f *os.File) (Attr, bool, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.fileAttrLocked(id, f)
}

// DirAttr reads a directory's attributes.
func (c *Core) DirAttr(id blob.ID) (unix.Stat_t, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.store.Stat(id)
}

// List returns a directory's entries in name order.
func (c *Core) List(parent blob.ID) ([]blob.DirEntry, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.store.List(parent)
}

// Mkdir makes a directory.
func (c *Core) Mkdir(parent blob.ID, name string, mode uint32, who blob.Owner) (blob.ID, unix.Stat_t, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, err := c.store.Mkdir(parent, name, mode, who)
	if err != nil {
		return 0, unix.Stat_t{}, err
	}
	st, err := c.store.Stat(id)
	return id, st, err
}

// Rmdir removes an empty directory.
func (c *Core) Rmdir(parent blob.ID, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.store.Rmdir(parent, name)
	return err
}

// Unlink removes a file's name. Delete is idempotent: a name kvfs no
// longer holds (evicted under a stale kernel entry, or deleted by another
// client) is already what the caller wants, and can never leave a charge
// behind.
func (c *Core) Unlink(parent blob.ID, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, err := c.store.Unlink(parent, name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	c.ledger.Unlink(id)
	return nil
}

// Link gives file id another name; EEXIST when the name is taken is how
// LMCache learns that another writer published first, so it is answered
// only for a name that exists.
func (c *Core) Link(id, parent blob.ID, name string) (Attr, error) {
	a, pub, err := c.link(id, parent, name)
	if err == nil {
		c.ledger.EndGrace(id)
		c.publishedWhileOpen(id)
		c.publish(pub)
	}
	return a, err
}

// link links, and reports the path to publish (see publishableLocked).
func (c *Core) link(id, parent blob.ID, name string) (Attr, []string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.store.Link(id, parent, name); err != nil {
		return Attr{}, nil, err
	}
	if err := c.ledger.Link(id); err != nil {
		// Cannot happen: eviction and Link both hold mu, and the store
		// had names for id.
		return Attr{}, nil, ledgerErr(err)
	}
	a, _, err := c.fileAttrLocked(id, nil)
	return a, c.publishableLocked(nil, blob.Name{Parent: parent, Name: name}), err
}

// Rename moves a name, atomically, with rename(2)'s flags; a file it
// replaces loses that name.
func (c *Core) Rename(parent blob.ID, name string, newParent blob.ID, newName string, flags uint32) error {
	moved, pub, err := c.rename(parent, name, newParent, newName, flags)
	if err == nil {
		for _, id := range moved {
			c.ledger.EndGrace(id)
			c.publishedWhileOpen(id)
		}
		c.publish(pub)
	}
	return err
}

// rename renames, and reports the files whose names it moved (the
// renamed one, and the other too for an exchange) and the paths to
// publish.
func (c *Core) rename(parent blob.ID, name string, newParent blob.ID, newName string, flags uint32) (moved []blob.ID, pub []string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	replaced, err := c.store.Rename(parent, name, newParent, newName, flags)
	if err != nil {
		return nil, nil, err
	}
	if replaced != 0 {
		c.ledger.Unlink(replaced)
	}
	for _, at := range []blob.Name{{Parent: newParent, Name: newName}, {Parent: parent, Name: name}} {
		if e, err := c.store.Lookup(at.Parent, at.Name); err == nil && !e.Dir {
			moved = append(moved, e.ID)
			pub = c.publishableLocked(pub, at)
		}
	}
	return moved, pub, nil
}

// SyncDir makes a directory's entries durable.
func (c *Core) SyncDir(id blob.ID) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.store.SyncDir(id)
}

// BackingPath is the absolute path of an object's stored file, for
// loaders that read it directly while holding a handle on the mount.
func (c *Core) BackingPath(id blob.ID) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	rel, ok := c.store.Path(id)
	if !ok {
		return "", false
	}
	return c.store.BackingPath(rel), true
}

// OpenStored opens an inode's stored file by its name, for changes of
// its attributes (mode, owner, times).
func (c *Core) OpenStored(id blob.ID, flags int) (*os.File, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	f, err := c.store.Open(id, flags)
	if errors.Is(err, ErrNotFound) {
		return nil, ErrStale
	}
	return f, err
}
