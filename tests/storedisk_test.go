package tests

// What the store's own disk does under kvfs: it goes read-only after an
// error, it fills up behind kvfs's back, it runs out of inodes.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvfs/kvfs/internal/loopfs"

	"golang.org/x/sys/unix"
)

// storeDisk mounts a small ext4 file system made with the extra mkfs
// arguments and mount options, for a store, and returns where.
func storeDisk(t *testing.T, size int64, opts string, mkfs ...string) string {
	t.Helper()
	requireRoot(t)
	return loopfs.Mount(t, loopfs.Spec{Mkfs: append([]string{"mkfs.ext4", "-q", "-F"}, mkfs...), Opts: opts, Size: size,
		NoMkfs: "this mkfs.ext4 cannot make the file system", NoMount: "this kernel cannot mount the ext4 image"})
}

// TestUnlinkOnAReadOnlyStore: a store whose file system turned read-only
// (ext4's errors=remount-ro after an error) refuses unlink, link and
// rename, and kvfs says so and keeps every name and its charge. Before,
// rm exited 0 and the name left the mount and the ledger, while the
// store kept the object, which the next start (or the audit) served
// again (an outside tester, 3 of 3).
func TestUnlinkOnAReadOnlyStore(t *testing.T) {
	root := storeDisk(t, 32<<20, "errors=remount-ro")
	m, ok := mountAt(root)
	if !ok {
		t.Fatalf("%s is not a mount", root)
	}
	trigger := filepath.Join("/sys/fs/ext4", filepath.Base(m.Source), "trigger_fs_error")
	if _, err := os.Stat(trigger); err != nil {
		t.Skipf("this kernel cannot fail an ext4 file system on purpose: %v", err)
	}
	_, mp, _ := mountDirs(t)
	store := filepath.Join(root, "store")
	d := startDaemon(t, mp, "--store", store, "--capacity", "16MiB")
	for _, name := range []string{"a", "b"} {
		putFile(t, filepath.Join(mp, name), objectBytes(name, 100_000))
	}
	before := waitReleased(t, mp)
	if err := os.WriteFile(trigger, []byte("kvfs test\n"), 0); err != nil {
		t.Fatal(err)
	}
	// ext4 turns read-only from a work queue, just after, and its mount
	// flags still say rw (emergency_ro): a create shows it.
	probe := filepath.Join(root, "probe")
	if !waitFor(func() bool { return errors.Is(os.WriteFile(probe, nil, 0o600), unix.EROFS) }) {
		t.Fatalf("the store's file system is not read-only %v after the error", hangGuard)
	}
	if err := os.Remove(filepath.Join(mp, "a")); !errors.Is(err, unix.EROFS) {
		t.Errorf("rm of a name on a read-only store: %v, want EROFS", err)
	}
	if err := os.Link(filepath.Join(mp, "a"), filepath.Join(mp, "c")); !errors.Is(err, unix.EROFS) {
		t.Errorf("ln on a read-only store: %v, want EROFS", err)
	}
	if err := os.Rename(filepath.Join(mp, "a"), filepath.Join(mp, "b")); !errors.Is(err, unix.EROFS) {
		t.Errorf("mv over a name on a read-only store: %v, want EROFS", err)
	}
	ents, err := os.ReadDir(mp)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("the mount lists %v after the refused changes, want [a b]", names)
	}
	for _, name := range []string{"a", "b"} {
		got, err := os.ReadFile(filepath.Join(mp, name))
		if err == nil {
			err = checkObject(got, name, 100_000)
		}
		if err != nil {
			t.Errorf("%s after the refused changes: %v", name, err)
		}
	}
	if st := stats(t, mp); st.UsedBytes != before.UsedBytes || st.Objects != before.Objects {
		t.Errorf("the ledger holds %d objects, %d bytes after the refused changes; %d, %d before",
			st.Objects, st.UsedBytes, before.Objects, before.UsedBytes)
	}
	d.stop() // a daemon whose store turned read-only still stops, exit 0
}

