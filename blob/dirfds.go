package blob

import (
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// dirFds keeps the store's directories open, by path under data/, for
// the changes made in them (at): an fs_native store changes its
// directory four or five times (create, link, unlink, the crash
// marker's link), and resolving it beneath data/ each time cost an
// openat2 and a close, a tenth of the daemon's syscalls per store.
//
// A descriptor follows its directory, not its path, so every change
// that moves or removes a directory in the store forgets the paths at
// and beneath it (forget), and a descriptor opened across such a change
// is used once and not kept (gen). A directory removed or replaced
// behind kvfs's back answers ENOENT to every change in it, and at
// retries those with a fresh resolve; the audit forgets them all.
type dirFds struct {
	mu sync.Mutex
	// GUARDED_BY(mu).
	open map[string]*dirFd
	// gen counts forgets; GUARDED_BY(mu).
	gen uint64
}

// dirFd is one open directory. INVARIANT: fd is closed once it is out
// of the map (gone) and no change holds it (refs 0).
type dirFd struct {
	fd   int
	refs int  // GUARDED_BY(dirFds.mu)
	gone bool // GUARDED_BY(dirFds.mu)
}

// maxDirFds bounds the directories kept open: stores of 100 objects a
// directory at ten million objects have 100,000 of them.
const maxDirFds = 1024

// get returns rel's kept descriptor, held (put it back), or nil and the
// generation to keep a fresh one under.
func (c *dirFds) get(rel string) (*dirFd, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.open[rel]
	if d != nil {
		d.refs++
	}
	return d, c.gen
}

// keep adds a descriptor opened for rel at generation gen, held, and
// returns it; nil if a forget came between (the caller closes fd after
// use) or another was kept first.
func (c *dirFds) keep(rel string, fd int, gen uint64) *dirFd {
	c.mu.Lock()
	if gen != c.gen || c.open[rel] != nil {
		c.mu.Unlock()
		return nil
	}
	if c.open == nil {
		c.open = make(map[string]*dirFd)
	}
	var shed []int
	if len(c.open) >= maxDirFds {
		shed = c.shedLocked(len(c.open) / 4)
	}
	d := &dirFd{fd: fd, refs: 1}
	c.open[rel] = d
	c.mu.Unlock()
	closeAll(shed)
	return d
}

// put gives back a descriptor get or keep held.
func (c *dirFds) put(d *dirFd) {
	c.mu.Lock()
	d.refs--
	last := d.gone && d.refs == 0
	c.mu.Unlock()
	if last {
		unix.Close(d.fd)
	}
}

// forget drops rel and every path beneath it ("" or ".": all), as a
// change that moved or removed the directory rel, or a walk that found
// the store changed, does.
func (c *dirFds) forget(rel string) {
	c.mu.Lock()
	c.gen++
	var shut []int
	for p, d := range c.open {
		if rel == "" || rel == "." || p == rel || strings.HasPrefix(p, rel) && p[len(rel)] == '/' {
			shut = c.dropLocked(p, d, shut)
		}
	}
	c.mu.Unlock()
	closeAll(shut)
}

// forgetOne drops rel's descriptor if it is still d (a change found d's
// directory gone), or whichever it is for d nil.
func (c *dirFds) forgetOne(rel string, d *dirFd) {
	c.mu.Lock()
	var shut []int
	if have := c.open[rel]; have != nil && (d == nil || have == d) {
		shut = c.dropLocked(rel, have, nil)
	}
	c.mu.Unlock()
	closeAll(shut)
}

// shedLocked drops up to n descriptors no change holds, and returns
// them to close.
func (c *dirFds) shedLocked(n int) (shut []int) {
	for p, d := range c.open {
		if len(shut) >= n {
			break
		}
		if d.refs == 0 {
			shut = c.dropLocked(p, d, shut)
		}
	}
	return shut
}

// dropLocked takes p's descriptor d out of the map, adding its fd to
// shut if no change holds it (else the last put closes it).
func (c *dirFds) dropLocked(p string, d *dirFd, shut []int) []int {
	delete(c.open, p)
	d.gone = true
	if d.refs == 0 {
		shut = append(shut, d.fd)
	}
	return shut
}

// close shuts every kept descriptor; none may be held.
func (c *dirFds) close() { c.forget("") }

// kept is how many directories are open (for tests).
func (c *dirFds) kept() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open)
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
