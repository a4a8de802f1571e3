package core

import (
	"errors"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/internal/lockorder"
	"github.com/kvfs/kvfs/ledger"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Stores while the index loads. A big store's start serves before its
// index is built (see Preview), and a cache must take stores then too: a
// node whose engine came back first would otherwise hold every store of
// its first minute. Preview takes the stores connectors make, of new
// names (LMCache's fs_native writes a temporary name, links the final one
// and unlinks the first; SGLang writes one and renames it), and deletes:
//
//   - a create of a name the store does not hold; writes, fsync, the
//     close and the release of its writer;
//   - link, rename and unlink of names made so ("made names");
//   - unlink of a stored file's name, and rename of a stored file with
//     one name to a new name (which is then a made name): a connector's
//     delete, and a user's rm and mv, in a restart's first minute;
//   - mkdir of a new directory (vLLM's file tier makes two levels of
//     directories by hash as it stores).
//
// Anything else, and any of these that does not fit, returns ErrWait: the
// caller waits for the index and hands the request to the file system
// over it. The bytes go where any store's go: born under writing/ with a
// crash marker (named by IDs from earlyBase, which the core's never
// reach) and linked to their name in data/, so a crash while loading
// leaves what a crash leaves: a finished store is a file the next start
// finds, an unfinished one is marked and deleted.
//
// Capacity: the ledger does not exist yet, so the stores take at most a
// budget (AllowStores), which the mount sets from the store's file
// system's used bytes (they bound from above what the load will charge)
// and, for a full cache, a bounded overshoot that the switch evicts back
// (mount.earlyBudget). A write past it waits for the index.
//
// A name removed while loading may be made again. The load may have
// indexed what it named before: the switch drops that from the index
// (see settleGone). The bytes a removal frees on the disk return to the
// budget.
//
// When the index is built, Core.TakeEarly settles the made names in it
// before any request reaches the core (adopted, charged, evicting to fit;
// names the load indexed and the stores removed since dropped; sizes the
// load read mid-write corrected) and hands writers still open to core
// handles.

// ErrWait: the request waits for the index (see Preview.Create).
var ErrWait = errors.New("waits for the index")

// earlyBase is the first crash marker ID of a store taken while loading.
const earlyBase = 1 << 62

// early is what Preview knows of the stores it took.
type early struct {
	budget int64
	// keepStored: stored names are not removed or moved while loading
	// (KeepStoredNames); set before serving.
	keepStored bool
	// ops is held shared by each store request, exclusively by
	// TakeEarly to end them (outermost: the core's locks are taken
	// under it).
	ops   lockorder.RWMutex
	taken bool // GUARDED_BY(ops)
	// used is the bytes of the budget taken: what the stores wrote less
	// what removals freed, below zero when they freed more.
	used atomic.Int64
	// mu orders the changes of names, syscalls included: it is held only
	// while loading, when few stores come. What it guards is read
	// without it by TakeEarly, which holds ops exclusively.
	mu      lockorder.Mutex
	next    blob.ID               // GUARDED_BY(mu)
	seq     int                   // files made or moved so far; GUARDED_BY(mu)
	made    map[string]*EarlyFile // made names; GUARDED_BY(mu)
	dirs    []string              // directories made, parents first; GUARDED_BY(mu)
	gone    map[string]bool       // names removed while loading (made again or not); GUARDED_BY(mu)
	inos    map[uint64]int        // made files' inodes, by names; GUARDED_BY(mu)
	writers map[*EarlyFile]bool   // open writers; GUARDED_BY(mu)
}

// EarlyFile is a file stored while the index loads, and its writer's
// handle until released; or a stored file renamed while loading (moved:
// no writer, file nil), whose new names are made names too.
type EarlyFile struct {
	p      *Preview
	marker blob.ID
	file   *os.File
	ino    uint64
	seq    int // its place among the stores, in the order they were made
	// moved: a stored file (not a store), of stored bytes on the disk
	// that its last name's removal frees.
	moved  bool
	stored int64
	mu     lockorder.Mutex
	size   int64 // the end charged so far; GUARDED_BY(mu)
	// handle: the core's handle it became at the switch (nil: none,
	// the object was gone or refused); set under p.early.ops.
	handle *Handle
	// refused: the index could not keep its object at the switch (no
	// room for it, or evicted to make room): its name is gone, and each
	// write and flush of it answers ErrNoSpace, as a core writer's
	// refused for space does. Set under p.early.ops.
	refused bool
	// closed: a close(2) of its writer succeeded, which tells the client
	// its store is done; released is closed by the RELEASE that ends the
	// writer, which the kernel sends after that close returned (see
	// awaitRelease). A moved file has neither.
	closed   atomic.Bool
	released chan struct{}
}

// AllowStores has p take stores of new names, up to budget bytes; with
// none, every store waits for the index. Call it before p serves.
func (p *Preview) AllowStores(budget int64) {
	if budget <= 0 {
		return
	}
	e := &p.early
	e.mu.Lock()
	defer e.mu.Unlock()
	e.budget, e.next = budget, earlyBase
	e.made, e.gone, e.inos, e.writers = map[string]*EarlyFile{}, map[string]bool{}, map[uint64]int{}, map[*EarlyFile]bool{}
}

// KeepStoredNames has p leave the names of stored files to the index:
// their unlinks and renames wait for it. A mount with a shared tier
// does, whose FS deletes a removed name from the bucket as well; a
// delete served before it exists would leave the object there for a
// later miss to fetch back. Call it before p serves.
func (p *Preview) KeepStoredNames() {
	e := &p.early
	e.mu.Lock()
	defer e.mu.Unlock()
	e.keepStored = true
}

// change runs a change of the stores' names with them locked, holding
// off TakeEarly; ErrWait once it ran or when p takes no stores.
func (p *Preview) change(fn func(e *early) error) error {
	e := &p.early
	e.ops.RLock()
	defer e.ops.RUnlock()
	if e.taken || e.made == nil {
		return ErrWait
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return fn(e)
}

// heldLocked says whether rel is a name a store may not add: one the
// store holds. e.mu held.
func (p *Preview) heldLocked(rel string) bool {
	if p.early.made[rel] != nil {
		return true
	}
	_, err := p.store.StatPath(rel)
	return !errors.Is(err, unix.ENOENT)
}

// Create makes the new file rel and opens it for its writer.
func (p *Preview) Create(rel string, mode uint32, who blob.Owner) (f *EarlyFile, a Attr, err error) {
	err = p.change(func(e *early) error {
		f, a, err = p.createLocked(e, rel, mode, who)
		return err
	})
	return f, a, err
}

func (p *Preview) createLocked(e *early, rel string, mode uint32, who blob.Owner) (*EarlyFile, Attr, error) {
	if p.heldLocked(rel) {
		return nil, Attr{}, ErrWait
	}
	var f *os.File
	var st unix.Stat_t
	var err error
	id := e.next
	who = p.store.OwnerAt(rel, who)
	for {
		// A marker of a store taken while an earlier load ran, which
		// crashed, is deleted only once this load ends.
		f, st, err = p.store.CreateFor(id, mode, who)
		if !errors.Is(err, unix.EEXIST) {
			break
		}
		id++
	}
	if err != nil {
		return nil, Attr{}, err
	}
	e.next = id + 1
	if err = p.store.LinkDetachedAt(rel, id); err != nil {
		p.store.ClearWriting(id)
		f.Close()
		if errors.Is(err, unix.EEXIST) {
			return nil, Attr{}, ErrWait
		}
		return nil, Attr{}, err
	}
	ef := p.newFileLocked(st.Ino)
	ef.marker, ef.file, ef.released = id, f, make(chan struct{})
	e.made[rel] = ef
	e.inos[st.Ino]++
	e.writers[ef] = true
	a := StoredAttr(st)
	a.Links = 1
	return ef, a, nil
}

// newFileLocked is the next file made or moved, of inode ino; e.mu
// held.
func (p *Preview) newFileLocked(ino uint64) *EarlyFile {
	p.early.seq++
	f := &EarlyFile{p: p, ino: ino, seq: p.early.seq}
	f.mu.SetRank(rankEarlyFile)
	return f
}

// File is the stored file; it stays open until Release.
func (f *EarlyFile) File() *os.File { return f.file }

// Handle is the core's handle f became when the index was built (nil:
// none).
func (f *EarlyFile) Handle() *Handle {
	f.p.early.ops.RLock()
	defer f.p.early.ops.RUnlock()
	return f.handle
}

// Write writes within the budget; ErrWait past it, and once the index
// is built for a writer that became a core handle (which admits it).
func (f *EarlyFile) Write(data []byte, off int64) (int, error) {
	e := &f.p.early
	e.ops.RLock()
	defer e.ops.RUnlock()
	switch {
	case e.taken && f.handle != nil:
		return 0, ErrWait
	case f.refused:
		return 0, ErrNoSpace
	}
	if err := f.charge(off + int64(len(data))); err != nil {
		return 0, err
	}
	return f.file.WriteAt(data, off)
}

// charge takes what growing f to end adds from the budget: ErrWait past
// it while loading, ErrNoSpace for a writer whose object was gone when
// the index was built (it has no name, and nothing admits it). e.ops
// held shared.
func (f *EarlyFile) charge(end int64) error {
	e := &f.p.early
	f.mu.Lock()
	defer f.mu.Unlock()
	add := ledger.Charge(end) - ledger.Charge(f.size)
	if add <= 0 {
		return nil
	}
	for {
		used := e.used.Load()
		if used+add > e.budget {
			if e.taken {
				return ErrNoSpace
			}
			return ErrWait
		}
		if e.used.CompareAndSwap(used, used+add) {
			break
		}
	}
	f.size = end
	return nil
}

// Refused says whether the index could not keep f's object at the
// switch (see EarlyFile.refused).
func (f *EarlyFile) Refused() bool {
	f.p.early.ops.RLock()
	defer f.p.early.ops.RUnlock()
	return f.refused
}

// Flush is a close of f's writer: ErrNoSpace once refused (its object
// is gone), ErrWait for a core handle's (flush that).
func (f *EarlyFile) Flush() error {
	e := &f.p.early
	e.ops.RLock()
	defer e.ops.RUnlock()
	switch {
	case f.handle != nil:
		return ErrWait
	case f.refused:
		return ErrNoSpace
	}
	f.closed.Store(true)
	return nil
}

// awaitRelease waits, up to releaseWait, for the RELEASE of f's writer
// once a close of it succeeded: the link or rename that publishes a
// store taken while loading returns with its crash marker gone, as a
// core publish does (Core.awaitRelease). Without it, a kill after
// LMCache's link and unlink of the temporary name, before the RELEASE
// in flight, left a completed store marked, and the next start deleted
// it (TestCrashLoopWhileLoading). No lock held.
func (f *EarlyFile) awaitRelease() {
	if f == nil || f.released == nil || !f.closed.Load() {
		return
	}
	select {
	case <-f.released:
	case <-time.After(releaseWait):
	}
}

// Fsync makes the stored bytes durable; ErrWait for a core handle's.
func (f *EarlyFile) Fsync(dataOnly bool) error {
	if f.Handle() != nil {
		return ErrWait
	}
	if dataOnly {
		return unix.Fdatasync(int(f.file.Fd()))
	}
	return f.file.Sync()
}

// Release ends f's writer: its crash marker goes, and the file is
// complete. ErrWait: the writer is a core handle's now (release that).
// The file f opened is closed either way.
func (f *EarlyFile) Release() error {
	e := &f.p.early
	e.ops.RLock()
	defer e.ops.RUnlock()
	defer f.file.Close()
	// A publish waiting goes on: handed on, the core's handle is
	// released next, in the same request.
	defer close(f.released)
	if f.handle != nil {
		return ErrWait
	}
	e.mu.Lock()
	delete(e.writers, f)
	if e.inos[f.ino] == 0 {
		e.freeLocked(f) // it lost its names while open
	}
	e.mu.Unlock()
	return f.p.store.ClearWriting(f.marker)
}

// freeLocked gives the budget back the bytes of f, which has neither a
// name nor a writer left: they left the disk. e.mu held.
func (e *early) freeLocked(f *EarlyFile) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e.used.Add(-ledger.Charge(f.size) - f.stored)
	f.size, f.stored = 0, 0
}

// Mkdir makes the new directory rel, in a directory the store holds;
// ErrWait if rel is held or its parent is not a directory.
func (p *Preview) Mkdir(rel string, mode uint32, who blob.Owner) (a Attr, err error) {
	err = p.change(func(e *early) error {
		if p.heldLocked(rel) {
			return ErrWait
		}
		err := p.store.MkdirAt(rel, mode, who)
		switch {
		case errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
			return ErrWait
		case err != nil:
			return err
		}
		e.dirs = append(e.dirs, rel)
		st, err := p.store.StatPath(rel)
		if err != nil {
			return err
		}
		a = StoredAttr(st)
		return nil
	})
	return a, err
}

// Link gives the made file at old the new name rel; ErrWait for any
// other link.
func (p *Preview) Link(old, rel string) (a Attr, err error) {
	var f *EarlyFile
	err = p.change(func(e *early) error {
		f = e.made[old]
		if f == nil || p.heldLocked(rel) {
			return ErrWait
		}
		st, err := p.store.LinkAt(old, rel)
		switch {
		case errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOENT):
			return ErrWait
		case err != nil:
			return err
		}
		if st.Ino == 0 {
			if st, err = p.store.StatPath(rel); err != nil {
				return err
			}
		}
		e.made[rel] = f
		e.inos[f.ino]++
		a = StoredAttr(st)
		return nil
	})
	if err == nil {
		f.awaitRelease()
	}
	return a, err
}

