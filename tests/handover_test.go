package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/s3test"
	"golang.org/x/sys/unix"
)

// handOver runs `kvfs mount FLAGS MP` with bin where old serves the
// mount: the new daemon must take the mount over (never unmount it) and
// old must exit 0 having handed it over.
func handOver(t *testing.T, bin string, old *daemon, flags ...string) *daemon {
	t.Helper()
	d := startSuccessor(t, bin, nil, old, flags...)
	if !d.alive() {
		t.Fatalf("the new daemon did not take the mount over (%v); its output:\n%s\nthe old one's:\n%s", d.waitErr, d.out, old.out)
	}
	if !old.waitExited() || old.waitErr != nil || !strings.Contains(old.out.String(), "mount handed over") {
		t.Fatalf("the old daemon did not hand over and exit 0 (%v); its output:\n%s", old.waitErr, old.out)
	}
	if strings.Contains(old.out.String(), "DATA RACE") {
		t.Fatalf("the old daemon (a -race build) reported a data race:\n%s", old.out)
	}
	return d
}

const KiB = 1 << 10

// startSuccessor runs `kvfs mount FLAGS MP` with bin and env where old
// serves the mount, and returns once the new daemon serves or has
// exited.
func startSuccessor(t *testing.T, bin string, env []string, old *daemon, flags ...string) *daemon {
	t.Helper()
	d := spawnDaemon(t, bin, env, old.mp, old.store, flags...)
	d.mountID = old.mountID
	d.printed("kvfs: serving")
	if m, ok := mountAt(d.mp); ok && d.alive() {
		d.mountID = m.ID
	}
	return d
}

// stormKey is one object a storm worker owns: it knows at every moment
// whether the object exists and what it holds.
type stormKey struct {
	name string
	size int // 0: absent
}

