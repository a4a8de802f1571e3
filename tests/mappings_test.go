package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMappingOutlivesItsDescriptor: the C way to map a file (open,
// ftruncate, mmap MAP_SHARED, close) keeps its object while the mapping
// is there, with or without passthrough. With passthrough the kernel
// serves the mapping from the stored file and sends the RELEASE at the
// close(2): the object was unpinned, evicted under the mapping, and what
// was written through it went to an unlinked inode, msync answering 0
// (an outside tester: 3 of 3). Once the mapping is gone the object is
// evicted like any other.
func TestMappingOutlivesItsDescriptor(t *testing.T) {
	for _, passthrough := range []bool{true, false} {
		t.Run(fmt.Sprintf("passthrough %v", passthrough), func(t *testing.T) {
			flags := []string{"--capacity", "16MiB", "--grace", "0s", "--wait-limit", "0s"}
			if !passthrough {
				flags = append(flags, "--no-passthrough")
			}
			mappingOutlivesItsDescriptor(t, mountCache(t, flags...))
		})
	}
}

func mappingOutlivesItsDescriptor(t *testing.T, d *daemon) {
	const size = 4 * MiB
	p := filepath.Join(d.mp, "mapped")
	m := mapTheCWay(t, p, size)
	fill := func(prefix string) {
		for i := range 6 {
			putFile(t, filepath.Join(d.mp, fmt.Sprintf("%s%d", prefix, i)), objectBytes(prefix, size))
		}
	}
	fill("f")
	if st := stats(t, d.mp); st.PinnedObjects != 1 || st.UsedBytes > 16*MiB {
		t.Errorf("with the mapping there: pinned objects %d, used %d; want 1, at most 16 MiB", st.PinnedObjects, st.UsedBytes)
	}
	want := bytes.Repeat([]byte("z"), size)
	copy(m, want)
	if err := unix.Msync(m, unix.MS_SYNC); err != nil {
		t.Fatal(err)
	}
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after munmap: read %d bytes (%v); want the %d written through the mapping", len(got), err, size)
	}
	if !waitFor(func() bool { return stats(t, d.mp).PinnedObjects == 0 }) {
		t.Fatalf("pinned objects %d once the mapping is gone, want 0", stats(t, d.mp).PinnedObjects)
	}
	fill("g")
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("the object outlived its mapping's pin (%v): want it evicted as the coldest", err)
	}
	assertQuietEqual(t, d)
}

// TestSmallStoreBesideALargeObject: a process with no objects of its own
// is reserved by others' sizes, a guess; where the cache has free room
// for more than 1 MiB of it, the store takes that room and evicts
// nothing. A shell's `echo hi > f` into a 64 MiB cache with 4-14 MiB
// free evicted the 50-60 MiB object a sibling had stored, or, that
// object held open, waited the wait limit and failed with ENOSPC (an
// outside tester).
func TestSmallStoreBesideALargeObject(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB", "--grace", "0s")
	sh := func(script string) {
		t.Helper()
		if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
	}
	big := filepath.Join(d.mp, "big")
	sh("head -c 60M /dev/zero > " + big)
	sh("echo hi > " + filepath.Join(d.mp, "tiny"))
	if st := stats(t, d.mp); st.Evictions != 0 {
		t.Errorf("a 3-byte store beside 4 MiB of free room evicted %d objects", st.Evictions)
	}
	held, err := os.Open(big)
	if err != nil {
		t.Fatalf("the large object: %v", err)
	}
	sh("echo hi > " + filepath.Join(d.mp, "small"))
	if st := stats(t, d.mp); st.Evictions != 0 || st.AdmissionFailures != 0 {
		t.Errorf("a store beside a held large object: evictions %d, admission failures %d; want 0 and 0", st.Evictions, st.AdmissionFailures)
	}
	held.Close()
	// Several new processes at once: the first's guess takes the free
	// room, and the others, finding none, take no reservation instead
	// of evicting for a guess; their bytes are admitted as they come,
	// from the unused part of the first's. Before, the second evicted
	// big (an outside tester: 6 of 6 runs, 3 stores of 4 KiB).
	concurrentStores(t, d.mp, "many", 3)
	if st := stats(t, d.mp); st.Evictions != 0 || st.AdmissionFailures != 0 {
		t.Errorf("3 concurrent small stores beside a large object: evictions %d, admission failures %d; want 0 and 0", st.Evictions, st.AdmissionFailures)
	}
	if _, err := os.Stat(big); err != nil {
		t.Errorf("the large object after the small stores: %v", err)
	}
	// Eight at once beside it held: those that find no free share wait
	// for a share (1 MiB), evicting small objects for it if they must,
	// not for their guess (16 MiB) whole, which cannot be had while big
	// is held (a re-check: 3-6 of 8 refused after the wait limit).
	if held, err = os.Open(big); err != nil {
		t.Fatalf("the large object: %v", err)
	}
	concurrentStores(t, d.mp, "held", 8)
	if st := stats(t, d.mp); st.AdmissionFailures != 0 {
		t.Errorf("8 concurrent small stores beside a held large object: admission failures %d; want 0", st.AdmissionFailures)
	}
	held.Close()
	assertQuietEqual(t, d)
}

