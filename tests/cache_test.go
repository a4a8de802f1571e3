package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfs/kvfs/mount"
	"golang.org/x/sys/unix"
)

// mountCache serves a fresh store under a temp dir and returns the
// daemon; flags come after --store.
func mountCache(t *testing.T, flags ...string) *daemon {
	t.Helper()
	requireRoot(t)
	_, mp, store := mountDirs(t)
	return startDaemon(t, mp, append([]string{"--store", store}, flags...)...)
}

// putFile stores data at path with a plain create, write, close.
func putFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatalf("storing %s: %v", path, err)
	}
}

// flood stores n objects of size bytes through fs_native, every one of
// which must succeed: backpressure may slow them, nothing may fail.
func flood(t *testing.T, mp, prefix string, n, size int) {
	t.Helper()
	cl := &fsNative{base: mp, seq: &atomic.Int64{}}
	buf := make([]byte, size)
	for i := range n {
		key := fmt.Sprintf("%s-%03d", prefix, i)
		fillObject(buf, key)
		if wrote, err := cl.store(key, buf); err != nil || !wrote {
			t.Fatalf("flood store %d of %d: wrote %v, %v", i, n, wrote, err)
		}
	}
}

// TestOpenStoreSurvivesFlood: a store whose temp file is still open for
// writing is never evicted, however much else is stored meanwhile; it
// then completes, publishes and reads back exact.
func TestOpenStoreSurvivesFlood(t *testing.T) {
	const capacity, size = 32 * MiB, 8 * MiB
	d := mountCache(t, "--capacity", "32MiB", "--grace", "200ms")
	key := "held-open"
	data := objectBytes(key, size)
	final := finalPath(d.mp, key)
	tmp := filepath.Join(d.mp, tmpPrefix+"held.1")
	fd, err := unix.Open(tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
	}()
	for off := 0; off < size/2; off += sliceSize {
		if err := writeFull(fd, data[off:off+sliceSize]); err != nil {
			t.Fatal(err)
		}
	}
	before := stats(t, d.mp)

	flood(t, d.mp, "flood", 4*capacity/(4*MiB), 4*MiB) // 4x the capacity
	during := stats(t, d.mp)
	t.Logf("flood of %d MiB: evictions %d -> %d, evicted bytes %d -> %d",
		4*capacity/MiB, before.Evictions, during.Evictions, before.EvictedBytes, during.EvictedBytes)
	if during.Evictions <= before.Evictions || during.EvictedBytes-before.EvictedBytes < 3*capacity-size {
		t.Errorf("evictions did not grow with the flood: before %+v, after %+v", before, during)
	}
	if during.PinnedObjects < 1 || during.PinnedBytes < size/2 {
		t.Errorf("the open store is not pinned: %+v", during)
	}
	var st unix.Stat_t
	if err := unix.Stat(tmp, &st); err != nil || st.Size != size/2 {
		t.Fatalf("open temp file after the flood: size %d, %v", st.Size, err)
	}

	for off := size / 2; off < size; off += sliceSize {
		if err := writeFull(fd, data[off:off+sliceSize]); err != nil {
			t.Fatalf("finishing the held store: %v", err)
		}
	}
	if err := unix.Close(fd); err != nil {
		t.Fatalf("close: %v", err)
	}
	fd = -1
	if err := unix.Link(tmp, final); err != nil {
		t.Fatalf("publishing the held store: %v", err)
	}
	if err := unix.Unlink(tmp); err != nil {
		t.Fatalf("unlink temp: %v", err)
	}
	got, err := (&fsNative{base: d.mp}).load(key)
	if err == nil {
		err = checkObject(got, key, size)
	}
	if err != nil {
		t.Fatalf("held store after publishing: %v", err)
	}
	assertQuietEqual(t, d)
	d.stop()
}

