package blob

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDirFDsFollowTheNames: the directories at keeps open answer for
// their paths only while the paths name them. After kvfs renames a
// directory (or removes one), a new directory made at the old path gets
// the names made there; one removed and made again behind kvfs's back
// is found stale at its first use. Each file must land where its path
// says, and the kept descriptors must not pile up past the bound.
func TestDirFDsFollowTheNames(t *testing.T) {
	dir, s := openUnracy(t)
	data := filepath.Join(dir, "data")
	inDir := func(rel string) bool {
		_, err := os.Stat(filepath.Join(data, rel))
		return err == nil
	}
	a := mustMkdir(t, s, RootID, "a")
	b := mustMkdir(t, s, a, "b")
	mustCreate(t, s, b, "x", []byte("x")) // keeps a/b open
	mustRename(t, s, RootID, "a", RootID, "z", 0)
	a2 := mustMkdir(t, s, RootID, "a")
	b2 := mustMkdir(t, s, a2, "b")
	mustCreate(t, s, b2, "y", []byte("y"))
	if !inDir("a/b/y") || inDir("z/b/y") || !inDir("z/b/x") {
		t.Fatalf("after a rename of a directory, a file made at its old path went elsewhere: a/b/y %v, z/b/y %v",
			inDir("a/b/y"), inDir("z/b/y"))
	}

	// Removed and made again by kvfs.
	c := mustMkdir(t, s, RootID, "c")
	d := mustMkdir(t, s, c, "d")
	mustCreate(t, s, d, "1", nil)
	if _, err := s.Unlink(d, "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rmdir(c, "d"); err != nil {
		t.Fatal(err)
	}
	d2 := mustMkdir(t, s, c, "d")
	mustCreate(t, s, d2, "2", []byte("2"))
	if !inDir("c/d/2") {
		t.Fatal("a file made in a directory made again after a rmdir is not there")
	}

	// Removed and made again behind kvfs's back: the kept descriptor
	// is stale at its next use.
	if err := os.Remove(filepath.Join(data, "c/d/2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(data, "c/d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(data, "c/d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "c/d/3"), []byte("3"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.stat("c/d/3"); err != nil {
		t.Fatalf("a stat in a directory made again behind kvfs's back: %v", err)
	}

	// Many directories: the kept descriptors stay bounded.
	for i := range 2 * maxDirFDs {
		sub := mustMkdir(t, s, RootID, "m"+string(rune('a'+i%26))+string(rune('a'+i/26)))
		mustCreate(t, s, sub, "f", nil)
	}
	s.dirFDs.mu.Lock()
	kept := len(s.dirFDs.fds)
	s.dirFDs.mu.Unlock()
	if kept > maxDirFDs {
		t.Fatalf("%d directories kept open, the bound is %d", kept, maxDirFDs)
	}
}
