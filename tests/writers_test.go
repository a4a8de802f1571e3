package tests

// Writers as shells and subprocesses make them (issue 22): a descriptor
// duplicated by a shell redirect, by dd, or handed to a child as its
// stdout, whose first close (FLUSH) is not the end of writing. These
// tests run real writer processes against the built binary and check
// the ledger, publication and crash safety once the last descriptor is
// released.

import (
	"bufio"
	crand "crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/blob"
	"golang.org/x/sys/unix"
)

// Writer kinds: each holds the object through a descriptor some process
// closes while another copy of it goes on writing.
const (
	kindShell  = "shell" // `for ...; do head -c 1M ...; done > obj`
	kindDD     = "dd"    // dd opens of=, dup2s it onto stdout, closes the original
	kindPopen  = "popen" // subprocess.Popen(stdout=f); f.close() in the parent
	kindNative = "fs_native"
)

// pythonExe is the real python3 interpreter (not a pyenv shim script),
// or "" when there is none.
var pythonExe = sync.OnceValue(func() string {
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
})

func requirePython(t testing.TB) string {
	t.Helper()
	py := pythonExe()
	if py == "" {
		t.Skip("needs python3 for the subprocess.Popen writer")
	}
	return py
}

// popenParent: the parent opens the object, starts the child (popenChild,
// its first argument) with it as stdout, closes its own copy at once and
// waits. Any error in a write or a close makes the exit status 1.
const popenParent = `
import subprocess, sys
child, path = sys.argv[1], sys.argv[2]
rc = 0
f = open(path, 'wb')
p = subprocess.Popen([sys.executable, '-c', child] + sys.argv[3:], stdout=f)
try:
    f.close()
except OSError as e:
    sys.stderr.write('parent close: %s\n' % e)
    rc = 1
if p.wait() != 0:
    rc = 1
sys.exit(rc)
`

// popenChild writes n 1 MiB chunks read from src to its stdout, pausing
// between them, then closes it.
const popenChild = `
import os, sys, time
src, n, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rc = 0
with open(src, 'rb') as s:
    for i in range(n):
        b = s.read(1 << 20)
        try:
            while b:
                b = b[os.write(1, b):]
        except OSError as e:
            sys.stderr.write('child write: %s\n' % e)
            rc = 1
            break
        if pause:
            time.sleep(pause)
try:
    os.close(1)
except OSError as e:
    sys.stderr.write('child close: %s\n' % e)
    rc = 1
sys.exit(rc)
`

// nativeScript is LMCache fs_native's store from a process of its own,
// slowly: O_EXCL temp file, 1 MiB writes with pauses, close, link, unlink.
const nativeScript = `
import os, sys, time
tmp, final, n, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
with open('/dev/urandom', 'rb') as s:
    for i in range(n):
        b = s.read(1 << 20)
        while b:
            b = b[os.write(fd, b):]
        time.sleep(pause)
os.close(fd)
try:
    os.link(tmp, final)
except FileExistsError:
    pass
os.unlink(tmp)
`

// writerProc is one writer process (and its children, one process group).
type writerProc struct {
	kind   string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{}
	err    error // valid once done is closed
}

// startWriter starts a writer of kind writing n 1 MiB chunks to path,
// read from src ("" for /dev/urandom), pausing between chunks. For
// kindNative path is the final name and the temp file is tmp.
func startWriter(t testing.TB, kind, path, tmp, src string, n int, pause time.Duration) *writerProc {
	t.Helper()
	if src == "" {
		src = "/dev/urandom"
	}
	p := strconv.FormatFloat(pause.Seconds(), 'f', 3, 64)
	sleep := ""
	if pause > 0 {
		sleep = "sleep " + p + "; "
	}
	var cmd *exec.Cmd
	switch kind {
	case kindShell:
		// head reads exactly 1 MiB of the shared descriptor per run.
		script := fmt.Sprintf(`exec 3<"$1"; rc=0; for i in $(seq %d); do head -c 1M <&3 || rc=1; %sdone > "$2" || rc=1; exit $rc`, n, sleep)
		cmd = exec.Command("sh", "-c", script, "sh", src, path)
	case kindDD:
		if pause == 0 {
			cmd = exec.Command("dd", "if="+src, "of="+path, "bs=1M", "status=none")
		} else {
			script := fmt.Sprintf(`exec 3<"$1"; for i in $(seq %d); do head -c 1M <&3; %sdone | dd of="$2" bs=1M iflag=fullblock status=none`, n, sleep)
			cmd = exec.Command("sh", "-c", script, "sh", src, path)
		}
	case kindPopen:
		cmd = exec.Command(requirePython(t), "-c", popenParent, popenChild, path, src, strconv.Itoa(n), p)
	case kindNative:
		cmd = exec.Command(requirePython(t), "-c", nativeScript, tmp, path, strconv.Itoa(n), p)
	default:
		t.Fatalf("unknown writer kind %q", kind)
	}
	w := &writerProc{kind: kind, cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = w.stderr
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the %s writer: %v", kind, err)
	}
	go func() { w.err = cmd.Wait(); close(w.done) }()
	t.Cleanup(w.kill)
	return w
}