// Unlink removes rel: a made name, or a name of a file the store holds
// (the switch drops it from the index, if the load indexed it); ErrWait
// for anything else.
func (p *Preview) Unlink(rel string) error {
	return p.change(func(e *early) error {
		f := e.made[rel]
		if f == nil {
			return p.unlinkStoredLocked(e, rel)
		}
		if err := p.store.UnlinkAt(rel); err != nil {
			return err
		}
		p.forgetLocked(rel, f)
		return nil
	})
}

// unlinkStoredLocked removes rel, a name of a stored file; the bytes of
// its last name return to the budget. e.mu held.
func (p *Preview) unlinkStoredLocked(e *early, rel string) error {
	st, ok := p.storedLocked(rel)
	if !ok {
		return ErrWait
	}
	if err := p.store.UnlinkAt(rel); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return ErrWait
		}
		return err
	}
	e.gone[rel] = true
	if st.Nlink == 1 {
		e.used.Add(-ledger.Charge(st.Size))
	}
	return nil
}

// storedLocked is the stat of rel if it names a stored file a client
// may remove or move while loading: a regular file the load keeps (not
// one marked half-written at the start, which the load deletes), unless
// p keeps stored names. e.mu held.
func (p *Preview) storedLocked(rel string) (unix.Stat_t, bool) {
	if p.early.keepStored {
		return unix.Stat_t{}, false
	}
	st, err := p.store.StatPath(rel)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || p.writing[st.Ino] {
		return st, false
	}
	return st, true
}

