package core

import (
	"errors"
	"os"
	"syscall"

	"github.com/kvfs/kvfs/blob"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Attr is what the mount shows of an inode: the stored file's attributes,
// the ledger's charge (st_blocks reports exactly it) and its names.
type Attr struct {
	unix.Stat_t
	Charge int64
	Links  int
	// Writing: the file has writers open, so its charge (and, with
	// passthrough, its size) may change with no request to the mount:
	// the kernel must not keep these attributes (see fusefs).
	Writing bool
}

// Lookup resolves a name, a connector's question: it counts in the
// lookup hits or misses. A file whose stored bytes vanished or changed
// size behind kvfs's back is reconciled first.
func (c *Core) Lookup(parent blob.ID, name string) (blob.Entry, Attr, error) {
	e, a, err := c.Listed(parent, name)
	switch {
	case e.Dir:
	case err == nil:
		c.counters.lookupHits.Add(1)
	case errors.Is(err, ErrNotFound):
		c.counters.lookupMisses.Add(1)
	}
	return e, a, err
}

// Listed is Lookup for a name a listing found (READDIRPLUS gives each
// its entry): the same answer, not counted, since no one asked for the
// name; an `ls` of a million names is no million hits.
func (c *Core) Listed(parent blob.ID, name string) (blob.Entry, Attr, error) {
	var e blob.Entry
	var a Attr
	var stale bool
	// The stored name may hold another file than the index says: a
	// rename over it (or over a directory above it) under way, between
	// its syscall and its commit; looked up again once it has ended.
	err, behind := c.retryReplaced(func() (err error) {
		e, a, stale, err = c.lookup(parent, name)
		return err
	})
	if stale {
		c.reconcile(e.ID)
		e, a, _, err = c.lookup(parent, name)
	}
	switch {
	case errors.Is(err, errReplaced) && behind:
		// Replaced behind kvfs's back, the audit's to judge; meanwhile
		// the name shows what it holds.
		err = nil
	case errors.Is(err, errReplaced):
		// Renames kept moving it: the kernel looks it up again, rather
		// than keep one object's size for another's inode.
		err = ErrStale
	}
	return e, a, err
}

// errReplaced: a name's stored file is not the one the index holds for
// it (lookup).
var errReplaced = errors.New("the stored name holds another file")

// lookup is Lookup, its syscall made without the lock (readStored);
// stale says the stored file disagrees with the ledger and must be
// reconciled.
func (c *Core) lookup(parent blob.ID, name string) (e blob.Entry, a Attr, stale bool, err error) {
	var rel string
	var known uint64
	var indexErr error
	err = c.readStored(func(vs *versions) error {
		var v blob.Version
		e, v, indexErr = c.store.LookupVersion(parent, name)
		if indexErr != nil {
			return indexErr
		}
		vs.add(v)
		r, v, ok := c.store.PathVersion(e.ID)
		if !ok {
			indexErr = ErrStale // cannot be: the name is one
			return indexErr
		}
		vs.add(v)
		rel, a.Links, known = r, c.store.Links(e.ID), c.store.Ino(e.ID)
		return nil
	}, func() (err error) {
		a.Stat_t, err = c.store.StatKind(rel, e.Dir)
		return err
	}, nil)
	if indexErr != nil || e.Dir {
		return e, a, false, err
	}
	a, stale, err = c.fileAttr(e.ID, a, err)
	if err == nil && known != 0 && a.Ino != known {
		// The stored name holds another file than the index says.
		return e, a, false, errReplaced
	}
	return e, a, stale, err
}

// replacedLocked says whether ino, read by id's stored path, is another
// file's than the one the index holds for id; mu held (shared at least).
func (c *Core) replacedLocked(id blob.ID, ino uint64) bool {
	known := c.store.Ino(id)
	return known != 0 && ino != known
}

// fileAttr completes the attributes a of file id, read from its stored
// file (err: how that read failed), from the ledger. stale: the stored
// size or presence disagrees with the ledger while no writer is open.
func (c *Core) fileAttr(id blob.ID, a Attr, err error) (Attr, bool, error) {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return a, true, ErrNotFound
	case errors.Is(err, ErrNotFound):
		// No name left, and no handle to read it through.
		return a, false, ErrStale
	case err != nil:
		return a, false, err
	}
	size, charge, writing, ok := c.ledger.Shown(id)
	if !ok {
		return a, false, ErrStale
	}
	if size != a.Size && !writing {
		return a, true, nil
	}
	a.Charge, a.Writing = charge, writing
	return a, false, nil
}

