package tests

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStoreDiskFull puts the store on a 48 MiB tmpfs (which works, with a
// warning) under a 96 MiB capacity, so the disk runs out before the
// ledger does. kvfs lowers the capacity to what the disk holds (keeping
// a floor of it free) and every store goes on, evicting the coldest:
// nothing is read back wrong, the accounting stays exact, the daemon
// keeps serving. A preallocation past the room left answers ENOSPC (the
// disk lacks it), not EFBIG (the cache never could). Before 2026-12-06
// the stores failed with ENOSPC once the disk was full, with nothing
// evicted.
func TestStoreDiskFull(t *testing.T) {
	disk, mp := storeDiskOf(t, "48m")
	d := startDaemon(t, mp, "--store", filepath.Join(disk, "store"), "--capacity", "96MiB", "--grace", "100ms")
	if !d.printed("store is on tmpfs") {
		t.Errorf("no warning that the store is on tmpfs:\n%s", d.out)
	}
	cl := &fsNative{base: mp, seq: &atomic.Int64{}}
	var stored []string
	for i := range 30 {
		key := "obj-" + string(rune('a'+i))
		if _, err := cl.store(key, objectBytes(key, 4*MiB)); err != nil {
			t.Fatalf("store %d of 4 MiB onto a 48 MiB disk: %v", i, err)
		}
		stored = append(stored, key)
	}
	checkAll := func(when string) (held int) {
		t.Helper()
		for _, k := range stored {
			got, err := cl.load(k)
			if err == nil && got == nil {
				continue // evicted: fs_native's miss
			}
			if err == nil {
				err = checkObject(got, k, 4*MiB)
			}
			if err != nil {
				t.Errorf("%s: %v", when, err)
			}
			held++
		}
		return held
	}
	held := checkAll("on the full disk")
	st := assertQuietEqual(t, d)
	if st.CapacityBytes >= 48*MiB || st.Evictions == 0 || st.Objects != int64(held) || held == 0 {
		t.Errorf("on a full 48 MiB disk: capacity %d, %d evictions, %d objects (%d read back); want the capacity lowered, evictions, every object held read back",
			st.CapacityBytes, st.Evictions, st.Objects, held)
	}

	// A whole-object write and a preallocation within the room work; a
	// preallocation past it is refused ENOSPC, the object unchanged.
	if _, err := (&fsNative{base: mp, whole: true, seq: cl.seq}).store("whole", objectBytes("whole", 4*MiB)); err != nil {
		t.Errorf("a whole-object write on a full disk: %v", err)
	}
	stored = append(stored, "whole")
	f, err := os.Create(filepath.Join(mp, "prealloc"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, 8*MiB); err != nil {
		t.Errorf("fallocate 8 MiB on the full disk: %v", err)
	}
	wantErrno(t, "fallocate 64 MiB past the disk's room", unix.Fallocate(int(f.Fd()), 0, 0, 64*MiB), unix.ENOSPC)
	f.Close()
	if err := os.Remove(filepath.Join(mp, "prealloc")); err != nil {
		t.Fatal(err)
	}
	checkAll("after the preallocations")
	st = assertQuietEqual(t, d)
	requireCleanLog(t, d)
	d.stop()
	requireCleanFsck(t, d.store, st)
}

// TestStoreDiskFullUnderFinalNames: writers through the daemon that
// store under final names (`open(key, "wb")`, a shell's `>`) onto a store
// whose disk is smaller than the capacity: stores go on, evicting, each
// name whole or absent, and a store larger than the room the disk leaves
// fails with ENOSPC and leaves no object, as one the capacity refuses
// does (it stayed, the prefix that fitted under its final name, charged,
// through a restart; fsck saw nothing: an outside tester). On a 12 MiB
// disk that refusal's setting of the ledger to what the disk took
// evicted objects and left their names, listed and answering ESTALE for
// good (5 of 12 before 2026-12-07).
func TestStoreDiskFullUnderFinalNames(t *testing.T) {
	for _, tc := range []struct {
		disk    string
		objects int
		big     int
	}{{"8m", 10, 6 * MiB}, {"12m", 12, 10 * MiB}} {
		t.Run(tc.disk, func(t *testing.T) {
			storeDiskFullUnderFinalNames(t, tc.disk, tc.objects, tc.big)
		})
	}
}

func storeDiskFullUnderFinalNames(t *testing.T, size string, objects, bigSize int) {
	disk, mp := storeDiskOf(t, size)
	d := startDaemon(t, mp, "--store", filepath.Join(disk, "store"), "--capacity", "64MiB", "--no-passthrough", "--grace", "0s")
	var stored []string
	for i := range objects {
		key := "o" + string(rune('a'+i))
		if err := os.WriteFile(filepath.Join(mp, key), objectBytes(key, 1000000), 0o644); err != nil {
			t.Fatalf("store %d of 1 MB onto a %s disk: %v", i, size, err)
		}
		stored = append(stored, key)
	}
	big := filepath.Join(mp, "big")
	if err := os.WriteFile(big, objectBytes("big", bigSize), 0o644); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("a %d MiB store onto a %s disk that keeps 4 MiB free: %v, want ENOSPC", bigSize/MiB, size, err)
	}
	if !waitFor(func() bool {
		// The kernel's cached name goes with kvfs's notice, sent after
		// the close's answer (the first CI run of a session under load
		// looked before it came).
		_, err := os.Lstat(big)
		return errors.Is(err, fs.ErrNotExist)
	}) {
		t.Errorf("the store the disk refused left %s", big)
	}
	held := 0
	for _, k := range stored {
		got, err := os.ReadFile(filepath.Join(mp, k))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			err = checkObject(got, k, 1000000)
		}
		if err != nil {
			t.Errorf("%s: %d bytes (%v)", k, len(got), err)
		}
		held++
	}
	st := assertQuietEqual(t, d)
	if st.Objects != int64(held) || held == 0 {
		t.Errorf("%+v, want the %d whole objects alone", st, held)
	}
	d.stop()
	requireCleanFsck(t, d.store, st)
}

