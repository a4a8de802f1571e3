package blob

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func mustRename(t *testing.T, s *Store, parent ID, name string, newParent ID, newName string, flags uint32) ID {
	t.Helper()
	replaced, err := s.Rename(parent, name, newParent, newName, flags)
	if err != nil {
		t.Fatalf("Rename(%d/%s -> %d/%s, %#x): %v", parent, name, newParent, newName, flags, err)
	}
	checkIndex(t, s)
	return replaced
}

// renameFails checks that a rename fails with want and changes nothing.
func renameFails(t *testing.T, s *Store, parent ID, name string, newParent ID, newName string, flags uint32, want error) {
	t.Helper()
	before := treeSnapshot(t, s.Dir())
	_, err := s.Rename(parent, name, newParent, newName, flags)
	if !errors.Is(err, want) {
		t.Fatalf("Rename(%d/%s -> %d/%s, %#x): %v, want %v", parent, name, newParent, newName, flags, err, want)
	}
	if after := treeSnapshot(t, s.Dir()); !slices.Equal(before, after) {
		t.Fatalf("failed Rename changed the store:\n%v\n%v", before, after)
	}
	checkIndex(t, s)
}

func wantPath(t *testing.T, s *Store, id ID, want string) {
	t.Helper()
	if got, ok := s.Path(id); !ok || got != want {
		t.Fatalf("Path(%d) = %q, %v; want %q", id, got, ok, want)
	}
}

func wantLookup(t *testing.T, s *Store, parent ID, name string, want ID) {
	t.Helper()
	e, err := s.Lookup(parent, name)
	if err != nil || e.ID != want {
		t.Fatalf("Lookup(%d, %q) = %+v, %v; want id %d", parent, name, e, err, want)
	}
}

func TestRenameFileOverFile(t *testing.T) {
	s := newStore(t)
	d := mustMkdir(t, s, RootID, "d")
	a := mustCreate(t, s, RootID, "a", []byte("new"))
	b := mustCreate(t, s, d, "b", []byte("old"))

	if replaced := mustRename(t, s, RootID, "a", d, "b", 0); replaced != b {
		t.Fatalf("replaced = %d, want %d", replaced, b)
	}
	wantLookup(t, s, d, "b", a)
	wantPath(t, s, a, "d/b")
	if _, err := s.Lookup(RootID, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old name survived: %v", err)
	}
	if s.Links(b) != 0 {
		t.Fatal("the replaced file kept its name in the index")
	}
	if string(readAll(t, s, a)) != "new" {
		t.Fatal("the new name does not hold the moved bytes")
	}

	// Replacing one name of a file with two names leaves the other.
	c := mustCreate(t, s, RootID, "c", nil)
	must(t, "Link", s.Link(c, RootID, "c2"))
	if replaced := mustRename(t, s, d, "b", RootID, "c", 0); replaced != c {
		t.Fatalf("replaced = %d, want %d", replaced, c)
	}
	if s.Links(c) != 1 {
		t.Fatalf("Links(c) = %d, want 1", s.Links(c))
	}
	wantPath(t, s, c, "c2")
	wantPath(t, s, a, "c")

	// Plain move to a free name replaces nothing.
	if replaced := mustRename(t, s, RootID, "c", d, "free", 0); replaced != 0 {
		t.Fatalf("replaced = %d, want 0", replaced)
	}
	wantPath(t, s, a, "d/free")
}

