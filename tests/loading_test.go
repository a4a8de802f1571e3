package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/blob"
	"golang.org/x/sys/unix"
)

// TestServeWhileLoading: a start over a big store serves loads before its
// index is built (the spec's 3 s at ten million objects after a crash).
// The store here is small and the load is held open by $KVFS_LOAD_GATE,
// so the test sees the mount while it loads: every completed object reads
// back byte for byte, listings show them, the object a writer had open at
// the crash is not served, a delete of a stored name is served at once,
// a store over a stored name and a chmod wait for the index (and change
// nothing in the store meanwhile), a handle opened while loading reads on
// after, and once loaded the ledger counts exactly what is there.
func TestServeWhileLoading(t *testing.T) {
	dir, mp := loadingDirs(t)
	d := startDaemon(t, mp, "--capacity", "64MiB", "--serve-while-loading", "-1")
	if err := os.Mkdir(filepath.Join(mp, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for i := range 24 {
		name := fmt.Sprintf("obj-%02d.data", i)
		if i%2 == 1 {
			name = filepath.Join("sub", name)
		}
		data := bytes.Repeat([]byte{byte(i + 1)}, 5000+i*3001)
		if err := os.WriteFile(filepath.Join(mp, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		want[name] = data
	}
	// A clean stop leaves a checkpoint of the 24 objects: the start
	// after the crash loads from it and finds half.data new.
	d.stop()
	d = startDaemon(t, mp, "--capacity", "64MiB", "--serve-while-loading", "-1")
	half, err := os.Create(filepath.Join(mp, "half.data"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := half.Write(make([]byte, 7000)); err != nil {
		t.Fatal(err)
	}
	d.kill9() // the writer of half.data still has it open
	half.Close()

	// 24: the checkpoint's count, so this start expects exactly enough.
	d, open := startLoading(t, dir, mp, "--capacity", "64MiB", "--serve-while-loading", "24")

	readAll := func(when string) {
		t.Helper()
		for name, data := range want {
			got, err := os.ReadFile(filepath.Join(mp, name))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s: %s read %d bytes (%v), want %d", when, name, len(got), err, len(data))
			}
		}
	}
	readAll("while loading")
	top := dirNames(t, mp)
	if !slices.Contains(top, "sub") || !slices.Contains(top, "obj-00.data") || slices.Contains(top, "half.data") {
		t.Fatalf("listing while loading: %v", top)
	}
	if sub := dirNames(t, filepath.Join(mp, "sub")); len(sub) != 12 {
		t.Fatalf("listing sub/ while loading: %v", sub)
	}
	if _, err := os.Stat(filepath.Join(mp, "half.data")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the object being written at the crash, while loading: %v, want ENOENT", err)
	}
	// ls -l asks for each name's extended attributes, and df for the
	// file system's figures: neither waits for the index.
	for _, cmd := range [][]string{{"ls", "-lR", mp}, {"df", mp}, {"du", "-s", mp}} {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		out, err := exec.CommandContext(ctx, cmd[0], cmd[1:]...).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%v while loading: %v\n%s", cmd, err, out)
		}
		if cmd[0] == "ls" && !bytes.Contains(out, []byte("obj-23.data")) {
			t.Fatalf("ls -lR while loading:\n%s", out)
		}
	}
	held, err := os.Open(filepath.Join(mp, "obj-00.data"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(held.Fd()), &st); err != nil || st.Size != int64(len(want["obj-00.data"])) {
		t.Fatalf("fstat while loading: size %d (%v)", st.Size, err)
	}
	// A mapping of it, held across the switch to the index.
	mapped, err := unix.Mmap(int(held.Fd()), 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap while loading: %v", err)
	}
	if !bytes.Equal(mapped, want["obj-00.data"]) {
		t.Fatal("a mapping made while loading reads other bytes")
	}

	fresh := bytes.Repeat([]byte{0xee}, 12345)
	stored, chmoded := make(chan error, 1), make(chan error, 1)
	// A store over a stored name waits (one of a new name is taken while
	// loading: TestStoresWhileLoading). It is a bare open(2), which no
	// library retries on EINTR, and its thread gets signals while it
	// waits, as the Go runtime's or a program's timer would send.
	tid := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid <- unix.Gettid()
		fd, err := unix.Open(filepath.Join(mp, "obj-02.data"), unix.O_CREAT|unix.O_TRUNC|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err == nil {
			_, err = unix.Write(fd, fresh)
			if cerr := unix.Close(fd); err == nil {
				err = cerr
			}
		}
		stored <- err
	}()
	go func() { chmoded <- os.Chmod(filepath.Join(mp, "sub", "obj-03.data"), 0o600) }()
	servedWhileLoading(t, "a delete of a stored name", func() error { return os.Remove(filepath.Join(mp, "sub", "obj-01.data")) })
	delete(want, filepath.Join("sub", "obj-01.data"))
	storer := <-tid
	readAll("while a store and a chmod wait")
	for range 5 {
		if err := unix.Tgkill(os.Getpid(), storer, unix.SIGURG); err != nil {
			t.Fatal(err)
		}
		readAll("while the waiting store is signalled")
	}
	data := filepath.Join(d.store, "data")
	if got, err := os.ReadFile(filepath.Join(data, "obj-02.data")); err != nil || !bytes.Equal(got, want["obj-02.data"]) {
		t.Fatalf("a store over a stored name while loading reached the store: %d bytes (%v)", len(got), err)
	}
	if perm, err := permOf(filepath.Join(data, "sub", "obj-03.data")); err != nil || perm != 0o644 {
		t.Fatalf("a chmod while loading reached the store: %v (%v)", perm, err)
	}
	if _, err := os.Stat(filepath.Join(data, "sub", "obj-01.data")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a delete while loading, in the store: %v, want gone", err)
	}
	select {
	case err := <-stored:
		t.Fatalf("a store finished while loading (%v)", err)
	case err := <-chmoded:
		t.Fatalf("a chmod finished while loading (%v)", err)
	default:
	}

	// kvfs stats answers at once, with the load's own figures, in each
	// of its forms.
	var loading struct {
		Loading         bool  `json:"loading"`
		ExpectedObjects int64 `json:"expected_objects"`
		CapacityBytes   int64 `json:"capacity_bytes"`
	}
	statsJSON(t, mp, &loading)
	if !loading.Loading || loading.ExpectedObjects != 24 || loading.CapacityBytes != 64<<20 {
		t.Fatalf("kvfs stats --json while loading: %+v, want loading, 24 objects expected, 64 MiB", loading)
	}
	for _, args := range [][]string{{"stats", mp}, {"stats", "--watch", "--count", "2", "--interval", "10ms", mp}} {
		res := runKvfsTimeout(t, hangGuard, args...)
		if res.code != 0 || !strings.Contains(res.stdout, "loading") || !strings.Contains(res.stdout, "24") {
			t.Fatalf("kvfs %v while loading: exit %d, stdout %q, stderr %q", args, res.code, res.stdout, res.stderr)
		}
	}

	open()
	if !d.printed("objects restored") || !d.printed(`"from_snapshot": true`) {
		t.Fatalf("the load from the checkpoint did not finish:\n%s", d.out)
	}
	for what, ch := range map[string]chan error{"store": stored, "chmod": chmoded} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("the %s that waited for the index: %v", what, err)
			}
		case <-time.After(hangGuard):
			t.Fatalf("the %s that waited for the index never finished", what)
		}
	}
	// Where the mount has passthrough, the kernel served the reads of
	// the load's handles itself: the daemon answered none.
	if s := stats(t, mp); s.Passthrough == 1 && s.FuseRequests["READ"] != 0 {
		t.Fatalf("the daemon answered %d READs while loading: the load's handles were not passthrough", s.FuseRequests["READ"])
	} else if s.Passthrough != 1 {
		t.Logf("no passthrough on this mount: the load's reads went through the daemon (%d READs)", s.FuseRequests["READ"])
	}
	want["obj-02.data"] = fresh
	if perm, err := permOf(filepath.Join(mp, "sub", "obj-03.data")); err != nil || perm != 0o600 {
		t.Fatalf("the chmod that waited for the index: %v (%v)", perm, err)
	}
	readAll("loaded")
	buf := make([]byte, len(want["obj-00.data"])+1)
	if n, err := held.ReadAt(buf, 0); n != len(want["obj-00.data"]) || !bytes.Equal(buf[:n], want["obj-00.data"]) {
		t.Fatalf("a handle opened while loading, read after: %d bytes (%v)", n, err)
	}
	if !bytes.Equal(mapped, want["obj-00.data"]) {
		t.Fatal("a mapping made while loading, read after: other bytes")
	}
	if err := unix.Munmap(mapped); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mp, "sub", "obj-01.data")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("deleted while loading, after: %v", err)
	}
	var sum int64
	for name, data := range want {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(mp, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Ino >= 1<<62 {
			t.Fatalf("%s still has the load's node (ino %#x) after the index was built", name, st.Ino)
		}
		sum += ceil4096(int64(len(data)))
	}
	s := stats(t, mp)
	if s.Objects != int64(len(want)) || s.UsedBytes != sum {
		t.Fatalf("loaded: %d objects, %d bytes used; want %d, %d", s.Objects, s.UsedBytes, len(want), sum)
	}
	if err := syscall.Access(filepath.Join(mp, "half.data"), 0); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("half-written object after the load: %v", err)
	}
	held.Close()
	d.stop()
}

