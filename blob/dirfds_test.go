package blob

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDirFdsKeptPerDirectory: the changes and stats of many names in a
// few directories keep one descriptor a directory, and each lands in
// its own directory.
func TestDirFdsKeptPerDirectory(t *testing.T) {
	s := newStore(t)
	a, b := mustMkdir(t, s, RootID, "a"), mustMkdir(t, s, RootID, "b")
	sub := mustMkdir(t, s, a, "sub")
	var ids []ID
	for i := range 20 {
		for _, d := range []ID{a, b, sub} {
			ids = append(ids, mustCreate(t, s, d, "f"+string(rune('a'+i)), []byte{byte(i)}))
		}
	}
	for _, id := range ids {
		if _, err := s.Stat(id); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.dirFds.len(); n != 3 {
		t.Fatalf("%d descriptors kept for 3 directories", n)
	}
	for _, rel := range []string{"a/fa", "b/fa", "a/sub/ft"} {
		if _, err := os.Stat(filepath.Join(s.Dir(), DataName, rel)); err != nil {
			t.Fatalf("not where the index says: %v", err)
		}
	}
	checkIndex(t, s)
}

// TestDirFdsFollowRenames: after a directory is renamed or removed
// through the store, a name made under its old path lands in the
// directory that has that path now, not in the one that moved.
func TestDirFdsFollowRenames(t *testing.T) {
	s := newStore(t)
	data := filepath.Join(s.Dir(), DataName)
	a := mustMkdir(t, s, RootID, "a")
	mustCreate(t, s, a, "x", []byte("x"))
	mustRename(t, s, RootID, "a", RootID, "moved", 0)
	a2 := mustMkdir(t, s, RootID, "a")
	mustCreate(t, s, a2, "y", []byte("y"))
	if _, err := os.Stat(filepath.Join(data, "a", "y")); err != nil {
		t.Fatalf("a/y not in the new a: %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "moved", "y")); err == nil {
		t.Fatal("a/y was made in the directory that moved away")
	}
	// Removed and made again.
	if _, err := s.Unlink(a2, "y"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rmdir(RootID, "a"); err != nil {
		t.Fatal(err)
	}
	a3 := mustMkdir(t, s, RootID, "a")
	z := mustCreate(t, s, a3, "z", []byte("z"))
	if _, err := s.Stat(z); err != nil {
		t.Fatalf("a/z after a was made again: %v", err)
	}
	checkIndex(t, s)
}

// TestDirFdsBehindTheBack: a directory replaced behind kvfs's back
// (its kept descriptor now names a removed directory) is resolved again
// at the next use.
func TestDirFdsBehindTheBack(t *testing.T) {
	s := newStore(t)
	data := filepath.Join(s.Dir(), DataName)
	a := mustMkdir(t, s, RootID, "a")
	x := mustCreate(t, s, a, "x", []byte("x"))
	must(t, "remove a", os.RemoveAll(filepath.Join(data, "a")))
	must(t, "make a", os.Mkdir(filepath.Join(data, "a"), 0o755))
	must(t, "write a/x", os.WriteFile(filepath.Join(data, "a", "x"), []byte("new bytes"), 0o644))
	st, err := s.Stat(x)
	if err != nil || st.Size != 9 {
		t.Fatalf("stat of a/x after a was replaced: size %d, %v; want the new file's 9 bytes", st.Size, err)
	}
}

// TestDirFdsClosedByLastUser: a descriptor dropped while in use stays
// open until its user releases it, and is closed then.
func TestDirFdsClosedByLastUser(t *testing.T) {
	dir := t.TempDir()
	var c dirFds
	open := func() (int, error) { return unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0) }
	d, kept, err := c.get("d", open)
	if err != nil || kept {
		t.Fatalf("first get: kept %v, %v", kept, err)
	}
	d2, kept, err := c.get("d", open)
	if err != nil || !kept || d2 != d {
		t.Fatalf("second get: kept %v, same %v, %v", kept, d2 == d, err)
	}
	c.release(d2)
	var want, st unix.Stat_t
	must(t, "stat", unix.Stat(dir, &want))
	c.clear()
	if err := unix.Fstat(d.fd, &st); err != nil || st.Ino != want.Ino {
		t.Fatalf("dropped while in use: %v", err)
	}
	if !d.dead {
		t.Fatal("not marked dropped")
	}
	c.release(d)
	if err := unix.Fstat(d.fd, &st); err == nil && st.Ino == want.Ino {
		t.Fatal("still open after its last user released it")
	}
	// Opened across a clear: used once, not kept.
	d3, _, err := c.get("e", func() (int, error) { c.clear(); return open() })
	if err != nil || !d3.dead || c.len() != 0 {
		t.Fatalf("opened across a clear: dead %v, %d kept, %v", d3.dead, c.len(), err)
	}
	c.release(d3)
}