// Getattr reads a file's attributes, through f (an open handle's stored
// file) when given.
func (c *Core) Getattr(id blob.ID, f *os.File) (Attr, error) {
	var a Attr
	var stale bool
	err, _ := c.retryMoved(func() (err error) {
		a, stale, err = c.getattr(id, f)
		if stale && errors.Is(err, ErrNotFound) {
			return syscall.ENOENT // the stored path is gone: moved, or vanished
		}
		return err
	})
	if errors.Is(err, syscall.ENOENT) {
		err = ErrNotFound
	}
	if stale {
		c.reconcile(id)
		a, _, err = c.getattr(id, f)
	}
	return a, err
}

func (c *Core) getattr(id blob.ID, f *os.File) (Attr, bool, error) {
	var a Attr
	var stale bool
	// As openPath: a rename over its name may be under way.
	err, _ := c.retryReplaced(func() (err error) {
		a, stale, err = c.getattrOnce(id, f, true)
		return err
	})
	if errors.Is(err, errReplaced) {
		a, stale, err = c.getattrOnce(id, f, false) // what its name holds
	}
	return a, stale, err
}

// getattrOnce is getattr; check: errReplaced when the stored path holds
// another file than the index's for id.
func (c *Core) getattrOnce(id blob.ID, f *os.File, check bool) (Attr, bool, error) {
	var a Attr
	var rel string
	var known uint64
	err := c.readStored(func(vs *versions) (err error) {
		a.Links = c.store.Links(id)
		if f != nil {
			return nil // read through f: no path
		}
		rel, known, err = c.pathOfFile(id, vs)
		return err
	}, func() (err error) {
		if f != nil {
			return unix.Fstat(int(f.Fd()), &a.Stat_t)
		}
		a.Stat_t, err = c.store.StatKind(rel, false)
		return err
	}, nil)
	a, stale, err := c.fileAttr(id, a, err)
	if check && err == nil && known != 0 && a.Ino != known {
		return a, false, errReplaced
	}
	return a, stale, err
}

// IsDir says whether id is a directory (false for a file, and for an
// ID the namespace no longer has).
func (c *Core) IsDir(id blob.ID) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.store.IsDir(id)
}

// DirAttr reads a directory's attributes.
func (c *Core) DirAttr(id blob.ID) (st unix.Stat_t, err error) {
	err = c.onStored(id, func(rel string, dir bool) (err error) {
		st, err = c.store.StatKind(rel, dir)
		return err
	}, nil)
	return st, err
}

// ListPage returns a page of a directory's entries after the cookie
// after (0: from the start): see blob.Store.ListPage. Each page holds
// Core.mu shared for the page's time only, so listing a directory of
// millions of names never holds off commits for long; names evicted
// before a page is taken are not in it.
func (c *Core) ListPage(parent blob.ID, after uint64, max int) ([]blob.DirEntry, bool, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.store.ListPage(parent, after, max)
}