// TestHandoverUnderLoad (issue 19): the daemon is replaced 12 times,
// alternating two builds and two capacities, while four workers store
// (LMCache fs_native: temp file, link, unlink), load, stat and unlink
// objects, a descriptor and a read-only mapping of an object are held
// across every handover, and a writer keeps one object open, writing a
// piece after each. Every client call must succeed; after each
// handover the mount is the same mount (ID and device), every object
// holds what its worker last stored, the held object reads the same
// through both, and the ledger equals the store. The writer's object is
// whole at its close, and the store is clean at the end.
func TestHandoverUnderLoad(t *testing.T) {
	requireRoot(t)
	dir, mp, store := mountDirs(t)
	other := filepath.Join(dir, "kvfs-b")
	build := exec.Command("go", "build", "-ldflags", "-X main.build=b", "-o", other, "github.com/kvfs/kvfs/cmd/kvfs")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the second kvfs: %v\n%s", err, out)
	}
	capacities := []string{"64MiB", "48MiB"}
	d := startDaemon(t, mp, "--store", store, "--capacity", capacities[0])
	mountID := d.mountID
	var st0 unix.Stat_t
	if err := unix.Stat(mp, &st0); err != nil {
		t.Fatal(err)
	}

	// The held object: a descriptor and a read-only shared mapping.
	heldData := make([]byte, 2*MiB)
	fillObject(heldData, "held")
	heldPath := filepath.Join(mp, "held.data")
	if err := os.WriteFile(heldPath, heldData, 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(heldPath)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	mapped, err := unix.Mmap(int(held.Fd()), 0, len(heldData), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mapped)
	// The writer, one piece before the first handover and one after each.
	piece := make([]byte, 256*KiB)
	writerPath := filepath.Join(mp, "writer.data")
	writer, err := os.OpenFile(writerPath, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	written := 0
	writePiece := func() {
		t.Helper()
		for i := range piece {
			piece[i] = byte(written/len(piece) + i)
		}
		if _, err := writer.Write(piece); err != nil {
			t.Fatalf("the writer held across handovers: %v", err)
		}
		written += len(piece)
	}
	writePiece()

	// The storm.
	var pause sync.RWMutex // a worker holds it shared across each call; checks take it
	var ops, failures atomic.Int64
	var firstErr atomic.Value
	fail := func(err error) {
		if failures.Add(1) == 1 {
			firstErr.Store(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	keys := make([][]stormKey, 4)
	seq := &atomic.Int64{}
	for w := range keys {
		for i := range 8 {
			keys[w] = append(keys[w], stormKey{name: fmt.Sprintf("w%d-k%d", w, i)})
		}
		wg.Go(func() {
			cl := &fsNative{base: mp, seq: seq, whole: w%2 == 0}
			r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			buf := make([]byte, MiB)
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := &keys[w][r.IntN(len(keys[w]))]
				pause.RLock()
				err := stormOp(cl, k, r, buf)
				pause.RUnlock()
				if err != nil {
					fail(fmt.Errorf("worker %d, %s: %w", w, k.name, err))
				}
				ops.Add(1)
			}
		})
	}
	paused := false // the test holds pause (a round's checks)
	defer func() {
		if paused {
			// A round's check failed with pause held: the workers
			// wait for it, and the wait below would never end.
			pause.Unlock()
		}
		close(stop)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(hangGuard):
			// Calls that no daemon will ever answer: abort the
			// connection, which fails them, so the test can end.
			unix.Unmount(mp, unix.MNT_FORCE)
			<-done
		}
	}()
	wantOps := func(n int64) {
		t.Helper()
		target := ops.Load() + n
		if !waitFor(func() bool { return ops.Load() >= target || failures.Load() > 0 }) {
			t.Fatalf("the storm stalled at %d operations", ops.Load())
		}
	}

	for round := 1; round <= 12; round++ {
		wantOps(40)
		bin, build := kvfsBin, "dev"
		if round%2 == 1 {
			bin, build = other, "b"
		}
		capacity := capacities[round%2]
		d = handOver(t, bin, d, "--store", store, "--capacity", capacity)
		if !d.printed(`"build": "` + build + `"`) {
			t.Fatalf("round %d: the daemon is not build %s:\n%s", round, build, d.out)
		}
		// It loaded the index while the old one served, and took only
		// what changed since in the pause.
		if !d.printed(`"two_phases": true`) {
			t.Fatalf("round %d: the handover was not in two phases:\n%s", round, d.out)
		}
		wantOps(40)
		if n := failures.Load(); n > 0 {
			t.Fatalf("round %d: %d client calls failed; the first: %v\nthe daemon's output:\n%s", round, n, firstErr.Load(), d.out)
		}
		var st unix.Stat_t
		m, ok := mountAt(mp)
		if err := unix.Stat(mp, &st); err != nil || !ok || m.ID != mountID || st.Dev != st0.Dev {
			t.Fatalf("round %d: the mount changed: ID %d (was %d), device %d (was %d), %v", round, m.ID, mountID, st.Dev, st0.Dev, err)
		}
		pause.Lock()
		paused = true
		checkStorm(t, mp, keys)
		if !bytes.Equal(mapped, heldData) {
			t.Fatalf("round %d: the held mapping changed", round)
		}
		got := make([]byte, len(heldData))
		if n, err := held.ReadAt(got, 0); n != len(got) || err != nil || !bytes.Equal(got, heldData) {
			t.Fatalf("round %d: the held descriptor reads %d bytes, %v", round, n, err)
		}
		writePiece()
		requireLedgerIsStore(t, d)
		s := stats(t, mp)
		if want := fmt.Sprint(s.CapacityBytes); capacity != "64MiB" && want != fmt.Sprint(48*MiB) || capacity == "64MiB" && want != fmt.Sprint(64*MiB) {
			t.Fatalf("round %d: capacity %s after a handover with --capacity %s", round, want, capacity)
		}
		pause.Unlock()
		paused = false
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d client calls failed; the first: %v", n, firstErr.Load())
	}
	if err := writer.Close(); err != nil {
		t.Fatalf("closing the writer: %v", err)
	}
	data, err := os.ReadFile(writerPath)
	if err != nil || len(data) != written {
		t.Fatalf("the writer's object: %d bytes, %v; want %d", len(data), err, written)
	}
	for off := 0; off < written; off += len(piece) {
		if data[off] != byte(off/len(piece)) || data[off+len(piece)-1] != byte(off/len(piece)+len(piece)-1) {
			t.Fatalf("the writer's object is wrong at piece %d", off/len(piece))
		}
	}
	unix.Munmap(mapped)
	mapped = nil
	held.Close()
	t.Logf("12 handovers under a storm of %d calls, 0 failed", ops.Load())
	final := stats(t, mp)
	d.stop()
	requireCleanFsck(t, store, final)
}

// stormOp is one call of a storm worker on its key k: a store of an
// absent object, else a load, a stat or an unlink of it.
func stormOp(cl *fsNative, k *stormKey, r *rand.Rand, buf []byte) error {
	p := filepath.Join(cl.base, k.name+".data")
	if k.size == 0 {
		size := 64*KiB + r.IntN(15)*64*KiB
		data := buf[:size]
		fillObject(data, k.name)
		wrote, err := cl.store(k.name, data)
		if err != nil {
			return err
		}
		if !wrote {
			return errors.New("store found the object present")
		}
		k.size = size
		return nil
	}
	switch r.IntN(4) {
	case 0, 1:
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return checkObject(data, k.name, k.size)
	case 2:
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return err
		}
		if st.Size != int64(k.size) {
			return fmt.Errorf("stat: %d bytes, want %d", st.Size, k.size)
		}
		return nil
	}
	if err := unix.Unlink(p); err != nil {
		return err
	}
	k.size = 0
	return nil
}

// checkStorm requires every object to hold what its worker last stored,
// and every other name of the workers to be absent.
func checkStorm(t *testing.T, mp string, keys [][]stormKey) {
	t.Helper()
	for _, ks := range keys {
		for _, k := range ks {
			data, err := os.ReadFile(filepath.Join(mp, k.name+".data"))
			switch {
			case k.size == 0 && !errors.Is(err, fs.ErrNotExist):
				t.Fatalf("%s: unlinked, yet %d bytes, %v", k.name, len(data), err)
			case k.size > 0 && err != nil:
				t.Fatalf("%s: lost: %v", k.name, err)
			case k.size > 0:
				if err := checkObject(data, k.name, k.size); err != nil {
					t.Fatalf("%s: changed: %v", k.name, err)
				}
			}
		}
	}
}

// requireLedgerIsStore: what the ledger charges, less the reservations
// of open writers, is what the store holds (each inode once, rounded up
// to a block), once the poller has seen the writer's last bytes.
func requireLedgerIsStore(t *testing.T, d *daemon) {
	t.Helper()
	var msg string
	if !waitFor(func() bool {
		st := stats(t, d.mp)
		held, err := storeBytes(d.store)
		if err != nil {
			t.Fatal(err)
		}
		msg = fmt.Sprintf("used %d, reserved %d, the store holds %d (pinned %d objects, shadow %d bytes)", st.UsedBytes, st.ReservedBytes, held, st.PinnedObjects, st.ShadowBytes)
		return st.UsedBytes-st.ReservedBytes == held
	}) {
		t.Fatalf("the ledger is not the store after a handover: %s", msg)
	}
}

// TestHandoverKilledAtEveryStep (issue 19): a handover whose old or new
// daemon is killed (kill -9) at each of its steps leaves a mount that
// serves every object stored before it, byte for byte, from exactly one
// daemon: the old one serving on (the new one died before it was
// ready), the new one (the old one died after it passed the mount, or
// before it passed anything: then the new one mounts afresh, as after a
// crash), or, when the new one dies after it said ready, a dead mount
// that the next `kvfs mount` recovers, as after a crash today. A held
// descriptor reads on wherever the mount was never lost.
func TestHandoverKilledAtEveryStep(t *testing.T) {
	requireRoot(t)
	const (
		oldServes  = "the old daemon serves on"
		newServes  = "the new daemon serves the same mount"
		newMounts  = "the new daemon mounts afresh"
		nextMounts = "the next kvfs mount recovers"
	)
	for _, c := range []struct {
		step, want string
	}{
		{"handover-asked", newMounts},
		{"handover-prepared", newMounts},
		{"handover-round", newMounts},
		{"handover-quiesced", newMounts},
		{"handover-frozen", newMounts},
		{"handover-offered", newServes},
		{"handover-ready", newServes},
		{"takeover-preloaded", oldServes},
		{"takeover-round", oldServes},
		{"takeover-offered", oldServes},
		{"takeover-adopted", oldServes},
		{"takeover-ready", nextMounts},
		{"takeover-resent", nextMounts},
	} {
		t.Run(c.step, func(t *testing.T) {
			_, mp, store := mountDirs(t)
			flags := []string{"--store", store, "--capacity", "64MiB"}
			env := []string{"KVFS_FAILPOINT=" + c.step}
			var oldEnv, newEnv []string
			if strings.HasPrefix(c.step, "handover-") {
				oldEnv = env
			} else {
				newEnv = env
			}
			old := startDaemonEnv(t, kvfsBin, oldEnv, mp, flags...)
			want := map[string][]byte{}
			for i := range 5 {
				name := fmt.Sprintf("obj%d.data", i)
				want[name] = make([]byte, (i+1)*100*KiB)
				fillObject(want[name], name)
				if err := os.WriteFile(filepath.Join(mp, name), want[name], 0o644); err != nil {
					t.Fatal(err)
				}
			}
			held, err := os.Open(filepath.Join(mp, "obj4.data"))
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			// A writer half-way: where the mount is never lost it
			// finishes after, and its object must be whole (no guard of
			// a dead daemon may empty it under its successor).
			half := make([]byte, 400*KiB)
			fillObject(half, "writer")
			writer, err := os.OpenFile(filepath.Join(mp, "writer.data"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer writer.Close()
			if _, err := writer.Write(half[:200*KiB]); err != nil {
				t.Fatal(err)
			}
			d := startSuccessor(t, kvfsBin, newEnv, old, flags...)
			serving := d
			switch c.want {
			case oldServes:
				if !d.waitExited() || !old.alive() {
					t.Fatalf("want the new daemon dead and the old one serving: new alive %v, old alive %v\nnew:\n%s\nold:\n%s", d.alive(), old.alive(), d.out, old.out)
				}
				serving = old
			case newServes, newMounts:
				if !d.alive() || !old.waitExited() {
					t.Fatalf("want the new daemon serving and the old one gone: new alive %v, old alive %v\nnew:\n%s\nold:\n%s", d.alive(), old.alive(), d.out, old.out)
				}
			case nextMounts:
				if !d.waitExited() || !old.waitExited() {
					t.Fatalf("want both daemons gone: new alive %v, old alive %v", d.alive(), old.alive())
				}
				serving = startDaemon(t, mp, flags...)
			}
			if m, ok := mountAt(mp); !ok || (c.want == newServes || c.want == oldServes) != (m.ID == old.mountID) {
				t.Fatalf("%s: mount ID %d (%v), the old mount's %d", c.want, m.ID, ok, old.mountID)
			}
			if c.want == newServes || c.want == oldServes {
				got := make([]byte, len(want["obj4.data"]))
				if n, err := held.ReadAt(got, 0); n != len(got) || err != nil || !bytes.Equal(got, want["obj4.data"]) {
					t.Fatalf("the held descriptor reads %d bytes, %v", n, err)
				}
				// A dead old daemon's guard, had it not stood down,
				// would be emptying the writer's file (or have aborted
				// the connection): it must be gone.
				if c.want == newServes && !waitFor(func() bool { return guardsOf(old.cmd.Process.Pid) == 0 }) {
					t.Fatal("the dead old daemon's guard still runs")
				}
				if _, err := writer.Write(half[200*KiB:]); err != nil {
					t.Fatalf("the writer after the handover: %v", err)
				}
				if err := writer.Close(); err != nil {
					t.Fatalf("closing the writer: %v", err)
				}
				want["writer.data"] = half
			}
			writer.Close()
			held.Close()
			for name, data := range want {
				got, err := os.ReadFile(filepath.Join(mp, name))
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("%s: %d bytes, %v", name, len(got), err)
				}
			}
			stopTheOneDaemon(t, serving, store)
		})
	}
}

// stopTheOneDaemon checks that d is the one daemon serving store (never
// two after a handover), stops it, and checks the store clean against
// d's last figures.
func stopTheOneDaemon(t *testing.T, d *daemon, store string) {
	t.Helper()
	if n := daemonsOf(store); n != 1 {
		t.Fatalf("%d daemons serve the store", n)
	}
	st := stats(t, d.mp)
	d.stop()
	requireCleanFsck(t, store, st)
}

// daemonsOf counts the live kvfs mount processes whose command line
// names store.
func daemonsOf(store string) int {
	return processes(func(args []string) bool {
		return len(args) > 1 && args[1] == "mount" && strings.Contains(strings.Join(args, " "), store)
	})
}

// guardsOf counts the live guards of daemon pid (kvfs __guard PID ...).
func guardsOf(pid int) int {
	return processes(func(args []string) bool {
		return len(args) > 2 && args[1] == "__guard" && args[2] == strconv.Itoa(pid)
	})
}

// processes counts the live processes (not zombies) whose arguments
// match. A process whose parent has the same command line is that
// parent's fork before its exec (a daemon starting its guard), not a
// process of its own: CI once counted one as a second daemon.
func processes(match func(args []string) bool) int {
	n := 0
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
		if !match(strings.Split(string(cmdline), "\x00")) || bytes.Contains(stat, []byte(") Z ")) {
			continue
		}
		// stat: "pid (comm) state ppid ...", comm may hold spaces.
		ppid := ""
		if i := bytes.LastIndexByte(stat, ')'); i > 0 {
			if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
				ppid = f[1]
			}
		}
		if parent, err := os.ReadFile(filepath.Join("/proc", ppid, "cmdline")); ppid != "" && err == nil && bytes.Equal(parent, cmdline) {
			continue
		}
		n++
	}
	return n
}

