package mount

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// A lock file that another user made where every user may make files
// (a FIFO, whose open would wait for a writer for good, or a plain file
// it holds locked, a symbolic link, a directory) is not used: the start
// goes on, unlocked, at once, with a warning.
func TestForeignPointLockIsNotUsed(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.lock")
	if err := unix.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, _, err := openPointLock([]string{fifo}); !errors.Is(err, errForeignLock) {
		t.Fatalf("a FIFO as the lock: %v, want errForeignLock", err)
	}

	link := filepath.Join(dir, "link.lock")
	if err := os.Symlink(filepath.Join(dir, "target"), link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir.lock")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, sub} {
		if _, _, err := openPointLock([]string{p}); !errors.Is(err, errForeignLock) {
			t.Errorf("%s as the lock: %v, want errForeignLock (a warning)", filepath.Base(p), err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "target")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the symbolic link's target: %v; want it never made", err)
	}

	own := filepath.Join(dir, "own.lock")
	fd, name, err := openPointLock([]string{filepath.Join(dir, "no-such-dir", "x.lock"), own})
	if err != nil || name != own {
		t.Fatalf("this user's lock in the second directory: %q, %v", name, err)
	}
	unix.Close(fd)

	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a file of another user")
	}
	theirs := filepath.Join(dir, "theirs.lock")
	if err := os.WriteFile(theirs, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	held, err := unix.Open(theirs, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(held)
	if err := unix.Flock(held, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, _, err := openPointLock([]string{theirs}); !errors.Is(err, errForeignLock) {
		t.Fatalf("another user's file as the lock: %v, want errForeignLock", err)
	}
}

// Root's locks are in a directory no other user may write in, so no
// other user can make them first.
func TestRootPointLocksAreRoots(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: root's lock directory")
	}
	paths := PointLockFiles("/some/mount/point")
	if len(paths) != 1 || filepath.Dir(paths[0]) != rootLockDir {
		t.Fatalf("root's lock files: %q, want one in %s", paths, rootLockDir)
	}
	if err := ownDir(rootLockDir, false); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockMountpoint("/some/mount/point", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(paths[0]); err != nil {
		t.Fatalf("the lock while held: %v", err)
	}
	unlock()
	if _, err := os.Stat(paths[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the lock once let go: %v, want it removed", err)
	}
}
