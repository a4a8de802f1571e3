package mount

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfs/kvfs/blob"
	"golang.org/x/sys/unix"
)

// TestLockHolder reads /proc/locks's lines: the holder of a flock of
// the file, not a waiter, a POSIX lock, or another file's.
func TestLockHolder(t *testing.T) {
	st := unix.Stat_t{Dev: unix.Mkdev(254, 0), Ino: 9977881}
	locks := "1: POSIX  ADVISORY  WRITE 11 fe:00:9977881 0 EOF\n" +
		"2: FLOCK  ADVISORY  WRITE 22 fe:00:1234 0 EOF\n" +
		"3: FLOCK  ADVISORY  WRITE 1780 fe:00:9977881 0 EOF\n" +
		"3: -> FLOCK  ADVISORY  WRITE 99 fe:00:9977881 0 EOF\n"
	if pid, ok := lockHolder(locks, st); !ok || pid != 1780 {
		t.Fatalf("holder %d, %v; want 1780", pid, ok)
	}
	if _, ok := lockHolder(locks, unix.Stat_t{Dev: unix.Mkdev(8, 1), Ino: 9977881}); ok {
		t.Fatal("a lock of another device's inode is taken for the store's")
	}
}

// TestStoreHolderFindsFlock: StoreHolder finds the process that holds
// a store's lock, and awaitReleased returns once it lets go.
func TestStoreHolderFindsFlock(t *testing.T) {
	dir := t.TempDir()
	lock := filepath.Join(dir, blob.LockName)
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, held := StoreHolder(dir); held {
		t.Fatal("an unlocked store has a holder")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// flock(1) says it holds the lock, and holds it until cat sees its
	// input end.
	cmd := exec.Command("flock", lock, "sh", "-c", "echo locked; cat")
	cmd.Stdin = r
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("flock(1): %v", err)
	}
	r.Close()
	defer cmd.Wait()
	defer w.Close()
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("flock(1) did not say it holds the lock: %v", err)
	}
	pid, held := StoreHolder(dir)
	if !held {
		t.Fatal("no holder found while flock holds the lock")
	}
	if pid <= 0 {
		t.Fatalf("holder %d", pid)
	}
	if _, held := awaitReleased(dir, time.Now()); !held {
		t.Fatal("awaitReleased with no time left says the store is free while flock holds it")
	}
	w.Close()
	if pid, held := awaitReleased(dir, time.Now().Add(time.Minute)); held {
		t.Fatalf("the store is still held by %d after flock exited", pid)
	}
}
