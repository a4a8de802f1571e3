package blob

import (
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/kvfs/kvfs/ledger"
	"golang.org/x/sys/unix"
)

// Audit is what a walk of data/ found that the index does not agree
// with: the store changed behind kvfs's back.
type Audit struct {
	// Vanished files: every name of theirs is gone from data/. Their
	// names are already dropped from the index.
	Vanished []ledger.ID
	// Sizes of files whose stored size the caller should compare with
	// the ledger, for every indexed file.
	Sizes map[ledger.ID]int64
	// Adopted files appeared in data/ without kvfs; they are now in the
	// index under fresh IDs.
	Adopted []Object
	// Linked files got new names behind kvfs's back, one entry a name.
	Linked []ledger.ID
	// Names dropped from the index for vanished files, for the kernel.
	Dropped []Name
}

// Audit walks data/ without holding the index lock, then settles each
// difference under it after checking it again, so work done through the
// mount meanwhile is never mistaken for a change behind kvfs's back.
func (s *Store) Audit() (Audit, error) {
	onDisk := map[string]unix.Stat_t{}
	root := s.BackingPath(".")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
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
	if err != nil {
		return Audit{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := Audit{Sizes: map[ledger.ID]int64{}}
	known := map[uint64]ledger.ID{} // stored inode -> indexed file
	for id, f := range s.files {
		s.auditFile(id, f, onDisk, known, &a)
	}
	adopted := map[uint64]int{} // inode -> index in a.Adopted
	for rel, st := range onDisk {
		s.adopt(rel, st, known, adopted, &a)
	}
	return a, nil
}

// auditFile checks one indexed file against the walk, removing from
// onDisk the names it accounts for; mu held.
func (s *Store) auditFile(id ledger.ID, f *file, onDisk map[string]unix.Stat_t, known map[uint64]ledger.ID, a *Audit) {
	present := false
	for _, l := range f.links {
		rel := s.childPath(l.Parent, l.Name)
		st, seen := onDisk[rel]
		delete(onDisk, rel)
		if !seen {
			// Created through the mount after the walk passed, perhaps.
			var err error
			if st, err = s.stat(rel); err != nil {
				continue
			}
		}
		present = true
		a.Sizes[id] = st.Size
		known[st.Ino] = id
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

// adopt indexes a file that appeared in data/ behind kvfs's back, if its
// directory is known and it is still there; mu held.
func (s *Store) adopt(rel string, st unix.Stat_t, known map[uint64]ledger.ID, adopted map[uint64]int, a *Audit) {
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
	s.files[id] = &file{links: []Name{{d.id, name}}}
	adopted[st.Ino] = len(a.Adopted)
	a.Adopted = append(a.Adopted, Object{ID: id, Size: st.Size, Atime: max(ts(st.Atim), ts(st.Mtim)), Links: 1})
}

// dirByPath finds an indexed directory by its path under data/; mu held.
func (s *Store) dirByPath(rel string) *dir {
	d := s.dirs[RootID]
	if rel == "." {
		return d
	}
	for _, part := range strings.Split(rel, "/") {
		id, ok := d.kids[part]
		if !ok {
			return nil
		}
		if d = s.dirs[id]; d == nil {
			return nil
		}
	}
	return d
}