// TestHandoverAsSystemdReload: the unit's ExecReload, `kvfs mount
// --background` over the live mount, returns 0 once the new daemon
// serves; under systemd's $NOTIFY_SOCKET the new daemon makes itself
// the service's main process (MAINPID) before the old daemon exits,
// then says READY=1; the old one exits 0 without STOPPING=1 (the
// service is not stopping) and the mount serves on.
func TestHandoverAsSystemdReload(t *testing.T) {
	requireRoot(t)
	dir, mp, store := mountDirs(t)
	l := listenNotify(t, filepath.Join(dir, "notify.sock"), mp)
	flags := []string{"--store", store, "--capacity", "16MiB"}
	d := startDaemonEnv(t, kvfsBin, []string{l.env}, mp, flags...)
	if n := l.next(t, "READY=1"); !strings.Contains(n.msg, "READY=1") {
		t.Fatalf("first datagram %q", n.msg)
	}
	data := make([]byte, 300*KiB)
	fillObject(data, "obj")
	if err := os.WriteFile(filepath.Join(mp, "obj.data"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	reload := exec.Command(kvfsBin, append(append([]string{"mount", "--background"}, flags...), mp)...)
	reload.Env = append(os.Environ(), l.env)
	// A file, as systemd's journal is: the daemon keeps writing to it
	// after the command returns (a pipe would not end).
	logPath := filepath.Join(dir, "reload.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	reload.Stdout, reload.Stderr = logFile, logFile
	// A descriptor the command inherits, on the very mount it takes
	// over (a shell's `exec 7<obj.data`), at 5: past the report pipe's 3.
	held, err := os.Open(filepath.Join(mp, "obj.data"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	reload.ExtraFiles = []*os.File{logFile, logFile, held}
	if err := reload.Run(); err != nil {
		out, _ := os.ReadFile(logPath)
		t.Fatalf("kvfs mount --background: %v\n%s", err, out)
	}
	var pid int
	t.Cleanup(func() { stopDetached(t, mp, pid) })
	main := l.next(t, "MAINPID=")
	if _, err := fmt.Sscanf(main.msg, "MAINPID=%d", &pid); err != nil || pid == d.cmd.Process.Pid || pid == 0 {
		t.Fatalf("after the reload: %q; want MAINPID= of the new daemon (the old one is %d)", main.msg, d.cmd.Process.Pid)
	}
	if ready := l.next(t, "READY=1"); !strings.Contains(ready.msg, "READY=1") || !ready.answered {
		t.Fatalf("then %q (mount answering: %v); want READY=1", ready.msg, ready.answered)
	}
	if !d.waitExited() || d.waitErr != nil {
		t.Fatalf("the old daemon did not exit 0: %v", d.waitErr)
	}
	// The new daemon holds none of it: it kept that mount busy at the
	// unmount (an outside tester's finding).
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); strings.HasPrefix(target, mp+"/") {
			t.Errorf("the new daemon holds %s at descriptor %s, inherited from the command that started it", target, fd.Name())
		}
	}
	if strings.Contains(d.out.String(), "STOPPING") {
		t.Fatal("the old daemon said STOPPING=1")
	}
	select {
	case n := <-l.received:
		t.Fatalf("unexpected datagram %q", n.msg)
	default:
	}
	if got, err := os.ReadFile(filepath.Join(mp, "obj.data")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after the reload: %d bytes, %v", len(got), err)
	}
	if m, ok := mountAt(mp); !ok || m.ID != d.mountID {
		t.Fatalf("the mount changed: %v %v", m.ID, ok)
	}
}

// stopDetached unmounts mp and waits for daemon pid, which is not the
// test's child, to exit (killing it if it does not).
func stopDetached(t *testing.T, mp string, pid int) {
	runKvfs(nil, "unmount", mp)
	if pid == 0 {
		return
	}
	if !waitWithin(10*time.Second, func() bool { return unix.Kill(pid, 0) != nil }) {
		t.Errorf("the detached daemon %d still runs after the unmount", pid)
		unix.Kill(pid, unix.SIGKILL)
	}
}

// TestHandoverWithRemoteTier: a mount with a remote tier hands over in
// one phase (the successor loads the index in the pause: the tier's
// journal of pending uploads is the old daemon's until then). The
// objects stored before read the same after, and the successor's tier
// uploads what is stored after.
func TestHandoverWithRemoteTier(t *testing.T) {
	requireRoot(t)
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a")
	before := objectBytes("before", 300*KiB)
	a.put("before", before)
	a.uploaded()
	flags := []string{"--remote", srv.URL(remotePrefix), "--capacity", "64MiB", "--grace", "0s"}
	d := startSuccessor(t, kvfsBin, srv.Env(), a.daemon, flags...)
	if !d.alive() || !a.waitExited() || a.waitErr != nil {
		t.Fatalf("no handover: new alive %v, old exit %v\nnew:\n%s\nold:\n%s", d.alive(), a.waitErr, d.out, a.out)
	}
	defer d.stop()
	if !d.printed(`"two_phases": false`) {
		t.Fatalf("a remote tier's handover was not in one phase:\n%s", d.out)
	}
	if m, ok := mountAt(d.mp); !ok || m.ID != a.mountID {
		t.Fatalf("mount ID %d after the handover, was %d", m.ID, a.mountID)
	}
	b := &remoteNode{daemon: d, fs: &fsNative{base: d.mp, seq: new(atomic.Int64)}}
	b.mustLoad("before", before)
	after := objectBytes("after", 200*KiB)
	b.put("after", after)
	if f := b.uploaded(); f.Uploads != 1 || f.UploadedBytes != int64(len(after)) {
		t.Fatalf("the successor's uploads: %+v", f)
	}
	if got, _ := remoteObject(t, srv, "after"); !bytes.Equal(got, after) {
		t.Fatalf("the bucket holds %d bytes of after", len(got))
	}
	requireLedgerIsStore(t, d)
}

// TestHandoverToSmallerCapacity: a handover to a smaller --capacity
// evicts at once what may go, coldest first, and the rest (objects in
// their grace period, one held open by a reader) as each comes free,
// until the cache is within its capacity: df == du == used_bytes <=
// capacity. Before, that eviction was all or nothing, so with the recent
// objects alone past the new capacity nothing went, and nothing tried
// again: used stayed at 9 times the capacity until the next store.
func TestHandoverToSmallerCapacity(t *testing.T) {
	d := mountCache(t, "--capacity", "256MiB", "--grace", "1s")
	for i := range 10 {
		// Published by a rename: their grace is over.
		tmp, final := filepath.Join(d.mp, fmt.Sprintf("old%d.tmp", i)), filepath.Join(d.mp, fmt.Sprintf("old%d", i))
		putFile(t, tmp, objectBytes(final, 3*MiB))
		if err := os.Rename(tmp, final); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		putFile(t, filepath.Join(d.mp, fmt.Sprintf("new%d", i)), objectBytes(fmt.Sprint(i), 3*MiB))
	}
	held, err := os.Open(filepath.Join(d.mp, "new0"))
	if err != nil {
		t.Fatal(err)
	}
	d = handOver(t, kvfsBin, d, "--store", d.store, "--capacity", "5MiB", "--grace", "1s")
	// The start's message counts what it evicted to fit (it said "15
	// objects restored", none evicted, an outside tester): at least the
	// 10 old objects, cold and unheld.
	var restored, fitted int
	if m := regexp.MustCompile(`(\d+) objects restored \((\d+) more evicted to fit the capacity\)`).FindStringSubmatch(d.out.String()); m != nil {
		restored, _ = strconv.Atoi(m[1])
		fitted, _ = strconv.Atoi(m[2])
	}
	if fitted < 10 || restored+fitted != 15 {
		t.Errorf("the successor's message after a handover to 5 MiB: %d restored, %d evicted to fit; want 15 in all, at least 10 evicted:\n%s", restored, fitted, d.out)
	}
	if !waitFor(func() bool {
		for i := range 10 {
			if _, err := os.Stat(filepath.Join(d.mp, fmt.Sprintf("old%d", i))); err == nil {
				return false
			}
		}
		return true
	}) {
		t.Errorf("the old objects are still served after the handover to 5 MiB: %+v", stats(t, d.mp))
	}
	buf := make([]byte, 3*MiB+1)
	n, _ := held.ReadAt(buf, 0)
	if err := checkObject(buf[:n], "0", 3*MiB); err != nil {
		t.Errorf("the held object read across the handover: %v", err)
	}
	held.Close()
	st := assertQuietEqual(t, d)
	if st.CapacityBytes != 5*MiB || st.Evictions < 14 {
		t.Errorf("after the handover to 5 MiB: %+v; want at least 14 evictions", st)
	}
	d.stop()
}

// TestHandoverWithoutCapacityWarns: a handover given no --capacity
// works the default out again from the disk's free space; where that
// changes the capacity, the successor warns and says how to keep it (an
// outside tester's 64 MiB cache became 71 GB with one info line). One
// given --capacity changes it without a warning.
func TestHandoverWithoutCapacityWarns(t *testing.T) {
	const warning = "the capacity changed at this handover"
	d := mountCache(t, "--capacity", "16MiB")
	putFile(t, filepath.Join(d.mp, "o"), objectBytes("o", 5000))
	d = handOver(t, kvfsBin, d, "--store", d.store)
	if out := d.out.String(); !strings.Contains(out, warning) || !strings.Contains(out, `"old_capacity": 16777216`) {
		t.Errorf("a handover with no --capacity from 16 MiB to %d bytes did not warn:\n%s", stats(t, d.mp).CapacityBytes, out)
	}
	d = handOver(t, kvfsBin, d, "--store", d.store, "--capacity", "32MiB")
	if out := d.out.String(); strings.Contains(out, warning) {
		t.Errorf("a handover given --capacity warned:\n%s", out)
	}
	readBackPlain(t, filepath.Join(d.mp, "o"), objectBytes("o", 5000))
	d.stop()
}

// TestHandoverKeepsAllowOther: whether other users get in is fixed by
// the kernel when the mount is made (allow_other, default_permissions),
// so a handover that would change --allow-other is refused, in either
// direction, with a message that says so, and the old daemon serves
// on; one that keeps the setting takes the mount over. Before, the
// successor took the mount over, exit 0, and the old setting stayed
// without a word (an outside tester's finding).
func TestHandoverKeepsAllowOther(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("allow-other %v", on), func(t *testing.T) {
			var flags []string
			if on {
				flags = []string{"--allow-other"}
			}
			d := mountCache(t, flags...)
			data := objectBytes("kept", 64*KiB)
			putFile(t, filepath.Join(d.mp, "kept"), data)
			var other []string
			if !on {
				other = []string{"--allow-other"}
			}
			refused := startSuccessor(t, kvfsBin, nil, d, append([]string{"--store", d.store}, other...)...)
			if !refused.waitExited() || !exitedWith(refused.waitErr, 2) {
				t.Fatalf("a handover that changes --allow-other was not refused as a bad flag, exit 2 (%v):\n%s", refused.waitErr, refused.out)
			}
			if !strings.Contains(refused.out.String(), "a handover cannot change that") {
				t.Errorf("the refusal does not say why:\n%s", refused.out)
			}
			if !d.alive() {
				t.Fatalf("the serving daemon exited:\n%s", d.out)
			}
			if got, err := os.ReadFile(filepath.Join(d.mp, "kept")); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("the object after the refused handover: %d bytes, %v", len(got), err)
			}
			m, _ := mountAt(d.mp)
			if strings.Contains(m.SuperOptions, "allow_other") != on {
				t.Fatalf("the mount's options are %q", m.SuperOptions)
			}
			d = handOver(t, kvfsBin, d, append([]string{"--store", d.store}, flags...)...)
			if got, err := os.ReadFile(filepath.Join(d.mp, "kept")); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("the object after the handover: %d bytes, %v", len(got), err)
			}
			// The successor preloads with no capacity yet: no warning of
			// one past the disk (every handover logged one).
			if strings.Contains(d.outSoFar(), "the capacity is more than") {
				t.Errorf("the successor warned of a capacity past the disk:\n%s", d.outSoFar())
			}
			d.stop()
		})
	}
}

