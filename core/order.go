package core

import (
	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/internal/lockorder"
	"go.uber.org/zap"
)

// Ordering changes of names. A change of a name is made in the store
// first and committed to the index after (see blob's phases), so the
// syscalls run outside Core.mu, which is held exclusively only to commit
// (index and ledger together, in memory). What keeps two changes of one
// name apart is the directory's lock (dirLocks: a striped table by
// directory ID), held from the plan to the commit, as the kernel holds
// the directory's own lock for CREATE, LINK, UNLINK and RENAME: changes
// in different directories run at once.
//
// Paths: a change reads its paths from the index and uses them in the
// store; a directory's rename moves every path below it, so changes hold
// Core.tree shared from plan to commit, and a directory's rename holds it
// exclusively (the one change that is namespace-wide; kvfs's clients
// rename files, not directories).
//
// Evictions: an eviction drops its victims' names from the index in the
// ledger's critical section (Core.mu), so no one sees a name whose
// object the ledger has given up; their stored names are doomed, and
// unlinked after, under each one's directory lock (reap). A change that
// needs a doomed name's place in the store (a create, link or rename to
// it) unlinks it first itself, under the same lock. An admission, which
// may evict, never runs while a directory lock is held, so reaping never
// waits for a lock its own caller holds.

// Ranks of the core's locks, outermost first (see the lock order in
// core.go); lockorder checks them in the race tests.
// rankDisk: the disk's watch (disk.go), held while it evicts.
const rankDisk lockorder.Rank = 6

const (
	// The stores taken while the index loads (early.go): their requests,
	// their names, a file's size.
	rankEarlyOps lockorder.Rank = 7 + iota
	rankEarly
	rankEarlyFile
)

const (
	rankDir lockorder.Rank = 10 + iota
	rankTree
	rankMarker
	rankHandle
	rankCheckpoint
	rankCore
	rankWriters
	rankSizes
	rankInstalls
	rankDoomed
)

const (
	dirStripes    = 256
	markerStripes = 64
)

type dirLocks [dirStripes]lockorder.Mutex

func (l *dirLocks) init() {
	for i := range l {
		l[i].SetStripe(rankDir, i)
	}
}

// lockDirs takes the locks of directories a and b (b: 0 for none), in
// stripe order, and returns their unlock.
func (c *Core) lockDirs(a, b blob.ID) func() {
	i, j := int(a%dirStripes), int(b%dirStripes)
	if b == 0 || i == j {
		c.dirs[i].Lock()
		return c.dirs[i].Unlock
	}
	if j < i {
		i, j = j, i
	}
	c.dirs[i].Lock()
	c.dirs[j].Lock()
	return func() { c.dirs[j].Unlock(); c.dirs[i].Unlock() }
}

// doomLocked records names dropped from the index whose stored names are
// still to be unlinked; mu held.
func (c *Core) doomLocked(id blob.ID, names []blob.Name) {
	if len(names) == 0 {
		return
	}
	c.doomedMu.Lock()
	defer c.doomedMu.Unlock()
	for _, n := range names {
		c.doomed[n] = id
	}
}

// undoom takes n off the doomed names; whoever does unlinks it.
func (c *Core) undoom(n blob.Name) bool {
	c.doomedMu.Lock()
	defer c.doomedMu.Unlock()
	_, ok := c.doomed[n]
	delete(c.doomed, n)
	return ok
}

// clearDoomed unlinks the stored name rel, the place of n, if n is
// doomed; n's directory lock and tree held. A create, link or rename to
// n calls it before it makes n in the store.
func (c *Core) clearDoomed(n blob.Name, rel string) {
	if c.undoom(n) {
		c.unlinkStored(rel)
	}
}

// reap unlinks the stored names of drops; no lock held. An object with
// more than one name is marked first, as a file being written is: a
// crash between its unlinks then leaves a marked file, whose every name
// the next start deletes, never an object that lost some of its names
// and is served under the others.
func (c *Core) reap(drops []Drop) {
	for i := range drops {
		d := &drops[i]
		// Said before the names go, as deliver says it after: a crash
		// between the two (one admission may evict many objects) leaves
		// the log saying why each stored object vanished.
		c.log.Debug("dropping", zap.String("why", d.Why.String()), zap.Uint64("id", uint64(d.ID)), zap.Int("names", len(d.Names)))
		marked := len(d.Names) > 1 && c.markReaped(*d)
		for _, n := range d.Names {
			c.reapName(n, d)
			if testHookReapedName != nil {
				testHookReapedName()
			}
		}
		if marked {
			if err := c.store.ClearWriting(d.ID); err != nil {
				c.log.Warn("clearing an evicted object's mark", zap.Error(err))
			}
		}
	}
}

// testHookReapedName, when set, runs after reap unlinked one name.
var testHookReapedName func()

// markReaped marks d's object through a name of it still doomed, under
// that name's directory lock (so the name is still the object's, not a
// new file made in its place); it reports whether it did.
func (c *Core) markReaped(d Drop) bool {
	for _, n := range d.Names {
		unlock := c.lockDirs(n.Parent, 0)
		c.tree.RLock()
		c.doomedMu.Lock()
		id, doomed := c.doomed[n]
		doomed = doomed && id == d.ID
		c.doomedMu.Unlock()
		var marked bool
		var err error
		if doomed {
			c.mu.RLock()
			rel, ok := c.store.NamePath(n.Parent, n.Name)
			c.mu.RUnlock()
			if ok {
				marked, err = c.store.MarkStored(rel, d.ID)
			}
		}
		c.tree.RUnlock()
		unlock()
		if err != nil {
			c.log.Warn("marking an evicted object", zap.Error(err))
			return false
		}
		if marked {
			return true
		}
	}
	return false
}

// reapName unlinks one doomed name, unless a change to it did already.
func (c *Core) reapName(n blob.Name, d *Drop) {
	unlock := c.lockDirs(n.Parent, 0)
	defer unlock()
	c.tree.RLock()
	defer c.tree.RUnlock()
	if !c.undoom(n) {
		return
	}
	c.mu.RLock()
	rel, ok := c.store.NamePath(n.Parent, n.Name)
	c.mu.RUnlock()
	if !ok {
		return
	}
	if d.Idle == idleUnknown {
		d.Idle = c.idleAt(rel)
	}
	c.unlinkStored(rel)
}

// unlinkStored unlinks a stored name the index no longer has. It cannot
// fail but for a broken store; the audit adopts what stays.
func (c *Core) unlinkStored(rel string) {
	if err := c.store.UnlinkAt(rel); err != nil {
		c.log.Warn("unlinking a dropped name", zap.String("path", rel), zap.Error(err))
	}
}

// takeFreeName takes parent's lock and the tree shared for a change that
// makes name in parent, checks the name is free in the index, and
// unlinks a doomed predecessor's stored name; it returns the name's path
// and the unlock.
func (c *Core) takeFreeName(parent blob.ID, name string) (rel string, unlock func(), err error) {
	unlockDir := c.lockDirs(parent, 0)
	c.tree.RLock()
	unlock = func() { c.tree.RUnlock(); unlockDir() }
	c.mu.RLock()
	rel, err = c.store.FreePath(parent, name)
	c.mu.RUnlock()
	if err != nil {
		unlock()
		return "", nil, err
	}
	c.clearDoomed(blob.Name{Parent: parent, Name: name}, rel)
	return rel, unlock, nil
}