// wait waits for the writer to exit (bounded) and returns its exit status.
func (w *writerProc) wait(t testing.TB) int {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(120 * time.Second):
		w.kill()
		t.Fatalf("the %s writer still running after 120s; stderr %q", w.kind, w.stderr)
	}
	var ee *exec.ExitError
	switch {
	case w.err == nil:
		return 0
	case errors.As(w.err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("the %s writer: %v", w.kind, w.err)
	return -1
}

func (w *writerProc) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the writer's whole process group and reaps it.
func (w *writerProc) kill() {
	if w.exited() {
		return
	}
	syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
	}
}

// randomFile is a file of n random MiB outside the mount.
func randomFile(t testing.TB, dir string, n int) string {
	t.Helper()
	b := make([]byte, n*MiB)
	crand.Read(b)
	p := filepath.Join(dir, fmt.Sprintf("src-%dMiB", n))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func fileSum(t testing.TB, p string) ([32]byte, int64) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("reading %s: %v", p, err)
	}
	return sha256.Sum256(b), int64(len(b))
}

// waitReleased polls the ledger until nothing is pinned: the kernel's
// RELEASE of the last descriptor comes after close(2) returns.
func waitReleased(t testing.TB, mp string) kvfsStats {
	t.Helper()
	var st kvfsStats
	if !waitFor(func() bool { st = stats(t, mp); return st.PinnedObjects == 0 }) {
		t.Fatalf("still %d objects pinned (%d bytes) %v after the writers exited", st.PinnedObjects, st.PinnedBytes, hangGuard)
	}
	return st
}

// ledgerExact: kvfs stats used_bytes == df used == the store's bytes for
// objects (each file's size rounded up to 4096), measured once.
func ledgerExact(t testing.TB, d *daemon) kvfsStats {
	t.Helper()
	st := stats(t, d.mp)
	df, err1 := dfUsed(d.mp)
	sb, err2 := storeBytes(d.store)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("measuring %s: %v", d.mp, err)
	}
	if st.UsedBytes != df || df != sb || st.UsedBytes > st.CapacityBytes {
		t.Errorf("ledger drift: kvfs stats used_bytes %d, df used %d, store %d; capacity %d, pinned %d, shadow %d",
			st.UsedBytes, df, sb, st.CapacityBytes, st.PinnedObjects, st.ShadowBytes)
	}
	return st
}

// storeLargest is the largest file size in the store's data/.
func storeLargest(t testing.TB, store string) (string, int64) {
	t.Helper()
	var name string
	var most int64
	for rel, st := range storeFiles(t, store) {
		if st.Size > most {
			name, most = rel, st.Size
		}
	}
	return name, most
}

// TestDupWriters: a shell redirect, dd and a Popen child write one
// object each, inside the capacity (8 MiB into 64 MiB) and past it (24
// MiB into 16 MiB). Once the writer has exited and its last descriptor
// is released: stats == df == store; inside, the object is byte for
// byte what was written; past, the writer saw an error (a write or a
// close), the object is not published, and nothing in the store is
// larger than the capacity.
func TestDupWriters(t *testing.T) {
	cases := []struct {
		name     string
		capacity int64
		mib      int
	}{{"inside", 64 * MiB, 8}, {"past", 16 * MiB, 24}}
	for _, kind := range []string{kindShell, kindDD, kindPopen} {
		for _, c := range cases {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				d := mountCache(t, "--capacity", strconv.FormatInt(c.capacity, 10))
				src := ""
				if c.name == "inside" || kind == kindDD {
					src = randomFile(t, t.TempDir(), c.mib)
				}
				obj := filepath.Join(d.mp, "obj")
				pause := time.Duration(0)
				if kind == kindPopen {
					pause = 10 * time.Millisecond
				}
				w := startWriter(t, kind, obj, "", src, c.mib, pause)
				rc := w.wait(t)
				waitReleased(t, d.mp)
				var st unix.Stat_t
				statErr := unix.Lstat(obj, &st)
				if c.name == "inside" {
					if rc != 0 {
						t.Errorf("writer exited %d; stderr %q", rc, w.stderr)
					}
					want, n := fileSum(t, src)
					if statErr != nil {
						t.Errorf("%s: %v, want the %d-byte object", obj, statErr, n)
					} else if got, m := fileSum(t, obj); got != want {
						t.Errorf("%s: %d bytes, sha256 %x; wrote %d bytes, sha256 %x", obj, m, got[:8], n, want[:8])
					}
				} else {
					if rc == 0 {
						t.Errorf("writer of %d MiB into a %d MiB cache exited 0: no write or close told it ENOSPC; stderr %q",
							c.mib, c.capacity/MiB, w.stderr)
					}
					if statErr == nil {
						t.Errorf("%s is published with %d bytes, over the capacity %d", obj, st.Size, c.capacity)
					}
					if name, size := storeLargest(t, d.store); size > c.capacity {
						t.Errorf("the store holds %s with %d bytes, over the capacity %d", name, size, c.capacity)
					}
				}
				ledgerExact(t, d)
				t.Logf("%s %s: writer exit %d, stderr %q", kind, c.name, rc, tail(w.stderr.String(), 300))
			})
		}
	}
}