// storeDiskOf is a tmpfs of size for a store (root only), and an empty
// mount point beside it.
func storeDiskOf(t *testing.T, size string) (disk, mp string) {
	t.Helper()
	dir := t.TempDir()
	disk = mountTmpfs(t, dir, size)
	mp = filepath.Join(dir, "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	return disk, mp
}

// changeBehind rewrites the store under data/ the ways an operator or a
// broken tool might (a directory removed with its files, too), and returns what each path must then hold (a nil
// value: absent).
func changeBehind(t *testing.T, store string) map[string][]byte {
	t.Helper()
	data := filepath.Join(store, "data")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]byte{}
	must(os.Remove(filepath.Join(data, "gone")))
	want["gone"] = nil
	must(os.RemoveAll(filepath.Join(data, "olddir")))
	want["olddir/f"] = nil
	want["olddir"] = nil
	must(os.Truncate(filepath.Join(data, "shrunk"), 1000))
	want["shrunk"] = objectBytes("shrunk", 2*MiB)[:1000]
	// Rewritten in place (same inode), three times the size.
	must(os.WriteFile(filepath.Join(data, "grown"), objectBytes("grown", 3*MiB), 0o644))
	want["grown"] = objectBytes("grown", 3*MiB)
	must(os.WriteFile(filepath.Join(data, "appeared"), objectBytes("appeared", MiB), 0o644))
	want["appeared"] = objectBytes("appeared", MiB)
	must(os.MkdirAll(filepath.Join(data, "newdir", "deeper"), 0o755))
	must(os.WriteFile(filepath.Join(data, "newdir", "deeper", "deep"), objectBytes("deep", MiB), 0o644))
	want["newdir/deeper/deep"] = objectBytes("deep", MiB)
	must(os.Link(filepath.Join(data, "kept"), filepath.Join(data, "kept-link")))
	want["kept"] = objectBytes("kept", 3*MiB)
	want["kept-link"] = want["kept"]
	want["sub/linked"] = objectBytes("linked", 2*MiB)
	want["linked2"] = want["sub/linked"]
	return want
}