// DirParent is the directory that holds directory id: the root for the
// root, as on any file system, and 0 for a directory not indexed.
func (c *Core) DirParent(id blob.ID) blob.ID {
	if id == blob.RootID {
		return id
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, ok := c.store.DirName(id)
	if !ok {
		return 0
	}
	return n.Parent
}

// Mkdir makes a directory.
func (c *Core) Mkdir(parent blob.ID, name string, mode uint32, who blob.Owner) (blob.ID, unix.Stat_t, error) {
	id, st, err := c.mkdir(parent, name, mode, who)
	if diskRefused(err) && c.fitDisk() {
		id, st, err = c.mkdir(parent, name, mode, who) // see create
	}
	return id, st, err
}

func (c *Core) mkdir(parent blob.ID, name string, mode uint32, who blob.Owner) (blob.ID, unix.Stat_t, error) {
	rel, unlock, err := c.takeFreeName(parent, name)
	if err != nil {
		return 0, unix.Stat_t{}, err
	}
	defer unlock()
	err = c.store.MkdirAt(rel, mode, who)
	if errors.Is(err, ErrExists) && c.foreignGaveWay(rel, "mkdir", true) {
		// Until the audit, stat said ENOENT and mkdir EEXIST (an
		// outside tester's `os.makedirs(exist_ok=True)` then failed).
		err = c.store.MkdirAt(rel, mode, who)
	}
	if err != nil {
		return 0, unix.Stat_t{}, err
	}
	c.mu.Lock()
	id, err := c.store.AddDir(parent, name)
	c.mu.Unlock()
	if err != nil {
		return 0, unix.Stat_t{}, err
	}
	st, err := c.DirAttr(id)
	return id, st, err
}

// Rmdir removes an empty directory. Names dropped from it whose stored
// names are not unlinked yet are unlinked first. It returns the
// directory's ID and its attributes as it went (with no link left), for
// those who still hold it (a working directory, an open descriptor).
func (c *Core) Rmdir(parent blob.ID, name string) (blob.ID, unix.Stat_t, error) {
	var st unix.Stat_t
	c.mu.RLock()
	e, err := c.store.Lookup(parent, name)
	c.mu.RUnlock()
	if err != nil {
		return 0, st, err
	}
	unlock := c.lockDirs(parent, e.ID)
	defer unlock()
	c.tree.RLock()
	defer c.tree.RUnlock()
	c.mu.RLock()
	id, rel, err := c.store.RmdirPath(parent, name)
	c.mu.RUnlock()
	if err != nil {
		return 0, st, err
	}
	if id != e.ID {
		// Renamed over between the lookup and the locks: its lock is
		// not held; the kernel retries what it gets back.
		return 0, st, ErrStale
	}
	c.clearDoomedIn(id)
	st, _ = c.store.StatKind(rel, true)
	if err := c.store.RmdirAt(rel); err != nil {
		return 0, st, err
	}
	c.mu.Lock()
	c.store.RemoveDir(parent, name, id)
	c.mu.Unlock()
	st.Nlink, st.Size = 0, 0
	st.Ctim = unix.NsecToTimespec(c.cfg.Now().UnixNano())
	return id, st, nil
}

// clearDoomedIn unlinks the doomed names in directory id; its lock and
// tree held.
func (c *Core) clearDoomedIn(id blob.ID) {
	c.doomedMu.Lock()
	var names []blob.Name
	for n := range c.doomed {
		if n.Parent == id {
			names = append(names, n)
		}
	}
	c.doomedMu.Unlock()
	for _, n := range names {
		c.mu.RLock()
		rel, ok := c.store.NamePath(n.Parent, n.Name)
		c.mu.RUnlock()
		if ok {
			c.clearDoomed(n, rel)
		}
	}
}

// Unlink removes a file's name. Delete is idempotent: a name kvfs no
// longer holds (evicted under a stale kernel entry, or deleted by another
// client) is already what the caller wants, and can never leave a charge
// behind. The name leaves the store first, then the index (and its
// charge the ledger).
func (c *Core) Unlink(parent blob.ID, name string) error {
	unlock := c.lockDirs(parent, 0)
	defer unlock()
	c.tree.RLock()
	defer c.tree.RUnlock()
	// A store that refuses the unlink (read-only, failing: EROFS, EIO)
	// keeps the name in both, and the client is told. Dropped from the
	// index first, the name was gone from the mount and its charge from
	// the ledger while the store kept the object, which the audit or the
	// next start served again (an outside tester: rm exited 0 on a store
	// remounted read-only). Only an eviction changes the name meanwhile:
	// it finds it gone from the index below, as it does an evicted name
	// not reaped yet.
	//
	// Between the syscall and the commit the index still gives the name
	// as a path of its object, which the store no longer has: an open of
	// the object by its other name (fs_native's reader of the key while
	// its writer unlinks the temp name) found ENOENT at the temp name and
	// took the object for vanished, dropping it with every stored name,
	// the key's too (an outside tester: 2 of 20,100 completed stores
	// lost). So an unlink counts as a move: such an open waits for its
	// commit and tries again (retryMoved).
	c.mu.RLock()
	_, rel, err := c.store.UnlinkPath(parent, name)
	c.mu.RUnlock()
	if err == nil {
		c.moves.begin()
		defer c.moves.end() // after the commit below
		if err := c.store.UnlinkAt(rel); err != nil {
			return err
		}
		if testHookUnlinked != nil {
			testHookUnlinked()
		}
	}
	c.mu.Lock()
	id, rel, first, err := c.store.RemoveName(parent, name)
	named := false
	if err == nil {
		c.ledger.Unlink(id)
		named = c.store.Links(id) > 0
	} else if errors.Is(err, ErrNotFound) {
		rel, _ = c.store.NamePath(parent, name)
	}
	c.mu.Unlock()
	if named && first {
		// A link's publish step ends here: the object keeps only the
		// names it was linked to (fs_native's unlink of its temp name).
		// Not at the unlink of a name it was linked to (another
		// client's delete of the key a moment after the link): the
		// grace then ended before the unlink of the temp name, which an
		// eviction in between failed with ENOENT (an outside tester).
		c.ledger.EndGrace(id)
	} else if err == nil && !named {
		c.deliver([]Drop{{ID: id, Why: Removed}})
	}
	if errors.Is(err, ErrNotFound) {
		// An evicted name whose stored name is not reaped yet: the
		// unlink that reports it gone removes it, so a crash cannot bring
		// back an object its client deleted.
		if rel != "" {
			c.clearDoomed(blob.Name{Parent: parent, Name: name}, rel)
		}
		return nil
	}
	return err
}

// Link gives file id another name; EEXIST when the name is taken is how
// LMCache learns that another writer published first, so it is answered
// only for a name that exists.
func (c *Core) Link(id, parent blob.ID, name string) (Attr, error) {
	pub, st, err := c.link(id, parent, name)
	if err != nil {
		return Attr{}, err
	}
	// The grace goes on until the unlink of the name the object was
	// written under (see Unlink), or its end: a publish by link is two
	// steps, and an eviction between them would lose the object its
	// link just published and fail the unlink that follows.
	a, err := c.linkedAttr(id, st)
	if err == nil {
		c.awaitRelease(id)
	}
	c.publish(pub)
	return a, err
}

// linkedAttr are a just linked file's attributes, from what the link read
// of it (st) when that agrees with the ledger, else read again.
func (c *Core) linkedAttr(id blob.ID, st unix.Stat_t) (Attr, error) {
	size, charge, writing, ok := c.ledger.Shown(id)
	if st.Ino == 0 || !ok || (size != st.Size && !writing) {
		return c.Getattr(id, nil)
	}
	c.mu.RLock()
	links := c.store.Links(id)
	c.mu.RUnlock()
	return Attr{Stat_t: st, Charge: charge, Links: links, Writing: writing}, nil
}

// link links, and reports the path to publish (see publishableLocked)
// and the file's attributes as the link read them. The name linked from
// may be renamed or unlinked in its own directory after the plan; the
// link then plans again holding that directory's lock too, which keeps
// the name it links from where it is.
func (c *Core) link(id, parent blob.ID, name string) ([]string, unix.Stat_t, error) {
	var from blob.ID // the directory linked from, once a plan went stale
	for try := 0; ; try++ {
		pub, st, at, err := c.linkFrom(id, parent, name, from)
		if errors.Is(err, syscall.ENOENT) && at != from && try < 8 {
			from = at
			continue
		}
		if errors.Is(err, syscall.ENOENT) {
			// Every name it had kept moving, or went: as a link of a
			// name that went.
			err = ErrNotFound
		}
		return pub, st, err
	}
}

// linkFrom links once, holding parent's lock and from's (0: only
// parent's); at is the directory of the name it linked from.
func (c *Core) linkFrom(id, parent blob.ID, name string, from blob.ID) (pub []string, st unix.Stat_t, at blob.ID, err error) {
	unlock := c.lockDirs(parent, from)
	defer unlock()
	c.tree.RLock()
	defer c.tree.RUnlock()
	n := blob.Name{Parent: parent, Name: name}
	c.mu.RLock()
	old, rel, at, err := c.store.LinkPaths(id, parent, name)
	c.mu.RUnlock()
	if err != nil {
		return nil, st, at, err
	}
	if testHookLinkPlanned != nil && from == 0 {
		testHookLinkPlanned()
	}
	c.clearDoomed(n, rel)
	c.moves.begin()
	defer c.moves.end() // after the commit below
	if st, err = c.store.LinkAt(old, rel); err != nil {
		return nil, st, at, err
	}
	if testHookLinked != nil {
		testHookLinked()
	}
	c.mu.Lock()
	if err = c.store.AddLink(id, parent, name); err == nil {
		err = c.ledger.Link(id)
	}
	if err == nil {
		pub = c.publishableLocked(nil, n)
	}
	c.mu.Unlock()
	if err != nil {
		// Dropped (evicted, or its last name removed) since the plan:
		// the new stored name goes too.
		c.unlinkStored(rel)
		return nil, st, at, ErrNotFound
	}
	return pub, st, at, nil
}

// Rename moves a name, atomically, with rename(2)'s flags; a file it
// replaces loses that name.
func (c *Core) Rename(parent blob.ID, name string, newParent blob.ID, newName string, flags uint32) error {
	_, err := c.RenameOver(parent, name, newParent, newName, flags)
	return err
}

// Gone is a directory a rename replaced (an empty one, renamed over by
// another): its ID and its attributes as it went, with no link left, for
// those who still hold it (see Rmdir).
type Gone struct {
	ID blob.ID
	St unix.Stat_t
}

// RenameOver is Rename, and says which directory it replaced, if one.
func (c *Core) RenameOver(parent blob.ID, name string, newParent blob.ID, newName string, flags uint32) (Gone, error) {
	moved, pub, gone, err := c.rename(parent, name, newParent, newName, flags)
	if err == nil {
		for _, m := range moved {
			if m.sole {
				c.ledger.EndGrace(m.id)
			}
			c.awaitRelease(m.id)
		}
		c.publish(pub)
	}
	return gone, err
}

// movedFile is a file whose name a rename moved, and whether that is
// its one name: the rename is then its publish step, which ends its
// grace. One with another name as well keeps its grace: a link
// published it and the unlink of its temp name is still to come (see
// Unlink), and a rename of the name it was linked to ended the grace
// before that unlink, which an eviction in between failed with ENOENT
// (an outside tester: 5 of 5, and 22 in 16,000 stores beside a thread
// renaming final names).
type movedFile struct {
	id   blob.ID
	sole bool
}

// rename renames, and reports the files whose names it moved (the
// renamed one, and the other too for an exchange) and the paths to
// publish.
func (c *Core) rename(parent blob.ID, name string, newParent blob.ID, newName string, flags uint32) (moved []movedFile, pub []string, gone Gone, err error) {
	unlock := c.lockDirs(parent, newParent)
	defer unlock()
	c.mu.RLock()
	e, err := c.store.Lookup(parent, name)
	c.mu.RUnlock()
	if err != nil {
		return nil, nil, gone, err
	}
	if e.Dir {
		c.tree.Lock()
		defer c.tree.Unlock()
	} else {
		c.tree.RLock()
		defer c.tree.RUnlock()
	}
	c.mu.RLock()
	p, err := c.store.PlanRename(parent, name, newParent, newName, flags)
	c.mu.RUnlock()
	if err != nil || p.Noop {
		return nil, nil, gone, err
	}
	if p.SrcDir != e.Dir {
		return nil, nil, gone, ErrStale
	}
	if p.Dst == 0 {
		c.clearDoomed(p.To, p.New)
	}
	if p.SrcDir && p.Dst != 0 && flags&unix.RENAME_EXCHANGE == 0 {
		gone.ID = p.Dst
		gone.St, _ = c.store.StatKind(p.New, true)
	}
	c.moves.begin()
	if err := c.store.RenameAt(p); err != nil {
		c.moves.end()
		return nil, nil, Gone{}, err
	}
	defer c.moves.end() // after the commit below
	if testHookRenamed != nil {
		testHookRenamed()
	}
	c.mu.Lock()
	// The rename replaced whatever the store held at the new name.
	c.undoom(p.To)
	if flags&unix.RENAME_EXCHANGE != 0 {
		c.undoom(p.From)
	}
	replaced, lost := c.store.CommitRename(p)
	removed := false
	if replaced != 0 {
		c.ledger.Unlink(replaced)
		removed = c.store.Links(replaced) == 0
	}
	for _, at := range []blob.Name{p.To, p.From} {
		if e, err := c.store.Lookup(at.Parent, at.Name); err == nil && !e.Dir {
			moved = append(moved, movedFile{e.ID, c.store.Links(e.ID) == 1})
			pub = c.publishableLocked(pub, at)
		}
	}
	c.mu.Unlock()
	if removed {
		c.deliver([]Drop{{ID: replaced, Why: Removed}})
	}
	for _, n := range lost {
		// An eviction dropped what was renamed after the plan: its bytes
		// now sit under the new name, and go.
		c.mu.RLock()
		rel, ok := c.store.NamePath(n.Parent, n.Name)
		c.mu.RUnlock()
		if ok {
			c.unlinkStored(rel)
		}
	}
	if gone.ID != 0 {
		gone.St.Nlink, gone.St.Size = 0, 0
		gone.St.Ctim = unix.NsecToTimespec(c.cfg.Now().UnixNano())
	}
	return moved, pub, gone, nil
}

// testHookLinkPlanned, when set, runs between a link's plan and its
// syscall while it holds only the new name's directory lock.
var testHookLinkPlanned func()

// testHookLinked, when set, runs between a link's syscall and its commit.
var testHookLinked func()

// testHookUnlinked, when set, runs between an unlink's syscall and its
// commit.
var testHookUnlinked func()

// testHookRenamed, when set, runs between a rename's syscall and its
// commit.
var testHookRenamed func()

// SyncDir makes a directory's entries durable.
func (c *Core) SyncDir(id blob.ID) error {
	return c.onStored(id, func(rel string, _ bool) error { return c.store.SyncPath(rel) }, nil)
}

// openPath opens id's stored file by its path (see readStored). A path
// that holds another file than the index's for id is a rename over its
// name under way, between its syscall and its commit: it is opened again
// once that rename has ended (when id may have no name left), so a
// handle never serves one object's inode from another's bytes (an
// outside tester's finding: an open racing os.replace over the name read
// the new object while fstat gave the old one's size). A path that still
// holds another file was replaced behind kvfs's back, the audit's to
// judge, and is not opened for id (ErrStale): a user who owns a stored
// directory could otherwise put a hard link to a file outside the store
// there and have the daemon, as root, chown or chmod it for them (an
// outside tester's finding).
func (c *Core) openPath(id blob.ID, flags int) (*os.File, error) {
	var f *os.File
	err, behind := c.retryReplaced(func() (err error) {
		f, err = c.openPathOnce(id, flags)
		return err
	})
	switch {
	case errors.Is(err, errReplaced):
		if behind {
			c.log.Warn("a stored name holds another file than the index says; not opened until the audit", zap.Uint64("id", uint64(id)))
		}
		return nil, ErrStale
	case errors.Is(err, unix.EXDEV):
		// A file system is mounted on the stored name (a bind mount of
		// a file: opens beneath data/ never cross into one). Not the
		// store's file; an open answered EXDEV, which no client expects.
		c.log.Warn("a file system is mounted on a stored name; not opened", zap.Uint64("id", uint64(id)))
		return nil, ErrStale
	}
	return f, err
}

func (c *Core) openPathOnce(id blob.ID, flags int) (f *os.File, err error) {
	var rel string
	var known uint64
	err = c.readStored(func(vs *versions) (err error) {
		rel, known, err = c.pathOfFile(id, vs)
		return err
	}, func() (err error) {
		f, err = c.store.OpenPath(rel, flags)
		return err
	}, func() { f.Close() })
	if err != nil || known == 0 {
		return f, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if st.Ino != known {
		f.Close()
		return nil, errReplaced
	}
	return f, nil
}

// pathOfFile reads file id's stored path and the inode number the index
// holds for it (0: not known), adding what they rest on to vs; Core.mu
// held shared.
func (c *Core) pathOfFile(id blob.ID, vs *versions) (rel string, ino uint64, err error) {
	rel, v, ok := c.store.PathVersion(id)
	if !ok {
		return "", 0, ErrNotFound
	}
	vs.add(v)
	return rel, c.store.Ino(id), nil
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
	f, err := c.openPath(id, flags)
	if errors.Is(err, ErrNotFound) {
		return nil, ErrStale
	}
	return f, err
}

// LinkedOutside says whether f, the stored file of object id, has more
// links than kvfs's names for it and its crash marker: a hard link made
// behind kvfs's back, perhaps from a file outside the store that the
// user who owns a stored directory put in place of their object (the
// index adopts it as the object at a start, or at the audit). chmod,
// chown and utimes refuse such a file: the daemon, as root, would change
// a file its user does not own (an outside tester's finding). A link of
// kvfs's own between its syscall and its commit is waited out (moves),
// and an object no longer indexed (evicted, or its last name removed
// meanwhile) has no name left to plant a link at.
func (c *Core) LinkedOutside(id blob.ID, f *os.File) bool {
	for try := 0; ; try++ {
		s := c.moves.snapshot()
		// Under the object's marker lock, which its last writer's
		// release holds from counting the writer out to unlinking the
		// marker: the count and the marker agree (a utime right after a
		// close met the marker of a writer already counted out).
		m := c.marker(id)
		m.Lock()
		var st unix.Stat_t
		err := unix.Fstat(int(f.Fd()), &st)
		c.mu.RLock()
		known := c.store.Links(id)
		c.mu.RUnlock()
		indexed := known > 0
		if c.beingWritten(id) {
			known++ // its crash marker in writing/
		}
		m.Unlock()
		if err != nil || !indexed || int(st.Nlink) <= known {
			return false
		}
		if c.moves.unchanged(s) || try == moveRetries {
			c.log.Warn("a stored file has links kvfs did not make: its mode, owner and times are not changed", zap.Uint64("id", uint64(id)),
				zap.Uint64("links", uint64(st.Nlink)), zap.Int("names", known))
			return true
		}
		c.moves.wait()
	}
}