// concurrentStores stores n objects of 4 KiB under prefix in dir, each
// from a shell of its own, all at once.
func concurrentStores(t *testing.T, dir, prefix string, n int) {
	t.Helper()
	var procs []*exec.Cmd
	for i := range n {
		cmd := exec.Command("sh", "-c", fmt.Sprintf("head -c 4096 /dev/zero > %s", filepath.Join(dir, fmt.Sprint(prefix, i))))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
	}
	for _, cmd := range procs {
		if err := cmd.Wait(); err != nil {
			t.Errorf("a concurrent small store: %v", err)
		}
	}
}

// TestOwnGuessBesideALargeObject: a process's writer is reserved the
// largest object it stored lately; where making that room would evict
// an object far larger than it and the cache has free room, it takes the
// free room instead. A process that stored 8 MiB, storing 4 KiB beside
// 4 MiB of free room, evicted the 52 MiB object another had stored (an
// outside tester, 7 of 7 runs).
func TestOwnGuessBesideALargeObject(t *testing.T) {
	for _, c := range []struct {
		mode string
		big  int
	}{{"passthrough", 52 * MiB}, {"no-passthrough", 52 * MiB}, {"passthrough", 55 * MiB}} {
		mode := c.mode
		t.Run(fmt.Sprint(mode, "-", c.big/MiB, "MiB"), func(t *testing.T) {
			flags := []string{"--capacity", "64MiB", "--grace", "0s"}
			if mode == "no-passthrough" {
				flags = append(flags, "--no-passthrough")
			}
			d := mountCache(t, flags...)
			big := filepath.Join(d.mp, "big")
			if out, err := exec.Command("sh", "-c", fmt.Sprint("head -c ", c.big, " /dev/zero > ", big)).CombinedOutput(); err != nil {
				t.Fatalf("the large object: %v\n%s", err, out)
			}
			putFile(t, filepath.Join(d.mp, "eight"), objectBytes("eight", 8*MiB))
			putFile(t, filepath.Join(d.mp, "tiny"), objectBytes("tiny", 4096))
			if st := stats(t, d.mp); st.Evictions != 0 || st.AdmissionFailures != 0 {
				t.Errorf("a 4 KiB store beside %d MiB of free room: evictions %d, admission failures %d; want 0 and 0", 56-c.big/MiB, st.Evictions, st.AdmissionFailures)
			}
			if _, err := os.Stat(big); err != nil {
				t.Errorf("the large object: %v", err)
			}
			assertQuietEqual(t, d)
			d.stop()
		})
	}
}

// TestHandoverKeepsMappings: objects kept for mappings whose descriptors
// are closed (the C way, with passthrough) stay kept after a handover:
// the old daemon passes their stored files, and the new one keeps them
// pinned until the mappings go, an unlinked one's bytes counted as
// shadow bytes until then. Dropped at the handover before, such an
// object was evicted under its mapping by the next stores, and what was
// written through the mapping went with it.
func TestHandoverKeepsMappings(t *testing.T) {
	const size = 4 * MiB
	flags := []string{"--capacity", "16MiB", "--grace", "0s", "--wait-limit", "0s"}
	d := mountCache(t, flags...)
	kept, gone := mapTheCWay(t, filepath.Join(d.mp, "mapped"), size), mapTheCWay(t, filepath.Join(d.mp, "unlinked"), size)
	if err := os.Remove(filepath.Join(d.mp, "unlinked")); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, d.mp); st.PinnedObjects != 2 || st.ShadowBytes != size {
		t.Fatalf("before the handover: pinned objects %d, shadow bytes %d; want 2 and %d", st.PinnedObjects, st.ShadowBytes, size)
	}
	d = handOver(t, kvfsBin, d, append([]string{"--store", d.store}, flags...)...)
	if st := stats(t, d.mp); st.PinnedObjects != 2 || st.ShadowBytes != size {
		t.Errorf("after the handover: pinned objects %d, shadow bytes %d; want 2 and %d", st.PinnedObjects, st.ShadowBytes, size)
	}
	for i := range 4 {
		putFile(t, filepath.Join(d.mp, fmt.Sprintf("f%d", i)), objectBytes("f", size))
	}
	want := bytes.Repeat([]byte("z"), size)
	copy(kept, want)
	copy(gone, want)
	if err := unix.Msync(kept, unix.MS_SYNC); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(d.mp, "mapped")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the mapped object after the handover and 4 stores: read %d bytes (%v); want the %d written through its mapping", len(got), err, size)
	}
	if err := unix.Munmap(kept); err != nil {
		t.Fatal(err)
	}
	if err := unix.Munmap(gone); err != nil {
		t.Fatal(err)
	}
	var st kvfsStats
	if !waitFor(func() bool { st = stats(t, d.mp); return st.PinnedObjects == 0 && st.ShadowBytes == 0 }) {
		t.Fatalf("once the mappings are gone: pinned objects %d, shadow bytes %d; want 0 and 0", st.PinnedObjects, st.ShadowBytes)
	}
	assertQuietEqual(t, d)
	d.stop()
}

// mapTheCWay maps a new file of size bytes at p shared, read-write, as C
// programs do (open, ftruncate, mmap, close): only the mapping holds it
// then. The mapping goes at the test's end, if it is still there.
func mapTheCWay(t *testing.T, p string, size int) []byte {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) }) // EINVAL once unmapped: x/sys knows its mappings
	if err := unix.Close(fd); err != nil {
		t.Fatal(err)
	}
	return m
}