// putChangeable stores the objects changeBehind changes.
func putChangeable(t *testing.T, mp string) {
	t.Helper()
	for _, dir := range []string{"sub", "olddir"} {
		if err := os.Mkdir(filepath.Join(mp, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	putFile(t, filepath.Join(mp, "olddir", "f"), objectBytes("f", MiB))
	for name, size := range map[string]int{"gone": 2 * MiB, "shrunk": 2 * MiB, "grown": MiB, "kept": 3 * MiB} {
		putFile(t, filepath.Join(mp, name), objectBytes(name, size))
	}
	putFile(t, filepath.Join(mp, "sub", "linked"), objectBytes("linked", 2*MiB))
	if err := os.Link(filepath.Join(mp, "sub", "linked"), filepath.Join(mp, "linked2")); err != nil {
		t.Fatal(err)
	}
	// Read and stat everything, so the kernel caches names, attributes
	// and pages that the changes then make stale.
	filepath.WalkDir(mp, func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			os.ReadFile(p)
		}
		return err
	})
}

// checkChanged requires the mount to serve exactly want: each path's
// content, or absence; evicted (absent) is accepted where evictable.
func checkChanged(t *testing.T, mp string, want map[string][]byte, evictable bool) {
	t.Helper()
	for rel, w := range want {
		got, err := os.ReadFile(filepath.Join(mp, rel))
		switch {
		case w == nil && !errors.Is(err, fs.ErrNotExist):
			t.Errorf("%s was deleted from the store, but the mount answers %v (%d bytes)", rel, err, len(got))
		case w == nil:
		case errors.Is(err, fs.ErrNotExist) && evictable:
		case err != nil:
			t.Errorf("%s: %v", rel, err)
		case firstDiff(got, w) >= 0:
			t.Errorf("%s: %d bytes, want %d; first difference at %d", rel, len(got), len(w), firstDiff(got, w))
		}
	}
	var a, b unix.Stat_t
	if unix.Stat(filepath.Join(mp, "kept"), &a) == nil && unix.Stat(filepath.Join(mp, "kept-link"), &b) == nil && a.Ino != b.Ino {
		t.Errorf("kept-link, made behind kvfs's back, is not the same inode as kept")
	}
}

// TestStoreChangedWhileMounted: files deleted, truncated, rewritten
// larger, hard linked and added (in a new directory too) in the store
// behind a running daemon are found by the periodic audit, which logs
// it, counts reconciliations, evicts if the store now holds more than
// the capacity, and leaves the accounting exact and the mount serving
// what the store holds.
func TestStoreChangedWhileMounted(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB", "--audit-interval", "1s", "--grace", "0s")
	putChangeable(t, d.mp)
	before := assertQuietEqual(t, d)
	want := changeBehind(t, d.store)
	// More than the capacity now: the audit must evict to fit.
	big := filepath.Join(d.store, "data", "big")
	if err := os.WriteFile(big, objectBytes("big", 8*MiB), 0o644); err != nil {
		t.Fatal(err)
	}
	want["big"] = objectBytes("big", 8*MiB)
	if !waitFor(func() bool {
		return stats(t, d.mp).Reconciliations > before.Reconciliations &&
			strings.Contains(d.out.String(), "store changed behind kvfs; ledger reconciled")
	}) {
		t.Fatalf("no reconciliation after changing the store: %+v", stats(t, d.mp))
	}
	st := assertQuietEqual(t, d)
	t.Logf("after the audit: %d reconciliations, %d evictions; %+v", st.Reconciliations, st.Evictions, st)
	if st.Evictions == 0 {
		t.Errorf("the store held more than the capacity, yet nothing was evicted: %+v", st)
	}
	checkChanged(t, d.mp, want, true)
	assertQuietEqual(t, d)
	requireCleanLog(t, d)
	d.stop()
}

// TestStoreChangedReconciledOnLookup: without an audit, a lookup that
// finds a file resized or gone in the store reconciles the ledger.
func TestStoreChangedReconciledOnLookup(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB", "--audit-interval", "0", "--cache-timeout", "0s")
	putFile(t, filepath.Join(d.mp, "shrunk"), objectBytes("shrunk", 2*MiB))
	putFile(t, filepath.Join(d.mp, "gone"), objectBytes("gone", 2*MiB))
	before := assertQuietEqual(t, d)
	if err := os.Truncate(filepath.Join(d.store, "data", "shrunk"), 5000); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(d.store, "data", "gone")); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(d.mp, "shrunk"), &st); err != nil || st.Size != 5000 || st.Blocks*512 != 8192 {
		t.Errorf("stat of a file truncated behind kvfs: %v, size %d, blocks %d", err, st.Size, st.Blocks)
	}
	wantErrno(t, "stat of a file deleted behind kvfs", unix.Stat(filepath.Join(d.mp, "gone"), &st), unix.ENOENT)
	after := assertQuietEqual(t, d)
	if after.Reconciliations < before.Reconciliations+2 || after.UsedBytes != 8192 {
		t.Errorf("after the lookups: %+v", after)
	}
	for _, line := range []string{"object size changed behind kvfs, or since the checkpoint a start came from; ledger reconciled", "object vanished from the store"} {
		if !d.printed(line) {
			t.Errorf("the log does not say %q", line)
		}
	}
	d.stop()
}

