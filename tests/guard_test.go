package tests

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/blob"
	"golang.org/x/sys/unix"
)

// ddWriter is dd writing what the test feeds it, 1 MiB at a time, into
// one file: a writer whose pace the test sets.
type ddWriter struct {
	feed   io.WriteCloser
	stderr lockedBuffer
	exited chan struct{}
	err    error // valid once exited is closed
}

func startDDWriter(t *testing.T, path string) *ddWriter {
	t.Helper()
	dd := exec.Command("dd", "of="+path, "bs=1M", "iflag=fullblock", "status=none")
	w := &ddWriter{exited: make(chan struct{})}
	var err error
	if w.feed, err = dd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	dd.Stderr = &w.stderr
	if err := dd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.err = dd.Wait(); close(w.exited) }()
	t.Cleanup(func() {
		w.feed.Close()
		select {
		case <-w.exited:
		case <-time.After(10 * time.Second):
			dd.Process.Kill()
			<-w.exited
		}
	})
	return w
}

// TestGuardCapsWriterAfterKill: on a store with no project quota (the
// test's own disk), a writer that has an object open when the daemon is
// killed keeps writing into the backing file (FUSE passthrough), and the
// daemon's guard truncates that marked, never-to-be-served file as it
// grows: the store stays near the capacity while the writer writes 16
// times it, the guard leaves once the writer stops, and the next mount
// serves nothing of the object. The same when the dead mount is detached
// (umount -l) after the kill: the writer's descriptor no longer shows a
// path under the mount point, and the guard, which once looked for
// holders by path, stopped capping at once and let it fill the disk.
func TestGuardCapsWriterAfterKill(t *testing.T) {
	requireRoot(t)
	t.Run("mounted", func(t *testing.T) { guardCapsWriter(t, false) })
	t.Run("detached", func(t *testing.T) { guardCapsWriter(t, true) })
}

func guardCapsWriter(t *testing.T, detach bool) {
	const capacity = 32 << 20
	d := mountCache(t, "--capacity", "32MiB")
	// The guard runs before the mount exists: a kill at any moment a
	// client could have opened a file finds it there.
	if !guardRunning(d.store) {
		t.Fatalf("no guard runs for %s once it is mounted", d.store)
	}
	w := startDDWriter(t, filepath.Join(d.mp, "obj"))
	feed, ddErr, exited := w.feed, &w.stderr, w.exited
	zeros := make([]byte, 1<<20)
	for range 4 {
		if _, err := feed.Write(zeros); err != nil {
			t.Fatalf("feeding the writer: %v; dd said %q", err, ddErr.String())
		}
	}
	if !waitFor(func() bool { n, _ := duCommand(d.store); return n >= 4<<20 }) {
		t.Fatal("4 MiB fed to the writer never reached the store")
	}
	d.kill9()
	if detach {
		if err := unix.Unmount(d.mp, unix.MNT_DETACH); err != nil {
			t.Fatal(err)
		}
	}

	fed, most := int64(4<<20), int64(0)
	for fed < 16*capacity {
		if _, err := feed.Write(zeros); err != nil {
			t.Fatalf("the writer stopped after %d bytes: %v; dd said %q", fed, err, ddErr.String())
		}
		if fed += 1 << 20; fed%(8<<20) == 0 {
			n, _ := duCommand(d.store)
			most = max(most, n)
		}
	}
	feed.Close()
	<-exited
	t.Logf("fed %d bytes after the kill; the store held at most %d (capacity %d); dd: %v %q", fed, most, capacity, w.err, ddErr.String())
	if most > 2*capacity {
		t.Errorf("the store held %d bytes while a writer outlived the daemon, over twice the capacity", most)
	}
	store := d.store
	if !waitFor(func() bool { return !guardRunning(store) }) {
		t.Errorf("the guard of %s is still running after its writer stopped", store)
	}
	d = startDaemon(t, d.mp, "--store", store, "--capacity", "32MiB")
	if _, err := os.Stat(filepath.Join(d.mp, "obj")); !os.IsNotExist(err) {
		t.Errorf("the object written past the daemon's death is served: %v", err)
	}
	ledgerExact(t, d)
}