// TestForkedWritersHoldReservations: Popen's way, a parent opens each
// object, hands it to a child as its stdout and closes its own copy, and
// the child holds it. The reservations stay with the children past the
// parents' closes (a FLUSH is not the end of writing): 10 such writers
// in a cache that holds 8 reservations keep 8 of them and no more, and
// the last two write through the ledger. Kept unshown for the moment a
// RELEASE takes (kept_bytes), they are shown as open writers'
// reservations once it passed, so df says no room is left while the
// children live. Before, each parent's close gave its reservation back
// (reserved_bytes 0 here), and such writers wrote by passthrough into
// room they no longer held: 18-34 MiB past a 64 MiB cache (README,
// Known limits).
func TestForkedWritersHoldReservations(t *testing.T) {
	d := mountCache(t, "--capacity", "32MiB")
	sized := filepath.Join(d.mp, "sized")
	putFile(t, sized, objectBytes("sized", 4*MiB)) // sizes the reservations
	if err := os.Remove(sized); err != nil {
		t.Fatal(err)
	}
	// Its charge goes at its RELEASE, which the kernel sends after
	// close returns: before it, the eighth writer found no room.
	if !waitFor(func() bool { return stats(t, d.mp).UsedBytes == 0 }) {
		t.Fatalf("the removed object is still charged after %v: %+v", hangGuard, stats(t, d.mp))
	}
	var children []*exec.Cmd
	stop := func() {
		for _, c := range children {
			c.Process.Kill()
			c.Wait()
		}
		children = nil
	}
	defer stop()
	for i := range 10 {
		f, err := os.Create(filepath.Join(d.mp, fmt.Sprint("popen-", i)))
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
		c := exec.Command("sleep", "600")
		c.Stdout = f
		err = c.Start()
		f.Close() // the parent's copy
		if err != nil {
			t.Fatal(err)
		}
		children = append(children, c)
	}
	var st kvfsStats
	if !waitFor(func() bool { st = stats(t, d.mp); return st.KeptBytes == 0 && st.PinnedObjects == 10 }) {
		t.Fatalf("10 writers held by children: %+v; the kept reservations never shown %v", st, hangGuard)
	}
	df, err := dfUsed(d.mp)
	if err != nil {
		t.Fatal(err)
	}
	if st.ReservedBytes != 32*MiB || st.UsedBytes != 32*MiB || df != st.UsedBytes || st.PinnedObjects != 10 || st.Evictions != 0 {
		t.Fatalf("10 writers held by children: %+v, df used %d; want 8 reservations of 4 MiB, shown in df", st, df)
	}
	stop()
	if st := waitReleased(t, d.mp); st.UsedBytes != 0 || st.KeptBytes != 0 || st.Objects != 10 {
		t.Fatalf("after the children exited: %+v; want 10 empty objects, nothing charged", st)
	}
	ledgerExact(t, d)
}

