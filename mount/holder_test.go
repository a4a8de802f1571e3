package mount

import (
	"bufio"
	"fmt"
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

// TestStoreHolderPastAZombie: after a handover, the process that took
// the store's lock has exited, and until its parent waits for it (never,
// under a PID 1 that reaps nothing) it is a zombie, whose mount table
// cannot be read; the lock is its successor's, named in the lock file.
// StoreHolder names the successor, and awaitStopped waits for it: taken
// for the holder, the zombie read as one serving the store elsewhere,
// and `kvfs unmount` returned while the successor still held the store
// (an outside tester: fsck right after it refused, 6 of 15 runs).
func TestStoreHolderPastAZombie(t *testing.T) {
	if os.Getenv("KVFS_LOCK_AND_LEAVE") != "" {
		lockAndLeave()
		return
	}
	dir := t.TempDir()
	lock := filepath.Join(dir, blob.LockName)
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	taker := exec.Command(os.Args[0], "-test.run=^TestStoreHolderPastAZombie$")
	taker.Env = append(os.Environ(), "KVFS_LOCK_AND_LEAVE="+lock)
	out, err := taker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := taker.Start(); err != nil {
		t.Fatal(err)
	}
	var successor int
	if _, err := fmt.Fscan(out, &successor); err != nil || successor <= 0 {
		t.Fatalf("the lock's taker named no successor: %v", err)
	}
	defer taker.Wait() // reaps the zombie, at the end
	defer unix.Kill(successor, unix.SIGKILL)
	// A zombie once its threads are all gone (os.Exit's exit_group takes
	// them a moment after the leader).
	if !waitUntil(func() bool {
		st, _ := procState(taker.Process.Pid)
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", taker.Process.Pid))
		return st == 'Z' && err == nil && len(tasks) == 1
	}) {
		t.Fatal("the lock's taker did not become a zombie")
	}
	if alive(taker.Process.Pid) {
		t.Error("a zombie counts as alive")
	}
	if pid, held := StoreHolder(dir); !held || pid != successor {
		t.Errorf("StoreHolder = %d, %v; want the successor %d, which holds the lock", pid, held, successor)
	}
	if pid, held := awaitStopped(dir, time.Now().Add(100*time.Millisecond)); !held || pid != successor {
		t.Errorf("awaitStopped = %d, %v; want the successor %d still holding the store", pid, held, successor)
	}
}

// lockAndLeave is TestStoreHolderPastAZombie's lock taker: it takes the
// lock, starts a successor that inherits it and names itself in the lock
// file, as a handover's does, says the successor's pid and exits.
func lockAndLeave() {
	f, err := os.OpenFile(os.Getenv("KVFS_LOCK_AND_LEAVE"), os.O_RDWR, 0)
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	successor := exec.Command("sleep", "60")
	successor.ExtraFiles = []*os.File{f}
	if err := successor.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	f.Truncate(0)
	f.WriteAt([]byte(fmt.Sprintf("%d\n", successor.Process.Pid)), 0)
	fmt.Println(successor.Process.Pid)
	os.Exit(0)
}
