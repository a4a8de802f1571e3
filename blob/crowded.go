package blob

import (
	"fmt"
	"os"
	"path"
	"sync"

	"golang.org/x/sys/unix"
)

// A directory of the store is its file system's directory too: kvfs
// keeps the names its clients chose, so a connector that writes one flat
// directory makes one, and an ext4 without large_dir refuses every new
// name in a directory of a few million (ENOSPC, with space and inodes
// free). The store says so ahead, and when it happens (WatchDirs).

// ErrDirFull is ENOSPC from a directory whose file system has room: its
// directory index is full.
var ErrDirFull = fmt.Errorf("the store's directory is full (its file system's directory index has no room for another name): %w", unix.ENOSPC)

// Crowded is a directory of the store filling its file system's
// directory index (see WatchDirs).
type Crowded struct {
	Dir   string // relative to data/ ("." for data/ itself)
	Names int    // the names the index holds there (0 when Full: not read)
	Limit int    // the estimate of the names it takes (0: none known)
	Full  bool   // a name was refused: ENOSPC, with space and inodes free
}

// crowd is what WatchDirs set.
type crowd struct {
	limit  func(nameLen int) int
	report func(Crowded)
	mu     sync.Mutex
	full   map[string]bool // directories reported full; GUARDED_BY(mu)
}

// WatchDirs has the store report to report, once per directory and
// mount, each directory that reaches half the names limit estimates for
// names of a new one's length (0: no limit) as a name is added to it,
// and each whose file system refused a new name with ENOSPC while it had
// space and inodes free (the error is then ErrDirFull). Call it before
// the store is shared.
func (s *Store) WatchDirs(limit func(nameLen int) int, report func(Crowded)) {
	s.crowd = &crowd{limit: limit, report: report, full: map[string]bool{}}
}

// adding notes that a name of nameLen bytes is about to be added to d.
func (c *crowd) adding(s *Store, d *dir, nameLen int) {
	if c == nil || d.crowded.Load() {
		return
	}
	lim := c.limit(nameLen)
	if n := d.kids.len(); lim > 0 && n >= lim/2 && !d.crowded.Swap(true) {
		c.report(Crowded{Dir: s.dirPath(d), Names: n, Limit: lim})
	}
}

// nameErr is the error of op adding the name rel to the store:
// ErrDirFull, reported, if the file system refused it with ENOSPC while
// it had room: blocks any user may take (Bavail; ext4 keeps blocks back
// that even root's mkdir cannot have, which Bfree counts) and inodes.
func (s *Store) nameErr(op, rel string, err error) error {
	err = underlying(err)
	if c := s.crowd; c != nil && err == unix.ENOSPC {
		var sf unix.Statfs_t
		if unix.Fstatfs(int(s.data.Fd()), &sf) == nil && sf.Bavail > 0 && sf.Ffree > 0 {
			err = ErrDirFull
			dir := path.Dir(rel)
			c.mu.Lock()
			first := !c.full[dir]
			c.full[dir] = true
			c.mu.Unlock()
			if first {
				c.report(Crowded{Dir: dir, Limit: c.limit(len(path.Base(rel))), Full: true})
			}
		}
	}
	return &os.PathError{Op: op, Path: rel, Err: err}
}
