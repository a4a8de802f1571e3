package blob

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// RemoteName is the store directory's entry that holds the remote tier's
// upload journal (package remote): one small file per object waiting to
// be uploaded. It belongs to the store: the journal names objects of
// this store and is replayed when the store is mounted again.
const RemoteName = "remote"

// CreateDetached makes an empty file id (from NewID) that has no name in
// the namespace yet, only its crash marker under writing/, and opens it
// read-write: the file a fetched object's bytes go into. A crash before
// LinkDetached leaves nothing but the marker, which start-up reclaims;
// ClearWriting removes it.
func (s *Store) CreateDetached(id ID, mode uint32) (*os.File, error) {
	dirfd, wname := s.marker(id)
	fd, err := unix.Openat(dirfd, wname, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, mode)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: markerPath(id), Err: err}
	}
	return os.NewFile(uintptr(fd), markerPath(id)), nil
}

// LinkDetached gives a file made by CreateDetached, stored inode ino
// (0: not known), its name, if the name is free (EEXIST if not). The file
// stays marked under writing/ until ClearWriting: a crash in between
// reclaims it as incomplete.
func (s *Store) LinkDetached(parent ID, name string, id ID, ino uint64) error {
	rel, err := s.FreePath(parent, name)
	if err != nil {
		return err
	}
	if err := s.linkMarkedAt("link", rel, id); err != nil {
		return err
	}
	return s.AddFile(parent, name, id, ino)
}

// LinkDetachedAt is LinkDetached's change of the store, at rel (see
// the phases in phases.go); AddFile commits it.
func (s *Store) LinkDetachedAt(rel string, id ID) error {
	s.changes.Add(1)
	return s.linkMarkedAt("link", rel, id)
}

// NamePath is the path, relative to data/, of name in directory parent.
func (s *Store) NamePath(parent ID, name string) (string, bool) {
	if _, ok := s.dirs[parent]; !ok {
		return "", false
	}
	return s.childPath(parent, name), true
}

// Names lists the names of file id.
func (s *Store) Names(id ID) []Name {
	if f, ok := s.files[id]; ok {
		return append([]Name(nil), f.links()...)
	}
	return nil
}

// Resolve finds the entry a slash-separated path relative to data/
// names.
func (s *Store) Resolve(rel string) (Entry, error) {
	e := Entry{ID: RootID, Dir: true}
	for _, part := range strings.Split(rel, "/") {
		if !e.Dir {
			return Entry{}, ErrNotFound
		}
		var err error
		if e, err = s.Lookup(e.ID, part); err != nil {
			return Entry{}, err
		}
	}
	return e, nil
}