// permOf is the permission bits of the file at p.
func permOf(p string) (os.FileMode, error) {
	st, err := os.Stat(p)
	if err != nil {
		return 0, err
	}
	return st.Mode().Perm(), nil
}

// startLoading starts a daemon on mp whose load waits, serving
// meanwhile, until open is called (the test's cleanup calls it too, so
// that no load is left waiting).
func startLoading(t *testing.T, dir, mp string, flags ...string) (d *daemon, open func()) {
	t.Helper()
	d, open = startGated(t, dir, mp, flags...)
	if !d.printed("while its index loads") {
		t.Fatalf("the start did not serve while loading:\n%s", d.out)
	}
	return d, open
}

// startGated starts a daemon on mp whose load, if it serves while it
// loads, waits until open is called.
func startGated(t *testing.T, dir, mp string, flags ...string) (d *daemon, open func()) {
	t.Helper()
	return startGatedEnv(t, dir, mp, nil, flags...)
}

// startGatedEnv is startGated with env added to the daemon's.
func startGatedEnv(t *testing.T, dir, mp string, env []string, flags ...string) (d *daemon, open func()) {
	t.Helper()
	gate := filepath.Join(dir, "gate")
	os.Remove(gate) // an earlier start's
	if err := unix.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	opened := false
	open = func() {
		if opened {
			return
		}
		opened = true
		// Without waiting on a daemon that is gone (killed while it
		// loaded) or never held (it loaded before it served): its gate
		// has no reader then, and a plain open would block.
		waitFor(func() bool {
			fd, err := unix.Open(gate, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
				return true
			}
			select {
			case <-d.exited:
				return true
			default:
				return strings.Contains(d.outSoFar(), "objects restored")
			}
		})
	}
	d = startDaemonEnv(t, kvfsBin, append([]string{"KVFS_LOAD_GATE=" + gate}, env...), mp, flags...)
	t.Cleanup(open) // before the daemon's cleanup, which waits for its exit
	return d, open
}

