package blob

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// nobody leaves new inodes to the test process.
var nobody = Owner{UID: -1, GID: -1}

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	checkIndex(t, s)
	return s
}

// mustCreate makes a complete file holding content: created, written,
// closed and cleared, as a writer that finished would leave it.
func mustCreate(t *testing.T, s *Store, parent ID, name string, content []byte) ID {
	t.Helper()
	id, f, err := create(s, parent, name, 0o644, nobody)
	if err != nil {
		t.Fatalf("Create(%d, %q): %v", parent, name, err)
	}
	if _, err := f.Write(content); err != nil {
		t.Fatalf("write %q: %v", name, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.ClearWriting(id); err != nil {
		t.Fatalf("ClearWriting(%d): %v", id, err)
	}
	return id
}

func mustMkdir(t *testing.T, s *Store, parent ID, name string) ID {
	t.Helper()
	id, err := s.Mkdir(parent, name, 0o755, nobody)
	if err != nil {
		t.Fatalf("Mkdir(%d, %q): %v", parent, name, err)
	}
	return id
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func lstat(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("lstat: %v", err)
	}
	return st
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func markerFile(s *Store, id ID) string {
	return filepath.Join(s.Dir(), markerPath(id))
}

// checkIndex compares the index with data/ and writing/ on disk: every
// name in the index exists on disk with the same type, names of one file
// share one inode and names of different files do not, a file's link
// count is its names plus its write markers, and data/ holds nothing the
// index lacks. It also checks the index's own links: parent pointers,
// kids and file links agree, and every directory is reachable.
func checkIndex(t *testing.T, s *Store) {
	t.Helper()
	var bad []string
	fail := func(format string, args ...any) {
		bad = append(bad, "  "+fmt.Sprintf(format, args...))
	}

	names := indexNames(s, fail)
	disk := diskNames(t, filepath.Join(s.dir, DataName), fail)
	// The markers on each inode: plain or intact (see MarkIntact).
	markers := map[uint64]uint64{}
	marked, _ := ReadMarkers(filepath.Join(s.dir, WritingName))
	for _, name := range marked {
		var m unix.Stat_t
		if unix.Lstat(filepath.Join(s.dir, WritingName, name), &m) == nil {
			markers[m.Ino]++
		}
	}

	inoOf := map[ID]uint64{}
	idOf := map[uint64]ID{}
	for rel, id := range names {
		st, ok := disk[rel]
		if !ok {
			fail("%s (id %d) is in the index but not in data/", rel, id)
			continue
		}
		_, isDir := s.dirs[id]
		if isDir != (st.Mode&unix.S_IFMT == unix.S_IFDIR) {
			fail("%s: index says dir=%v, disk mode %o", rel, isDir, st.Mode)
			continue
		}
		if isDir {
			continue
		}
		if ino, ok := inoOf[id]; ok && ino != st.Ino {
			fail("%s: file %d has names on inodes %d and %d", rel, id, ino, st.Ino)
		}
		inoOf[id] = st.Ino
		if ino := s.files[id].ino; ino != 0 && ino != st.Ino {
			fail("%s: the index says inode %d, the store holds %d", rel, ino, st.Ino)
		}
		if other, ok := idOf[st.Ino]; ok && other != id {
			fail("%s: inode %d holds files %d and %d", rel, st.Ino, other, id)
		}
		idOf[st.Ino] = id
		links := uint64(len(s.files[id].links())) + markers[st.Ino]
		if uint64(st.Nlink) != links {
			fail("%s: nlink %d, want %d (names + write markers)", rel, st.Nlink, links)
		}
	}
	for rel := range disk {
		if _, ok := names[rel]; !ok {
			fail("data/%s is on disk but not in the index", rel)
		}
	}
	checkWriting(s, inoOf, fail)
	if len(bad) > 0 {
		t.Fatalf("index and store disagree:\n%s", strings.Join(bad, "\n"))
	}
}

// indexNames lists every name the index holds, as paths relative to
// data/, checking the index's internal links on the way.
func indexNames(s *Store, fail func(string, ...any)) map[string]ID {
	names := map[string]ID{}
	reached := map[ID]bool{}
	var walk func(d *dir, rel string)
	walk = func(d *dir, rel string) {
		reached[d.id] = true
		for name, id := range d.kids.all() {
			p := path.Join(rel, name)
			names[p] = id
			if c, ok := s.dirs[id]; ok {
				if reached[id] {
					fail("%s: directory %d reached twice", p, id)
					continue
				}
				if c.id != id || c.parent != d || c.name != name {
					fail("%s: directory %d says id %d, name %q", p, id, c.id, c.name)
				}
				walk(c, p)
				continue
			}
			f, ok := s.files[id]
			if !ok {
				fail("%s: id %d is neither a directory nor a file", p, id)
				continue
			}
			if !slices.Contains(f.links(), Name{d.id, name}) {
				fail("%s: file %d lacks the link %v", p, id, Name{d.id, name})
			}
		}
	}
	root := s.dirs[RootID]
	if root == nil || root.parent != nil {
		fail("bad root directory %+v", root)
		return names
	}
	walk(root, "")
	for id := range s.dirs {
		if !reached[id] {
			fail("directory %d (%q) is unreachable", id, s.dirs[id].name)
		}
	}
	for id, f := range s.files {
		if len(f.links()) == 0 {
			fail("file %d has no names", id)
		}
		if f.more != nil && (len(*f.more) < 2 || f.one[0] != (Name{})) {
			fail("file %d keeps %d names apart beside %v", id, len(*f.more), f.one[0])
		}
		seen := map[Name]bool{}
		for _, l := range f.links() {
			if seen[l] {
				fail("file %d lists %v twice", id, l)
			}
			seen[l] = true
			if d := s.dirs[l.Parent]; d == nil || d.kids.get(l.Name) != id {
				fail("file %d's link %v is not in its directory", id, l)
			}
		}
	}
	return names
}

// diskNames lists data/, failing on anything but directories and
// regular files.
func diskNames(t *testing.T, root string, fail func(string, ...any)) map[string]unix.Stat_t {
	t.Helper()
	disk := map[string]unix.Stat_t{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR, unix.S_IFREG:
			disk[rel] = st
		default:
			fail("data/%s: foreign entry, mode %o", rel, st.Mode)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk data/: %v", err)
	}
	return disk
}

// checkWriting checks that writing/ holds only regular files named by
// file IDs (with an intact marker's mtime or not), on the inode of that
// file while it has names.
func checkWriting(s *Store, inoOf map[ID]uint64, fail func(string, ...any)) {
	names, err := ReadMarkers(filepath.Join(s.dir, WritingName))
	if err != nil {
		fail("read writing/: %v", err)
		return
	}
	for _, name := range names {
		plain, _, _ := strings.Cut(filepath.Base(name), intactSep)
		n, err := strconv.ParseUint(plain, 16, 64)
		var st unix.Stat_t
		lerr := unix.Lstat(filepath.Join(s.dir, WritingName, name), &st)
		if err != nil || lerr != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || filepath.Dir(name) != shardName(ID(n)) {
			fail("writing/%s: not a marker (%v, %v, mode %o)", name, err, lerr, st.Mode)
			continue
		}
		id := ID(n)
		if _, ok := s.files[id]; !ok {
			continue // its file lost every name while a writer held it
		}
		if st.Ino != inoOf[id] {
			fail("writing/%s: inode %d, but file %d is inode %d", name, st.Ino, id, inoOf[id])
		}
	}
}

// treeSnapshot describes a directory tree on disk (names, types, inodes,
// sizes) so a test can tell that an operation changed nothing.
func treeSnapshot(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == LockName {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s mode=%o ino=%d nlink=%d size=%d", rel, st.Mode, st.Ino, st.Nlink, st.Size))
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
}

func readAll(t *testing.T, s *Store, id ID) []byte {
	t.Helper()
	f, err := s.Open(id, os.O_RDONLY)
	if err != nil {
		t.Fatalf("Open(%d): %v", id, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// namespace describes the index by names: each file by the sorted list of
// its names, so that two indexes with different IDs compare equal.
func namespace(s *Store) []string {
	var out []string
	for _, d := range s.dirs {
		out = append(out, "dir "+s.dirPath(d))
	}
	for _, f := range s.files {
		var names []string
		for _, l := range f.links() {
			names = append(names, s.childPath(l.Parent, l.Name))
		}
		sort.Strings(names)
		out = append(out, "file "+strings.Join(names, " = "))
	}
	sort.Strings(out)
	return out
}

// create is Create with a fresh ID, as the owner calls it.
func create(s *Store, parent ID, name string, mode uint32, who Owner) (ID, *os.File, error) {
	id := s.NewID()
	f, err := s.Create(parent, name, id, mode, who)
	return id, f, err
}
