package blob

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Audit is what a walk of data/ found that the index does not agree
// with: the store changed behind kvfs's back.
type Audit struct {
	// Vanished files: every name of theirs is gone from data/. Their
	// names are already dropped from the index.
	Vanished []ID
	// Sizes of files whose stored size the caller should compare with
	// the ledger, for every indexed file.
	Sizes map[ID]int64
	// Adopted files appeared in data/ without kvfs; they are now in the
	// index under fresh IDs.
	Adopted []Object
	// Linked files got new names behind kvfs's back, one entry a name.
	Linked []ID
	// Names dropped from the index for vanished files and directories,
	// for the kernel.
	Dropped []Name
}

// ErrAuditStopped is Walk's answer when stop closed mid-walk.
var ErrAuditStopped = errors.New("audit stopped")

// Walked is what a walk of data/ found: every regular file and
// directory by path.
type Walked struct {
	Files map[string]WalkedFile
	Dirs  map[string]bool
}

// WalkedFile is what a walk keeps of a regular file: its inode and size
// (a whole stat is 144 bytes, ten million of them 1.4 GB), all that the
// comparison with the index reads; what it settles is stat'ed again.
type WalkedFile struct {
	Ino  uint64
	Size int64
}

// Walk lists data/'s regular files and directories, reading nothing of
// the index, so the owner runs it without its lock; it gives up with
// ErrAuditStopped as soon as stop closes.
func (s *Store) Walk(stop <-chan struct{}) (Walked, error) {
	w := Walked{Files: map[string]WalkedFile{}, Dirs: map[string]bool{}}
	root := s.BackingPath(".")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		select {
		case <-stop:
			return ErrAuditStopped
		default:
		}
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			w.Dirs[rel] = true
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			w.Files[rel] = WalkedFile{st.Ino, st.Size}
		}
		return nil
	})
	return w, err
}

// An audit in phases, so that its owner makes no syscall under its lock
// held exclusively: AuditPlan compares a walk with the index (memory
// only, the owner's lock shared); each difference is then checked again
// in the store (Recheck..., with the lock shared at most and the name's
// directory kept unchanged by the owner) and committed (Apply..., the
// lock exclusive, memory only). Work done through the mount since the
// walk is never mistaken for a change behind kvfs's back.

// AuditPlan is what a walk and the index disagree on, to check again.
type AuditPlan struct {
	// Sizes: the walked size of every indexed file the walk saw.
	Sizes map[ID]int64
	// Inos: the walked stored inode of every indexed file the walk saw.
	Inos map[ID]uint64
	// Missing: indexed names of files the walk did not see.
	Missing []Name
	// MissingDirs: indexed directories the walk did not see.
	MissingDirs []ID
	// Unknown: walked files the index has no name for.
	Unknown map[string]WalkedFile
}

// AuditPlan compares a walk with the index; the owner's lock held
// (shared is enough); w is used up.
func (s *Store) AuditPlan(w Walked) AuditPlan {
	p := AuditPlan{Sizes: map[ID]int64{}, Inos: map[ID]uint64{}}
	for id, f := range s.files {
		for _, l := range f.links() {
			rel := s.childPath(l.Parent, l.Name)
			st, seen := w.Files[rel]
			delete(w.Files, rel)
			if !seen {
				p.Missing = append(p.Missing, l)
				continue
			}
			p.Sizes[id], p.Inos[id] = st.Size, st.Ino
		}
	}
	for _, d := range s.dirs {
		if d.parent != nil && !w.Dirs[s.dirPath(d)] {
			p.MissingDirs = append(p.MissingDirs, d.id)
		}
	}
	p.Unknown = w.Files
	return p
}

// ApplyInos records the walked inodes of indexed files (a file may have
// been replaced behind kvfs's back); the owner's lock held.
func (s *Store) ApplyInos(inos map[ID]uint64) {
	for id, ino := range inos {
		if f, ok := s.files[id]; ok && f.ino != ino {
			f.ino = ino
			s.note(id)
		}
	}
}