// TestLoadingReadsAreUses: an object read while the index loaded is as
// recently used as any read makes it: a store that must evict once the
// index is built takes the oldest object not read, not the one read.
func TestLoadingReadsAreUses(t *testing.T) {
	dir, mp := loadingDirs(t)
	const size = 100_000 // charged 102,400
	capacity := fmt.Sprint(3*ceil4096(size) + 4096)
	d := startDaemon(t, mp, "--capacity", capacity, "--grace", "0s", "--serve-while-loading", "-1")
	data := map[string][]byte{}
	for i, name := range []string{"a", "b", "c"} { // a is the oldest
		data[name] = bytes.Repeat([]byte{byte('a' + i)}, size)
		if err := os.WriteFile(filepath.Join(mp, name), data[name], 0o644); err != nil {
			t.Fatal(err)
		}
		// An object takes its place in the LRU order as its writing
		// ends, at its RELEASE, which comes after close(2) returns: the
		// next store's could come first (1 run in 20-30: c before b,
		// and c evicted for d).
		waitReleased(t, mp)
	}
	d.stop()
	d, open := startLoading(t, dir, mp, "--capacity", capacity, "--grace", "0s", "--serve-while-loading", "1")
	if got, err := os.ReadFile(filepath.Join(mp, "a")); err != nil || !bytes.Equal(got, data["a"]) {
		t.Fatalf("reading a while loading: %d bytes (%v)", len(got), err)
	}
	open()
	if !d.printed("objects restored") {
		t.Fatalf("the load did not finish:\n%s", d.out)
	}
	if err := os.WriteFile(filepath.Join(mp, "d"), bytes.Repeat([]byte{'d'}, size), 0o644); err != nil {
		t.Fatal(err)
	}
	// d's bytes are admitted, evicting, as the daemon learns of them:
	// by passthrough, at the latest at d's last RELEASE, which the
	// kernel sends after close(2) has returned.
	if !waitFor(func() bool {
		_, err := os.Stat(filepath.Join(d.store, "data", "b"))
		return errors.Is(err, os.ErrNotExist)
	}) {
		t.Fatal("b, the oldest object not read, was not evicted for d")
	}
	if got, err := os.ReadFile(filepath.Join(mp, "a")); err != nil || !bytes.Equal(got, data["a"]) {
		t.Fatalf("a, read while loading, was evicted: %d bytes (%v)", len(got), err)
	}
	if s := stats(t, mp); s.Evictions < 1 || s.UsedBytes > 3*ceil4096(size)+4096 {
		t.Fatalf("after d: %d evictions, %d bytes used", s.Evictions, s.UsedBytes)
	}
	d.stop()
}

