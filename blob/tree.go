package blob

import (
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// dir is a directory of the namespace. Directories are few, so paths are
// built by walking parents rather than stored.
type dir struct {
	id     ID
	parent *dir
	name   string
	kids   *kids
	// crowded: reported filling its file system's directory index
	// (crowded.go).
	crowded atomic.Bool
}

// file is an inode of the namespace: its names, usually one, and the
// stored inode's number (0: not known), which the checkpoint records so
// that a start can recognise the file from a directory listing alone.
type file struct {
	ino uint64
	// one is its name when it has one (Parent 0: none); more, when it
	// has several, holds them all. One name is the rule: a hard link
	// lives only between an fs_native store's link and its unlink, and
	// a slice of its own would cost each of millions of files 24 bytes
	// and a heap object.
	one  [1]Name
	more *[]Name
}

// links is f's names. For one name it is a view of f.one: writing an
// element changes f; setLinks stores a changed length.
func (f *file) links() []Name {
	switch {
	case f.more != nil:
		return *f.more
	case f.one[0].Parent == 0:
		return nil
	}
	return f.one[:]
}

// setLinks sets f's names to ns, which it may keep.
func (f *file) setLinks(ns []Name) {
	switch len(ns) {
	case 0:
		f.one[0], f.more = Name{}, nil
	case 1:
		f.one[0], f.more = ns[0], nil // ns may be f.one's view
	default:
		f.one[0], f.more = Name{}, &ns
	}
}

// addLink adds a name to f.
func (f *file) addLink(n Name) { f.setLinks(append(f.links(), n)) }

// newFile is a file record with one name.
func newFile(ino uint64, n Name) *file { return &file{ino: ino, one: [1]Name{n}} }

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
	// Cookie is where a listing resumes after this entry (ListPage):
	// nonzero, below 1<<62+1, equal only for names of one hash.
	Cookie uint64
}

func (s *Store) resetIndex(hint int) {
	s.dirs = map[ID]*dir{RootID: {id: RootID, kids: newKids(0)}}
	s.files = make(map[ID]*file, hint)
	s.dirsChanged()
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
	id, ok := d.kids.lookup(name)
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
	return s.filePath(id)
}

// filePath is the first name of file id relative to data/.
func (s *Store) filePath(id ID) (string, bool) {
	f, ok := s.files[id]
	if !ok || len(f.links()) == 0 {
		return "", false
	}
	first := f.links()[0]
	return s.childPath(first.Parent, first.Name), true
}

// Ancestors are the directories from the root down to directory id, both
// included; nil for a directory it does not hold.
func (s *Store) Ancestors(id ID) []ID {
	d, ok := s.dirs[id]
	if !ok {
		return nil
	}
	var ids []ID
	for ; d != nil; d = d.parent {
		ids = append(ids, d.id)
	}
	slices.Reverse(ids)
	return ids
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
		return len(f.links())
	}
	return 0
}

// Ino is the inode number the index holds for file id (0: unknown).
func (s *Store) Ino(id ID) uint64 {
	if f, ok := s.files[id]; ok {
		return f.ino
	}
	return 0
}

// Stat reads id's attributes from the store. A name that now holds
// something of another type (a symlink planted in place of a file) is
// reported gone, so kvfs neither serves nor charges it.
func (s *Store) Stat(id ID) (unix.Stat_t, error) {
	rel, ok := s.Path(id)
	if !ok {
		return unix.Stat_t{}, ErrNotFound
	}
	_, isDir := s.dirs[id]
	return s.StatKind(rel, isDir)
}

// ListPage returns the entries of a directory after the cookie after
// (0: from the start), in cookie order, at least max of them unless the
// directory ends (then more is false), and about max at most: its cost is
// the page's, however large the directory (see kids). A name present for
// a whole paged listing is listed exactly once; one made or removed
// meanwhile may or may not be.
func (s *Store) ListPage(parent ID, after uint64, max int) (page []DirEntry, more bool, err error) {
	d, ok := s.dirs[parent]
	if !ok {
		return nil, false, ErrNotFound
	}
	names, more := d.kids.page(nil, after, max)
	page = make([]DirEntry, len(names))
	for i, n := range names {
		page[i] = DirEntry{Name: n.name, Entry: s.entry(n.id), Cookie: n.cookie}
	}
	return page, more, nil
}