// TestEvictedNameStillCached: names whose objects were evicted while the
// kernel had them cached behave as absent: unlink succeeds (or ENOENT),
// open and stat say ENOENT, an exclusive re-create works, and no charge
// is left behind.
func TestEvictedNameStillCached(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB", "--grace", "0s")
	names := []string{"unlinked.data", "unlinked-twice.data", "opened.data", "statted.data", "recreated.data"}
	for _, n := range names {
		putFile(t, filepath.Join(d.mp, n), objectBytes(n, 2*MiB+100))
	}
	waitReleased(t, d.mp) // a name still pinned by its writer is not evicted
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(d.mp, n), &st); err != nil || st.Size != 2*MiB+100 {
			t.Fatalf("stat %s: %v (size %d)", n, err, st.Size)
		}
	}
	flood(t, d.mp, "flood", 8, 2*MiB)
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(d.store, "data", n)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s was not evicted from the store (%v); the test needs it evicted", n, err)
		}
	}
	path := func(n string) string { return filepath.Join(d.mp, n) }
	absentOK := func(err error) bool { return err == nil || err == unix.ENOENT }

	if err := unix.Unlink(path("unlinked.data")); !absentOK(err) {
		t.Errorf("unlink of an evicted name: %v", err)
	}
	for i := range 2 {
		if err := unix.Unlink(path("unlinked-twice.data")); !absentOK(err) {
			t.Errorf("unlink %d of an evicted name: %v", i+1, err)
		}
	}
	if _, err := unix.Open(path("opened.data"), unix.O_RDONLY, 0); err != unix.ENOENT {
		t.Errorf("open of an evicted name: %v, want ENOENT", err)
	}
	// stat and an exclusive create can be answered from the kernel's
	// cache alone, until kvfs's invalidation of the evicted names lands:
	// it is sent from a goroutine of its own (a request that evicts may
	// hold the directory's lock the invalidation waits for). It must land
	// well before the cache's own timeout would drop the names.
	for _, n := range []string{"statted.data", "recreated.data"} {
		if err := goneWithin(path(n), 10*time.Second); err != nil {
			t.Errorf("stat of evicted %s: %v; want ENOENT within 10s (the kernel's cache timeout is %v)", n, err, mount.DefaultCacheTimeout)
		}
	}
	fd, err := unix.Open(path("recreated.data"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatalf("exclusive re-create of an evicted name: %v", err)
	}
	data := objectBytes("recreated.data", 3*MiB)
	err = writeFull(fd, data)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("re-store: %v", err)
	}
	if got, err := os.ReadFile(path("recreated.data")); err != nil || checkObject(got, "recreated.data", 3*MiB) != nil {
		t.Errorf("re-stored object reads back wrong: %v", err)
	}
	ents, err := os.ReadDir(d.mp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		for _, n := range names[:4] {
			if e.Name() == n {
				t.Errorf("evicted name %s still listed", n)
			}
		}
	}
	assertQuietEqual(t, d)
	d.stop()
}

// TestShadowBytes: an unlinked object that is still open stays charged
// as shadow bytes until its last close, then is released, once.
func TestShadowBytes(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB")
	const size = 3*MiB + 100
	p := filepath.Join(d.mp, "obj.data")
	putFile(t, p, objectBytes("obj", size))
	other := filepath.Join(d.mp, "other.data")
	putFile(t, other, objectBytes("other", 5000))
	base := assertQuietEqual(t, d)

	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatalf("unlink of an open object: %v", err)
	}
	st := stats(t, d.mp)
	if st.ShadowBytes != ceil4096(size) || st.UsedBytes != base.UsedBytes {
		t.Errorf("while unlinked and open: shadow %d used %d, want shadow %d used %d", st.ShadowBytes, st.UsedBytes, ceil4096(size), base.UsedBytes)
	}
	if df, _ := dfUsed(d.mp); df != base.UsedBytes {
		t.Errorf("df used %d while the unlinked object is open, want %d", df, base.UsedBytes)
	}
	got := make([]byte, size+1)
	n, _ := f.ReadAt(got, 0)
	if err := checkObject(got[:n], "obj", size); err != nil {
		t.Errorf("reading the unlinked object: %v", err)
	}
	f.Close()
	after := assertQuietEqual(t, d)
	if after.UsedBytes != base.UsedBytes-ceil4096(size) || after.Objects != base.Objects-1 {
		t.Errorf("after the last close: used %d objects %d, want %d and %d", after.UsedBytes, after.Objects, base.UsedBytes-ceil4096(size), base.Objects-1)
	}

	// The same with the writer: it keeps writing after the unlink.
	w, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	chunk := objectBytes("chunk", MiB)
	if _, err := w.Write(chunk); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(chunk); err != nil {
		t.Fatalf("write after unlink: %v", err)
	}
	// An open writer is charged what it wrote, or its reservation if that
	// is more, all of it shadow once unlinked. `kvfs stats` is a fork and
	// exec of this process, whose child's exec closes its inherited copy
	// of w (a FLUSH): that hides nothing (before 2026-12-07 it hid the
	// reservation, and the figures read 2 MiB).
	if st := stats(t, d.mp); st.ShadowBytes != 2*MiB+st.ReservedBytes || st.UsedBytes != after.UsedBytes+st.ShadowBytes || st.KeptBytes != 0 {
		t.Errorf("unlinked writer: shadow %d used %d reserved %d kept %d, want shadow 2 MiB and the reservation, used that more than %d, nothing kept",
			st.ShadowBytes, st.UsedBytes, st.ReservedBytes, st.KeptBytes, after.UsedBytes)
	}
	w.Close()
	if st := assertQuietEqual(t, d); st.UsedBytes != after.UsedBytes {
		t.Errorf("after closing the unlinked writer: used %d, want %d", st.UsedBytes, after.UsedBytes)
	}
	d.stop()
}