// TestHandoverKeepsRequestTimeout: the kernel takes a connection's
// request timeout from its INIT reply, once, so a handover that would
// change --request-timeout, either way, is refused with a message that
// says so, and the old daemon serves on; one that keeps it takes the
// mount over. Before, the successor took the mount over, exit 0, and
// the timeout it asked for never applied (an outside tester).
func TestHandoverKeepsRequestTimeout(t *testing.T) {
	requireRoot(t)
	if _, err := os.Stat("/proc/sys/fs/fuse/default_request_timeout"); err != nil {
		t.Skipf("needs a kernel with FUSE request timeouts (6.14+): %v", err)
	}
	for _, c := range []struct{ have, ask []string }{
		{nil, []string{"--request-timeout", "30s"}},
		{[]string{"--request-timeout", "30s"}, nil},
		{[]string{"--request-timeout", "30s"}, []string{"--request-timeout", "60s"}},
	} {
		t.Run(fmt.Sprintf("%v to %v", c.have, c.ask), func(t *testing.T) {
			d := mountCache(t, c.have...)
			data := objectBytes("kept", 64*KiB)
			putFile(t, filepath.Join(d.mp, "kept"), data)
			refused := startSuccessor(t, kvfsBin, nil, d, append([]string{"--store", d.store}, c.ask...)...)
			// Exit 2, as --allow-other's (an outside tester: exit 1).
			if !refused.waitExited() || !exitedWith(refused.waitErr, 2) {
				t.Fatalf("a handover that changes --request-timeout was not refused as a bad flag, exit 2 (%v):\n%s", refused.waitErr, refused.out)
			}
			if out := refused.out.String(); !strings.Contains(out, "a handover cannot") || !strings.Contains(out, "request timeout") && !strings.Contains(out, "request-timeout") {
				t.Errorf("the refusal does not say why:\n%s", out)
			}
			if !d.alive() {
				t.Fatalf("the serving daemon exited:\n%s", d.out)
			}
			d = handOver(t, kvfsBin, d, append([]string{"--store", d.store}, c.have...)...)
			if got, err := os.ReadFile(filepath.Join(d.mp, "kept")); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("the object after the handover: %d bytes, %v", len(got), err)
			}
			d.stop()
		})
	}
}