// TestInPlaceWriterShowsItsReservation: a writer that opens a stored
// object without truncating it (`exec 3<>x`, `>>`, an r+ mapping) is
// charged a reservation at its open; its st_blocks shows it at once, as
// used and df do. The object was stat'ed before the open, so the
// attributes the kernel cached then (the charge before the reservation)
// had stood in for a minute. And an empty file made by mknod shows no
// blocks.
func TestInPlaceWriterShowsItsReservation(t *testing.T) {
	d := mountCache(t, "--capacity", "32MiB")
	x := filepath.Join(d.mp, "x")
	putFile(t, x, objectBytes("x", 4*MiB))
	waitReleased(t, d.mp)
	for _, flags := range []int{os.O_RDWR, os.O_WRONLY | os.O_APPEND} {
		fi, err := os.Stat(x) // the kernel caches its attributes
		if err != nil {
			t.Fatal(err)
		}
		before := fi.Sys().(*syscall.Stat_t).Blocks * 512
		f, err := os.OpenFile(x, flags, 0)
		if err != nil {
			t.Fatal(err)
		}
		st := statsHere(t, d.mp) // a forked `kvfs stats` would close it (a FLUSH)
		if fi, err = os.Stat(x); err != nil {
			t.Fatal(err)
		}
		blocks := fi.Sys().(*syscall.Stat_t).Blocks * 512
		df, err := dfUsed(d.mp)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.ReservedBytes == 0 || blocks != st.UsedBytes || df != st.UsedBytes {
			t.Errorf("open %#x of a stored 4 MiB object: st_blocks %d bytes (%d before the open), used %d, reserved %d, df %d; want st_blocks == used == df, with a reservation",
				flags, blocks, before, st.UsedBytes, st.ReservedBytes, df)
		}
		waitReleased(t, d.mp)
	}
	// A shell holding the writer (`exec 3<>x`) runs a command, which
	// inherits the descriptor and closes it as it exits: a FLUSH whose
	// RELEASE never comes. The reservation is hidden for a moment, then
	// shown again, with no request to the mount; a stat in that moment
	// had the kernel keep the hidden figure for the cache timeout.
	blocks := func() int64 {
		var st unix.Stat_t
		if err := unix.Stat(x, &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks * 512
	}
	f, err := os.OpenFile(x, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	child := exec.Command("true")
	child.ExtraFiles = []*os.File{f}
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	hidden := blocks()
	var st kvfsStats
	if !waitFor(func() bool { st = statsHere(t, d.mp); return st.KeptBytes == 0 && st.ReservedBytes > 0 }) {
		t.Fatalf("the reservation a child's exit hid was never shown again: %+v", st)
	}
	if got := blocks(); got != st.UsedBytes {
		t.Errorf("a writer whose child exited: st_blocks %d bytes (%d while hidden), used %d, reserved %d; want st_blocks == used",
			got, hidden, st.UsedBytes, st.ReservedBytes)
	}
	f.Close()
	waitReleased(t, d.mp)
	// mknod(2) of a regular file is a create and a close in one request:
	// its reply's attributes, which the kernel keeps, are the closed
	// empty file's (they carried the create's reservation).
	node := filepath.Join(d.mp, "node")
	if err := unix.Mknod(node, unix.S_IFREG|0o644, 0); err != nil {
		t.Fatal(err)
	}
	var nst unix.Stat_t
	if err := unix.Stat(node, &nst); err != nil || nst.Blocks != 0 || nst.Size != 0 {
		t.Errorf("an empty file made by mknod: %d blocks, size %d, %v; want 0 blocks, as on ext4", nst.Blocks, nst.Size, err)
	}
	ledgerExact(t, d)
}

// TestShellLoopTurnsOver: a bash loop stores each object from a process
// of its own (`head -c N > key`), under its final name, leaving each
// unpublished when the next child creates, so after a few stores its
// objects are plain LRU at their last release, and a full cache of them
// turns over: here with a 1-hour grace, where every store past the
// capacity waited the wait limit and failed before (and, until the loop
// made 64 stores, still did at d141ccf). The loop's first objects, made
// before it was learnt, lose their grace at that moment (before, they
// kept it: the first was never evicted).
func TestShellLoopTurnsOver(t *testing.T) {
	d := mountCache(t, "--capacity", "8MiB", "--grace", "1h", "--wait-limit", "1s")
	script := `for i in $(seq 48); do head -c 262144 /dev/zero > d$i || exit 2; done`
	cmd := exec.Command("bash", "-c", script) // bash opens a redirect in the child (dash, in itself)
	cmd.Dir = d.mp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the loop of 48 stores of 256 KiB into 8 MiB: %v: %s", err, out)
	}
	st := waitReleased(t, d.mp)
	if st.Evictions != 48-32 || st.Objects != 32 {
		t.Errorf("after 12 MiB of final-name stores into 8 MiB: %+v; want the 16 oldest evicted", st)
	}
	for i := 1; i <= 48; i++ {
		_, err := os.Stat(filepath.Join(d.mp, fmt.Sprintf("d%d", i)))
		if kept := i > 48-32; kept != (err == nil) {
			t.Errorf("d%d: %v; want the 32 last stores kept, the oldest evicted", i, err)
		}
	}
	ledgerExact(t, d)
}

// poolStores is a multiprocessing.Pool of 4 storing argv[2] rounds of
// 4 objects of 4 MiB under their final names (open "wb", LMCache's
// local_disk), one a worker each round (a barrier), in argv[1], after
// the parent itself stored argv[3] of them.
const poolStores = `
import multiprocessing as mp, os, sys
d, rounds, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = b"k" * (4 << 20)
def init(b):
    global barrier
    barrier = b
def store(i):
    with open(os.path.join(d, "k%d" % i), "wb") as f:
        f.write(data)
    barrier.wait()
if __name__ == "__main__":
    for i in range(first):
        with open(os.path.join(d, "parent%d" % i), "wb") as f:
            f.write(data)
    mp.set_start_method("fork")
    with mp.Pool(4, init, (mp.Barrier(4),)) as p:
        p.map(store, range(4 * rounds), chunksize=1)
`

// TestPoolTurnsOver: a pool of workers storing under final names is
// learnt at its workers' second creates, when the first round's objects
// are closed and unpublished; their graces end then, and the second
// round's at their release, so a full cache of them turns over: here
// with a 1-hour grace, where the second round waited the wait limit
// and failed before (an outside tester: 40 stores of 4 MiB from a pool
// of 4 into a full 16 MiB cache waited whole graces, 8.4-12.3 s).
func TestPoolTurnsOver(t *testing.T) { poolTurnsOver(t, 3, 0) }

// TestPoolAfterItsParentFilledTheCache: a program that stores four
// objects under their final names, filling the cache, then starts a
// pool to store the rest, is learnt whole: a worker's create finds the
// parent's last object left, as the parent's own next create would,
// and the parent's objects lose their graces. Here with a 1-hour grace,
// where every store of the pool was refused (an outside tester); and
// each create comes before the last store's RELEASE (its close(2)
// returned, the RELEASE follows), which counted as no evidence before.
func TestPoolAfterItsParentFilledTheCache(t *testing.T) { poolTurnsOver(t, 2, 4) }

// poolTurnsOver runs poolStores (rounds, after the parent's first) into
// a 16 MiB cache with a 1-hour grace, and requires every store to
// succeed, the last round kept and everything before it evicted.
func poolTurnsOver(t *testing.T, rounds, first int) {
	d := mountCache(t, "--capacity", "16MiB", "--grace", "1h", "--wait-limit", "2s")
	if out, err := exec.Command("python3", "-c", poolStores, d.mp, fmt.Sprint(rounds), fmt.Sprint(first)).CombinedOutput(); err != nil {
		t.Fatalf("a pool of 4 storing %d rounds of 4 MiB objects into 16 MiB, after its parent stored %d: %v: %s", rounds, first, err, out)
	}
	st := waitReleased(t, d.mp)
	if want := int64(first + 4*(rounds-1)); st.Evictions != want || st.Objects != 4 {
		t.Errorf("after %d objects of 4 MiB into 16 MiB: %+v; want all but the last round (%d) evicted", first+4*rounds, st, want)
	}
	for i := 4 * (rounds - 1); i < 4*rounds; i++ {
		if _, err := os.Stat(filepath.Join(d.mp, fmt.Sprintf("k%d", i))); err != nil {
			t.Errorf("k%d: %v; want the last round kept", i, err)
		}
	}
	ledgerExact(t, d)
}

// killDaemonAndWriter is the crash: SIGKILL the daemon, then the writer
// (so the daemon never sees its last release), and require the daemon
// to exit by itself. A daemon stuck in a kernel notification after kill
// -9 is a bug; it is reported, then the connection is aborted so the
// test can go on.
func killDaemonAndWriter(t testing.TB, d *daemon, w *writerProc) {
	t.Helper()
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill -9 of the daemon: %v", err)
	}
	w.kill()
	if d.waitExited() {
		return
	}
	t.Errorf("the daemon for %s had not exited %v after kill -9 (stuck in the kernel?)", d.mp, hangGuard)
	unix.Unmount(d.mp, unix.MNT_FORCE)
	if !d.waitExited() {
		t.Fatalf("the daemon for %s did not exit even after its connection was aborted", d.mp)
	}
}

