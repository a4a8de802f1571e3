package core

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
)

// moves follows renames and links between their syscall and their
// commit. Each changes the stored names first and the index after
// (order.go), so in between the two disagree: an open or stat of an
// object by the index's path can fail with ENOENT while the object is
// whole under its new name, and a stored file can have a link the index
// does not count yet. Such a disagreement proves a change behind kvfs's
// back only if no rename or link was under way when the attempt began
// and none began or committed before it ended (see retryMoved).
type moves struct {
	inflight atomic.Int64  // renames and links between syscall and commit
	commits  atomic.Uint64 // renames and links ended

	mu   sync.Mutex    // a leaf
	done chan struct{} // GUARDED_BY(mu): closed, and replaced, at each end
}

// movesSnap is what a path attempt saw of renames as it began.
type movesSnap struct {
	quiet   bool
	commits uint64
}

func (m *moves) begin() { m.inflight.Add(1) }

// end is a rename's or link's end, after its commit (or its failed
// syscall).
func (m *moves) end() {
	m.commits.Add(1)
	m.inflight.Add(-1)
	m.mu.Lock()
	if m.done != nil {
		close(m.done)
		m.done = nil
	}
	m.mu.Unlock()
}

// snapshot is taken before a path attempt. In-flight first: a rename
// that begins after that load either is still under way at the check,
// or has ended, and then the commit count differs (unless it committed
// before the count was loaded, and so before the attempt read a path).
func (m *moves) snapshot() movesSnap {
	quiet := m.inflight.Load() == 0
	return movesSnap{quiet: quiet, commits: m.commits.Load()}
}

// unchanged says whether no rename was under way from s until now.
func (m *moves) unchanged(s movesSnap) bool {
	return s.quiet && m.inflight.Load() == 0 && m.commits.Load() == s.commits
}

// wait returns once no rename is under way, or the next one has ended.
func (m *moves) wait() {
	m.mu.Lock()
	if m.inflight.Load() == 0 {
		m.mu.Unlock()
		return
	}
	if m.done == nil {
		m.done = make(chan struct{})
	}
	ch := m.done
	m.mu.Unlock()
	<-ch
}

// moveRetries bounds the attempts of retryMoved: under a storm of
// renames an ENOENT stays unproven, and the object is left alone (the
// audit settles one that is really gone).
const moveRetries = 4

// retryMoved runs attempt, a syscall on a path the index gave for an
// object (no lock held between attempts), again while it fails with
// ENOENT and a rename was under way meanwhile. proven says whether its
// last ENOENT shows the object gone: false when renames kept moving
// paths through every attempt.
func (c *Core) retryMoved(attempt func() error) (err error, proven bool) {
	for try := 0; ; try++ {
		s := c.moves.snapshot()
		err = attempt()
		if !errors.Is(err, syscall.ENOENT) || c.moves.unchanged(s) {
			return err, true
		}
		if testHookMoved != nil {
			testHookMoved()
		}
		if try == moveRetries {
			return err, false
		}
		c.moves.wait()
	}
}

// testHookMoved, when set, runs each time an ENOENT is retried because a
// rename was under way.
var testHookMoved func()

// retryReplaced runs attempt, which answers errReplaced when the stored
// path it used held another file than the index's for the object: one of
// kvfs's own renames between its syscall and its commit, if a rename was
// under way or ended since the attempt began; it runs it again, after the
// next rename's end, while that is so, at most moveRetries times (a
// directory swapped in a tight loop). behind: the attempt met another
// file with no rename about: one put there behind kvfs's back.
func (c *Core) retryReplaced(attempt func() error) (err error, behind bool) {
	for try := 0; ; try++ {
		s := c.moves.snapshot()
		err = attempt()
		if !errors.Is(err, errReplaced) {
			return err, false
		}
		if c.moves.unchanged(s) {
			return err, true
		}
		if try == moveRetries {
			return err, false
		}
		c.moves.wait()
	}
}