// A foreground `kvfs mount` that takes a mount over from a shell holding
// one of its files (`exec 7<MP/obj`) does not keep that descriptor: held
// by the new daemon for its whole life, it kept the daemon's own mount
// busy at its unmount (`kvfs mount --background` marks what it inherits
// close-on-exec; a foreground daemon is the process that inherited it).
func TestHandoverDropsInheritedFiles(t *testing.T) {
	requireRoot(t)
	_, mp, store := mountDirs(t)
	flags := []string{"--store", store, "--capacity", "16MiB"}
	old := startDaemon(t, mp, flags...)
	obj := filepath.Join(mp, "obj.data")
	putFile(t, obj, objectBytes(obj, 5000))
	held, err := os.Open(obj)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	out := &lockedBuffer{}
	// The mount point as a user types it, relative to the shell's
	// directory.
	cmd := exec.Command(kvfsBin, append(append([]string{"mount"}, flags...), filepath.Base(mp))...)
	cmd.Dir = filepath.Dir(mp)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{held} // descriptor 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
			unix.Unmount(mp, unix.MNT_DETACH)
		}
	}()
	if !waitFor(func() bool { return strings.Contains(out.String(), "kvfs: serving") }) {
		t.Fatalf("the new daemon did not take over:\n%s", out)
	}
	if !old.waitExited() || old.waitErr != nil {
		t.Fatalf("the old daemon did not exit 0: %v\n%s", old.waitErr, old.out)
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid))
	for _, fd := range fds {
		if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", cmd.Process.Pid, fd.Name())); target == obj {
			t.Errorf("the new daemon holds %s at descriptor %s, inherited from the command that started it", target, fd.Name())
		}
	}
	held.Close()
	if res := runKvfs(t, "unmount", mp); res.code != 0 {
		t.Fatalf("kvfs unmount: exit %d, %s", res.code, res.stderr)
	}
	if err := <-exited; err != nil {
		t.Fatalf("the new daemon: %v\n%s", err, out)
	}
	exited <- nil
}