// waitStoreSize polls the store's file for rel until it holds at least
// n bytes; the writer must still be running then.
func waitStoreSize(t testing.TB, store, rel string, n int64, w *writerProc) {
	t.Helper()
	p := filepath.Join(store, "data", rel)
	var st unix.Stat_t
	reached := false
	waitFor(func() bool {
		reached = unix.Stat(p, &st) == nil && st.Size >= n
		return reached || w.exited()
	})
	switch {
	case reached:
	case w.exited():
		t.Fatalf("the %s writer exited (%v) before %s held %d bytes; stderr %q", w.kind, w.err, rel, n, w.stderr)
	default:
		t.Fatalf("%s did not reach %d bytes in %v (%d now)", rel, n, hangGuard, st.Size)
	}
}

// requireAbsent fails (and returns false) if the mount serves name.
func requireAbsent(t testing.TB, mp, name, why string) bool {
	t.Helper()
	var st unix.Stat_t
	err := unix.Lstat(filepath.Join(mp, name), &st)
	switch {
	case err == nil:
		t.Errorf("%s: %s is served with %d bytes", why, name, st.Size)
	case err != unix.ENOENT:
		t.Errorf("%s: lstat %s: %v", why, name, err)
	}
	return err == unix.ENOENT
}

// TestCrashDupWriter: a writer of each kind writes 1 MiB chunks slowly
// (50 ms apart); once the store holds 4 MiB of it the daemon and the
// writer are SIGKILLed. Restarted on the same store, the object is not
// served (its writer never finished), the ledger is exact, and fsck finds
// the store clean.
func TestCrashDupWriter(t *testing.T) {
	for i, kind := range []string{kindShell, kindShell, kindDD, kindDD, kindPopen, kindPopen} {
		t.Run(fmt.Sprintf("%s-%d", kind, i%2+1), func(t *testing.T) {
			_, mp, store := mountDirs(t)
			flags := []string{"--store", store, "--capacity", "256MiB"}
			d := startDaemon(t, mp, flags...)
			w := startWriter(t, kind, filepath.Join(mp, "obj"), "", "", 64, 50*time.Millisecond)
			waitStoreSize(t, store, "obj", 4*MiB, w)
			killDaemonAndWriter(t, d, w)
			var st unix.Stat_t
			unix.Stat(filepath.Join(store, "data", "obj"), &st)
			d = startDaemon(t, mp, flags...)
			requireAbsent(t, mp, "obj", fmt.Sprintf("after a kill -9 mid-write (%d bytes in the store)", st.Size))
			got := assertQuietEqual(t, d)
			d.stop()
			requireCleanFsck(t, store, got)
		})
	}
}