// guardRunning says whether a daemon's guard for store runs.
func guardRunning(store string) bool {
	out, _ := exec.Command("pgrep", "-f", "__guard .* "+store).Output()
	return len(strings.TrimSpace(string(out))) != 0
}

// TestKillKeepsObjectsOpenedButUnchanged: an object that was complete
// when a writer opened it (O_RDWR to read, as `exec 3<>f`, numpy's
// memmap r+ or open(..., "r+b") do, or O_WRONLY with nothing written)
// survives a kill -9 of the daemon whole: the guard leaves it alone and
// the next start serves it. One that its writer changed (5 bytes
// written in place, or cut by O_TRUNC, or written with its mtime put
// back by utimes) is reclaimed as before. Before, all three were
// emptied by the guard within a second and reclaimed at the start.
func TestKillKeepsObjectsOpenedButUnchanged(t *testing.T) {
	requireRoot(t)
	d := mountCache(t, "--capacity", "32MiB")
	const size = 3 * MiB
	names := []string{"read-write", "write-only", "changed", "truncated", "restored"}
	for _, name := range names {
		putFile(t, filepath.Join(d.mp, name), objectBytes(name, size))
	}
	var fds []int
	for _, name := range names {
		flags := unix.O_RDWR
		switch name {
		case "write-only":
			flags = unix.O_WRONLY
		case "truncated":
			flags = unix.O_WRONLY | unix.O_TRUNC
		}
		fd, err := unix.Open(filepath.Join(d.mp, name), flags|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
		switch name {
		case "read-write":
			if n, err := unix.Pread(fd, make([]byte, 4096), 0); n != 4096 || err != nil {
				t.Fatalf("pread: %d, %v", n, err)
			}
		case "changed":
			if _, err := unix.Pwrite(fd, []byte("12345"), 0); err != nil {
				t.Fatal(err)
			}
		case "restored":
			// Written, then its mtime put back through the mount: the
			// marker no longer trusts the mtime (was: served changed).
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				t.Fatal(err)
			}
			if _, err := unix.Pwrite(fd, []byte("12345"), 0); err != nil {
				t.Fatal(err)
			}
			if err := unix.UtimesNano(filepath.Join(d.mp, name), []unix.Timespec{st.Atim, st.Mtim}); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.kill9()
	// The guard empties the changed object while its writer holds it,
	// and leaves the others whole.
	stored := func(name string) int64 {
		fi, err := os.Stat(filepath.Join(d.store, "data", name))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	if !waitFor(func() bool { return stored("changed") == 0 }) {
		t.Fatalf("the guard did not cap the changed object: %d bytes stored", stored("changed"))
	}
	for _, name := range names[:2] {
		if n := stored(name); n != size {
			t.Errorf("%s: %d bytes stored after the kill, want %d", name, n, size)
		}
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	store := d.store
	if !waitFor(func() bool { return !guardRunning(store) }) {
		t.Errorf("the guard of %s is still running after its writers closed", store)
	}
	d = startDaemon(t, d.mp, "--store", store, "--capacity", "32MiB")
	for _, name := range names[:2] {
		got, err := os.ReadFile(filepath.Join(d.mp, name))
		if err != nil {
			t.Errorf("%s after the restart: %v", name, err)
		} else if err := checkObject(got, name, size); err != nil {
			t.Errorf("%s after the restart: %v", name, err)
		}
	}
	for _, name := range names[2:] {
		if _, err := os.Stat(filepath.Join(d.mp, name)); !os.IsNotExist(err) {
			t.Errorf("%s: the object changed at the crash is served: %v", name, err)
		}
	}
	if st := ledgerExact(t, d); st.Objects != 2 {
		t.Errorf("%d objects after the restart, want 2", st.Objects)
	}
	markers, err := blob.ReadMarkers(filepath.Join(store, blob.WritingName))
	if err != nil || len(markers) != 0 {
		t.Errorf("markers left after the start: %q, %v", markers, err)
	}
}

// TestKillKeepsNoObjectAWriterStillHolds: a writer of the dead daemon's
// mount that still holds its object open when the next daemon starts
// could change it afterwards (passthrough writes outlive the daemon), so
// the start reclaims it even though nothing changed it yet; the
// writer's later write lands in a file no name serves (was: the start
// kept it as intact, and served the bytes written after it). The same
// when the dead mount was detached (umount -l) before the start, where
// no mount table lists it: the dead daemon's guard, still capping for
// that writer, tells the start (was: kept as intact).
func TestKillKeepsNoObjectAWriterStillHolds(t *testing.T) {
	requireRoot(t)
	t.Run("mounted", func(t *testing.T) { killKeepsNoHeldObject(t, false) })
	t.Run("detached", func(t *testing.T) { killKeepsNoHeldObject(t, true) })
}

func killKeepsNoHeldObject(t *testing.T, detach bool) {
	d := mountCache(t, "--capacity", "32MiB")
	const size = 1 * MiB
	putFile(t, filepath.Join(d.mp, "held"), objectBytes("held", size))
	fd, err := unix.Open(filepath.Join(d.mp, "held"), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	d.kill9()
	if detach {
		if err := unix.Unmount(d.mp, unix.MNT_DETACH); err != nil {
			t.Fatal(err)
		}
	}
	store := d.store
	d = startDaemon(t, d.mp, "--store", store, "--capacity", "32MiB")
	if _, err := os.Stat(filepath.Join(d.mp, "held")); !os.IsNotExist(err) {
		t.Fatalf("an object a writer of the dead mount still holds is served: %v", err)
	}
	unix.Pwrite(fd, []byte("written after the start"), 0) // ENOTCONN, or into the orphan
	if _, err := os.Stat(filepath.Join(d.mp, "held")); !os.IsNotExist(err) {
		t.Fatalf("held is served after its old writer wrote: %v", err)
	}
	ledgerExact(t, d)
}

// TestLockRemovedUnderLiveMount: kvfs.lock removed while a daemon
// serves the store does not let a second daemon or fsck at it: both are
// refused, naming the live mount, and the first serves on. Before, a
// second mount served the same store beside the first, and fsck --repair
// deleted the object a live writer was writing (an outside tester's
// finding).
func TestLockRemovedUnderLiveMount(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	putFile(t, filepath.Join(d.mp, "obj"), objectBytes("obj", 5000))
	if err := os.Remove(filepath.Join(d.store, "kvfs.lock")); err != nil {
		t.Fatal(err)
	}
	mp2 := filepath.Join(t.TempDir(), "mnt2")
	if err := os.Mkdir(mp2, 0o755); err != nil {
		t.Fatal(err)
	}
	res := runKvfsTimeout(t, 30*time.Second, "mount", "--store", d.store, "--background", mp2)
	if res.code != 2 || !strings.Contains(res.stderr, "no longer holds its lock") {
		runKvfs(t, "unmount", mp2)
		t.Fatalf("a second mount of a served store whose lock was removed: exit %d, %q", res.code, res.stderr)
	}
	res = runKvfsTimeout(t, 30*time.Second, "fsck", "--store", d.store, "--repair")
	if res.code != 2 || !strings.Contains(res.stderr, "no longer holds its lock") {
		t.Fatalf("fsck --repair of a served store whose lock was removed: exit %d, %q", res.code, res.stderr)
	}
	if got, err := os.ReadFile(filepath.Join(d.mp, "obj")); err != nil || !bytes.Equal(got, objectBytes("obj", 5000)) {
		t.Fatalf("the first mount after the refusals: %v", err)
	}
	d.stop()
}