func TestRenameTypeMismatches(t *testing.T) {
	s := newStore(t)
	f := mustCreate(t, s, RootID, "f", nil)
	mustCreate(t, s, RootID, "g", nil)
	d := mustMkdir(t, s, RootID, "d")
	full := mustMkdir(t, s, RootID, "full")
	mustCreate(t, s, full, "x", nil)
	empty := mustMkdir(t, s, RootID, "empty")
	sub := mustMkdir(t, s, d, "sub")
	deep := mustMkdir(t, s, sub, "deep")

	renameFails(t, s, RootID, "f", RootID, "d", 0, unix.EISDIR)
	renameFails(t, s, RootID, "d", RootID, "f", 0, unix.ENOTDIR)
	renameFails(t, s, RootID, "d", RootID, "full", 0, unix.ENOTEMPTY)
	renameFails(t, s, RootID, "d", d, "inside", 0, unix.EINVAL)
	renameFails(t, s, RootID, "d", deep, "inside", 0, unix.EINVAL)
	renameFails(t, s, RootID, "d", sub, "deep", 0, unix.EINVAL)
	renameFails(t, s, RootID, "f", RootID, "g", unix.RENAME_NOREPLACE, unix.EEXIST)
	renameFails(t, s, RootID, "f", RootID, "absent", unix.RENAME_EXCHANGE, ErrNotFound)
	renameFails(t, s, RootID, "f", RootID, "g", unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE, unix.EINVAL)
	renameFails(t, s, RootID, "f", RootID, "g", unix.RENAME_WHITEOUT, unix.EPERM) // a character device, as mknod of one
	renameFails(t, s, RootID, "absent", RootID, "g", 0, ErrNotFound)
	renameFails(t, s, 4321, "f", RootID, "g", 0, ErrNotFound)
	renameFails(t, s, RootID, "f", 4321, "g", 0, ErrNotFound)
	renameFails(t, s, RootID, "f", f, "g", 0, ErrNotFound)

	// A directory over an empty one takes its place; the old one is gone.
	if replaced := mustRename(t, s, RootID, "d", RootID, "empty", 0); replaced != 0 {
		t.Fatalf("replaced = %d for a directory", replaced)
	}
	wantLookup(t, s, RootID, "empty", d)
	if _, ok := s.Path(empty); ok {
		t.Fatal("the replaced directory is still in the index")
	}
	wantPath(t, s, deep, "empty/sub/deep")

	// NOREPLACE to a free name is a plain move.
	mustRename(t, s, RootID, "f", full, "f", unix.RENAME_NOREPLACE)
	wantPath(t, s, f, "full/f")
}

func TestRenameExchange(t *testing.T) {
	s := newStore(t)
	d := mustMkdir(t, s, RootID, "d")
	e := mustMkdir(t, s, RootID, "e")
	a := mustCreate(t, s, RootID, "a", []byte("A"))
	b := mustCreate(t, s, d, "b", []byte("B"))
	inE := mustCreate(t, s, e, "inE", nil)

	// File with file, across directories.
	if replaced := mustRename(t, s, RootID, "a", d, "b", unix.RENAME_EXCHANGE); replaced != 0 {
		t.Fatalf("exchange replaced %d", replaced)
	}
	wantLookup(t, s, RootID, "a", b)
	wantLookup(t, s, d, "b", a)
	wantPath(t, s, a, "d/b")
	wantPath(t, s, b, "a")
	if string(readAll(t, s, b)) != "B" || string(readAll(t, s, a)) != "A" {
		t.Fatal("exchange mixed up the bytes")
	}

	// File with directory, in one directory.
	mustRename(t, s, RootID, "a", RootID, "e", unix.RENAME_EXCHANGE)
	wantLookup(t, s, RootID, "a", e)
	wantLookup(t, s, RootID, "e", b)
	wantPath(t, s, inE, "a/inE")
	if ent, _ := s.Lookup(RootID, "a"); !ent.Dir {
		t.Fatal("exchanged directory lost its kind")
	}

	// Directory with directory, one inside the other's sibling.
	mustRename(t, s, RootID, "d", RootID, "a", unix.RENAME_EXCHANGE)
	wantPath(t, s, inE, "d/inE")
	wantPath(t, s, a, "a/b")

	// A hard-linked file keeps its other name while one is exchanged.
	// e is now named "d", and d "a".
	must(t, "Link", s.Link(b, e, "b2"))
	mustRename(t, s, e, "b2", RootID, "a", unix.RENAME_EXCHANGE)
	wantLookup(t, s, e, "b2", d)
	wantLookup(t, s, RootID, "a", b)
	wantLookup(t, s, RootID, "e", b)
	if s.Links(b) != 2 {
		t.Fatalf("Links(b) = %d", s.Links(b))
	}
	wantPath(t, s, a, "d/b2/b")

	// The kernel refuses to exchange a directory with its own ancestor;
	// the index must stay as it was.
	x := mustMkdir(t, s, RootID, "x")
	y := mustMkdir(t, s, x, "y")
	mustMkdir(t, s, y, "z")
	before := treeSnapshot(t, s.Dir())
	if _, err := s.Rename(y, "z", RootID, "x", unix.RENAME_EXCHANGE); err == nil {
		t.Fatal("exchanging a directory with its ancestor succeeded")
	}
	if !slices.Equal(before, treeSnapshot(t, s.Dir())) {
		t.Fatal("failed exchange changed the store")
	}
	checkIndex(t, s)
	renameFails(t, s, RootID, "x", y, "z", unix.RENAME_EXCHANGE, unix.EINVAL)
}