// forgetLocked records that the made name rel of f is gone, and frees
// f's bytes if that was its last name and no writer holds it; e.mu held.
func (p *Preview) forgetLocked(rel string, f *EarlyFile) {
	e := &p.early
	delete(e.made, rel)
	e.gone[rel] = true
	if e.inos[f.ino]--; e.inos[f.ino] <= 0 {
		delete(e.inos, f.ino)
		if !e.writers[f] {
			e.freeLocked(f)
		}
	}
}

// Rename moves old to rel, a name the store does not hold (flags 0 or
// RENAME_NOREPLACE): a made name, or the one name of a stored file, which
// makes rel a made name; ErrWait for any other rename.
func (p *Preview) Rename(old, rel string, flags uint32) error {
	if flags&^unix.RENAME_NOREPLACE != 0 {
		return ErrWait
	}
	var f *EarlyFile
	err := p.change(func(e *early) error {
		if p.heldLocked(rel) {
			return ErrWait
		}
		f = e.made[old]
		if f == nil {
			// A stored file of more names would be charged twice at
			// the switch: once by the load, under those, and once
			// adopted under rel.
			st, ok := p.storedLocked(old)
			if !ok || st.Nlink != 1 {
				return ErrWait
			}
			f = p.newFileLocked(st.Ino)
			f.moved, f.stored = true, ledger.Charge(st.Size)
		}
		err := p.store.RenameAt(blob.RenamePlan{Old: old, New: rel, Flags: unix.RENAME_NOREPLACE})
		switch {
		case errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOENT):
			return ErrWait
		case err != nil:
			return err
		}
		moved := e.made[old] == nil
		e.made[rel] = f
		e.inos[f.ino]++
		if moved {
			e.gone[old] = true
		} else {
			p.forgetLocked(old, f) // not its last name: rel is one
		}
		return nil
	})
	if err == nil {
		f.awaitRelease()
	}
	return err
}