// Owner is who a new inode belongs to; negative fields leave the
// daemon's own.
type Owner struct{ UID, GID int }

// Create makes a new empty file id (from NewID), exclusively, and opens
// it read-write (see CreateAt).
func (s *Store) Create(parent ID, name string, id ID, mode uint32, who Owner) (*os.File, error) {
	rel, err := s.FreePath(parent, name)
	if err != nil {
		return nil, err
	}
	f, st, err := s.CreateAt(rel, id, mode, who)
	if err != nil {
		return nil, err
	}
	s.AddFile(parent, name, id, st.Ino)
	return f, nil
}

// freeName checks that name is free in parent.
func (s *Store) freeName(parent ID, name string) (*dir, error) {
	d, ok := s.dirs[parent]
	if !ok {
		return nil, ErrNotFound
	}
	if _, taken := d.kids.lookup(name); taken {
		return nil, unix.EEXIST
	}
	return d, nil
}

// Mkdir makes a new directory.
func (s *Store) Mkdir(parent ID, name string, mode uint32, who Owner) (ID, error) {
	rel, err := s.FreePath(parent, name)
	if err != nil {
		return 0, err
	}
	if err := s.MkdirAt(rel, mode, who); err != nil {
		return 0, err
	}
	return s.AddDir(parent, name)
}

// Link gives file id another name.
func (s *Store) Link(id, parent ID, name string) error {
	old, rel, _, err := s.LinkPaths(id, parent, name)
	if err != nil {
		return err
	}
	if _, err := s.LinkAt(old, rel); err != nil {
		return err
	}
	return s.AddLink(id, parent, name)
}

// Unlink removes a file's name and returns the file's ID. A name whose
// stored file already vanished is still removed from the index.
func (s *Store) Unlink(parent ID, name string) (ID, error) {
	_, id, err := s.child(parent, name)
	if err != nil {
		return 0, err
	}
	if s.IsDir(id) {
		return 0, unix.EISDIR
	}
	if err := s.UnlinkAt(s.childPath(parent, name)); err != nil {
		return 0, err
	}
	s.RemoveName(parent, name)
	return id, nil
}

// dropName removes one name of file id from the index. The directory
// entry goes only if it is still id's: a handover's successor may hold
// a name that two objects claimed (see LoadHandover), or a directory
// already gone (nil).
func (s *Store) dropName(id ID, d *dir, name string) {
	s.note(id)
	var parent ID
	if d != nil {
		parent = d.id
		if d.kids.get(name) == id {
			d.kids.del(name)
		} else {
			d.kids.gen.Add(1) // the file's names change all the same
		}
	}
	f := s.files[id]
	for i, l := range f.links() {
		if l.Parent == parent && l.Name == name {
			f.setLinks(slices.Delete(f.links(), i, i+1))
			break
		}
	}
	if len(f.links()) == 0 {
		delete(s.files, id)
	}
}

// dropDir removes d's subtree from the index only, and returns the
// files that had no name left outside it.
func (s *Store) dropDir(d *dir) (vanished []ID) {
	for name, id := range d.kids.all() {
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
	s.dirsChanged()
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
	id, rel, err := s.RmdirPath(parent, name)
	if err != nil {
		return 0, err
	}
	if err := s.RmdirAt(rel); err != nil {
		return 0, err
	}
	s.RemoveDir(parent, name, id)
	return id, nil
}

// Drop removes every name of file id, from the store and the index, and
// returns them so the caller can tell the kernel.
func (s *Store) Drop(id ID) []Name {
	var paths []string
	if f, ok := s.files[id]; ok {
		for _, n := range f.links() {
			paths = append(paths, s.childPath(n.Parent, n.Name))
		}
	}
	for _, rel := range paths {
		s.UnlinkAt(rel)
	}
	return s.Forget(id)
}
