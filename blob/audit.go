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

// Walked is what a walk of data/ found: every regular file by path.
type Walked map[string]unix.Stat_t

// Walk lists data/'s regular files, reading nothing of the index, so the
// owner runs it without its lock; it gives up with ErrAuditStopped as
// soon as stop closes.
func (s *Store) Walk(stop <-chan struct{}) (Walked, error) {
	onDisk := Walked{}
	root := s.BackingPath(".")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		select {
		case <-stop:
			return ErrAuditStopped
		default:
		}
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			rel, _ := filepath.Rel(root, p)
			onDisk[rel] = st
		}
		return nil
	})
	return onDisk, err
}

// Audit brings the index in line with a walk, checking each difference
// again first, so work done through the mount since the walk is never
// mistaken for a change behind kvfs's back. The owner holds its lock;
// onDisk is used up.
func (s *Store) Audit(onDisk Walked) Audit {
	s.changes.Add(1)
	a := Audit{Sizes: map[ID]int64{}}
	known := map[uint64]ID{} // stored inode -> indexed file
	for id, f := range s.files {
		s.auditFile(id, f, onDisk, known, &a)
	}
	for _, d := range s.dirs {
		if d.parent != nil && s.dirs[d.id] == d {
			s.auditDir(d, &a)
		}
	}
	adopted := map[uint64]int{} // inode -> index in a.Adopted
	for rel, st := range onDisk {
		s.adopt(rel, st, known, adopted, &a)
	}
	return a
}

// auditFile checks one indexed file against the walk, removing from
// onDisk the names it accounts for.
func (s *Store) auditFile(id ID, f *file, onDisk Walked, known map[uint64]ID, a *Audit) {
	present := false
	for _, l := range f.links {
		rel := s.childPath(l.Parent, l.Name)
		st, seen := onDisk[rel]
		delete(onDisk, rel)
		if !seen {
			// Created through the mount after the walk passed, perhaps;
			// anything but a regular file there now means it is gone.
			var err error
			if st, err = s.stat(rel); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
				continue
			}
		}
		present = true
		a.Sizes[id] = st.Size
		known[st.Ino] = id
		f.ino = st.Ino // it may have been replaced behind kvfs's back
	}
	if present {
		return
	}
	a.Vanished = append(a.Vanished, id)
	for _, n := range append([]Name(nil), f.links...) {
		s.dropName(id, s.dirs[n.Parent], n.Name)
		a.Dropped = append(a.Dropped, n)
	}
}

// auditDir drops an indexed directory that is no longer a directory in
// data/ (removed, or replaced by a symlink, behind kvfs's back) with
// everything under it, so it is neither listed nor walked into.
func (s *Store) auditDir(d *dir, a *Audit) {
	if st, err := s.stat(s.dirPath(d)); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return
	}
	a.Vanished = append(a.Vanished, s.dropDir(d)...)
	delete(d.parent.kids, d.name)
	a.Dropped = append(a.Dropped, Name{d.parent.id, d.name})
}

// adopt indexes a file that appeared in data/ behind kvfs's back, and
// the directories above it that did too, if it is still there.
func (s *Store) adopt(rel string, st unix.Stat_t, known map[uint64]ID, adopted map[uint64]int, a *Audit) {
	dirRel, name := filepath.Split(rel)
	d := s.dirByPath(filepath.Clean(dirRel))
	if d == nil {
		return
	}
	if _, taken := d.kids[name]; taken {
		return
	}
	if cur, err := s.stat(rel); err != nil || cur.Ino != st.Ino {
		return
	}
	if id, ok := known[st.Ino]; ok {
		// A new name of an indexed file: no new bytes.
		d.kids[name] = id
		s.files[id].links = append(s.files[id].links, Name{d.id, name})
		a.Linked = append(a.Linked, id)
		return
	}
	if i, ok := adopted[st.Ino]; ok {
		o := &a.Adopted[i]
		d.kids[name] = o.ID
		s.files[o.ID].links = append(s.files[o.ID].links, Name{d.id, name})
		o.Links++
		return
	}
	id := s.NewID()
	d.kids[name] = id
	s.files[id] = &file{links: []Name{{d.id, name}}, ino: st.Ino}
	adopted[st.Ino] = len(a.Adopted)
	a.Adopted = append(a.Adopted, Object{ID: id, Size: st.Size, Atime: max(ts(st.Atim), ts(st.Mtim)), Links: 1})
}

// dirByPath finds a directory by its path under data/, indexing those on
// the way that were made behind kvfs's back (their files would otherwise
// hold bytes no charge covers until a restart).
func (s *Store) dirByPath(rel string) *dir {
	d := s.dirs[RootID]
	if rel == "." {
		return d
	}
	parts := strings.Split(rel, "/")
	for i, part := range parts {
		id, ok := d.kids[part]
		if !ok {
			st, err := s.stat(strings.Join(parts[:i+1], "/"))
			if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return nil
			}
			id = s.NewID()
			d.kids[part] = id
			s.dirs[id] = &dir{id: id, parent: d, name: part, kids: map[string]ID{}}
		}
		if d = s.dirs[id]; d == nil {
			return nil
		}
	}
	return d
}
