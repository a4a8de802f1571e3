package fusefs_test

import (
	"os"
	"testing"

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
	// A name made anew where it was is another directory.
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("the new directory: %v, %v", fi, err)
	}
}