// madeIno says whether a made file has inode ino (it may reuse one that
// was marked at the start, whose file the load deletes).
func (p *Preview) madeIno(ino uint64) bool {
	e := &p.early
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inos[ino] > 0
}

// TakeEarly ends p's stores and settles what they made in the index,
// before any request reaches the core: names the load indexed and the
// stores removed since are dropped, made names the load did not index
// are adopted (charged, evicting to fit), sizes the load read mid-write
// are corrected, and each writer still open becomes a core handle
// (EarlyFile.Handle), its crash marker the core's. It returns those
// writers. The stores that were complete are published
// (Config.Published: the remote tier uploads them) and counted, as their
// releases would have been; the names stored files were moved to are
// published, as a rename's are.
func (c *Core) TakeEarly(p *Preview) []*EarlyFile {
	writers, pub := c.takeEarly(p)
	if c.earlyTaken != nil {
		c.earlyOnce.Do(func() { close(c.earlyTaken) })
	}
	c.publish(pub)
	return writers
}

// AwaitEarly has c's audits wait for TakeEarly: until then a Preview's
// stores change the store's names without the core's locks, which an
// audit's check of a name and its change to the index would straddle
// (adopting a file a store renames a moment later, say). Call it before
// Start, on a core whose Preview took stores.
func (c *Core) AwaitEarly() {
	c.earlyTaken = make(chan struct{})
}