// RecheckName reads what the store holds at n now: ok if a regular
// file. The owner's lock held (shared is enough).
func (s *Store) RecheckName(n Name) (st unix.Stat_t, rel string, ok bool) {
	d, ok := s.dirs[n.Parent]
	if !ok {
		return st, "", false
	}
	if _, ok := d.kids.lookup(n.Name); !ok {
		return st, "", false
	}
	rel = s.childPath(n.Parent, n.Name)
	st, err := s.stat(rel)
	return st, rel, err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// ApplyVanishedName drops n, which the store no longer holds, from the
// index, if it still names id; when id has no name left it vanished.
// The owner's lock held.
func (s *Store) ApplyVanishedName(n Name, id ID, a *Audit) {
	d, ok := s.dirs[n.Parent]
	if !ok || d.kids.get(n.Name) != id || s.files[id] == nil {
		return
	}
	s.dropName(id, d, n.Name)
	a.Dropped = append(a.Dropped, n)
	if _, ok := s.files[id]; !ok {
		a.Vanished = append(a.Vanished, id)
	}
}

// Kid is what name in parent refers to in the index (0: nothing).
func (s *Store) Kid(parent ID, name string) ID {
	if d, ok := s.dirs[parent]; ok {
		return d.kids.get(name)
	}
	return 0
}

// DirName is a directory's name in its parent (false: the root, or not
// indexed).
func (s *Store) DirName(id ID) (Name, bool) {
	d, ok := s.dirs[id]
	if !ok || d.parent == nil {
		return Name{}, false
	}
	return Name{d.parent.id, d.name}, true
}

// RecheckDir says whether the store still holds directory id. The
// owner's lock held (shared is enough).
func (s *Store) RecheckDir(id ID) bool {
	d, ok := s.dirs[id]
	if !ok {
		return true
	}
	st, err := s.stat(s.dirPath(d))
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// ApplyVanishedDir drops directory id, which the store no longer holds
// as one, with everything under it. The owner's lock held.
func (s *Store) ApplyVanishedDir(id ID, a *Audit) {
	d, ok := s.dirs[id]
	if !ok || d.parent == nil {
		return
	}
	a.Vanished = append(a.Vanished, s.dropDir(d)...)
	d.parent.kids.del(d.name)
	a.Dropped = append(a.Dropped, Name{d.parent.id, d.name})
}

// Found is a file found in data/ that the index has no name for,
// checked again: where it is, and what it is now.
type Found struct {
	Rel string
	St  unix.Stat_t
	// Dirs: the directories on its path, from data/ down, that the index
	// lacks (made behind kvfs's back too), checked to be directories.
	Dirs []string
}

// RecheckUnknown checks a walked file the index had no name for again:
// still a regular file with the walked inode, under directories that are
// directories. The owner's lock held (shared is enough).
func (s *Store) RecheckUnknown(rel string, walked WalkedFile) (Found, bool) {
	f := Found{Rel: rel}
	dirRel, _ := filepath.Split(rel)
	if dirRel = filepath.Clean(dirRel); dirRel != "." {
		d := s.dirs[RootID]
		parts := strings.Split(dirRel, "/")
		for i, part := range parts {
			if d != nil {
				if id, ok := d.kids.lookup(part); ok {
					if d = s.dirs[id]; d == nil {
						return f, false // a file there in the index
					}
					continue
				}
				d = nil
			}
			p := strings.Join(parts[:i+1], "/")
			if st, err := s.stat(p); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return f, false
			}
			f.Dirs = append(f.Dirs, p)
		}
	}
	cur, err := s.stat(rel)
	if err != nil || cur.Ino != walked.Ino || cur.Mode&unix.S_IFMT != unix.S_IFREG {
		return f, false
	}
	f.St = cur
	return f, true
}

// IndexedAbove is the deepest indexed directory on rel's path: the one
// whose changes a file found at rel is ordered with.
func (s *Store) IndexedAbove(rel string) ID {
	d := s.dirs[RootID]
	dirRel, _ := filepath.Split(rel)
	if dirRel = filepath.Clean(dirRel); dirRel == "." {
		return d.id
	}
	for _, part := range strings.Split(dirRel, "/") {
		sub, ok := s.dirs[d.kids.get(part)]
		if !ok {
			break
		}
		d = sub
	}
	return d.id
}

// ApplyFound indexes a file found behind kvfs's back, and the
// directories above it that were too, unless the index named it since;
// known maps stored inodes to indexed files (a new name of one of them
// adds no bytes), adopted those adopted by this audit (nil: known gets
// them, for callers that commit each adoption at once). The owner's lock
// held.
func (s *Store) ApplyFound(f Found, known map[uint64]ID, adopted map[uint64]int, a *Audit) {
	for _, p := range f.Dirs {
		s.indexDir(p)
	}
	dirRel, name := filepath.Split(f.Rel)
	d := s.dirByPathIndexed(filepath.Clean(dirRel))
	if d == nil {
		return
	}
	if _, taken := d.kids.lookup(name); taken {
		return
	}
	st := f.St
	if id, ok := known[st.Ino]; ok && s.files[id] != nil {
		// A new name of an indexed file: no new bytes.
		d.kids.set(name, id)
		s.files[id].addLink(Name{d.id, name})
		s.note(id)
		a.Linked = append(a.Linked, id)
		return
	}
	if i, ok := adopted[st.Ino]; ok && s.files[a.Adopted[i].ID] != nil {
		o := &a.Adopted[i]
		d.kids.set(name, o.ID)
		s.files[o.ID].addLink(Name{d.id, name})
		s.note(o.ID)
		o.Links++
		return
	}
	id := s.NewID()
	d.kids.set(name, id)
	s.files[id] = newFile(st.Ino, Name{d.id, name})
	s.note(id)
	if adopted == nil {
		// Committed one by one: a later name of this inode is a link.
		known[st.Ino] = id
	} else {
		adopted[st.Ino] = len(a.Adopted)
	}
	a.Adopted = append(a.Adopted, Object{ID: id, Size: st.Size, Atime: max(ts(st.Atim), ts(st.Mtim)), Links: 1})
}

// Audit brings the index in line with a walk, each phase in a row, for
// owners that serialise everything; onDisk is used up.
func (s *Store) Audit(onDisk Walked) Audit {
	s.changes.Add(1)
	p := s.AuditPlan(onDisk)
	a := Audit{Sizes: p.Sizes}
	s.ApplyInos(p.Inos)
	for _, n := range p.Missing {
		id := s.Kid(n.Parent, n.Name)
		if st, _, ok := s.RecheckName(n); ok {
			a.Sizes[id] = st.Size
			continue
		}
		s.ApplyVanishedName(n, id, &a)
	}
	for _, id := range p.MissingDirs {
		if !s.RecheckDir(id) {
			s.ApplyVanishedDir(id, &a)
		}
	}
	known := map[uint64]ID{}
	for id, ino := range p.Inos {
		known[ino] = id
	}
	for _, n := range p.Missing {
		if st, _, ok := s.RecheckName(n); ok {
			known[st.Ino] = s.Kid(n.Parent, n.Name)
		}
	}
	adopted := map[uint64]int{}
	for rel, st := range p.Unknown {
		if f, ok := s.RecheckUnknown(rel, st); ok {
			s.ApplyFound(f, known, adopted, &a)
		}
	}
	return a
}

// dirByPathIndexed finds an indexed directory by its path under data/.
func (s *Store) dirByPathIndexed(rel string) *dir {
	d := s.dirs[RootID]
	if rel == "." {
		return d
	}
	for _, part := range strings.Split(rel, "/") {
		id, ok := d.kids.lookup(part)
		if !ok {
			return nil
		}
		if d = s.dirs[id]; d == nil {
			return nil
		}
	}
	return d
}

// indexDir indexes the directory at rel, made behind kvfs's back, if
// its parent is indexed and its name free; the caller checked it is a
// directory in the store.
func (s *Store) indexDir(rel string) {
	parentRel, name := filepath.Split(rel)
	d := s.dirByPathIndexed(filepath.Clean(parentRel))
	if d == nil {
		return
	}
	if _, taken := d.kids.lookup(name); taken {
		return
	}
	id := s.NewID()
	d.kids.set(name, id)
	s.dirs[id] = &dir{id: id, parent: d, name: name, kids: newKids(0)}
}