// TestLRUOrder: eviction takes the least recently used object; opening
// (and reading) an object touches it, stat does not; the order survives
// a restart, from the store's access times.
func TestLRUOrder(t *testing.T) {
	const size = 4 * MiB
	d := mountCache(t, "--capacity", "16MiB", "--grace", "0s")
	flags := []string{"--store", d.store, "--capacity", "16MiB", "--grace", "0s"}
	path := func(n string) string { return filepath.Join(d.mp, n) }
	// The order a restart finds is the store's file times: each step
	// waits until they have moved past the last one's.
	tick := storeTick(t, d.store)
	put := func(n string) {
		tick()
		putFile(t, path(n), objectBytes(n, size))
	}
	touch := func(n string) {
		tick()
		if data, err := os.ReadFile(path(n)); err != nil || checkObject(data, n, size) != nil {
			t.Fatalf("reading %s: %v", n, err)
		}
	}
	statOnly := func(n string) {
		if err := unix.Stat(path(n), new(unix.Stat_t)); err != nil {
			t.Fatalf("stat %s: %v", n, err)
		}
	}
	present := func(want ...string) {
		t.Helper()
		if got := dirNames(t, d.mp); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("objects present: %v, want %v", got, want)
		}
	}
	for _, n := range []string{"a", "b", "c", "d"} {
		put(n) // full: 4 x 4 MiB
	}
	statOnly("a")
	touch("b") // LRU order a c d b
	put("e")   // evicts a
	present("b", "c", "d", "e")
	statOnly("c")
	touch("d") // c b e d
	assertQuietEqual(t, d)
	d.stop()

	d = startDaemon(t, d.mp, flags...)
	put("f") // evicts c if the order survived
	present("b", "d", "e", "f")
	assertQuietEqual(t, d)
	d.stop()
}

// TestLRUOrderAfterCrash: a load is journaled (STORE/kvfs.reads) off
// the load's path, within about a second; a start after kill -9 with no
// checkpoint orders the objects by their stored times and that journal,
// so the first eviction takes the coldest, not the one loaded last. The
// loads leave the objects' ctimes alone (before, the record went into
// the stored file's atime, and moved its ctime: an outside tester's `git
// diff-files` called read files changed).
func TestLRUOrderAfterCrash(t *testing.T) {
	const size = 4 * MiB
	flags := []string{"--capacity", "16MiB", "--grace", "0s", "--checkpoint-interval", "0"}
	d := mountCache(t, flags...)
	flags = append([]string{"--store", d.store}, flags...)
	tick := storeTick(t, d.store)
	for _, n := range []string{"a", "b", "c", "d"} {
		tick()
		putFile(t, filepath.Join(d.mp, n), objectBytes(n, size))
	}
	load := func(n string) {
		if data, err := os.ReadFile(filepath.Join(d.mp, n)); err != nil || checkObject(data, n, size) != nil {
			t.Fatalf("reading %s: %v", n, err)
		}
	}
	for _, n := range []string{"a", "b", "c", "d"} {
		load(n)
	}
	ctimes := func() map[string]unix.Timespec {
		out := map[string]unix.Timespec{}
		for _, n := range []string{"a", "b", "c", "d"} {
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(d.mp, n), &st); err != nil {
				t.Fatal(err)
			}
			out[n] = st.Ctim
		}
		return out
	}
	before := ctimes()
	// kvfs notes an object's use once a second (its first): the second
	// load of a comes in the next second of the daemon's clock.
	<-time.After(time.Until(time.Unix(time.Now().Unix()+1, 0)))
	load("a")
	journal := filepath.Join(d.store, "kvfs.reads")
	if !waitFor(func() bool { st, err := os.Stat(journal); return err == nil && st.Size() >= 5*16 }) {
		t.Fatalf("the second load of a was not journaled within %v", hangGuard)
	}
	if after := ctimes(); !maps.Equal(before, after) {
		t.Errorf("loads moved ctimes: %v, then %v", before, after)
	}
	crashThenEvict(t, d, false, flags...)
}

