package blob

import (
	"os"

	"golang.org/x/sys/unix"
)

// A Version is what a path read from the index rests on: the names of
// the directory that holds it, and the tree of directories above. It is
// taken with the owner's lock held (shared at least) and checked without
// it, so that the owner makes a syscall on the path with no lock held and
// trusts its answer only if no change of names was committed in that
// directory, and no directory moved or went, since (Current). A change is
// made in the store before it is committed to the index (phases.go), or
// after for a name the index gave up first; either way a syscall that met
// it ran while the index still said what the Version read, or it fails
// Current, just as a syscall made under the owner's lock would have met
// the first kind and never the second.
type Version struct {
	names     *kids // nil for a directory's own path
	gen, tree uint64
}

// Current says whether the index is still where v was read; no lock
// needed.
func (s *Store) Current(v Version) bool {
	return s.tree.Load() == v.tree && (v.names == nil || v.names.gen.Load() == v.gen)
}

// dirsChanged notes a change of the directories' tree; the owner's lock
// held exclusively.
func (s *Store) dirsChanged() { s.tree.Add(1) }

// PathVersion is Path (id's first name relative to data/) and what it
// rests on.
func (s *Store) PathVersion(id ID) (rel string, v Version, ok bool) {
	v.tree = s.tree.Load()
	if d, isDir := s.dirs[id]; isDir {
		return s.dirPath(d), v, true
	}
	f, found := s.files[id]
	if !found || len(f.links()) == 0 {
		return "", v, false
	}
	first := f.links()[0]
	d := s.dirs[first.Parent]
	v.names, v.gen = d.kids, d.kids.gen.Load()
	return s.childPath(first.Parent, first.Name), v, true
}

// StatKind reads the attributes of the stored file, or directory (dir),
// at rel, relative to data/: Stat's syscall, made without the index. A
// name that holds something of another type is reported gone.
func (s *Store) StatKind(rel string, dir bool) (unix.Stat_t, error) {
	want := uint32(unix.S_IFREG)
	if dir {
		want = unix.S_IFDIR
	}
	st, err := s.stat(rel)
	if err == nil && st.Mode&unix.S_IFMT != want {
		return st, &os.PathError{Op: "stat", Path: rel, Err: unix.ENOENT}
	}
	return st, err
}

// SyncPath makes the entries of the stored directory rel durable.
func (s *Store) SyncPath(rel string) error {
	f, err := s.openBeneath(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// LookupVersion is Lookup and what its answer rests on.
func (s *Store) LookupVersion(parent ID, name string) (Entry, Version, error) {
	v := Version{tree: s.tree.Load()}
	d, ok := s.dirs[parent]
	if !ok {
		return Entry{}, v, ErrNotFound
	}
	v.names, v.gen = d.kids, d.kids.gen.Load()
	id, ok := d.kids.lookup(name)
	if !ok {
		return Entry{}, v, ErrNotFound
	}
	return s.entry(id), v, nil
}

// Dir says whether v is a directory's own path (PathVersion).
func (v Version) Dir() bool { return v.names == nil }
