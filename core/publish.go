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

// Publishing. A complete object is reported to Config.Published under
// each name it gets: by a link or rename to it once its writing has
// ended, or, for one still being written then, by its last writer's
// release under every name it has at that moment. Both decisions are
// taken under Core.mu (with writersMu inside it), so a link racing the
// release is published by exactly one of them.

// publishableLocked appends the path of at to pub if at names a file
// whose writing has ended; mu held.
func (c *Core) publishableLocked(pub []string, at blob.Name) []string {
	if c.cfg.Published == nil {
		return pub
	}
	e, err := c.store.Lookup(at.Parent, at.Name)
	if err != nil || e.Dir || c.beingWritten(e.ID) {
		return pub
	}
	if p, ok := c.store.NamePath(at.Parent, at.Name); ok {
		pub = append(pub, p)
	}
	return pub
}

// pathsLocked are the paths of every name of file id; mu held.
func (c *Core) pathsLocked(id blob.ID) []string {
	if c.cfg.Published == nil {
		return nil
	}
	return c.namePathsLocked(id)
}

// PathsOf are the paths, relative to the namespace's root, of every name
// of file id: what the remote tier calls the object.
func (c *Core) PathsOf(id blob.ID) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.namePathsLocked(id)
}

func (c *Core) namePathsLocked(id blob.ID) []string {
	var paths []string
	for _, n := range c.store.Names(id) {
		if p, ok := c.store.NamePath(n.Parent, n.Name); ok {
			paths = append(paths, p)
		}
	}
	return paths
}

// publish reports paths to Config.Published; no lock held.
func (c *Core) publish(paths []string) {
	for _, p := range paths {
		c.cfg.Published(p)
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
	h, err := c.open(e.ID, unix.O_RDONLY, false, nil, false)
	if errors.Is(err, ErrStale) {
		return nil, ErrNotFound
	}
	return h, err
}
