package mount

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/internal/mountinfo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

// hangGuard bounds the waits of these tests: a wait that runs into it is
// waiting for something that is not coming, however slow the machine.
const hangGuard = time.Minute

// waitUntil reports whether cond came to hold before hangGuard passed,
// polling it: for another process's state in /proc, which nothing
// announces to a process that is not its parent.
func waitUntil(cond func() bool) bool {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	guard := time.After(hangGuard)
	for !cond() {
		select {
		case <-tick.C:
		case <-guard:
			return cond()
		}
	}
	return true
}

// stuckExiting starts a process whose leader thread has exited while
// another thread goes on, as a SIGKILLed daemon with a thread asleep in
// the kernel looks from outside: its /proc state is Z.
func stuckExiting(t *testing.T) int {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("needs gcc to build a process whose leader exits before its thread (.ci/run installs it)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "stuck.c")
	os.WriteFile(src, []byte(`#include <pthread.h>
#include <unistd.h>
static void *sleeper(void *a) { sleep(60); return a; }
int main(void) { pthread_t t; pthread_create(&t, 0, sleeper, 0); pthread_exit(0); }
`), 0o644)
	bin := filepath.Join(dir, "stuck")
	if out, err := exec.Command("gcc", "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	// Its leader is gone while its thread lives: no wait(2) reports
	// that, only its /proc state.
	if !waitUntil(func() bool { return zombie(pid) }) {
		t.Fatalf("pid %d never showed its leader exited", pid)
	}
	return pid
}

// TestGuardAbortsStuckDaemon: the guard of a daemon stuck exiting tries
// to abort its connection, and returns once the daemon is gone.
func TestGuardAbortsStuckDaemon(t *testing.T) {
	pid := stuckExiting(t)
	core, logs := observer.New(zap.WarnLevel)
	logged := make(chan struct{}, 1)
	core = zapcore.RegisterHooks(core, func(zapcore.Entry) error {
		select {
		case logged <- struct{}{}:
		default:
		}
		return nil
	})
	r, w, _ := os.Pipe()
	fmt.Fprintln(w, guardMounted, "999999")
	done := make(chan struct{})
	go func() {
		RunGuard(pid, t.TempDir(), t.TempDir(), r, zap.New(core))
		close(done)
	}()
	guard := time.After(hangGuard)
	for logs.FilterMessageSnippet("stuck exiting").Len() == 0 {
		select {
		case <-logged: // the guard logged something: look again
		case <-done:
			t.Fatalf("the guard returned while the daemon still holds its pipe: %v", logs.All())
		case <-guard:
			t.Fatalf("the guard did not act on a daemon stuck exiting: %v", logs.All())
		}
	}
	if logs.FilterMessageSnippet("stuck exiting").Len() != 1 {
		t.Fatalf("the guard did not act on a daemon stuck exiting: %v", logs.All())
	}
	select {
	case <-done:
		t.Fatal("the guard returned while the daemon still holds its pipe")
	default:
	}
	fmt.Fprintln(w, guardStop) // the daemon's last thread ends
	w.Close()
	<-done
}

// TestGuardCapsOnlyAfterMount: a daemon that dies once it mounted leaves
// its guard to truncate the marked files while a process holds a file of
// the mount open, and the guard returns once none does; one that dies
// before it mounted had no client, and its guard touches nothing.
func TestGuardCapsOnlyAfterMount(t *testing.T) {
	for _, told := range []bool{true, false} {
		mp, store := t.TempDir(), t.TempDir()
		marked := filepath.Join(store, blob.WritingName, "3", "1f")
		os.MkdirAll(filepath.Dir(marked), 0o755)
		if err := os.WriteFile(marked, make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
		// A client's descriptor of a file under the mount point.
		held, err := os.Create(filepath.Join(mp, "obj"))
		if err != nil {
			t.Fatal(err)
		}
		r, w, _ := os.Pipe()
		if told {
			fmt.Fprintln(w, guardMounted, "999999")
		}
		done := make(chan struct{})
		go func() {
			RunGuard(os.Getpid(), mp, store, r, zap.NewNop())
			close(done)
		}()
		w.Close() // the daemon dies
		if told {
			if !waitUntil(func() bool { st, err := os.Stat(marked); return err == nil && st.Size() == 0 }) {
				t.Fatal("the guard of a daemon that died after it mounted did not truncate the marked file")
			}
			// The writer goes on: truncated again.
			os.WriteFile(marked, make([]byte, 4096), 0o644)
			if !waitUntil(func() bool { st, err := os.Stat(marked); return err == nil && st.Size() == 0 }) {
				t.Fatal("the guard stopped truncating while a file of the mount was held open")
			}
			select {
			case <-done:
				t.Fatal("the guard returned while a file of the mount was held open")
			default:
			}
		}
		held.Close()
		select {
		case <-done:
		case <-time.After(hangGuard):
			t.Fatalf("the guard (told of the mount: %v) did not return once no file of the mount was open", told)
		}
		if st, err := os.Stat(marked); !told && (err != nil || st.Size() != 4096) {
			t.Errorf("the guard of a daemon that died before it mounted touched the store: %v %v", st, err)
		}
	}
}

// blockingRoot is a file system whose lookup of "block" is read and
// never answered until release closes: entered says a lookup began.
type blockingRoot struct {
	fs.Inode
	entered chan struct{}
	release chan struct{}
}

func (r *blockingRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if name == "block" {
		r.entered <- struct{}{}
		<-r.release
	}
	return nil, syscall.ENOENT
}

// TestGuardAbortsKilledDaemon: a process SIGKILLed while its only
// thread, its leader, waits for an answer its FUSE server has read
// sleeps in the kernel before it ever begins to exit, neither a zombie
// nor exiting: a daemon's leader thread waiting so (for a directory's
// lock in an eviction notice) hung a CI run's crash loop for a minute.
// The guard aborts the connection, which lets it exit.
func TestGuardAbortsKilledDaemon(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts FUSE without fusermount")
	}
	statBin, err := exec.LookPath("stat")
	if err != nil {
		t.Skip("needs stat(1), a process of one thread that waits on the mount:", err)
	}
	mp := t.TempDir()
	root := &blockingRoot{entered: make(chan struct{}, 1), release: make(chan struct{})}
	srv, err := fs.Mount(mp, root, &fs.Options{MountOptions: fuse.MountOptions{FsName: "blocking", Logger: log.New(io.Discard, "", 0)}})
	if err != nil {
		t.Skipf("mounting FUSE: %v", err)
	}
	t.Cleanup(func() {
		close(root.release)
		if srv.Unmount() != nil {
			unix.Unmount(mp, unix.MNT_DETACH)
		}
	})
	e, ok := mountinfo.At(mp)
	conn, ok2 := connectionOf(e)
	if !ok || !ok2 {
		t.Fatalf("no FUSE connection at %s: %+v", mp, e)
	}
	cmd := exec.Command(statBin, filepath.Join(mp, "block"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pid := cmd.Process.Pid
	select {
	case <-root.entered:
	case err := <-exited:
		t.Fatalf("stat exited before its lookup reached the server: %v", err)
	}
	cmd.Process.Kill()
	if !waitUntil(func() bool { return killed(pid) }) {
		t.Fatalf("pid %d, SIGKILLed in a FUSE wait, never read as killed", pid)
	}
	if zombie(pid) || exiting(pid) {
		t.Fatalf("pid %d reads as a zombie or exiting: not the case this test is for", pid)
	}

	core, logs := observer.New(zap.WarnLevel)
	r, w, _ := os.Pipe()
	defer w.Close()
	fmt.Fprintln(w, guardMounted, conn, e.ID)
	done := make(chan struct{})
	go func() {
		RunGuard(pid, mp, t.TempDir(), r, zap.New(core))
		close(done)
	}()
	select {
	case <-exited:
	case <-time.After(hangGuard):
		t.Fatalf("the killed process still waits %v on: its guard did not abort the connection: %v", hangGuard, logs.All())
	}
	if n := logs.FilterMessageSnippet("stuck exiting").Len(); n != 1 {
		t.Errorf("the guard said %d times that it aborts: %v", n, logs.All())
	}
	fmt.Fprintln(w, guardStop)
	<-done
}

// TestKilled: this test's own process, alive with no signal pending,
// is not killed (procstat's TestKillPending reads the masks).
func TestKilled(t *testing.T) {
	if killed(os.Getpid()) {
		t.Error("this test's own process reads as killed")
	}
	if killed(1 << 30) {
		t.Error("a process that does not exist reads as killed")
	}
}

// TestGuardLogsWhereTheDaemonDoes: the guard writes its warnings to the
// daemon's standard error when that is a file (or a terminal, or the
// journal's socket), and not into a pipe, whose reader would wait for
// the guard too. The guard here is sh given the guard's arguments, which
// complains that it cannot open a script named __guard.
func TestGuardLogsWhereTheDaemonDoes(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("needs sh:", err)
	}
	o := Options{Mountpoint: t.TempDir(), Store: t.TempDir()}
	logFile, err := os.Create(filepath.Join(t.TempDir(), "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, daemon := range []*os.File{logFile, w} {
		saved := os.Stderr
		os.Stderr = daemon
		g, err := startGuard(sh, o)
		os.Stderr = saved
		if err != nil {
			t.Fatal(err)
		}
		g.Stop()
	}
	w.Close()
	if b, _ := os.ReadFile(logFile.Name()); !bytes.Contains(b, []byte(GuardCommand)) {
		t.Errorf("the guard's complaint did not reach the daemon's log file: %q", b)
	}
	if b, _ := io.ReadAll(r); len(b) != 0 {
		t.Errorf("the guard wrote into the daemon's pipe: %q", b)
	}
}

// TestHeldOnMountByDevice: a descriptor counts as a file of a mount only
// where its mount ID and its device are the mount's: a mount's ID is
// given again once it is gone, and a new mount's file with the old ID
// kept a dead mount's handles unreleased (a fresh-clone CI run).
func TestHeldOnMountByDevice(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "held"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	id, ok := descriptorMount(fmt.Sprintf("/proc/self/fdinfo/%d", f.Fd()))
	if !ok {
		t.Fatal("no mnt_id in this descriptor's fdinfo")
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	if pid, held := heldOnMounts(map[string]string{id: dev}); !held || pid == 0 {
		t.Errorf("a file open on mount %s, device %s: held %v (pid %d), want held", id, dev, held, pid)
	}
	// Its ID, another device: a new mount that took the ID of a gone one.
	if pid, held := heldOnMounts(map[string]string{id: "0:1"}); held {
		t.Errorf("mount %s on another device: held by pid %d, want not held", id, pid)
	}
}

// TestBlockedBehindAWrite: a process of one thread in a write into an
// object an admission waits for cannot write anything else meanwhile
// (blocked): here a head(1) blocked writing into a full FIFO, the FIFO
// standing in for the waited-for object (its inode number as the
// object's ID, its mount's ID as the mount's). A write into another
// object, or on another mount, is not blocked so.
func TestBlockedBehindAWrite(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Held open for reading and writing, never read: the child's open
	// does not wait for a reader, and its writes fill the pipe.
	f, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mnt, ok := descriptorMount(fmt.Sprintf("/proc/self/fdinfo/%d", f.Fd()))
	if !ok {
		t.Fatal("no mnt_id in this descriptor's fdinfo")
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("head", "-c", "1000000", "/dev/zero")
	out, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(time.Minute); ; {
		if fd, ok := writingTo(pid); ok && fd == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("head(1) never read as writing through its descriptor 1 (/proc/%d/syscall)", pid)
		}
		runtime.Gosched()
	}
	waited := blob.ID(st.Ino)
	if !blocked(mnt, pid, core.Waits{1: waited}) {
		t.Errorf("a write into the waited-for object: not blocked")
	}
	if blocked(mnt, pid, core.Waits{1: waited + 1}) {
		t.Errorf("a write into another object than the waited-for one: blocked")
	}
	if blocked(mnt+"0", pid, core.Waits{1: waited}) {
		t.Errorf("a write on another mount: blocked")
	}
	if !blocked(mnt, pid, core.Waits{pid: waited + 1}) {
		t.Errorf("a process of one thread whose admission waits: not blocked")
	}
	if blocked(mnt, os.Getpid(), core.Waits{os.Getpid(): waited}) {
		t.Errorf("this test's process, of several threads: blocked")
	}
}