// fillDisk writes a file of zeros at path until its file system is
// full, as another program sharing the store's disk would.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, MiB)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// TestDiskFilledBehindKvfs: another program fills the store's disk. The
// capacity drops to what the disk leaves, evicting the coldest objects,
// and stores go on, evicting, instead of failing: before, every store
// failed with ENOSPC from the disk and nothing was evicted (an outside
// tester, 60 of 60). When the program's file goes, the capacity goes
// back to the one asked for.
func TestDiskFilledBehindKvfs(t *testing.T) {
	root := storeDisk(t, 64<<20, "")
	_, mp, _ := mountDirs(t)
	const asked = 32 * MiB
	d := startDaemon(t, mp, "--store", filepath.Join(root, "store"), "--capacity", "32MiB", "--grace", "0s")
	for i := range 24 {
		putFile(t, filepath.Join(mp, fmt.Sprintf("old%02d", i)), objectBytes(fmt.Sprint("old", i), MiB))
	}
	junk := filepath.Join(root, "junk")
	fillDisk(t, junk)
	var st kvfsStats
	if !waitFor(func() bool { st = stats(t, mp); return st.CapacityBytes < asked && st.Evictions > 0 }) {
		t.Fatalf("the capacity stayed %d, %d evicted, %v after the disk filled", st.CapacityBytes, st.Evictions, hangGuard)
	}
	if !d.printed("the store's file system holds less than the capacity") {
		t.Errorf("no warning of the full disk:\n%s", d.outSoFar())
	}
	for i := range 24 {
		name := fmt.Sprintf("new%02d", i)
		if err := os.WriteFile(filepath.Join(mp, name), objectBytes(name, MiB), 0o644); err != nil {
			t.Fatalf("store %d into the mount of a full disk: %v", i, err)
		}
	}
	for i := 20; i < 24; i++ { // the last stored are kept, whole
		name := fmt.Sprintf("new%02d", i)
		got, err := os.ReadFile(filepath.Join(mp, name))
		if err == nil {
			err = checkObject(got, name, MiB)
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	st = assertQuietEqual(t, d)
	if st.UsedBytes > st.CapacityBytes || st.CapacityBytes >= asked {
		t.Errorf("used %d of a capacity %d on the full disk; want within it, below %d", st.UsedBytes, st.CapacityBytes, asked)
	}
	if err := os.Remove(junk); err != nil {
		t.Fatal(err)
	}
	if !waitFor(func() bool { st = stats(t, mp); return st.CapacityBytes == asked }) {
		t.Errorf("the capacity is %d %v after the disk had room again, want %d", st.CapacityBytes, hangGuard, asked)
	}
	d.stop()
}

// TestStoreDiskOutOfInodes: a store on a file system of few inodes
// sheds its coldest objects for them, so creates go on: before, 1,050
// of 3,000 failed with ENOSPC with a quarter of the capacity used and
// nothing evicted (an outside tester), and df -i of the mount showed a
// million free (then the disk's free inodes, the ones kvfs keeps free
// included: another tester).
func TestStoreDiskOutOfInodes(t *testing.T) {
	root := storeDisk(t, 32<<20, "", "-N", "512")
	_, mp, _ := mountDirs(t)
	d := startDaemon(t, mp, "--store", filepath.Join(root, "store"), "--capacity", "16MiB", "--grace", "0s")
	var disk unix.Statfs_t
	if err := unix.Statfs(root, &disk); err != nil {
		t.Fatal(err)
	}
	n := int(disk.Files) * 3 // three times the inodes the disk has
	for i := range n {
		name := fmt.Sprintf("o%04d", i)
		if err := os.WriteFile(filepath.Join(mp, name), objectBytes(name, 4096), 0o644); err != nil {
			t.Fatalf("store %d of %d on a disk of %d inodes: %v", i, n, disk.Files, err)
		}
	}
	got, err := os.ReadFile(filepath.Join(mp, fmt.Sprintf("o%04d", n-1)))
	if err == nil {
		err = checkObject(got, fmt.Sprintf("o%04d", n-1), 4096)
	}
	if err != nil {
		t.Errorf("the last object: %v", err)
	}
	st := assertQuietEqual(t, d)
	if st.Evictions == 0 || st.UsedBytes > 16*MiB/4 {
		t.Errorf("%d evicted, %d bytes used: want objects evicted for inodes, not for bytes", st.Evictions, st.UsedBytes)
	}
	var sf unix.Statfs_t
	if err := unix.Statfs(mp, &sf); err != nil {
		t.Fatal(err)
	}
	if err := unix.Statfs(root, &disk); err != nil {
		t.Fatal(err)
	}
	// Free to a store: the disk's, less the hundredth (at least 64)
	// kvfs keeps free there, which a create evicts for.
	if floor := max(disk.Files/100, 64); sf.Ffree+floor > max(disk.Ffree, floor) {
		t.Errorf("df -i of the mount shows %d inodes free; the store's disk has %d, of which kvfs keeps %d", sf.Ffree, disk.Ffree, floor)
	}

	// Another program takes every inode left, with no object to shed:
	// a store fails with ENOSPC, counted as refused (it was not: an
	// outside tester's 1,797 such failures, admission_failures 0).
	entries, err := os.ReadDir(mp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(mp, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	hog := filepath.Join(root, "hog")
	t.Cleanup(func() { os.RemoveAll(hog) })
	if err := os.Mkdir(hog, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; os.WriteFile(filepath.Join(hog, fmt.Sprint(i)), nil, 0o644) == nil; i++ {
	}
	before := stats(t, mp).AdmissionFailures
	wantErrno(t, "a store with every inode of the disk taken", os.WriteFile(filepath.Join(mp, "late"), []byte("x"), 0o644), unix.ENOSPC)
	if after := stats(t, mp).AdmissionFailures; after != before+1 {
		t.Errorf("admission_failures %d after the refused store, want %d", after, before+1)
	}
	if err := os.RemoveAll(hog); err != nil {
		t.Fatal(err)
	}
	d.stop()
}

// TestStatsOfAFailedStore: with the store's file system shut down (XFS
// answers EIO to everything), kvfs stats fails with exit 1 and says
// why, as for any failure of the work: before, it exited 2, the code
// of a bad argument (an outside tester). rm says EIO and drops nothing.
func TestStatsOfAFailedStore(t *testing.T) {
	requireRoot(t)
	root := loopfs.Mount(t, loopfs.Spec{Mkfs: []string{"mkfs.xfs", "-q", "-f"}, Size: 320 << 20,
		NoMkfs: "this mkfs.xfs cannot make the file system", NoMount: "this kernel cannot mount the XFS image"})
	_, mp, _ := mountDirs(t)
	// No kernel cache: the stat of the root reaches the daemon.
	d := startDaemon(t, mp, "--store", filepath.Join(root, "store"), "--capacity", "16MiB", "--cache-timeout", "0s")
	putFile(t, filepath.Join(mp, "a"), objectBytes("a", 100_000))
	waitReleased(t, mp)
	if out, err := exec.Command("xfs_io", "-x", "-c", "shutdown", root).CombinedOutput(); err != nil {
		t.Skipf("xfs_io cannot shut the file system down: %v: %s", err, out)
	}
	if err := os.Remove(filepath.Join(mp, "a")); !errors.Is(err, unix.EIO) {
		t.Errorf("rm on a shut-down store: %v, want EIO", err)
	}
	res := runKvfs(t, "stats", mp)
	if res.code != 1 || !strings.Contains(res.stderr, unix.EIO.Error()) {
		t.Errorf("kvfs stats of a mount whose store fails: exit %d, %q; want exit 1 saying %v", res.code, res.stderr, unix.EIO)
	}
	if res := runKvfs(t, "unmount", mp); res.code != 0 {
		t.Errorf("kvfs unmount of a mount whose store fails: exit %d, %q", res.code, res.stderr)
	}
	d.waitExited()
}

// TestSmallStoreDisk: a store on a disk of a few MiB takes what fits.
// The free space kvfs keeps on the disk was 4 MiB at least, the whole of
// a 4 MiB disk: a --capacity of 2 MiB became 0 on the empty disk, and
// every store failed (an outside tester); half of it is kept now. And the default capacity is
// what the disk keeps, as announced: on 20 MiB it was said as 18 MiB,
// then lowered to 16 MiB by the first stores.
func TestSmallStoreDisk(t *testing.T) {
	t.Run("capacity_given", func(t *testing.T) {
		disk, mp := storeDiskOf(t, "4m")
		d := startDaemon(t, mp, "--store", filepath.Join(disk, "store"), "--capacity", "1MiB")
		for i := range 4 {
			name := fmt.Sprintf("o%d", i)
			if err := os.WriteFile(filepath.Join(mp, name), objectBytes(name, 256<<10), 0o644); err != nil {
				t.Fatalf("store %d of 256 KiB into 1 MiB on a 4 MiB disk: %v", i, err)
			}
		}
		st := assertQuietEqual(t, d)
		if st.CapacityBytes != MiB || st.Objects != 4 {
			t.Errorf("capacity %d holding %d objects; want 1 MiB holding 4", st.CapacityBytes, st.Objects)
		}
		if out := d.outSoFar(); strings.Contains(out, "holds less than the capacity") {
			t.Errorf("a 1 MiB cache on an empty 4 MiB disk was said to pass the disk:\n%s", out)
		}
		d.stop()
	})
	t.Run("default_capacity", func(t *testing.T) {
		disk, mp := storeDiskOf(t, "20m")
		d := startDaemon(t, mp, "--store", filepath.Join(disk, "store"))
		announced := stats(t, mp).CapacityBytes
		for i := range 40 {
			name := fmt.Sprintf("o%d", i)
			if err := os.WriteFile(filepath.Join(mp, name), objectBytes(name, 1<<20), 0o644); err != nil {
				t.Fatalf("store %d of 1 MiB into the default capacity (%d) of a 20 MiB disk: %v", i, announced, err)
			}
		}
		st := assertQuietEqual(t, d)
		if st.CapacityBytes != announced || st.Evictions == 0 {
			t.Errorf("capacity %d after %d evictions; want the %d announced, after evictions", st.CapacityBytes, st.Evictions, announced)
		}
		d.stop()
	})
}

// TestPassthroughStoresOnADiskSmallerThanTheCapacity: 8 threads store
// objects of 2.5-3 MB the fs_native way, by passthrough, with a capacity
// of 1 GiB on a 64 MiB disk. Every store succeeds, evicting, and the
// capacity in force is within the disk. The capacity was lowered only
// once the disk's free space was below the floor, reckoned with the
// writers' unwritten reservations as if on the disk: the writers were
// reserved room the disk lacked, and 7-9 of 120 stores failed with the
// disk's ENOSPC, none counted, while the cache held objects it could
// evict (an outside tester: 17-52 of 300 on 128 MiB).
func TestPassthroughStoresOnADiskSmallerThanTheCapacity(t *testing.T) {
	disk, mp := storeDiskOf(t, "64m")
	d := startDaemon(t, mp, "--store", filepath.Join(disk, "store"), "--capacity", "1GiB")
	const stores, threads = 120, 8
	cl := &fsNative{base: mp, seq: &atomic.Int64{}}
	errs := make(chan error, stores)
	inPool(threads, stores, func(i int) {
		key := fmt.Sprintf("key-%03d", i)
		if _, err := cl.store(key, objectBytes(key, 2500000+i*4000)); err != nil {
			errs <- fmt.Errorf("store %s: %w", key, err)
		}
	})
	close(errs)
	failed := 0
	for err := range errs {
		if failed++; failed <= 3 {
			t.Error(err)
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d stores failed on a 64 MiB disk with room to evict", failed, stores)
	}
	st := assertQuietEqual(t, d)
	if st.CapacityBytes >= 64*MiB || st.Evictions == 0 {
		t.Errorf("capacity %d after %d evictions; want one within the 64 MiB disk, after evictions", st.CapacityBytes, st.Evictions)
	}
	d.stop()
	requireCleanFsck(t, d.store, st)
}
