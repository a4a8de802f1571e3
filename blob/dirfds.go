package blob

import (
	"sync"

	"golang.org/x/sys/unix"
)

// dirFDs keeps the directories of data/ that at resolved open, by path,
// so that a change or a stat of a name is one syscall, not three (an
// openat2 of the directory beneath data/, the call, a close): a store
// through the mount resolves its directory three times (create, link,
// unlink), and every stat of an object once.
//
// A directory's descriptor follows the directory, its path does not, so
// the cache forgets every path (dropAll) whenever kvfs renames or removes
// a directory, and a descriptor opened before that is not kept
// (generation). A directory removed behind kvfs's back is found stale at
// its first use (no links left) and opened again; one renamed behind its
// back is followed, as the audit, which finds the change, expects of any
// change made then.
type dirFDs struct {
	mu  sync.Mutex
	gen uint64                // GUARDED_BY(mu); dropAll bumps it
	fds map[string]*cachedDir // GUARDED_BY(mu)
}

// cachedDir is one open directory; it is closed once dropped and no
// longer in use.
type cachedDir struct {
	fd      int
	users   int  // GUARDED_BY(dirFDs.mu)
	dropped bool // GUARDED_BY(dirFDs.mu)
}

// maxDirFDs bounds the descriptors kept: a store's directories a
// connector writes are few (LMCache: one), and a tree of many only
// reopens the ones it does not keep.
const maxDirFDs = 256

// get is the open directory rel, borrowed until put, and the cache's
// generation when it was missing (ok false: the caller opens it and may
// add it with that generation).
func (c *dirFDs) get(rel string) (d *cachedDir, gen uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d = c.fds[rel]; d != nil {
		d.users++
		return d, 0, true
	}
	return nil, c.gen, false
}

// add keeps fd, the directory rel opened at generation gen, borrowed
// until put; nil: not kept (a directory was renamed or removed since),
// and the caller closes it.
func (c *dirFDs) add(rel string, fd int, gen uint64) *cachedDir {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen || c.fds[rel] != nil {
		return nil
	}
	if c.fds == nil {
		c.fds = map[string]*cachedDir{}
	}
	if len(c.fds) >= maxDirFDs {
		for p, d := range c.fds { // any one
			c.dropLocked(p, d)
			break
		}
	}
	d := &cachedDir{fd: fd, users: 1}
	c.fds[rel] = d
	return d
}

// put returns a borrowed directory.
func (c *dirFDs) put(d *cachedDir) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.users--; d.users == 0 && d.dropped {
		unix.Close(d.fd)
	}
}

// drop forgets rel's directory if it is still d (stale: removed behind
// kvfs's back).
func (c *dirFDs) drop(rel string, d *cachedDir) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fds[rel] == d {
		c.dropLocked(rel, d)
	}
}

// dropAll forgets every path: a directory was renamed or removed.
func (c *dirFDs) dropAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for p, d := range c.fds {
		c.dropLocked(p, d)
	}
}

func (c *dirFDs) dropLocked(rel string, d *cachedDir) {
	delete(c.fds, rel)
	d.dropped = true
	if d.users == 0 {
		unix.Close(d.fd)
	}
}