func TestRenameSameInodeIsNoop(t *testing.T) {
	s := newStore(t)
	d := mustMkdir(t, s, RootID, "d")
	a := mustCreate(t, s, RootID, "a", nil)
	must(t, "Link", s.Link(a, d, "b"))
	before := treeSnapshot(t, s.Dir())

	for _, flags := range []uint32{0, unix.RENAME_EXCHANGE} {
		if replaced := mustRename(t, s, RootID, "a", d, "b", flags); replaced != 0 {
			t.Fatalf("rename onto another link replaced %d", replaced)
		}
		if !slices.Equal(before, treeSnapshot(t, s.Dir())) {
			t.Fatal("rename onto another link of the same inode changed the store")
		}
		wantLookup(t, s, RootID, "a", a)
		wantLookup(t, s, d, "b", a)
		if s.Links(a) != 2 {
			t.Fatalf("Links = %d", s.Links(a))
		}
	}
	renameFails(t, s, RootID, "a", d, "b", unix.RENAME_NOREPLACE, unix.EEXIST)

	// A name onto itself, file or directory.
	mustRename(t, s, RootID, "a", RootID, "a", 0)
	mustRename(t, s, RootID, "d", RootID, "d", 0)
	wantPath(t, s, d, "d")
	if !slices.Equal(before, treeSnapshot(t, s.Dir())) {
		t.Fatal("rename onto itself changed the store")
	}
}

func TestRenameDirectoryKeepsChildPaths(t *testing.T) {
	s := newStore(t)
	data := filepath.Join(s.Dir(), DataName)
	a := mustMkdir(t, s, RootID, "a")
	b := mustMkdir(t, s, a, "b")
	f := mustCreate(t, s, b, "f", []byte("payload"))
	g := mustCreate(t, s, a, "g", nil)
	must(t, "Link", s.Link(f, RootID, "flink"))

	mustRename(t, s, RootID, "a", RootID, "c", 0)
	wantPath(t, s, b, "c/b")
	wantPath(t, s, g, "c/g")
	wantPath(t, s, f, "c/b/f")
	if string(readAll(t, s, f)) != "payload" {
		t.Fatal("Open through the renamed directory failed")
	}
	if st, err := s.Stat(g); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Fatalf("Stat through the renamed directory: %v", err)
	}

	mustRename(t, s, a, "b", RootID, "b2", 0)
	wantPath(t, s, f, "b2/f")
	mustRename(t, s, RootID, "b2", a, "deeper", 0)
	wantPath(t, s, f, "c/deeper/f")
	if !exists(filepath.Join(data, "c", "deeper", "f")) {
		t.Fatal("data/c/deeper/f missing")
	}

	// New names under a moved directory land where the index says.
	h := mustCreate(t, s, b, "h", nil)
	wantPath(t, s, h, "c/deeper/h")
	must(t, "Link", s.Link(h, a, "hlink"))
	_, err := s.Unlink(b, "f")
	must(t, "Unlink", err)
	wantPath(t, s, f, "flink")
	checkIndex(t, s)

	// Moving one name of a linked file moves exactly that name.
	mustRename(t, s, a, "hlink", RootID, "hmoved", 0)
	wantLookup(t, s, b, "h", h)
	wantLookup(t, s, RootID, "hmoved", h)
	if _, err := s.Lookup(a, "hlink"); !errors.Is(err, ErrNotFound) {
		t.Fatal("moved name still resolves")
	}
}

func TestRenameOpenWriterKeepsMarker(t *testing.T) {
	s := newStore(t)
	d := mustMkdir(t, s, RootID, "d")
	id, f, err := create(s, RootID, "a", 0o644, nobody)
	must(t, "Create", err)
	defer f.Close()
	mustRename(t, s, RootID, "a", d, "a", 0)
	if !exists(markerFile(s, id)) {
		t.Fatal("rename dropped the write marker")
	}
	must(t, "ClearWriting", s.ClearWriting(id))
	checkIndex(t, s)
	if _, err := os.Stat(filepath.Join(s.Dir(), DataName, "d", "a")); err != nil {
		t.Fatal(err)
	}
}