// A directory removed while a process holds it answers as ext4's does
// (fusefs goneDirs), across a handover too: the successor takes the
// removed directories the kernel still holds over with the handles.
func TestHandoverKeepsRemovedDirectories(t *testing.T) {
	d := mountCache(t)
	dir := filepath.Join(d.mp, "held")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	d = handOver(t, kvfsBin, d, "--store", d.store)
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	serr := unix.Fsync(fd)
	unix.Close(fd)
	if err != nil {
		t.Fatalf("fstat of a removed directory held across the handover: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Nlink != 0 || st.Mode&0o777 != 0o750 {
		t.Fatalf("after the handover: mode %o, %d links; want a directory 0750 with none", st.Mode, st.Nlink)
	}
	if serr != nil {
		t.Fatalf("fsync after the handover: %v", serr)
	}
	d.stop()
}

// TestBackgroundWithPipedOutput: `kvfs mount --background` whose output
// is a pipe (a shell pipeline, `$(...)`, ssh) returns once the mount
// serves, and the pipe ends then: the daemon lets go of it, and the
// command says its log is discarded (an outside tester's pipeline hung
// until the unmount, ten minutes later; a handover as well as a fresh
// mount). The mount serves on.
func TestBackgroundWithPipedOutput(t *testing.T) {
	requireRoot(t)
	_, mp, store := mountDirs(t)
	var pid int
	t.Cleanup(func() { stopDetached(t, mp, pid) })
	for _, what := range []string{"a fresh mount", "a handover"} {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		cmd := exec.CommandContext(ctx, kvfsBin, "mount", "--background", "--store", store, "--capacity", "16MiB", mp)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out // pipes, copied until every holder closes them
		cmd.WaitDelay = time.Second
		err := cmd.Run()
		cancel()
		if errors.Is(err, exec.ErrWaitDelay) {
			t.Fatalf("%s: kvfs mount --background returned, and its daemon still holds the pipe of its output\n%s", what, out.String())
		}
		if err != nil {
			t.Fatalf("%s: kvfs mount --background with its output on a pipe: %v\n%s", what, err, out.String())
		}
		i := strings.Index(out.String(), "the daemon (pid ")
		if i < 0 {
			t.Fatalf("%s: no pid in %q", what, out.String())
		}
		fmt.Sscanf(out.String()[i:], "the daemon (pid %d)", &pid)
		if !strings.Contains(out.String(), "its log is discarded") {
			t.Errorf("%s: the command did not say the daemon's log is discarded:\n%s", what, out.String())
		}
		// No terminal sends a daemon in its own session Ctrl-C (an
		// outside tester read the hint as a way to stop it).
		if !strings.Contains(out.String(), "kvfs: serving") || strings.Contains(out.String(), "Ctrl-C") {
			t.Errorf("%s: want the serving line without Ctrl-C for a background daemon:\n%s", what, out.String())
		}
		p := filepath.Join(mp, "o")
		if err := os.WriteFile(p, []byte(what), 0o644); err != nil {
			t.Fatalf("%s: the mount after the command returned: %v", what, err)
		}
		if got, err := os.ReadFile(p); err != nil || string(got) != what {
			t.Fatalf("%s: read back %q, %v", what, got, err)
		}
	}
	// Stderr, the log, to a file and stdout to a pipe (`2>>FILE` from a
	// terminal): the log goes on to the file, and the command does not
	// say it is discarded (an outside tester was told it was).
	logFile := filepath.Join(t.TempDir(), "kvfs.log")
	lf, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	var out bytes.Buffer
	cmd := exec.Command(kvfsBin, "mount", "--background", "--store", store, "--capacity", "16MiB", mp)
	cmd.Stdout, cmd.Stderr = &out, lf
	if err := cmd.Run(); err != nil {
		t.Fatalf("a handover, its stderr to a file: %v\n%s", err, out.String())
	}
	if i := strings.Index(out.String(), "the daemon (pid "); i >= 0 {
		fmt.Sscanf(out.String()[i:], "the daemon (pid %d)", &pid)
	}
	if strings.Contains(out.String(), "its log is discarded") {
		t.Errorf("the command says the log is discarded where its stderr was a file:\n%s", out.String())
	}
	if where, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/2", pid)); err != nil || where != logFile {
		t.Errorf("the daemon's stderr is %q (%v), want the log file %s", where, err, logFile)
	}
}