func (c *Core) takeEarly(p *Preview) (writers []*EarlyFile, pub []string) {
	e := &p.early
	e.ops.Lock()
	defer e.ops.Unlock()
	e.taken = true
	if e.made == nil {
		return nil, nil
	}
	// What follows settles kvfs's own changes, none made behind its
	// back: no reconciliation is counted, and what vanished or changed
	// is no warning.
	c.ledger.Own(true)
	defer c.ledger.Own(false)
	var r AuditReport
	for _, rel := range e.dirs {
		c.settleDir(rel)
	}
	for _, rel := range slices.Sorted(maps.Keys(e.gone)) {
		c.settleGone(rel, e.made[rel] != nil, &r)
	}
	byFile := map[*EarlyFile][]string{}
	for rel, f := range e.made {
		byFile[f] = append(byFile[f], rel)
	}
	// In the order they were made: each is the most recently used as it
	// is settled (not as old as its stored file's times say, which a
	// file system may keep to the second), and the first are the first
	// evicted of them.
	order := slices.SortedFunc(maps.Keys(byFile), func(a, b *EarlyFile) int { return a.seq - b.seq })
	for _, f := range order {
		names := byFile[f]
		slices.Sort(names)
		id, err := c.settleMade(f, names, e.writers[f], &r)
		if !e.writers[f] {
			if err == nil {
				if !f.moved {
					c.counters.stores.Add(1)
				}
				c.mu.RLock()
				pub = append(pub, c.pathsLocked(id)...)
				c.mu.RUnlock()
			}
			continue
		}
		if err == nil {
			f.handle, err = c.takeWriter(id, f)
		}
		if err != nil {
			f.refused = true
			c.log.Warn("a store taken while the index loaded could not go on once it was built; its object is removed, and its writer answers ENOSPC",
				zap.String("name", names[0]), zap.Error(err))
			for _, rel := range names {
				c.unlinkPath(rel)
			}
			continue
		}
		writers = append(writers, f)
	}
	c.locked(func() (victims, error) { return c.ledger.Trim(), nil })
	c.log.Info("stores taken while the index loaded are in it",
		zap.Int("names", len(e.made)), zap.Int("removed", len(e.gone)), zap.Int("writers_open", len(writers)),
		zap.Int("adopted", r.Adopted), zap.Int("linked", r.Linked), zap.Int("resized", r.Resized),
		zap.Int("vanished", r.Vanished), zap.Int64("budget_net_bytes", e.used.Load()))
	return writers, pub
}

// Removed is how many names clients removed or moved away while
// loading, so far.
func (p *Preview) Removed() int {
	e := &p.early
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.gone)
}

