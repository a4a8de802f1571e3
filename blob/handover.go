package blob

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// A handover in two phases (see package mount). While the old daemon
// serves on, it notes every object whose record changes (Track, Noted;
// the ledger notes its own), captures its index as a checkpoint that it
// never writes to disk (HandoverCheckpoint; the objects it left out are
// noted too), and keeps the checkpoint's directories (Basis). The successor builds its index from those bytes
// alone (LoadHandover), touching nothing in the store, which the old
// daemon still owns. Then, in rounds while the old daemon serves and
// once more after it has stopped every request, the old daemon sends
// only what changed since the last (the noted objects as they are now,
// the directories that differ: DirDelta), and the successor applies it
// (ApplyHandover): the pause is the last round's changes, not the store.

// HandoverCheckpoint captures the index as WriteCheckpoint does, and
// returns its bytes (as on disk) without writing them: a successor loads
// them (LoadHandover).
func (s *Store) HandoverCheckpoint(shared func(func()), order Order, busy func(ID) bool) (*Checkpoint, []byte, error) {
	w := &cpWriter{b: make([]byte, 0, s.checkpointSize.Load()+s.checkpointSize.Load()/8)}
	cp := s.capture(w, shared, order, busy, false, nil)
	return cp, w.b, w.err
}

// Basis is what a handover checkpoint says of directories, kept by the
// old daemon to tell which changed since (DirDelta moves it on to what
// each round sent).
type Basis struct {
	Taken int64 // unix nanoseconds
	dirs  map[ID]basisDir
}

type basisDir struct {
	parent ID
	name   string
}

// ParseBasis reads a handover checkpoint's directories into a Basis.
func ParseBasis(data []byte) (*Basis, error) {
	body, _, err := checkpointBody(data)
	if err != nil {
		return nil, err
	}
	r := &cpReader{b: body}
	r.u8()
	b := &Basis{Taken: int64(r.u64()), dirs: map[ID]basisDir{}}
	r.u64() // the next ID
	n := r.u64()
	if r.err != nil || n > uint64(len(r.b)) {
		return nil, errors.New("bad directory count")
	}
	ids := make([]ID, n)
	for i := range ids {
		id, parent, name := ID(r.u64()), r.u32(), r.str()
		r.u64()
		r.u64()
		r.u32()
		r.u8()
		if r.err != nil || (i > 0 && uint64(parent) >= uint64(i)) {
			return nil, fmt.Errorf("bad directory %d", i)
		}
		ids[i] = id
		if i > 0 {
			b.dirs[id] = basisDir{parent: ids[parent], name: name}
		}
	}
	return b, r.err
}

// Track starts noting the objects whose names or inode change (Noted);
// the owner's lock held exclusively.
func (s *Store) Track() { s.noted = map[ID]struct{}{} }

// Untrack stops it.
func (s *Store) Untrack() { s.noted = nil }

// Tracking says whether it is on; the owner's lock held.
func (s *Store) Tracking() bool { return s.noted != nil }

// Noted returns the objects noted since Track or the last call, and
// starts afresh; the owner's lock held exclusively.
func (s *Store) Noted() []ID {
	out := make([]ID, 0, len(s.noted))
	for id := range s.noted {
		out = append(out, id)
	}
	clear(s.noted)
	return out
}

// note notes that object id's record changed, if tracking.
func (s *Store) note(id ID) {
	if s.noted != nil {
		s.noted[id] = struct{}{}
	}
}

// FileRecord is object id's inode number and names (none: it has no
// name, or no record).
func (s *Store) FileRecord(id ID) (uint64, []Name) {
	f, ok := s.files[id]
	if !ok {
		return 0, nil
	}
	return f.ino, append([]Name(nil), f.links()...)
}

// Delta is what changed in the index and the LRU order since a Basis.
type Delta struct {
	NextID ID
	// Dirs are the directories new or moved since, parents first;
	// GoneDirs those removed.
	Dirs     []DirRecord
	GoneDirs []ID
	// Objects are those new or changed since (names, inode, size or
	// place in the LRU order), each with the object before it in that
	// order; Gone those removed.
	Objects []ObjectRecord
	Gone    []ID
}