// TestKilledBeforeRelease: a store whose last close(2) returned is kept
// by a start after the daemon died before the RELEASE the kernel sends
// after that close ($KVFS_FAILPOINT=writer-release kills it exactly
// there): LMCache local_disk's whole file under its final name, a shell
// redirect and dd, each byte for byte. Before, each was reclaimed as
// incomplete (an outside tester: 6 of 25 local_disk stores, the daemon
// killed right after their close). A store closed but still held by a
// duplicate of its descriptor as the daemon died is reclaimed (the
// duplicate may write on), though the duplicate is closed before the
// start; so is one mapped with no descriptor left (the C way), and
// Popen(stdout=f)'s, whose last close was the child's, not
// the opener's: kvfs cannot tell a child's exit from a forked child's
// close of a descriptor its parent writes on.
func TestKilledBeforeRelease(t *testing.T) {
	for _, kind := range []string{"local_disk", kindShell, kindDD, kindPopen, "held", "mapped"} {
		t.Run(kind, func(t *testing.T) {
			_, mp, store := mountDirs(t)
			flags := []string{"--store", store, "--capacity", "64MiB"}
			d := startDaemonEnv(t, kvfsBin, []string{"KVFS_FAILPOINT=writer-release"}, mp, flags...)
			obj := filepath.Join(mp, "obj")
			src := randomFile(t, t.TempDir(), 3)
			data, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			held := -1
			var mapped []byte
			switch kind {
			case "local_disk":
				err = os.WriteFile(obj, data, 0o644)
			case "held":
				var fd int
				if fd, err = unix.Open(obj, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644); err != nil {
					t.Fatal(err)
				}
				if err = writeFull(fd, data); err == nil {
					held, err = unix.Dup(fd)
				}
				if err == nil {
					err = unix.Close(fd)
				}
				if err == nil {
					// Another store's release kills the daemon.
					err = os.WriteFile(filepath.Join(mp, "other"), data, 0o644)
				}
			case "mapped":
				// The C way: open, write, map, close; the mapping holds
				// the file, and no descriptor shows it.
				var fd int
				if fd, err = unix.Open(obj, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC, 0o644); err != nil {
					t.Fatal(err)
				}
				if err = writeFull(fd, data); err == nil {
					mapped, err = unix.Mmap(fd, 0, len(data), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
				}
				if cerr := unix.Close(fd); err == nil {
					err = cerr
				}
			default:
				if rc := startWriter(t, kind, obj, "", src, 3, 0).wait(t); rc != 0 {
					err = fmt.Errorf("exit status %d", rc)
				}
			}
			if err != nil {
				t.Fatalf("the %s store: %v", kind, err)
			}
			if !d.waitExited() {
				t.Fatal("the daemon did not die at the writer's release")
			}
			if held >= 0 || mapped != nil {
				// Held until the dead daemon's guard has looked (it makes
				// the marker plain), as a holder that writes on would be.
				awaitPlainMarker(t, store)
				if held >= 0 {
					unix.Close(held)
				} else {
					unix.Munmap(mapped)
				}
			}
			d = startDaemon(t, mp, flags...)
			stored := func(p string) {
				t.Helper()
				if _, err := os.Stat(p); err != nil {
					t.Fatalf("a store whose close returned, after a kill before its release: %v", err)
				}
				want, n := fileSum(t, src)
				if got, m := fileSum(t, p); got != want || m != n {
					t.Errorf("%s after the kill: %d bytes, not the %d stored", p, m, n)
				}
			}
			switch kind {
			case kindPopen:
				requireAbsent(t, mp, "obj", "last closed by a child")
			case "held":
				requireAbsent(t, mp, "obj", "closed, but held by a duplicate as the daemon died")
				stored(filepath.Join(mp, "other"))
			case "mapped":
				requireAbsent(t, mp, "obj", "closed, but mapped as the daemon died")
			default:
				stored(obj)
			}
			st := assertQuietEqual(t, d)
			d.stop()
			requireCleanFsck(t, store, st)
		})
	}
}

// TestClosedButHeldByAChild: a shell opens a store, writes it, starts a
// child that inherits the descriptor and closes its own: its close is
// the opener's, and its marker records the state it left, but the
// RELEASE does not come, and a moment later the daemon finds the child
// holding the object and makes the marker plain. So when the child is
// killed with the daemon (a container's kill), the start reclaims the
// object instead of serving the prefix the close left as complete (an
// outside tester: a forked child killed with the daemon 20 ms after its
// parent's close, 10 of 10 prefixes served: the dead daemon's guard,
// which vouches for such a record where nothing holds the object, found
// the child gone).
func TestClosedButHeldByAChild(t *testing.T) {
	_, mp, store := mountDirs(t)
	flags := []string{"--store", store, "--capacity", "64MiB"}
	d := startDaemon(t, mp, flags...)
	obj := filepath.Join(mp, "obj")
	sh := exec.Command("sh", "-c", `exec 3>"$1"; head -c 1048576 /dev/urandom >&3; sleep 60 & exec 3>&-; echo closed; wait`, "sh", obj)
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-sh.Process.Pid, syscall.SIGKILL); sh.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "closed\n" {
		t.Fatalf("the shell's store: %q, %v", line, err)
	}
	awaitPlainMarker(t, store)
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
	if !d.waitExited() {
		t.Fatal("the daemon did not exit after kill -9")
	}
	sh.Wait()
	d = startDaemon(t, mp, flags...)
	requireAbsent(t, mp, "obj", "closed by its opener, held by its child, both killed with the daemon")
	st := assertQuietEqual(t, d)
	d.stop()
	requireCleanFsck(t, store, st)
}