// crashThenEvict kills d, mounts its store again (from the checkpoint or
// not: fromCheckpoint) and stores one more object of a, b, c, d's size
// into the full cache: b, the coldest, goes; a, loaded last, stays.
func crashThenEvict(t *testing.T, d *daemon, fromCheckpoint bool, flags ...string) {
	t.Helper()
	d.kill9()
	d = startDaemon(t, d.mp, flags...)
	requireLoadedFrom(t, d, fromCheckpoint)
	putFile(t, filepath.Join(d.mp, "e"), objectBytes("e", 4*MiB))
	if got, want := dirNames(t, d.mp), "[a c d e]"; fmt.Sprint(got) != want {
		t.Errorf("after a crash and one more store: %v, want %s (the coldest, b, evicted; a was loaded last)", got, want)
	}
	assertQuietEqual(t, d)
	d.stop()
}

// TestLRUOrderAfterCrashFromCheckpoint: a start from the running
// checkpoint after kill -9 puts the objects loaded since the checkpoint
// after its order (the journal of uses, STORE/kvfs.reads), so the first
// eviction takes the coldest, not the one loaded last (an outside
// tester: the order was the checkpoint's, and the objects read in the
// seconds before the crash were evicted first, 3 of 3).
func TestLRUOrderAfterCrashFromCheckpoint(t *testing.T) {
	const size = 4 * MiB
	flags := []string{"--capacity", "16MiB", "--grace", "0s", "--checkpoint-interval", "1h"}
	d := mountCache(t, flags...)
	flags = append([]string{"--store", d.store}, flags...)
	for _, n := range []string{"a", "b", "c", "d"} {
		putFile(t, filepath.Join(d.mp, n), objectBytes(n, size))
	}
	d.stop() // its checkpoint's order: a, b, c, d
	d = startDaemon(t, d.mp, flags...)
	requireLoadedFrom(t, d, true)
	if data, err := os.ReadFile(filepath.Join(d.mp, "a")); err != nil || checkObject(data, "a", size) != nil {
		t.Fatalf("reading a: %v", err)
	}
	journaled := func() bool {
		st, err := os.Stat(filepath.Join(d.store, "kvfs.reads"))
		return err == nil && st.Size() >= 16
	}
	if !waitFor(journaled) {
		t.Fatalf("the load of a was not journaled within %v", hangGuard)
	}
	crashThenEvict(t, d, true, flags...)
}

// dirNames lists a directory's names, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names
}