// DirRecord is a directory as the old daemon has it.
type DirRecord struct {
	ID     ID
	Parent ID
	Name   string
}

// ObjectRecord is an object as the old daemon has it (no Links: it has
// no name, and lives for its open handles alone). After is the object
// before it in the LRU order (First: none).
type ObjectRecord struct {
	ID    ID
	Ino   uint64
	Size  int64
	Links []Name
	After ID
	First bool
}

// DirDelta says which directories are new or moved since b (parents
// first) and which are gone, and the next ID: a Delta but for its
// objects. b then holds the directories as they are now: the next
// DirDelta says what changed since this one. The owner's lock held
// exclusively.
func (s *Store) DirDelta(b *Basis) *Delta {
	d := &Delta{NextID: ID(s.nextID.Load())}
	for _, dd := range s.dirsParentsFirst()[1:] {
		if was, ok := b.dirs[dd.id]; !ok || was.parent != dd.parent.id || was.name != dd.name {
			d.Dirs = append(d.Dirs, DirRecord{ID: dd.id, Parent: dd.parent.id, Name: dd.name})
			b.dirs[dd.id] = basisDir{parent: dd.parent.id, name: dd.name}
		}
	}
	for id := range b.dirs {
		if _, ok := s.dirs[id]; !ok {
			d.GoneDirs = append(d.GoneDirs, id)
			delete(b.dirs, id)
		}
	}
	return d
}

// OpenBorrowed opens a store that another process owns, to build the
// index a handover's successor will serve (LoadHandover, ApplyHandover):
// it takes no lock and writes nothing. TakeLock makes it this process's.
func OpenBorrowed(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: abs, racy: racyWindow, step: cpStep}
	for _, name := range []string{DataName, WritingName} {
		if fi, err := os.Stat(filepath.Join(abs, name)); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%s is not a kvfs store (no %s/)", abs, name)
		}
	}
	if err := s.openLayout(); err != nil {
		s.Close()
		return nil, err
	}
	s.resetIndex(0)
	s.nextID.Store(uint64(RootID))
	return s, nil
}

// TakeLock makes a borrowed store this process's with the store's lock
// its owner passed (see OpenLocked).
func (s *Store) TakeLock(lock *os.File) error {
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("%s: the lock passed is not the store's: %w", s.dir, err)
	}
	s.lock = lock
	// The lock's holder as /proc/locks shows it stays the process that
	// took it first: the file says who holds it now (see lockStore).
	if err := lock.Truncate(0); err == nil {
		fmt.Fprintf(lock, "%d\n", os.Getpid())
	}
	return nil
}

// LoadHandover builds the index from a handover checkpoint's bytes
// alone: the store belongs to the old daemon until ApplyHandover, so
// nothing in it is read or changed. A name two objects claim (the
// capture copies in steps) goes to the later; both changed during the
// capture, so the old daemon noted both, and ApplyHandover puts each
// where it is now.
func (s *Store) LoadHandover(data []byte) ([]Object, int64, error) {
	s.resetIndex(0)
	r, when, err := s.readHeader(data)
	if err != nil {
		return nil, 0, err
	}
	c := &cpLoad{s: s, when: when, unsure: map[ID]bool{}, taken: map[int][]string{}}
	if err := c.parseDirs(r); err != nil {
		return nil, 0, err
	}
	if err := c.parseObjects(r); err != nil {
		return nil, 0, err
	}
	out := make([]Object, 0, len(c.objs))
	for i, o := range c.objs {
		out = append(out, Object{ID: o.id, Size: max(o.size, 0), Atime: c.when - int64(len(c.objs)-i), Links: len(s.files[o.id].links())})
	}
	s.checkpointObjects.Store(int64(len(out)))
	return out, c.when, nil
}

