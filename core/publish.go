package core

import (
	"errors"

	"github.com/kvfs/kvfs/blob"
	"golang.org/x/sys/unix"
)

// PathOf is the path, relative to the namespace's root, of name in
// directory parent: what the remote tier calls the object.
func (c *Core) PathOf(parent blob.ID, name string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.store.NamePath(parent, name)
}

// publishName reports name in parent to Config.Published if it holds a
// complete file; one still being written is published by its last
// writer's release, under every name it has then. No lock held.
func (c *Core) publishName(parent blob.ID, name string) {
	if c.cfg.Published == nil {
		return
	}
	c.mu.RLock()
	e, err := c.store.Lookup(parent, name)
	p, ok := c.store.NamePath(parent, name)
	c.mu.RUnlock()
	if err == nil && ok && !e.Dir && !c.beingWritten(e.ID) {
		c.cfg.Published(p)
	}
}

// publishID reports every name of file id to Config.Published; no lock
// held.
func (c *Core) publishID(id blob.ID) {
	if c.cfg.Published == nil {
		return
	}
	c.mu.RLock()
	names := c.store.Names(id)
	paths := make([]string, 0, len(names))
	for _, n := range names {
		if p, ok := c.store.NamePath(n.Parent, n.Name); ok {
			paths = append(paths, p)
		}
	}
	c.mu.RUnlock()
	for _, p := range paths {
		c.cfg.Published(p)
	}
}

// publishRenamed reports what a rename published: the new name, and the
// old one too when the two were exchanged.
func (c *Core) publishRenamed(parent blob.ID, name string, newParent blob.ID, newName string, flags uint32) {
	c.publishName(newParent, newName)
	if flags&unix.RENAME_EXCHANGE != 0 {
		c.publishName(parent, name)
	}
}

// OpenPath opens, for reading, the object a path relative to the
// namespace's root names: pinned (never evicted while the handle is
// open), not counted as a load. The remote tier reads what it uploads
// through it. ErrNotFound when no object has that name now.
func (c *Core) OpenPath(path string) (*Handle, error) {
	c.mu.RLock()
	e, err := c.store.Resolve(path)
	c.mu.RUnlock()
	switch {
	case err != nil:
		return nil, err
	case e.Dir:
		return nil, ErrNotFound
	}
	h, err := c.open(e.ID, unix.O_RDONLY, false, nil)
	if errors.Is(err, ErrStale) {
		return nil, ErrNotFound
	}
	return h, err
}
