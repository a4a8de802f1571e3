package core

import "github.com/kvfs/kvfs/blob"

// Reads of the store without the namespace lock. A read of an object's
// stored file (stat, open, a directory's fsync) takes its path from the
// index under Core.mu shared, and makes its syscalls after letting the
// lock go, so that a syscall, which may wait on the disk, never holds off
// the commits of other names (the exclusive sections every create, link
// and unlink ends with, and each reader queued behind them). What the
// path was read from is checked after (blob.Version): if a change of
// names was committed meanwhile where it rests, the read is made again
// with the lock held across it, as every read was before. Either way the
// answer is as sure as the locked read's: a change is made in the store
// before its commit, which a syscall under the lock could meet as well,
// or after a commit that gave the name up, which fails the check.

// versions are what one read of the index rests on.
type versions struct {
	n int
	v [2]blob.Version
}

func (vs *versions) add(v blob.Version) {
	vs.v[vs.n] = v
	vs.n++
}

func (vs *versions) current(s *blob.Store) bool {
	for _, v := range vs.v[:vs.n] {
		if !s.Current(v) {
			return false
		}
	}
	return true
}

// readStored runs index, which reads the index (Core.mu shared held) and
// adds the versions its answer rests on, then syscalls, with no lock
// held; if the index moved under what index read, both again, holding the
// lock across them. undo gives back what a first syscalls that is not
// trusted made (a file it opened); it runs only when that returned nil.
func (c *Core) readStored(index func(*versions) error, syscalls func() error, undo func()) error {
	var vs versions
	c.mu.RLock()
	err := index(&vs)
	c.mu.RUnlock()
	if err != nil {
		return err
	}
	if testHookReadStored != nil {
		testHookReadStored()
	}
	err = syscalls()
	if vs.current(c.store) {
		return err
	}
	c.counters.readsRedone.Add(1)
	if err == nil && undo != nil {
		undo()
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	vs = versions{}
	if err := index(&vs); err != nil {
		return err
	}
	return syscalls()
}

// testHookReadStored, when set, runs between a read's index and its
// syscalls.
var testHookReadStored func()

// onStored runs syscalls on the stored path of file or directory id (see
// readStored); ErrNotFound when id has none.
func (c *Core) onStored(id blob.ID, syscalls func(rel string, dir bool) error, undo func()) error {
	var rel string
	var dir bool
	return c.readStored(func(vs *versions) error {
		r, v, ok := c.store.PathVersion(id)
		if !ok {
			return ErrNotFound
		}
		rel, dir = r, v.Dir()
		vs.add(v)
		return nil
	}, func() error { return syscalls(rel, dir) }, undo)
}