// TestRAMCache: `--ram-cache` with passthrough off serves a load whose
// pages the kernel dropped from the RAM tier, exact, and says so in
// `kvfs stats`; the mount's readahead is widened to 1 MiB (root).
func TestRAMCache(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB", "--no-passthrough", "--ram-cache", "16MiB")
	p := filepath.Join(d.mp, "obj")
	want := objectBytes("obj", 3<<20+5)
	putFile(t, p, want)
	// No copy is made of an object whose writer's RELEASE has not come.
	waitReleased(t, d.mp)
	load := func() {
		t.Helper()
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		got := make([]byte, len(want)+1)
		n, _ := io.ReadFull(f, got)
		if err := checkObject(got[:n], "obj", len(want)); err != nil {
			t.Fatal(err)
		}
	}
	type ramStats struct {
		RAM *struct {
			Capacity int64 `json:"capacity_bytes"`
			Hits     int64 `json:"hits"`
			Bytes    int64 `json:"bytes"`
		} `json:"ram_cache"`
	}
	ram := func() ramStats {
		t.Helper()
		res := runKvfs(t, "stats", "--json", d.mp)
		var st ramStats
		if err := json.Unmarshal([]byte(res.stdout), &st); err != nil || st.RAM == nil {
			t.Fatalf("stats --json: %v %s", err, res.stdout)
		}
		return st
	}
	load()
	// The copy reaches the tier asynchronously.
	waitFor(func() bool { load(); return ram().RAM.Hits > 0 })
	if st := ram(); st.RAM.Capacity != 16<<20 || st.RAM.Hits < 1 || st.RAM.Bytes != int64(len(want)) {
		t.Fatalf("RAM tier after loads: %+v", *st.RAM)
	}
	if out := runKvfs(t, "stats", d.mp).stdout; !strings.Contains(out, "ram_cache.hits") {
		t.Errorf("kvfs stats does not show the RAM tier:\n%s", out)
	}
	var sst unix.Stat_t
	if err := unix.Stat(d.mp, &sst); err != nil {
		t.Fatal(err)
	}
	ra, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(sst.Dev), unix.Minor(sst.Dev)))
	if err != nil || strings.TrimSpace(string(ra)) != "1024" {
		t.Errorf("readahead of the mount: %q, %v; want 1024", ra, err)
	}
	assertQuietEqual(t, d)
	d.stop()

	requireCleanLog(t, d)

	// Without the tier, 1 MiB reads (the widened readahead, O_DIRECT)
	// are served exactly and quietly too.
	plain := mountCache(t, "--capacity", "64MiB", "--no-passthrough")
	if out := runKvfs(t, "stats", plain.mp).stdout; strings.Contains(out, "ram_cache") {
		t.Errorf("stats of a mount without a RAM tier shows one:\n%s", out)
	}
	p = filepath.Join(plain.mp, "obj")
	putFile(t, p, want)
	load()
	direct, err := os.OpenFile(p, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := alignedBuffer(t, 4<<20)
	n, _ := io.ReadFull(direct, buf[:len(want)])
	direct.Close()
	if err := checkObject(buf[:n], "obj", len(want)); err != nil {
		t.Fatalf("O_DIRECT load: %v", err)
	}
	requireCleanLog(t, plain)
	plain.stop()
}

// storeTick returns a wait for the store's file system clock to tick:
// it returns once a file written there now gets a later time than any
// stored object has, so objects stored or opened after it are ordered by
// their times even where the file system's clock is coarse.
func storeTick(t *testing.T, store string) func() {
	probe := store + ".clock-probe" // beside the store, on its file system
	t.Cleanup(func() { os.Remove(probe) })
	latest := func() int64 {
		var most int64
		for _, st := range storeFiles(t, store) {
			most = max(most, st.Atim.Nano(), st.Mtim.Nano())
		}
		return most
	}
	return func() {
		t.Helper()
		last := latest()
		if !waitFor(func() bool {
			var st unix.Stat_t
			return os.WriteFile(probe, nil, 0o600) == nil && unix.Stat(probe, &st) == nil && st.Mtim.Nano() > last
		}) {
			t.Fatalf("the store's clock did not pass %d", last)
		}
	}
}

// goneWithin waits up to d for a stat of p to say ENOENT; if it never
// does, it says what the last stat said.
func goneWithin(p string, d time.Duration) error {
	var err error
	if waitWithin(d, func() bool { err = unix.Stat(p, new(unix.Stat_t)); return err == unix.ENOENT }) {
		return nil
	}
	if err == nil {
		return errors.New("the name is still there")
	}
	return err
}

// mountDirs makes a test's directory with an empty mount point in it,
// and names the store beside it (made by the mount).
func mountDirs(t *testing.T) (dir, mp, store string) {
	t.Helper()
	dir = t.TempDir()
	mp, store = filepath.Join(dir, "mnt"), filepath.Join(dir, "store")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, mp, store
}