// plantForeign leaves in a stopped store what kvfs never makes: a
// symlink to a file outside, a FIFO, a socket, a device node, an object
// marked as still being written, and a stale marker. It returns the
// outside file, which must survive untouched.
func plantForeign(t *testing.T, store, tag string) string {
	t.Helper()
	data := filepath.Join(store, "data")
	secret := filepath.Join(filepath.Dir(store), "secret-"+tag)
	if err := os.WriteFile(secret, []byte("outside the store"), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(secret, filepath.Join(data, "evil-"+tag)))
	must(os.Symlink(filepath.Dir(store), filepath.Join(data, "sub", "evildir-"+tag)))
	must(unix.Mkfifo(filepath.Join(data, "fifo-"+tag), 0o644))
	must(unix.Mknod(filepath.Join(data, "dev-"+tag), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))))
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(data, "sock-"+tag), Net: "unix"})
	must(err)
	l.SetUnlinkOnClose(false)
	l.Close()
	partial := filepath.Join(data, "partial-"+tag)
	must(os.WriteFile(partial, objectBytes("partial", MiB)[:MiB/2], 0o644))
	must(os.Link(partial, filepath.Join(store, "writing", "ffff"+tag)))
	must(os.WriteFile(filepath.Join(store, "writing", "dead"+tag), nil, 0o644))
	return secret
}

// TestStoreChangedWhileDown: a stopped store changed behind kvfs's back
// (files deleted, truncated, rewritten, linked and added) and planted
// with what kvfs never makes (a symlink, a FIFO, a socket, a device, a
// half-written object, a stale marker). fsck reports each planted thing
// and changes nothing; fsck --repair reclaims them, leaves the symlinks'
// targets alone, and is then clean; the remount serves exactly the
// store, with exact accounting. A second round plants again and remounts
// without fsck: start-up reclaims the same way.
func TestStoreChangedWhileDown(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB")
	flags := []string{"--store", d.store, "--capacity", "64MiB"}
	putChangeable(t, d.mp)
	assertQuietEqual(t, d)
	d.stop()

	want := changeBehind(t, d.store)
	secret := plantForeign(t, d.store, "1")
	// fsck takes the store's lock (and writes its pid in kvfs.lock).
	before := listing(t, filepath.Join(d.store, "data")) + listing(t, filepath.Join(d.store, "writing"))
	rep, res := fsck(t, d.store)
	t.Logf("fsck of the planted store: exit %d, problems %q", res.code, rep.Problems)
	if res.code != 1 || rep.Repaired {
		t.Errorf("fsck of a planted store: exit %d, repaired %v; want exit 1", res.code, rep.Repaired)
	}
	problems := strings.Join(rep.Problems, "\n")
	for _, what := range []string{"evil-1", "sub/evildir-1", "fifo-1", "sock-1", "dev-1", "incomplete object partial-1", "stale write marker writing/dead1"} {
		if !strings.Contains(problems, what) {
			t.Errorf("fsck does not report %s", what)
		}
	}
	if after := listing(t, filepath.Join(d.store, "data")) + listing(t, filepath.Join(d.store, "writing")); after != before {
		t.Errorf("fsck without --repair changed the store:\nbefore\n%s\nafter\n%s", before, after)
	}
	rep, res = fsck(t, d.store, "--repair")
	if res.code != 0 || !rep.Repaired {
		t.Errorf("fsck --repair: exit %d, %+v, stderr %q", res.code, rep, res.stderr)
	}
	if got, err := os.ReadFile(secret); err != nil || string(got) != "outside the store" {
		t.Errorf("the symlink's target outside the store: %q, %v", got, err)
	}
	rep, res = fsck(t, d.store)
	if res.code != 0 || len(rep.Problems) != 0 {
		t.Fatalf("fsck after --repair: exit %d, problems %q", res.code, rep.Problems)
	}
	d = startDaemon(t, d.mp, flags...)
	checkChanged(t, d.mp, want, false)
	st := assertQuietEqual(t, d)
	if st.Objects != rep.Objects || st.UsedBytes != rep.Bytes {
		t.Errorf("the remount charges %d objects / %d bytes, fsck counted %d / %d", st.Objects, st.UsedBytes, rep.Objects, rep.Bytes)
	}
	d.stop()

	// Again, straight to the mount.
	if err := os.Remove(filepath.Join(d.store, "data", "appeared")); err != nil {
		t.Fatal(err)
	}
	want["appeared"] = nil
	secret = plantForeign(t, d.store, "2")
	d = startDaemon(t, d.mp, flags...)
	checkChanged(t, d.mp, want, false)
	for _, name := range []string{"evil-2", "sub/evildir-2", "fifo-2", "sock-2", "dev-2", "partial-2"} {
		if _, err := os.Lstat(filepath.Join(d.mp, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s planted in the store is served: %v", name, err)
		}
	}
	if got, err := os.ReadFile(secret); err != nil || string(got) != "outside the store" {
		t.Errorf("the symlink's target outside the store: %q, %v", got, err)
	}
	if r := loaded(t, d); r.Incomplete != 1 || r.Foreign != 5 {
		t.Errorf("start-up does not report reclaiming 1 incomplete object and 5 foreign entries:\n%s", d.out.String())
	}
	st = assertQuietEqual(t, d)
	d.stop()
	requireCleanFsck(t, d.store, st)
}