// TestExecBesideAWriter: a process that holds a writer open starts a
// child (os/exec, as Python's os.system and glibc's system() do, by
// vfork and exec); the child's exec closes the inherited descriptor, a
// FLUSH from a process in execve. The daemon asked /proc whether that
// process was exiting, and a read of an execve'ing task's stat waits
// for its exec, which waited for the FLUSH: the child and a daemon
// thread hung for good (an outside tester: os.system("true") beside an
// open writer, 3 of 3, both modes).
func TestExecBesideAWriter(t *testing.T) {
	for _, mode := range []string{"passthrough", "no-passthrough"} {
		t.Run(mode, func(t *testing.T) {
			_, mp, store := mountDirs(t)
			flags := []string{"--store", store, "--capacity", "64MiB"}
			if mode == "no-passthrough" {
				flags = append(flags, "--no-passthrough")
			}
			d := startDaemon(t, mp, flags...)
			f, err := os.Create(filepath.Join(mp, "held"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(make([]byte, MiB)); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				done := make(chan error, 1)
				child := exec.Command("true")
				go func() { done <- child.Run() }()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("child %d: %v", i, err)
					}
				case <-time.After(hangGuard):
					if child.Process != nil {
						child.Process.Kill()
					}
					t.Fatalf("child %d of a process holding a writer did not end in %v", i, hangGuard)
				}
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			st := assertQuietEqual(t, d)
			d.stop()
			requireCleanFsck(t, store, st)
		})
	}
}

// awaitPlainMarker waits (bounded) until store's writing/ holds a
// plain crash marker: one that records no mtime.
func awaitPlainMarker(t *testing.T, store string) {
	t.Helper()
	plain := waitFor(func() bool {
		names, _ := blob.ReadMarkers(filepath.Join(store, blob.WritingName))
		return slices.ContainsFunc(names, func(n string) bool {
			_, intact := blob.IntactMark(n)
			return !intact
		})
	})
	if !plain {
		t.Errorf("no plain crash marker in %s after %v", store, hangGuard)
	}
}

