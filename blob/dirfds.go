package blob

import (
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// dirFds keeps an O_PATH descriptor of each directory of data/ that a
// change or a stat was made in (see Store.at), by its path under data/,
// so that a name's syscall is made relative to its directory at once:
// resolving the directory again for each (openat2, close) was two of a
// lookup's three syscalls, and over ten million stored names the kernel's
// dentry hash chains made the walk the costliest part of it.
//
// A descriptor follows its directory's inode, not its path, so every
// descriptor is dropped when the index renames or removes a directory
// (clear); one taken for a path that has moved since, behind kvfs's back,
// fails its syscall with ENOENT, and at drops it and resolves the path
// again. A descriptor in use when it is dropped is closed by its last
// user.
type dirFds struct {
	mu  sync.Mutex
	fds map[string]*dirFd
	// gen counts clears: a descriptor opened across one is used once,
	// not kept, as its path may have moved in between.
	gen uint64
}

type dirFd struct {
	fd   int
	refs int
	dead bool // out of the cache: its last user closes it
}

// dirFdsMax bounds the descriptors kept; past it the cache starts over.
// Connectors keep their objects in few directories.
const dirFdsMax = 4096

// get returns rel's descriptor, from the cache or opened by open, and
// whether it came from the cache; release it after use.
func (c *dirFds) get(rel string, open func() (int, error)) (*dirFd, bool, error) {
	c.mu.Lock()
	if d, ok := c.fds[rel]; ok {
		d.refs++
		c.mu.Unlock()
		return d, true, nil
	}
	gen := c.gen
	c.mu.Unlock()
	fd, err := open()
	if err != nil {
		return nil, false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	d := &dirFd{fd: fd, refs: 1}
	switch had, ok := c.fds[rel]; {
	case ok: // opened by another meanwhile
		unix.Close(fd)
		had.refs++
		return had, true, nil
	case gen != c.gen:
		d.dead = true
		return d, false, nil
	}
	if len(c.fds) >= dirFdsMax {
		for _, fd := range c.clearLocked() {
			unix.Close(fd)
		}
	}
	if c.fds == nil {
		c.fds = make(map[string]*dirFd)
	}
	c.fds[strings.Clone(rel)] = d // rel may be a slice of a longer path
	return d, false, nil
}

// release ends a use of d.
func (c *dirFds) release(d *dirFd) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.refs--; d.refs == 0 && d.dead {
		unix.Close(d.fd)
	}
}

// forget drops rel's descriptor if it is still d.
func (c *dirFds) forget(rel string, d *dirFd) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fds[rel] == d {
		delete(c.fds, rel)
		c.dropLocked(d)
	}
}

// clear drops every descriptor: a directory was renamed or removed.
// Those not in use are closed by a goroutine of their own: the caller
// commits a change under its namespace-wide lock, where kvfs makes no
// syscall.
func (c *dirFds) clear() {
	c.mu.Lock()
	idle := c.clearLocked()
	c.mu.Unlock()
	if len(idle) > 0 {
		go func() {
			for _, fd := range idle {
				unix.Close(fd)
			}
		}()
	}
}

// clearLocked drops every descriptor and returns those not in use, for
// the caller to close.
func (c *dirFds) clearLocked() (idle []int) {
	c.gen++
	for _, d := range c.fds {
		if d.dead = true; d.refs == 0 {
			idle = append(idle, d.fd)
		}
	}
	c.fds = nil
	return idle
}

func (c *dirFds) dropLocked(d *dirFd) {
	d.dead = true
	if d.refs == 0 {
		unix.Close(d.fd)
	}
}

// len is how many descriptors are kept.
func (c *dirFds) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.fds)
}
