package blob

import (
	"errors"
	"path/filepath"
	"slices"
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

// ErrAuditStopped is WalkDirs' answer when stop closed mid-walk.
var ErrAuditStopped = errors.New("audit stopped")

// WalkedFile is what a walk keeps of a regular file: its inode and size
// (a whole stat is 144 bytes), all that the comparison with the index
// reads; what it settles is stat'ed again.
type WalkedFile struct {
	Ino  uint64
	Size int64
}

// WalkedName is an entry a walk found in a directory: a regular file, or
// a directory (Dir).
type WalkedName struct {
	Name string
	Dir  bool
	WalkedFile
}

// walkBatch is the most entries of one directory a walk hands over at a
// time.
const walkBatch = 4096

// WalkDirs lists data/ one directory at a time, each before those
// beneath it, reading nothing of the index, so that its owner runs it
// without its lock. A directory's regular files (with their inode and
// size) and subdirectories go to batch, at most walkBatch at a time, then
// the directory's end to done (also for a directory that could not be
// listed: the index's names in it are then all unseen). What the walk
// holds is one batch and the paths of the directories still to list,
// however large the store or a directory: at ten million objects, a walk
// of the whole store into memory held 1.5 GB. Directories are opened
// beneath data/ without following symlinks. It gives up with
// ErrAuditStopped as soon as stop closes.
func (s *Store) WalkDirs(stop <-chan struct{}, batch func(rel string, names []WalkedName), done func(rel string)) error {
	todo := []string{"."}
	for len(todo) > 0 {
		rel := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		subs, err := s.walkDir(stop, rel, batch)
		if err != nil {
			return err
		}
		done(rel)
		todo = append(todo, subs...)
	}
	return nil
}

// walkDir lists one directory for WalkDirs, and returns the paths of its
// subdirectories.
func (s *Store) walkDir(stop <-chan struct{}, rel string, batch func(string, []WalkedName)) (subs []string, err error) {
	f, err := s.openListing(rel)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	fd := int(f.Fd())
	for {
		select {
		case <-stop:
			return nil, ErrAuditStopped
		default:
		}
		ents, err := f.ReadDir(walkBatch)
		names := make([]WalkedName, 0, len(ents))
		for _, e := range ents {
			switch {
			case e.IsDir():
				names = append(names, WalkedName{Name: e.Name(), Dir: true})
				subs = append(subs, filepath.Join(rel, e.Name()))
			case e.Type().IsRegular():
				var st unix.Stat_t
				if statAt(fd, e.Name(), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
					names = append(names, WalkedName{Name: e.Name(), WalkedFile: WalkedFile{st.Ino, st.Size}})
				}
			}
		}
		if len(names) > 0 {
			batch(rel, names)
		}
		if err != nil { // io.EOF at the end
			return subs, nil
		}
	}
}

// Seen is what a walk saw of one directory, for AuditMissing: a hash of
// each name, 8 bytes a name however long (two names of one 62-bit hash,
// one seen and one gone, would hide the gone one from this audit).
type Seen struct {
	files, dirs []uint64
	sorted      bool
}

func (v *Seen) add(n WalkedName) {
	if n.Dir {
		v.dirs = append(v.dirs, hashName(n.Name))
	} else {
		v.files = append(v.files, hashName(n.Name))
	}
	v.sorted = false
}

func (v *Seen) has(name string, dir bool) bool {
	if !v.sorted {
		slices.Sort(v.files)
		slices.Sort(v.dirs)
		v.sorted = true
	}
	in := v.files
	if dir {
		in = v.dirs
	}
	_, ok := slices.BinarySearch(in, hashName(name))
	return ok
}

// Reset empties v for the next directory, keeping its memory.
func (v *Seen) Reset() { v.files, v.dirs = v.files[:0], v.dirs[:0] }

// An audit in phases, so that its owner makes no syscall under its lock
// held exclusively: AuditNames and AuditMissing compare what a walk
// found in a directory with the index (memory only, the owner's lock
// shared); each difference is then checked again in the store
// (Recheck..., with the lock shared at most and the name's directory
// kept unchanged by the owner) and committed (Apply..., the lock
// exclusive, memory only). Work done through the mount since the walk is
// never mistaken for a change behind kvfs's back.

// AuditPlan is what a walk and the index disagree on, to check again.
type AuditPlan struct {
	// Sizes: the walked size of indexed files the walk saw.
	Sizes map[ID]int64
	// Inos: the walked stored inode of indexed files the walk saw whose
	// inode in the index differs, and InoAt where it saw it.
	Inos  map[ID]uint64
	InoAt map[ID]WalkedAt
	// Missing: indexed names of files the walk did not see.
	Missing []Name
	// MissingDirs: indexed directories the walk did not see.
	MissingDirs []ID
	// Unknown: walked files the index has no name for.
	Unknown map[string]WalkedFile
}

// WalkedAt is a walked file with its name and path.
type WalkedAt struct {
	Name
	Path string
	WalkedFile
}

// NewAuditPlan is an empty plan.
func NewAuditPlan() AuditPlan {
	return AuditPlan{Sizes: map[ID]int64{}, Inos: map[ID]uint64{}, InoAt: map[ID]WalkedAt{}, Unknown: map[string]WalkedFile{}}
}

// AuditNames compares a batch of what a walk found in the directory at
// rel with the index, into p, and notes the names in seen; the owner's
// lock held (shared is enough).
func (s *Store) AuditNames(rel string, names []WalkedName, seen *Seen, p *AuditPlan) {
	d := s.dirByPathIndexed(rel)
	for _, n := range names {
		seen.add(n)
		if n.Dir {
			continue
		}
		if d != nil {
			if id, ok := d.kids.lookup(n.Name); ok {
				if f := s.files[id]; f != nil {
					p.Sizes[id] = n.Size
					if f.ino != n.Ino {
						p.Inos[id] = n.Ino
						p.InoAt[id] = WalkedAt{Name{d.id, n.Name}, filepath.Join(rel, n.Name), n.WalkedFile}
					}
					continue
				}
			}
		}
		p.Unknown[filepath.Join(rel, n.Name)] = n.WalkedFile
	}
}

// auditPage is how many of a directory's indexed names AuditMissing
// reads at a time.
const auditPage = 1024

// AuditMissing adds to p the names the index holds in the directory at
// rel that the walk did not see (seen), from those after the listing
// cookie after: about a page of them; more says whether there are more,
// from next on. The owner's lock held (shared is enough).
func (s *Store) AuditMissing(rel string, seen *Seen, after uint64, p *AuditPlan) (next uint64, more bool) {
	d := s.dirByPathIndexed(rel)
	if d == nil {
		return 0, false
	}
	page, more := d.kids.page(nil, after, auditPage)
	for _, e := range page {
		if _, isDir := s.dirs[e.id]; isDir {
			if !seen.has(e.name, true) {
				p.MissingDirs = append(p.MissingDirs, e.id)
			}
		} else if !seen.has(e.name, false) {
			p.Missing = append(p.Missing, Name{d.id, e.name})
		}
		next = e.cookie
	}
	return next, more
}

// IndexedInos maps those of inos that indexed files are stored at to the
// files; the owner's lock held (shared is enough). It reads every file's
// record: an audit calls it once, for the files it found that the index
// has no name for.
func (s *Store) IndexedInos(inos map[uint64]bool) map[uint64]ID {
	known := map[uint64]ID{}
	if len(inos) == 0 {
		return known
	}
	for id, f := range s.files {
		if inos[f.ino] {
			known[f.ino] = id
		}
	}
	return known
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

// Audit brings the index in line with the store, each phase in a row,
// for owners that serialise everything.
func (s *Store) Audit(stop <-chan struct{}) (Audit, error) {
	s.changes.Add(1)
	p := NewAuditPlan()
	var seen Seen
	err := s.WalkDirs(stop, func(rel string, names []WalkedName) {
		s.AuditNames(rel, names, &seen, &p)
	}, func(rel string) {
		for after, more := uint64(0), true; more; {
			after, more = s.AuditMissing(rel, &seen, after, &p)
		}
		seen.Reset()
	})
	if err != nil {
		return Audit{}, err
	}
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
	inos := map[uint64]bool{}
	for _, st := range p.Unknown {
		inos[st.Ino] = true
	}
	known := s.IndexedInos(inos)
	adopted := map[uint64]int{}
	for rel, st := range p.Unknown {
		if f, ok := s.RecheckUnknown(rel, st); ok {
			s.ApplyFound(f, known, adopted, &a)
		}
	}
	return a, nil
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