// TestCrashPublishedDupWriter: the fs_native store with a duplicate of
// the descriptor left open (write 1 MiB to the temp name, dup, close the
// first copy, link to the final name, unlink the temp), then kill -9 of
// the daemon: the object is still being written (writing ends at the
// last release), so the next start reclaims it rather than serve it. The
// same store with no duplicate is kept. (Before, the link cleared the
// crash marker and the next start served the prefix as complete.)
func TestCrashPublishedDupWriter(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB")
	flags := []string{"--store", d.store, "--capacity", "64MiB"}
	store := func(name string, dup bool) int {
		t.Helper()
		tmp := filepath.Join(d.mp, name+".tmp")
		fd, err := unix.Open(tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeFull(fd, objectBytes(name, MiB)); err != nil {
			t.Fatal(err)
		}
		held := -1
		if dup {
			if held, err = unix.Dup(fd); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.Close(fd); err != nil {
			t.Fatal(err)
		}
		if err := unix.Link(tmp, filepath.Join(d.mp, name)); err != nil {
			t.Fatal(err)
		}
		if err := unix.Unlink(tmp); err != nil {
			t.Fatal(err)
		}
		return held
	}
	store("kept", false)
	held := store("held", true)
	d.kill9()
	// Held while the dead daemon's guard looks, as a duplicate's holder
	// that writes on would be (closed at once, with nothing written
	// since the close, the object is what that close left).
	awaitPlainMarker(t, d.store)
	unix.Close(held)
	d = startDaemon(t, d.mp, flags...)
	requireAbsent(t, d.mp, "held", "published while a duplicate descriptor was open, then a kill -9")
	if got, err := os.ReadFile(filepath.Join(d.mp, "kept")); err != nil {
		t.Errorf("kept after the kill -9: %v", err)
	} else if err := checkObject(got, "kept", MiB); err != nil {
		t.Errorf("kept after the kill -9: %v", err)
	}
	assertQuietEqual(t, d)
	d.stop()
}

// TestKillLoopWriters: kill -9 cycles, each with a writer of a random
// kind (shell redirect, dd, Popen child, fs_native in a process of its
// own) cut off mid-write at a random size, while completed objects
// accumulate (and are evicted: 32 MiB capacity). After each kill the
// daemon must exit by itself (15 s bound); after each restart the writer's object is
// not served, every served object is a completed one byte for byte, and
// the ledger is exact. 10 cycles by default (make test); KVFS_LONG=1
// runs the 100 of issue 22.
func TestKillLoopWriters(t *testing.T) {
	cycles := 10
	if os.Getenv("KVFS_LONG") == "1" {
		cycles = 100
	}
	_, mp, store := mountDirs(t)
	flags := []string{"--store", store, "--capacity", "32MiB", "--grace", "200ms", "--checkpoint-interval", "20ms"}
	d := startDaemon(t, mp, flags...)
	kinds := []string{kindShell, kindDD, kindPopen, kindNative}
	seed := time.Now().UnixNano()
	t.Logf("seed %d, %d cycles", seed, cycles)
	r := rand.New(rand.NewPCG(uint64(seed), 22))
	done := map[string]int{}   // completed objects' names -> size
	drawn := map[string]int{}  // cycles by writer kind
	served := map[string]int{} // cycles whose writer's object was served, by kind
	for c := 0; c < cycles; c++ {
		for i := range 2 {
			name := fmt.Sprintf("done-%03d-%d", c, i)
			data := objectBytes(name, 2*MiB)
			if err := os.WriteFile(filepath.Join(mp, name), data, 0o644); err != nil {
				t.Fatalf("cycle %d: storing %s: %v", c, name, err)
			}
			done[name] = len(data)
		}
		kind := kinds[r.IntN(len(kinds))]
		drawn[kind]++
		name := fmt.Sprintf("w-%03d", c)
		tmp := fmt.Sprintf("%s%d.%d", tmpPrefix, os.Getpid(), c)
		rel := name
		if kind == kindNative {
			rel = tmp
		}
		w := startWriter(t, kind, filepath.Join(mp, name), filepath.Join(mp, tmp), "", 16, 50*time.Millisecond)
		at := int64(1+r.IntN(8)) * MiB
		waitStoreSize(t, store, rel, at, w)
		killDaemonAndWriter(t, d, w)
		d = startDaemon(t, mp, flags...)
		why := fmt.Sprintf("cycle %d: %s writer killed at %d MiB", c, kind, at/MiB)
		if !requireAbsent(t, mp, name, why) || !requireAbsent(t, mp, tmp, why) {
			served[kind]++
			// Reported; removed so the next cycles are judged alone.
			unix.Unlink(filepath.Join(mp, name))
			unix.Unlink(filepath.Join(mp, tmp))
		}
		checkServed(t, mp, done, why)
		assertQuietEqual(t, d)
	}
	t.Logf("%d cycles, writers %v; the killed writer's object was served after the restart in %v", cycles, drawn, served)
	st := assertQuietEqual(t, d)
	d.stop()
	requireCleanFsck(t, store, st)
}

// checkServed: every file the mount serves is a completed object, byte
// for byte (an absent one was evicted).
func checkServed(t testing.TB, mp string, done map[string]int, why string) {
	t.Helper()
	err := filepath.WalkDir(mp, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		size, ok := done[e.Name()]
		if !ok {
			t.Errorf("%s: %s is served, but no writer completed it", why, e.Name())
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := checkObject(data, e.Name(), size); err != nil {
			t.Errorf("%s: %v", why, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: walking %s: %v", why, mp, err)
	}
}