// exitedWith says whether a command's error is its exit with code.
func exitedWith(err error, code int) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == code
}

// TestHandoverSocketGone: a mount whose daemon's handover socket was
// moved away or replaced by a regular file or a socket no one listens
// on cannot be handed over; a
// mount of its store says so, naming the socket and the way out, and
// the daemon serves on. It said the mount is served, and that only a
// mount of that store, by root, takes it over: the very command run (an
// outside tester, 3 of 3).
func TestHandoverSocketGone(t *testing.T) {
	requireRoot(t)
	d := mountCache(t, "--capacity", "16MiB")
	putFile(t, filepath.Join(d.mp, "obj"), objectBytes("obj", 5000))
	sock := filepath.Join(d.store, "kvfs.handover")
	aside := filepath.Join(t.TempDir(), "sock")
	if err := os.Rename(sock, aside); err != nil {
		t.Fatal(err)
	}
	res := runKvfs(t, "mount", "--store", d.store, "--capacity", "32MiB", d.mp)
	requireUsageError(t, res, sock+" is missing", "kvfs unmount "+d.mp)
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	res = runKvfs(t, "mount", "--store", d.store, "--capacity", "32MiB", d.mp)
	requireUsageError(t, res, sock+" is not a socket")
	os.Remove(sock)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close() // a socket no one listens on
	res = runKvfs(t, "mount", "--store", d.store, "--capacity", "32MiB", d.mp)
	requireUsageError(t, res, sock+" takes no connection")
	if got, err := os.ReadFile(filepath.Join(d.mp, "obj")); err != nil || checkObject(got, "obj", 5000) != nil {
		t.Errorf("the daemon after the refusals: %v", err)
	}
	os.Remove(sock)
	if err := os.Rename(aside, sock); err != nil {
		t.Fatal(err)
	}
	d.stop()
}