// ApplyHandover brings an index LoadHandover built up to the old
// daemon's, which d describes.
func (s *Store) ApplyHandover(d *Delta) {
	for _, o := range d.Objects {
		s.Forget(o.ID)
	}
	for _, id := range d.Gone {
		s.Forget(id)
	}
	for _, id := range d.GoneDirs {
		if dd, ok := s.dirs[id]; ok && dd.parent != nil {
			s.RemoveDir(dd.parent.id, dd.name, id)
		}
	}
	for _, r := range d.Dirs {
		parent := s.dirs[r.Parent]
		if parent == nil {
			continue // parents come first: only a bad delta
		}
		dd, ok := s.dirs[r.ID]
		if ok {
			if dd.parent.kids.get(dd.name) == r.ID {
				dd.parent.kids.del(dd.name)
			}
			dd.parent, dd.name = parent, r.Name
			s.dirsChanged()
		} else {
			dd = &dir{id: r.ID, parent: parent, name: r.Name, kids: newKids(0)}
			s.dirs[r.ID] = dd
		}
		parent.kids.set(r.Name, r.ID)
	}
	for _, o := range d.Objects {
		if len(o.Links) == 0 {
			continue
		}
		f := &file{ino: o.Ino}
		for _, n := range o.Links {
			if dd := s.dirs[n.Parent]; dd != nil {
				dd.kids.set(n.Name, o.ID)
				f.addLink(n)
			}
		}
		if len(f.links()) > 0 {
			s.files[o.ID] = f
		}
	}
	if uint64(d.NextID) > s.nextID.Load() {
		s.nextID.Store(uint64(d.NextID))
	}
}

// MarshalJSON writes a Delta as the base64 of a compact binary form
// (see the checkpoint's): ten thousand changes are a few hundred
// kilobytes, written and read in the pause in about a millisecond.
func (d *Delta) MarshalJSON() ([]byte, error) {
	w := &cpWriter{b: make([]byte, 0, 64+64*len(d.Objects))}
	w.u64(uint64(d.NextID))
	w.u32(uint32(len(d.Dirs)))
	for _, r := range d.Dirs {
		w.u64(uint64(r.ID))
		w.u64(uint64(r.Parent))
		w.str(r.Name)
	}
	w.ids(d.GoneDirs)
	w.u32(uint32(len(d.Objects)))
	for _, o := range d.Objects {
		w.u64(uint64(o.ID))
		w.u64(o.Ino)
		w.u64(uint64(o.Size))
		w.u64(uint64(o.After))
		w.u8(o.First)
		w.u32(uint32(len(o.Links)))
		for _, n := range o.Links {
			w.u64(uint64(n.Parent))
			w.str(n.Name)
		}
	}
	w.ids(d.Gone)
	return json.Marshal(w.b)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (d *Delta) UnmarshalJSON(data []byte) error {
	var b []byte
	if err := json.Unmarshal(data, &b); err != nil {
		return err
	}
	r := &cpReader{b: b}
	d.NextID = ID(r.u64())
	d.Dirs = make([]DirRecord, r.count())
	for i := range d.Dirs {
		d.Dirs[i] = DirRecord{ID: ID(r.u64()), Parent: ID(r.u64()), Name: r.str()}
	}
	d.GoneDirs = r.ids()
	d.Objects = make([]ObjectRecord, r.count())
	for i := range d.Objects {
		o := &d.Objects[i]
		o.ID, o.Ino, o.Size, o.After, o.First = ID(r.u64()), r.u64(), int64(r.u64()), ID(r.u64()), r.u8() == 1
		if n := r.count(); n > 0 {
			o.Links = make([]Name, n)
			for j := range o.Links {
				o.Links[j] = Name{Parent: ID(r.u64()), Name: r.str()}
			}
		}
	}
	d.Gone = r.ids()
	if r.err != nil || len(r.b) != 0 {
		return errors.New("a bad handover delta")
	}
	return nil
}

func (w *cpWriter) ids(ids []ID) {
	w.u32(uint32(len(ids)))
	for _, id := range ids {
		w.u64(uint64(id))
	}
}

// count reads a count of records, each at least a byte.
func (r *cpReader) count() int {
	n := r.u32()
	if uint64(n) > uint64(len(r.b)) {
		r.err = io.ErrUnexpectedEOF
		return 0
	}
	return int(n)
}

func (r *cpReader) ids() []ID {
	out := make([]ID, r.count())
	for i := range out {
		out[i] = ID(r.u64())
	}
	return out
}
