package fusefs_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRemovedDirectoryStillHeld: a directory removed while a process
// holds it (its working directory, an open descriptor) answers as an
// empty directory with no link left, as on a local file system: stat,
// opendir of ".", fsync and chmod work (an outside tester's finding: they
// answered ESTALE, ENOTDIR and ENOENT, so `ls` in a working directory
// another process removed said "Not a directory").
func TestRemovedDirectoryStillHeld(t *testing.T) {
	k := mountKVFS(t)
	dir := k.path("d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatalf("fstat of a removed directory: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Nlink != 0 || st.Mode&0o777 != 0o755 {
		t.Fatalf("removed directory: mode %o, %d links; want a directory 0755 with none", st.Mode, st.Nlink)
	}
	dot, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatalf(`opendir of "." in a removed directory: %v`, err)
	}
	unix.Close(dot)
	if err := unix.Fsync(fd); err != nil {
		t.Fatalf("fsync of a removed directory: %v", err)
	}
	if err := unix.Fchmod(fd, 0o700); err != nil {
		t.Fatalf("fchmod of a removed directory: %v", err)
	}
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&0o777 != 0o700 {
		t.Fatalf("after fchmod 0700: mode %o, %v", st.Mode&0o777, err)
	}
	if _, err := unix.Openat(fd, "x", unix.O_CREAT|unix.O_WRONLY, 0o644); err != unix.ENOENT {
		t.Fatalf("create in a removed directory: %v, want ENOENT", err)
	}
	// Renamed over by another directory, as removed.
	if err := os.Mkdir(k.path("c"), 0o751); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(k.path("o"), 0o755); err != nil {
		t.Fatal(err)
	}
	held, err := unix.Open(k.path("c"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(held)
	if err := unix.Rename(k.path("o"), k.path("c")); err != nil { // os.Rename refuses a directory over one
		t.Fatal(err)
	}
	if err := unix.Fstat(held, &st); err != nil || st.Nlink != 0 || st.Mode&0o777 != 0o751 {
		t.Fatalf("a directory renamed over, held: %v, mode %o, %d links", err, st.Mode&0o777, st.Nlink)
	}
	if err := unix.Fsync(held); err != nil {
		t.Fatalf("fsync of a directory renamed over: %v", err)
	}
	// A name made anew where it was is another directory.
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("the new directory: %v, %v", fi, err)
	}
}

// TestNoAttrsThroughForeignLinks: chmod, chown and utimes of an object
// whose stored file has a link kvfs did not make are refused (EPERM),
// and the file is left as it was: a user who owns a stored directory
// could put a hard link to a file outside the store there (a root-owned
// world-writable one, say), which a start adopts as their object, and
// have the daemon, as root, make it theirs (an outside tester's
// finding, across a restart). A plain object, and one with two names of
// kvfs's own, still change.
func TestNoAttrsThroughForeignLinks(t *testing.T) {
	k := mountKVFS(t)
	mustWrite(t, k.path("mine"), []byte("mine"))
	mustWrite(t, k.path("two"), []byte("two names"))
	if err := os.Link(k.path("two"), k.path("two-b")); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(filepath.Dir(k.Store), "outside")
	if err := os.Link(filepath.Join(k.Store, "data", "mine"), outside); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(outside)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(k.path("mine"), 0o777); !errors.Is(err, unix.EPERM) {
		t.Fatalf("chmod of an object linked from outside the store: %v, want EPERM", err)
	}
	if err := os.Chown(k.path("mine"), 65534, 65534); !errors.Is(err, unix.EPERM) {
		t.Fatalf("chown: %v, want EPERM", err)
	}
	if err := os.Chtimes(k.path("mine"), time.Unix(1, 0), time.Unix(1, 0)); !errors.Is(err, unix.EPERM) {
		t.Fatalf("utimes: %v, want EPERM", err)
	}
	after, err := os.Stat(outside)
	if err != nil {
		t.Fatal(err)
	}
	if after.Mode() != before.Mode() || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("the file outside changed: %v %v, was %v %v", after.Mode(), after.ModTime(), before.Mode(), before.ModTime())
	}
	os.Remove(outside)
	for _, n := range []string{"mine", "two"} {
		if err := os.Chmod(k.path(n), 0o600); err != nil {
			t.Fatalf("chmod of %s: %v", n, err)
		}
	}
}