// TestHandoverSocketOfAnotherStore: a daemon whose handover socket was
// moved into another store's place refuses a successor of that store:
// it handed its own mount over, which the successor then served from
// the other store beside that store's own daemon (an outside tester).
func TestHandoverSocketOfAnotherStore(t *testing.T) {
	requireRoot(t)
	h := mountCache(t, "--capacity", "16MiB")
	i := mountCache(t, "--capacity", "16MiB")
	putFile(t, filepath.Join(h.mp, "h"), objectBytes("h", 5000))
	putFile(t, filepath.Join(i.mp, "i"), objectBytes("i", 5000))
	hSock, iSock := filepath.Join(h.store, "kvfs.handover"), filepath.Join(i.store, "kvfs.handover")
	aside := filepath.Join(t.TempDir(), "sock")
	if err := os.Rename(hSock, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(iSock, hSock); err != nil {
		t.Fatal(err)
	}
	res := runKvfs(t, "mount", "--store", h.store, "--capacity", "32MiB", h.mp)
	os.Rename(hSock, iSock)
	os.Rename(aside, hSock)
	requireUsageError(t, res, "the handover socket in "+h.store+" is the one of the kvfs daemon of the store "+i.store)
	for _, c := range []struct{ mp, name string }{{h.mp, "h"}, {i.mp, "i"}} {
		if got, err := os.ReadFile(filepath.Join(c.mp, c.name)); err != nil || checkObject(got, c.name, 5000) != nil {
			t.Errorf("%s after the refusal: %v", c.mp, err)
		}
	}
	i.stop()
	h.stop()
}

// TestHandoverSuccessorStoppedOrSignalled: a successor stopped or
// signalled before it has told the old daemon it is ready leaves the
// mount to the old daemon, which serves on, the same mount, with every
// object and a held descriptor as they were:
//   - stopped in the pause (Ctrl-Z of a foreground `kvfs mount`, a
//     debugger): the old daemon, its gate closed, kills it after
//     pauseLimit (10 s) and serves on. It waited up to 10 minutes, and
//     every client of the mount with it (an outside tester: 20 s of a
//     20 s SIGSTOP);
//   - SIGTERM (Ctrl-C, a service manager's stop) while it loads or in
//     the pause: it cancels the takeover and exits non-zero. It took
//     the mount over, then stopped as for any signal, unmounting it,
//     with no daemon left (the same tester, 6 of 6).
func TestHandoverSuccessorStoppedOrSignalled(t *testing.T) {
	requireRoot(t)
	for _, c := range []struct {
		name, step           string
		signal, remote, hang bool
	}{
		{"stopped-in-the-pause", "takeover-offered", false, false, false},
		// One phase (a remote tier): the successor loads in the pause,
		// which may take minutes, but none for being stopped, or stuck
		// (running, and doing nothing: it held the clients for the 10
		// minutes of the load's limit).
		{"stopped-in-the-pause-one-phase", "takeover-offered", false, true, false},
		{"stuck-in-the-pause-one-phase", "takeover-offered", false, true, true},
		{"signalled-while-loading", "takeover-preloaded", true, false, false},
		{"signalled-in-the-pause", "takeover-offered", true, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, mp, store := mountDirs(t)
			flags := []string{"--store", store, "--capacity", "64MiB"}
			var env []string
			if c.remote {
				srv := s3test.New(t)
				flags, env = append(flags, "--remote", srv.URL(remotePrefix)), srv.Env()
			}
			old := startDaemonEnv(t, kvfsBin, env, mp, flags...)
			data := make([]byte, 300*KiB)
			fillObject(data, "obj")
			if err := os.WriteFile(filepath.Join(mp, "obj.data"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			held, err := os.Open(filepath.Join(mp, "obj.data"))
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			action := "stop"
			if c.hang {
				action = "hang"
			}
			d := spawnDaemon(t, kvfsBin, append([]string{"KVFS_FAILPOINT=" + c.step + ":" + action}, env...), mp, store, flags...)
			if !c.hang && !waitFor(func() bool { return runState(d.cmd.Process.Pid) == "T" }) {
				t.Fatalf("the successor did not stop at %s:\n%s", c.step, d.outSoFar())
			}
			if c.signal {
				d.cmd.Process.Signal(unix.SIGTERM)
				d.cmd.Process.Signal(unix.SIGCONT)
			}
			if !d.waitExited() {
				t.Fatalf("the successor still runs:\n%s", d.outSoFar())
			}
			if !old.alive() {
				t.Fatalf("the old daemon is gone:\nold:\n%s\nnew:\n%s", old.outSoFar(), d.outSoFar())
			}
			if c.signal && !strings.Contains(d.outSoFar(), "the handover was cancelled by a signal; the old daemon serves on") {
				t.Errorf("the signalled successor's word:\n%s", d.outSoFar())
			}
			// The old daemon logs it, then ends the successor: its line
			// may still be in the pipe the test reads its output from
			// (a fresh-clone CI run, under load).
			if !c.signal && !old.printed("the successor gave no word of the mount") {
				t.Errorf("the old daemon's word of the stopped successor:\n%s", old.outSoFar())
			}
			if m, ok := mountAt(mp); !ok || m.ID != old.mountID {
				t.Fatalf("mount ID %d (%v), the old mount's %d", m.ID, ok, old.mountID)
			}
			got := make([]byte, len(data))
			if n, err := held.ReadAt(got, 0); n != len(got) || err != nil || !bytes.Equal(got, data) {
				t.Fatalf("the held descriptor reads %d bytes, %v", n, err)
			}
			held.Close()
			if got, err := os.ReadFile(filepath.Join(mp, "obj.data")); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("obj.data: %d bytes, %v", len(got), err)
			}
			if err := os.WriteFile(filepath.Join(mp, "after.data"), data, 0o644); err != nil {
				t.Fatalf("a store after: %v", err)
			}
			stopTheOneDaemon(t, old, store)
		})
	}
}

// runState is the state letter of process pid ("T": stopped), or "".
func runState(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) {
		return string(stat[i+2])
	}
	return ""
}