// resolve is the index's entry for rel ("" is the root).
func (c *Core) resolve(rel string) (blob.Entry, error) {
	if rel == "" {
		return blob.Entry{ID: RootID, Dir: true}, nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.store.Resolve(rel)
}

// settleDir indexes a directory made while loading, unless the load did
// (it listed its parent after the mkdir); its parent is indexed by then
// (made before it, or the store's).
func (c *Core) settleDir(rel string) {
	dir, name := path.Split(rel)
	d, err := c.resolve(strings.TrimSuffix(dir, "/"))
	if err != nil || !d.Dir {
		return
	}
	unlock := c.lockDirs(d.ID, 0)
	defer unlock()
	c.tree.RLock()
	defer c.tree.RUnlock()
	c.mu.RLock()
	known := c.store.Kid(d.ID, name) != 0
	c.mu.RUnlock()
	if known {
		return
	}
	if st, err := c.store.StatPath(rel); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return // gone behind kvfs's back
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.store.AddDir(d.ID, name)
}

// settleGone drops a name removed while loading from the index, if the
// load indexed what it named. One remade (a made name now) is dropped
// whatever the load read under it, the removed file or the made one, and
// settleMade indexes it afresh: a stat of the name cannot tell the two
// apart where the made file took the removed one's inode number.
func (c *Core) settleGone(rel string, remade bool, r *AuditReport) {
	dir, name := path.Split(rel)
	d, err := c.resolve(strings.TrimSuffix(dir, "/"))
	if err != nil || !d.Dir {
		return
	}
	n, err := c.resolve(rel)
	if err != nil || n.Dir {
		return
	}
	at := blob.Name{Parent: d.ID, Name: name}
	if remade {
		c.dropStaleName(at, r, func(blob.ID) bool { return true })
	} else {
		c.auditName(at, map[blob.ID]int64{}, r)
	}
}

// settleMade puts a made file's names in the index: adopted under the
// first the load did not index (charged, evicting others to fit), linked
// under the rest, its size the stored file's; it returns the object.
// With writing, the object is pinned for its writer as soon as the index
// has it, so nothing settled after evicts it.
func (c *Core) settleMade(f *EarlyFile, names []string, writing bool, r *AuditReport) (blob.ID, error) {
	known := map[uint64]blob.ID{}
	var unknown []string
	for _, rel := range names {
		if n, err := c.resolve(rel); err != nil {
			unknown = append(unknown, rel)
		} else if !n.Dir {
			known[f.ino] = n.ID
		}
	}
	id, pinned := known[f.ino], false
	pin := func() error {
		if pinned || !writing || id == 0 {
			return nil
		}
		pinned = true
		return ledgerErr(c.ledger.Open(id, true))
	}
	if err := pin(); err != nil {
		return 0, err
	}
	if id != 0 && !writing {
		if c.reconcile(id) {
			r.Resized++ // the load read it mid-write
		}
		c.Used(id)
	}
	for _, rel := range unknown {
		c.auditFound(rel, blob.WalkedFile{Ino: f.ino}, known, r)
		if id == 0 {
			if n, err := c.resolve(rel); err == nil && !n.Dir {
				id = n.ID
			}
		}
		if err := pin(); err != nil {
			return 0, err
		}
	}
	if id == 0 {
		return 0, ErrNotFound // evicted, as the load made room
	}
	return id, nil
}

// takeWriter makes the core's handle of a writer open at the switch, on
// object id that settleMade pinned for it, marked by the core's marker
// before the early one goes, so a crash in between leaves it marked
// either way. It gets no reservation (its bytes are admitted as they
// come), so no store under way is refused at the switch, and it was
// created by its writer: a refusal later removes it (see baseSize).
func (c *Core) takeWriter(id blob.ID, f *EarlyFile) (*Handle, error) {
	h := &Handle{c: c, id: id, write: true}
	var err error
	if h.file, err = c.openStored(id, unix.O_RDWR, nil); err == nil {
		err = c.store.MarkWriting(h.file, id)
	}
	if err == nil {
		err = c.startWriting(h, true, false)
	}
	if err != nil {
		if h.file != nil {
			h.file.Close()
		}
		h.unpin()
		return nil, err
	}
	if err := c.store.ClearWriting(f.marker); err != nil {
		c.log.Warn("clearing a writing marker", zap.Uint64("id", uint64(f.marker)), zap.Error(err))
	}
	if f.closed.Load() {
		// Its client was told the store is done: a publish by the
		// core waits for its release (see Core.awaitRelease), and a
		// whole writer of it after is refused back to this size.
		if size, err := h.size(); err == nil {
			c.settledAt(id, size)
		}
	}
	return h, nil
}

// unlinkPath removes the name rel through the index.
func (c *Core) unlinkPath(rel string) {
	dir, name := path.Split(rel)
	if d, err := c.resolve(strings.TrimSuffix(dir, "/")); err == nil && d.Dir {
		c.Unlink(d.ID, name)
	}
}