// TestLoadingStoppedAtOnce: SIGTERM while the index loads unmounts at
// once, not when the load ends; the daemon exits once it has, cleanly,
// and the next start finds every object.
func TestLoadingStoppedAtOnce(t *testing.T) {
	dir, mp := loadingDirs(t)
	d := startDaemon(t, mp, "--serve-while-loading", "-1")
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(mp, fmt.Sprint(i)), []byte{byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d.stop()
	checkpoint := filepath.Join(d.store, blob.CheckpointName)
	before, err := os.Stat(checkpoint)
	if err != nil {
		t.Fatalf("no checkpoint after a clean stop: %v", err)
	}
	d, open := startLoading(t, dir, mp, "--serve-while-loading", "1")
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !waitFor(func() bool { m, ok := mountAt(mp); return !ok || m.FSType != "fuse.kvfs" }) {
		t.Fatalf("still mounted after SIGTERM while loading:\n%s", d.out)
	}
	if !d.alive() {
		t.Fatalf("the daemon exited before its load began:\n%s", d.out)
	}
	// The load, let go, stops at its first step: the daemon exits
	// cleanly without building the index or writing a checkpoint.
	open()
	if !d.waitExited() || d.waitErr != nil || !d.printed("before its index was built") {
		t.Fatalf("the daemon whose mount was stopped while loading exited %v:\n%s", d.waitErr, d.out)
	}
	if strings.Contains(d.out.String(), "objects restored") {
		t.Fatalf("the load went on to the end after the mount was gone:\n%s", d.out)
	}
	if after, err := os.Stat(checkpoint); err != nil || !after.ModTime().Equal(before.ModTime()) || after.Size() != before.Size() {
		t.Fatalf("the checkpoint changed under a stopped load: %v, %v (was %v, %d B)", after, err, before.ModTime(), before.Size())
	}
	d = startDaemon(t, mp, "--serve-while-loading", "-1")
	if names := dirNames(t, mp); len(names) != 5 {
		t.Fatalf("after a stop while loading, the next start serves %v", names)
	}
	d.stop()
}

// loadingDirs is a test's directory and the mount point in it.
func loadingDirs(t *testing.T) (dir, mp string) {
	requireRoot(t)
	dir = t.TempDir()
	mp = filepath.Join(dir, "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, mp
}

// TestLoadingNamesHoldAHandover: a handover is refused while the index
// loads (saying so), and after while the kernel holds a handle the mount
// answered while it loaded (the successor would not know it); the daemon
// serves on, the handle too.
func TestLoadingNamesHoldAHandover(t *testing.T) {
	dir, mp := loadingDirs(t)
	d := startDaemon(t, mp, "--serve-while-loading", "-1")
	if err := os.WriteFile(filepath.Join(mp, "held"), []byte("held while loading"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.stop()
	d, open := startLoading(t, dir, mp, "--serve-while-loading", "1")
	held, err := os.Open(filepath.Join(mp, "held"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	r := runKvfsTimeout(t, hangGuard, "mount", "--background", "--serve-while-loading", "-1", mp)
	if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "still building its index") {
		t.Fatalf("a handover while loading: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	open()
	if !d.printed("objects restored") {
		t.Fatalf("the load did not finish:\n%s", d.out)
	}
	if link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", held.Fd())); err != nil || strings.HasSuffix(link, "(deleted)") {
		t.Fatalf("a handle opened while loading, once loaded, reads as %q (%v)", link, err)
	}
	r = runKvfsTimeout(t, hangGuard, "mount", "--background", "--serve-while-loading", "-1", mp)
	if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "still in use") {
		t.Fatalf("a handover with a handle of the load's open: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	buf := make([]byte, 64)
	if n, err := held.ReadAt(buf, 0); string(buf[:n]) != "held while loading" {
		t.Fatalf("the handle after the refused handover: %q (%v)", buf[:n], err)
	}
	if !d.alive() {
		t.Fatalf("the daemon exited:\n%s", d.out)
	}
	// Once its last handle is closed, the name goes too (the kernel is
	// told to forget it) and a handover takes the mount, with no client
	// looking the name up again (before, it waited for one forever: the
	// name is not looked up by path since the load, on purpose).
	held.Close()
	var next *daemon
	if !waitFor(func() bool {
		next = startSuccessor(t, kvfsBin, nil, d, "--store", d.store, "--serve-while-loading", "-1")
		return next.alive()
	}) {
		t.Fatalf("a handover after the load's last handle closed:\n%s", next.out)
	}
	if !d.waitExited() {
		t.Fatal("the old daemon did not exit after the handover")
	}
	if got, err := os.ReadFile(filepath.Join(mp, "held")); err != nil || string(got) != "held while loading" {
		t.Fatalf("the mount after the handover: %q (%v)", got, err)
	}
	next.stop()
}

// TestLoadingStoppedWithFilesOpen: a stop while loading that finds files
// open (a reader, a listing) detaches the mount and serves them until
// they close, as a stop of a loaded mount does; then the daemon exits
// as any stop while loading does. The stopped load closed the store
// under them: their fstat and getdents answered EBADF (an outside
// tester: in-flight client calls failed with EBADF after a SIGTERM
// mid-load).
func TestLoadingStoppedWithFilesOpen(t *testing.T) {
	dir, mp := loadingDirs(t)
	d := startDaemon(t, mp, "--serve-while-loading", "-1")
	if err := os.Mkdir(filepath.Join(mp, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(mp, "d", fmt.Sprint(i)), []byte{byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d.stop()
	d, open := startLoading(t, dir, mp, "--serve-while-loading", "1", "--log-level", "info")
	reader, err := os.Open(filepath.Join(mp, "d", "3"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	listing, err := os.Open(filepath.Join(mp, "d"))
	if err != nil {
		t.Fatal(err)
	}
	defer listing.Close()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Detached (the files keep it busy), then the load let go, which
	// stops at its first step.
	if !waitFor(func() bool { m, ok := mountAt(mp); return !ok || m.FSType != "fuse.kvfs" }) {
		t.Fatalf("still mounted after SIGTERM while loading:\n%s", d.outSoFar())
	}
	open()
	if !waitFor(func() bool { return strings.Contains(d.outSoFar(), "the load stopped") }) {
		t.Fatalf("the load did not stop:\n%s", d.outSoFar())
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(reader.Fd()), &st); err != nil || st.Size != 1 {
		t.Errorf("fstat of a file held across a stop while loading: size %d, %v", st.Size, err)
	}
	if b := make([]byte, 2); true {
		if n, err := reader.ReadAt(b, 0); n != 1 || b[0] != 3 {
			t.Errorf("reading a file held across a stop while loading: %d bytes %v, %v", n, b[:n], err)
		}
	}
	if names, err := listing.Readdirnames(-1); err != nil || len(names) != 5 {
		t.Errorf("listing a directory held across a stop while loading: %v, %v", names, err)
	}
	reader.Close()
	listing.Close()
	if !d.waitExited() || d.waitErr != nil || !d.printed("before its index was built") {
		t.Fatalf("the daemon whose mount was stopped while loading exited %v:\n%s", d.waitErr, d.outSoFar())
	}
	d = startDaemon(t, mp, "--serve-while-loading", "-1")
	if names := dirNames(t, filepath.Join(mp, "d")); len(names) != 5 {
		t.Fatalf("after a stop while loading, the next start serves %v", names)
	}
	d.stop()
}
