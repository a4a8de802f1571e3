package blob

import (
	"os"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// dir is a directory of the namespace. Directories are few, so paths are
// built by walking parents rather than stored.
type dir struct {
	id     ID
	parent *dir
	name   string
	kids   map[string]ID
}

// file is an inode of the namespace: its names, usually one, and the
// stored inode's number (0: not known), which the checkpoint records so
// that a start can recognise the file from a directory listing alone.
type file struct {
	links []Name
	ino   uint64
}

// Name is one directory entry: a name in a parent directory.
type Name struct {
	Parent ID
	Name   string
}

// Entry is what a name refers to.
type Entry struct {
	ID  ID
	Dir bool
}

// DirEntry is one entry of a directory listing.
type DirEntry struct {
	Name string
	Entry
}

func (s *Store) resetIndex(hint int) {
	s.dirs = map[ID]*dir{RootID: {id: RootID, kids: map[string]ID{}}}
	s.files = make(map[ID]*file, hint)
}

// Lookup resolves a name in a directory.
func (s *Store) Lookup(parent ID, name string) (Entry, error) {
	_, id, err := s.child(parent, name)
	if err != nil {
		return Entry{}, err
	}
	return s.entry(id), nil
}

// child finds a name in a directory, and the directory.
func (s *Store) child(parent ID, name string) (*dir, ID, error) {
	d, ok := s.dirs[parent]
	if !ok {
		return nil, 0, ErrNotFound
	}
	id, ok := d.kids[name]
	if !ok {
		return nil, 0, ErrNotFound
	}
	return d, id, nil
}

// entry describes id.
func (s *Store) entry(id ID) Entry {
	_, isDir := s.dirs[id]
	return Entry{ID: id, Dir: isDir}
}

// Path is a name of id relative to data/: the first name of a file.
func (s *Store) Path(id ID) (string, bool) {
	if d, ok := s.dirs[id]; ok {
		return s.dirPath(d), true
	}
	f, ok := s.files[id]
	if !ok || len(f.links) == 0 {
		return "", false
	}
	return s.childPath(f.links[0].Parent, f.links[0].Name), true
}

func (s *Store) dirPath(d *dir) string {
	if d.parent == nil {
		return "."
	}
	var parts []string
	for ; d.parent != nil; d = d.parent {
		parts = append(parts, d.name)
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, "/")
}

func (s *Store) childPath(parent ID, name string) string {
	d := s.dirs[parent]
	if d.parent == nil {
		return name
	}
	return s.dirPath(d) + "/" + name
}

// Links reports how many names id has.
func (s *Store) Links(id ID) int {
	if f, ok := s.files[id]; ok {
		return len(f.links)
	}
	return 0
}

// Stat reads id's attributes from the store. A name that now holds
// something of another type (a symlink planted in place of a file) is
// reported gone, so kvfs neither serves nor charges it.
func (s *Store) Stat(id ID) (unix.Stat_t, error) {
	rel, ok := s.Path(id)
	_, isDir := s.dirs[id]
	if !ok {
		return unix.Stat_t{}, ErrNotFound
	}
	want := uint32(unix.S_IFREG)
	if isDir {
		want = unix.S_IFDIR
	}
	st, err := s.stat(rel)
	if err == nil && st.Mode&unix.S_IFMT != want {
		return st, &os.PathError{Op: "stat", Path: rel, Err: unix.ENOENT}
	}
	return st, err
}

// Open opens the stored bytes of an existing file.
func (s *Store) Open(id ID, flags int) (*os.File, error) {
	rel, ok := s.Path(id)
	if !ok {
		return nil, ErrNotFound
	}
	return s.openBeneath(rel, flags, 0)
}

// List returns a directory's entries in name order, so that concurrent
// readers of one directory see one stable sequence.
func (s *Store) List(parent ID) ([]DirEntry, error) {
	d, ok := s.dirs[parent]
	if !ok {
		return nil, ErrNotFound
	}
	out := make([]DirEntry, 0, len(d.kids))
	for name, id := range d.kids {
		out = append(out, DirEntry{Name: name, Entry: s.entry(id)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Owner is who a new inode belongs to; negative fields leave the
// daemon's own.
type Owner struct{ UID, GID int }

// Create makes a new empty file id (from NewID), exclusively, and opens
// it read-write. The file is born under writing/ and only then linked to
// its name, so a crash at any point leaves it marked incomplete until its
// writer finishes (ClearWriting).
func (s *Store) Create(parent ID, name string, id ID, mode uint32, who Owner) (*os.File, error) {
	s.changes.Add(1)
	d, err := s.freeName(parent, name)
	if err != nil {
		return nil, err
	}
	f, err := s.CreateDetached(id, mode)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	unix.Fstat(int(f.Fd()), &st) // for the inode number only; 0 if it fails
	if who.UID >= 0 {
		f.Chown(who.UID, who.GID)
	}
	if err := s.linkMarked("create", d, name, id, st.Ino); err != nil {
		unix.Unlinkat(int(s.writing.Fd()), writingName(id), 0)
		f.Close()
		return nil, err
	}
	return f, nil
}

// linkMarked gives the file marked under writing/ as id its name in d,
// and indexes it with its stored inode's number (0: not known); op
// names the failure.
func (s *Store) linkMarked(op string, d *dir, name string, id ID, ino uint64) error {
	wfd, wname := int(s.writing.Fd()), writingName(id)
	rel := s.childPath(d.id, name)
	err := s.at(rel, func(dirfd int, name string) error { return unix.Linkat(wfd, wname, dirfd, name, 0) })
	if err != nil {
		return &os.PathError{Op: op, Path: rel, Err: underlying(err)}
	}
	d.kids[name] = id
	s.files[id] = &file{links: []Name{{d.id, name}}, ino: ino}
	return nil
}

// freeName checks that name is free in parent.
func (s *Store) freeName(parent ID, name string) (*dir, error) {
	d, ok := s.dirs[parent]
	if !ok {
		return nil, ErrNotFound
	}
	if _, taken := d.kids[name]; taken {
		return nil, unix.EEXIST
	}
	return d, nil
}

// Mkdir makes a new directory.
func (s *Store) Mkdir(parent ID, name string, mode uint32, who Owner) (ID, error) {
	s.changes.Add(1)
	d, err := s.freeName(parent, name)
	if err != nil {
		return 0, err
	}
	rel := s.childPath(parent, name)
	err = s.at(rel, func(dirfd int, name string) error {
		if err := unix.Mkdirat(dirfd, name, mode); err != nil {
			return err
		}
		if who.UID >= 0 {
			unix.Fchownat(dirfd, name, who.UID, who.GID, unix.AT_SYMLINK_NOFOLLOW)
		}
		return nil
	})
	if err != nil {
		return 0, &os.PathError{Op: "mkdir", Path: rel, Err: underlying(err)}
	}
	id := s.NewID()
	d.kids[name] = id
	s.dirs[id] = &dir{id: id, parent: d, name: name, kids: map[string]ID{}}
	return id, nil
}

// Link gives file id another name.
func (s *Store) Link(id, parent ID, name string) error {
	s.changes.Add(1)
	f, ok := s.files[id]
	if !ok || len(f.links) == 0 {
		return ErrNotFound
	}
	d, err := s.freeName(parent, name)
	if err != nil {
		return err
	}
	old, rel := s.childPath(f.links[0].Parent, f.links[0].Name), s.childPath(parent, name)
	err = s.at2(old, rel, func(da int, na string, db int, nb string) error {
		return unix.Linkat(da, na, db, nb, 0)
	})
	if err != nil {
		return &os.PathError{Op: "link", Path: rel, Err: underlying(err)}
	}
	d.kids[name] = id
	f.links = append(f.links, Name{parent, name})
	return nil
}

// Unlink removes a file's name and returns the file's ID. A name whose
// stored file already vanished is still removed from the index.
func (s *Store) Unlink(parent ID, name string) (ID, error) {
	s.changes.Add(1)
	d, id, err := s.child(parent, name)
	if err != nil {
		return 0, err
	}
	if _, isDir := s.dirs[id]; isDir {
		return 0, unix.EISDIR
	}
	rel := s.childPath(parent, name)
	if err := s.unlinkAt(rel, 0); err != nil {
		return 0, &os.PathError{Op: "unlink", Path: rel, Err: err}
	}
	s.dropName(id, d, name)
	return id, nil
}

// dropName removes one name of file id from the index.
func (s *Store) dropName(id ID, d *dir, name string) {
	delete(d.kids, name)
	f := s.files[id]
	for i, l := range f.links {
		if l.Parent == d.id && l.Name == name {
			f.links = append(f.links[:i], f.links[i+1:]...)
			break
		}
	}
	if len(f.links) == 0 {
		delete(s.files, id)
	}
}

// dropDir removes d's subtree from the index only, and returns the
// files that had no name left outside it.
func (s *Store) dropDir(d *dir) (vanished []ID) {
	for name, id := range d.kids {
		if sub, ok := s.dirs[id]; ok {
			vanished = append(vanished, s.dropDir(sub)...)
			continue
		}
		s.dropName(id, d, name)
		if _, ok := s.files[id]; !ok {
			vanished = append(vanished, id)
		}
	}
	delete(s.dirs, d.id)
	return vanished
}

// unlinkAt removes a stored name; one already gone is not an error: the
// index is what callers change, and it must follow.
func (s *Store) unlinkAt(rel string, flags int) error {
	err := underlying(s.at(rel, func(dirfd int, name string) error {
		return unix.Unlinkat(dirfd, name, flags)
	}))
	if err == unix.ENOENT {
		return nil
	}
	return err
}

// Rmdir removes an empty directory.
func (s *Store) Rmdir(parent ID, name string) (ID, error) {
	s.changes.Add(1)
	d, id, err := s.child(parent, name)
	if err != nil {
		return 0, err
	}
	child, isDir := s.dirs[id]
	if !isDir {
		return 0, unix.ENOTDIR
	}
	if len(child.kids) > 0 {
		return 0, unix.ENOTEMPTY
	}
	rel := s.childPath(parent, name)
	if err := s.unlinkAt(rel, unix.AT_REMOVEDIR); err != nil {
		return 0, &os.PathError{Op: "rmdir", Path: rel, Err: err}
	}
	delete(d.kids, name)
	delete(s.dirs, id)
	return id, nil
}

// Drop removes every name of file id, from the store and the index, and
// returns them so the caller can tell the kernel.
func (s *Store) Drop(id ID) []Name {
	s.changes.Add(1)
	f, ok := s.files[id]
	if !ok {
		return nil
	}
	names := append([]Name(nil), f.links...)
	for _, n := range names {
		s.unlinkAt(s.childPath(n.Parent, n.Name), 0)
		s.dropName(id, s.dirs[n.Parent], n.Name)
	}
	return names
}
