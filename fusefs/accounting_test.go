package fusefs_test

import (
	"bytes"
	"fmt"
	"github.com/kvfs/kvfs/core"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The accounting tests run on a small cache so that floods of a few
// times the capacity are quick.
const (
	smallCap = 8 * mib
	grace    = 50 * time.Millisecond
)

func mountSmall(t *testing.T, opts ...mountOpt) *kvfsMount {
	return mountKVFS(t, append([]mountOpt{withCapacity(smallCap), withGrace(grace), withWait(time.Second)}, opts...)...)
}

// exists reports whether p is on the mount, failing on errors other
// than ENOENT.
func exists(t *testing.T, p string) bool {
	t.Helper()
	var st unix.Stat_t
	err := unix.Lstat(p, &st)
	if err != nil && err != unix.ENOENT {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return err == nil
}

// flood stores n objects of size bytes each under prefix, from writers
// goroutines, failing the test on any error: with nothing pinned beyond
// what the test holds, room is always made by eviction or by waiting.
func flood(t *testing.T, k *kvfsMount, prefix string, n, size, writers int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += writers {
				if err := writeObject(k.path(fmt.Sprintf("%s%03d", prefix, i)), pattern(1000+i, size)); err != nil {
					errs <- fmt.Errorf("flood object %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestLRUOrder: eviction takes the least recently used object first;
// opening an object touches it, stat does not. The kernel caches nothing
// here, so every stat reaches kvfs.
func TestLRUOrder(t *testing.T) {
	k := mountSmall(t, withCache(0))
	for i := range 8 {
		mustWrite(t, k.path(fmt.Sprintf("obj%d", i)), pattern(i, mib))
		k.released(0) // the LRU order is the order of the RELEASEs
	}
	if st := k.M.Stats(); st.UsedBytes != smallCap {
		t.Fatalf("used %d after filling, want %d", st.UsedBytes, smallCap)
	}
	k.pastGrace(0)
	f, err := os.Open(k.path("obj0"))
	if err != nil {
		t.Fatal(err)
	}
	f.Read(make([]byte, 1))
	f.Close()
	for range 3 {
		lstat(t, k.path("obj1"))
		if _, err := os.ReadDir(k.Mnt); err != nil {
			t.Fatal(err)
		}
	}
	k.pastGrace(0)

	mustWrite(t, k.path("new0"), pattern(100, mib))
	if exists(t, k.path("obj1")) || !exists(t, k.path("obj0")) {
		t.Errorf("after one eviction: obj1 present %v, obj0 present %v; want obj1 (stat only) evicted and obj0 (opened) kept",
			exists(t, k.path("obj1")), exists(t, k.path("obj0")))
	}
	mustWrite(t, k.path("new1"), pattern(101, mib))
	for i, want := range []bool{true, false, false, true, true, true, true, true} {
		if got := exists(t, k.path(fmt.Sprintf("obj%d", i))); got != want {
			t.Errorf("after two evictions obj%d present %v, want %v", i, got, want)
		}
	}
	mustRead(t, k.path("obj0"), pattern(0, mib))
	if st := k.M.Stats(); st.Evictions != 2 || st.EvictedBytes != 2*mib || st.UsedBytes != smallCap {
		t.Errorf("stats after two evictions: %+v", st)
	}
}

// TestOpenHandlesNeverEvicted: while a flood five times the capacity is
// stored, an object open for reading and one open for writing (a store
// in progress) stay, byte for byte; the writer then finishes.
func TestOpenHandlesNeverEvicted(t *testing.T) {
	k := mountSmall(t)
	rdata := pattern(1, 2*mib)
	mustWrite(t, k.path("reading"), rdata)
	r, err := os.Open(k.path("reading"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wdata := pattern(2, 2*mib)
	w, err := os.OpenFile(k.path("writing"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write(wdata[:mib]); err != nil {
		t.Fatal(err)
	}
	k.pastGrace(2)

	s := sampleCapacity(k, false)
	flood(t, k, "flood", 5*smallCap/mib, mib, 2)
	s.check(t)

	if !exists(t, k.path("reading")) || !exists(t, k.path("writing")) {
		t.Fatalf("an open object was evicted: reading present %v, writing present %v", exists(t, k.path("reading")), exists(t, k.path("writing")))
	}
	if _, err := w.Write(wdata[mib:]); err != nil {
		t.Fatalf("finishing the open store after the flood: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(rdata))
	if _, err := r.ReadAt(got, 0); err != nil || !bytes.Equal(got, rdata) {
		t.Errorf("the open reader's bytes changed (%v)", err)
	}
	r.Close()
	mustRead(t, k.path("reading"), rdata)
	mustRead(t, k.path("writing"), wdata)
	st := k.M.Stats()
	if st.Evictions < 5*smallCap/mib-8 || st.AdmissionFailures != 0 {
		t.Errorf("after the flood: %d evictions, %d admission failures", st.Evictions, st.AdmissionFailures)
	}
}

// TestEvictionRemovesEveryName: evicting a hard-linked inode removes all
// its names from kvfs, the store and the kernel's caches, which would
// otherwise answer stat for a minute (the production cache timeout).
func TestEvictionRemovesEveryName(t *testing.T) {
	k := mountSmall(t)
	if err := os.Mkdir(k.path("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b", "sub/c"}
	mustWrite(t, k.path("a"), pattern(1, mib))
	for _, n := range names[1:] {
		if err := os.Link(k.path("a"), k.path(n)); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		lstat(t, k.path(n)) // cache the entries and attributes
	}
	k.pastGrace(0)
	flood(t, k, "flood", smallCap/mib, mib, 1)

	gone := eventually(func() bool {
		for _, n := range names {
			if exists(t, k.path(n)) {
				return false
			}
		}
		return true
	})
	if !gone {
		for _, n := range names {
			t.Errorf("%s still answers stat after its inode was evicted", n)
		}
	}
	for _, n := range names {
		wantAbsent(t, k.storePath(n))
		wantErrno(t, "open "+n, func() error { _, err := os.Open(k.path(n)); return err }(), syscall.ENOENT)
	}
	if ents, _ := os.ReadDir(k.path("sub")); len(ents) != 0 {
		t.Errorf("sub still lists %d entries", len(ents))
	}
	if st := k.M.Stats(); st.Evictions != 1 || st.EvictedBytes != mib {
		t.Errorf("evicted %d objects, %d bytes; want the one linked inode, once", st.Evictions, st.EvictedBytes)
	}
}

// TestUnlinkRacingEviction: unlinks of names that eviction removes at the
// same moment (their kernel entries cached, the invalidation on its way)
// succeed or get ENOENT, never anything else, and leave no charge behind;
// so do several clients deleting one key.
func TestUnlinkRacingEviction(t *testing.T) {
	k := mountSmall(t)
	const n, floodN = 64, 32
	for i := range n {
		mustWrite(t, k.path(fmt.Sprintf("old%02d", i)), pattern(i, smallCap/n))
	}
	for i := range n {
		lstat(t, k.path(fmt.Sprintf("old%02d", i)))
	}
	k.pastGrace(0)
	s := sampleCapacity(k, false)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		flood(t, k, "new", floodN, smallCap/16, 1)
	}()
	// Start deleting once eviction is under way, from the coldest
	// objects up, so that the first unlinks meet names just evicted.
	if !eventually(func() bool { return k.M.Stats().Evictions >= 4 }) {
		t.Fatalf("the flood evicted nothing")
	}
	results := make([]error, n)
	for i := range n {
		results[i] = os.Remove(k.path(fmt.Sprintf("old%02d", i)))
	}
	wg.Wait()
	s.check(t)
	removed, absent := 0, 0
	for i, err := range results {
		switch {
		case err == nil:
			removed++
		case errnoOf(err) == syscall.ENOENT:
			absent++
		default:
			t.Errorf("unlink old%02d: %v, want success or ENOENT", i, err)
		}
	}
	st := k.M.Stats()
	t.Logf("unlinks: %d succeeded, %d ENOENT; %d evictions", removed, absent, st.Evictions)
	for i := range n {
		wantAbsent(t, k.path(fmt.Sprintf("old%02d", i)))
	}

	mustWrite(t, k.path("key"), pattern(7, 100*kib))
	results = make([]error, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = os.Remove(k.path("key"))
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range results {
		if err == nil {
			ok++
		} else if errnoOf(err) != syscall.ENOENT {
			t.Errorf("concurrent unlink of one key: %v", err)
		}
	}
	if ok == 0 {
		t.Errorf("no concurrent unlink of the key succeeded")
	}
	var want int64
	for i := range floodN {
		if exists(t, k.path(fmt.Sprintf("new%03d", i))) {
			want += smallCap / 16
		}
	}
	if st := k.settled(func(st core.Stats) bool { return st.UsedBytes == want }); st.UsedBytes != want || st.Objects != want/(smallCap/16) {
		t.Errorf("used %d in %d objects; the surviving objects hold %d: a charge was left behind", st.UsedBytes, st.Objects, want)
	}
}

// TestShadowBytes: an unlinked inode that is still open stays charged as
// shadow bytes, readable and writable through its handles, and is
// released once, at its last close.
func TestShadowBytes(t *testing.T) {
	k := mountSmall(t)
	data := pattern(1, mib+1)
	charge := ceil4096(int64(len(data)))
	mustWrite(t, k.path("obj"), data)
	r, err := os.Open(k.path("obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := os.Remove(k.path("obj")); err != nil {
		t.Fatal(err)
	}
	wantAbsent(t, k.path("obj"))
	wantAbsent(t, k.storePath("obj"))
	if st := k.M.Stats(); st.ShadowBytes != charge || st.UsedBytes != charge || st.Objects != 1 {
		t.Errorf("unlinked while open: shadow %d used %d objects %d; want shadow = used = %d, 1 object", st.ShadowBytes, st.UsedBytes, st.Objects, charge)
	}
	var sf unix.Statfs_t
	if err := unix.Statfs(k.Mnt, &sf); err != nil || int64(sf.Blocks-sf.Bfree)*4096 != charge {
		t.Errorf("statfs used %d (%v), want the shadow charge %d", int64(sf.Blocks-sf.Bfree)*4096, err, charge)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(r.Fd()), &st); err != nil || st.Nlink != 0 || st.Blocks != charge/512 {
		t.Errorf("fstat of the unlinked object: nlink %d blocks %d (%v), want 0 and %d", st.Nlink, st.Blocks, err, charge/512)
	}
	got := make([]byte, len(data))
	if _, err := r.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Errorf("reading the unlinked object: %v", err)
	}

	// A writer keeps writing after its object lost its name.
	w, err := os.OpenFile(k.path("w"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write(pattern(2, 512*kib)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(k.path("w")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(pattern(3, 512*kib)); err != nil {
		t.Fatalf("writing to an unlinked open object: %v", err)
	}
	// The writer is charged what it holds, at least its reservation.
	k.M.Poll()
	if st, want := k.M.Stats(), charge+max(mib, k.M.Reservation()); st.ShadowBytes != want {
		t.Errorf("shadow %d with both open, want %d", st.ShadowBytes, want)
	}
	before := k.M.Stats()
	w.Close()
	r.Close()
	if !eventually(func() bool { return k.M.Stats().Objects == 0 }) {
		t.Fatalf("unlinked objects not released after their last close: %+v", k.M.Stats())
	}
	after := k.M.Stats()
	if after.UsedBytes != 0 || after.ShadowBytes != 0 || after.Evictions != before.Evictions {
		t.Errorf("after the last closes: %+v, want nothing used and no evictions", after)
	}
	mustWrite(t, k.path("next"), pattern(4, 10000))
	if got := k.M.Stats().UsedBytes; got != ceil4096(10000) {
		t.Errorf("used %d after one more object, want %d: a release counted twice", got, ceil4096(10000))
	}
}

// TestNoSpace: a truncate or fallocate that cannot fit even after
// evicting all that is evictable fails with ENOSPC; one larger than the
// whole capacity, which could never fit, with EFBIG, uncounted as an
// admission failure; neither loses anything already stored.
func TestNoSpace(t *testing.T) {
	k := mountSmall(t, withWait(300*time.Millisecond))
	keep := pattern(1, mib)
	mustWrite(t, k.path("keep"), keep)
	held := map[string][]byte{"w1": pattern(2, 3*mib), "w2": pattern(3, 3*mib)}
	for name, data := range held {
		f, err := os.OpenFile(k.path(name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	d, err := os.OpenFile(k.path("d"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	k.pastGrace(3)
	k.M.Poll()
	// 7 MiB held by writers (d its reservation, the size of "keep"), 1 MiB
	// evictable ("keep"), nothing free.
	if res := k.M.Reservation(); res != mib {
		t.Fatalf("reservation %d, want the size of the object stored before (1 MiB)", res)
	}
	fd := int(d.Fd())
	wantErrno(t, "ftruncate past the capacity", unix.Ftruncate(fd, smallCap+1), syscall.EFBIG)
	wantErrno(t, "ftruncate to more than can be freed", unix.Ftruncate(fd, 3*mib), syscall.ENOSPC)
	wantErrno(t, "fallocate past the capacity", unix.Fallocate(fd, 0, 0, smallCap+4096), syscall.EFBIG)
	wantErrno(t, "fallocate of more than can be freed", unix.Fallocate(fd, 0, 0, 3*mib), syscall.ENOSPC)
	wantErrno(t, "truncate by path past the capacity", os.Truncate(k.path("keep"), smallCap+4096), syscall.EFBIG)
	if st := lstat(t, k.path("d")); st.Size != 0 || st.Blocks != mib/512 {
		t.Errorf("refused object has size %d blocks %d, want 0 and its reservation", st.Size, st.Blocks)
	}
	mustRead(t, k.path("keep"), keep)
	for name, data := range held {
		mustRead(t, k.path(name), data)
	}
	st := k.M.Stats()
	if st.Evictions != 0 || st.AdmissionFailures != 2 || st.UsedBytes != smallCap || st.ReservedBytes != mib {
		t.Errorf("after refusals: %+v; want no evictions, 2 admission failures (the ENOSPCs), all used, 1 MiB of it reserved", st)
	}

	// What does fit is admitted by evicting first. d's handle spent its
	// wait limit in the two refusals (they waited for the writers in
	// flight), so this admission does not wait for the RELEASE of the
	// read of keep above, which may come after close(2) returned (a
	// fresh-clone CI run under -race): wait for it here.
	k.released(3)
	if err := unix.Fallocate(fd, 0, 0, 2*mib); err != nil {
		t.Errorf("fallocate that fits by evicting: %v", err)
	}
	if exists(t, k.path("keep")) {
		t.Errorf("keep should have been evicted to admit the fallocate")
	}
	if st := lstat(t, k.path("d")); st.Size != 2*mib || st.Blocks != 2*mib/512 {
		t.Errorf("after fallocate: size %d blocks %d", st.Size, st.Blocks)
	}
}

// modes are the two write paths: passthrough (the default as root: the
// data bypasses the daemon, admission at open and at close) and strict
// capacity (every byte through the daemon, admitted before it lands).
var modes = []struct {
	name string
	opts []mountOpt
}{{"passthrough", nil}, {"strict", []mountOpt{withStrict()}}}

// allModes adds the daemon's writes without a strict capacity (no
// passthrough) to modes.
var allModes = append(modes, struct {
	name string
	opts []mountOpt
}{"daemon", []mountOpt{withPassthrough(false)}})

// TestWriteLargerThanCapacity: an object larger than the capacity is
// never published and costs nothing already stored. With passthrough the
// write lands (its bytes are counted over the capacity, unadmitted) and
// the close fails with ENOSPC and removes it; through the daemon the
// write itself fails, at once when it fits one FUSE request, and after a
// short write when the kernel splits it.
func TestWriteLargerThanCapacity(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			k := mountKVFS(t, append([]mountOpt{withCapacity(256 * kib), withGrace(grace)}, m.opts...)...)
			mustWrite(t, k.path("a"), pattern(1, 64*kib))
			mustWrite(t, k.path("b"), pattern(2, 64*kib))
			k.pastGrace(0)
			err := writeObject(k.path("big"), pattern(3, 512*kib))
			wantErrno(t, "store of 512 KiB on a 256 KiB cache", err, syscall.ENOSPC)
			wantGone(t, k.path("big"))
			mustRead(t, k.path("a"), pattern(1, 64*kib))
			mustRead(t, k.path("b"), pattern(2, 64*kib))
			st := k.M.Stats()
			if st.Evictions != 0 || st.AdmissionFailures == 0 {
				t.Errorf("a store that could never fit: %+v; want no evictions, a refusal counted", st)
			}
			if strict := m.name == "strict"; strict != (st.OvershootMaxBytes == 0) {
				t.Errorf("overshoot high-water mark %d (strict %v)", st.OvershootMaxBytes, strict)
			}
		})
	}
	t.Run("strict, split by the kernel", func(t *testing.T) {
		k := mountSmall(t, withStrict())
		s := sampleCapacity(k, true)
		f, err := os.OpenFile(k.path("big"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		data := pattern(3, smallCap+4096)
		n, err := f.Write(data)
		if errnoOf(err) != syscall.ENOSPC {
			t.Errorf("write of capacity+4096: n=%d err=%v, want ENOSPC", n, err)
		}
		s.check(t)
		t.Logf("write(2) of %d on a %d cache: %d bytes admitted, then %v", len(data), smallCap, n, err)
		if st := lstat(t, k.path("big")); st.Size > smallCap || st.Size != int64(n) {
			t.Errorf("refused object holds %d bytes, write reported %d", st.Size, n)
		}
	})
}

// fillCold fills a cache of smallCap with objects o00, o01... of size
// bytes (pattern(i, size)), past their grace: all evictable. It returns
// how many.
func (k *kvfsMount) fillCold(size int) int {
	k.t.Helper()
	n := smallCap / size
	for i := range n {
		mustWrite(k.t, k.path(fmt.Sprintf("o%02d", i)), pattern(i, size))
	}
	k.pastGrace(0)
	return n
}

// TestLargerStoreIntoFullCache: a full cache of cold 1 MiB objects takes
// a 4 MiB store, four times the reservation its writer opened with (the
// largest recent object), in every mode: passthrough and the daemon's
// writes admit what passed twice the reservation at the close, evicting
// then; a strict capacity, whose bytes never pass it, refuses the first
// try past twice the reservation and reserves the next writer for twice
// the size it reached (an outside tester: without passthrough every try of
// an 8 MiB store into a cache of 1 MiB objects failed with ENOSPC).
func TestLargerStoreIntoFullCache(t *testing.T) {
	const big = 4 * mib
	for _, m := range allModes {
		t.Run(m.name, func(t *testing.T) {
			k := mountSmall(t, m.opts...)
			k.fillCold(mib)
			tries := 1
			if m.name == "strict" {
				tries = 2
			}
			var err error
			for try := 1; try <= tries; try++ {
				if err = writeObject(k.path("big"), pattern(99, big)); err == nil {
					if try < tries {
						t.Errorf("stored at try %d; a strict capacity refuses the first past twice the reservation", try)
					}
					break
				}
				wantErrno(t, fmt.Sprintf("try %d", try), err, syscall.ENOSPC)
				wantGone(t, k.path("big"))
				k.pastGrace(0)
			}
			if err != nil {
				t.Fatalf("a %d MiB store into a full cache of cold 1 MiB objects, %d tries: %v", big/mib, tries, err)
			}
			k.released(0)
			mustRead(t, k.path("big"), pattern(99, big))
			st := k.M.Stats()
			if st.UsedBytes > st.CapacityBytes || st.Evictions < big/mib {
				t.Errorf("after the store: %+v", st)
			}
		})
	}
}

// TestQuarterStoreNeverOver: a store of a quarter of the capacity into a
// full cache of smaller cold objects (its reservation theirs) evicts for
// its growth as it comes, in every mode: the cache is never over the
// capacity while it writes, the poller's reads included (an outside
// tester: an 8 MiB `cp` into a 32 MiB cache of 100 KB objects was past
// twice its reservation at 200 KB, and 8 MiB over the capacity until its
// close).
func TestQuarterStoreNeverOver(t *testing.T) {
	const obj, big = 128 * kib, smallCap / 4
	for _, m := range allModes {
		t.Run(m.name, func(t *testing.T) {
			k := mountSmall(t, m.opts...)
			k.fillCold(obj)
			data := pattern(99, big)
			f, err := os.OpenFile(k.path("big"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close() // before the unmount, if the test fails first
			for off := 0; off < big; off += 256 * kib {
				if _, err := f.Write(data[off : off+256*kib]); err != nil {
					t.Fatalf("write at %d: %v", off, err)
				}
				k.M.Poll() // the passthrough poller's read of what it wrote
				if st := k.M.Stats(); st.UsedBytes > st.CapacityBytes || st.UnadmittedBytes != 0 {
					t.Fatalf("after %d KiB of %d: %+v; want its growth admitted, evicting", (off+256*kib)/kib, big/kib, st)
				}
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			k.released(0)
			mustRead(t, k.path("big"), data)
			if st := k.M.Stats(); st.OvershootMaxBytes != 0 || st.Evictions < big/obj {
				t.Errorf("after the store: %+v; want no overshoot, %d evicted", st, big/obj)
			}
		})
	}
}

// TestDoomedStoreFlushedKeepsCache: the same, written by a writer whose
// descriptor is duplicated and closed every 512 KiB (a process that
// forks while it writes: each child's exec closes its copy, and each
// close is a FLUSH that admits what was written so far). It costs at
// most a quarter of the cache (its budget) and its reservation, never
// the cache (an outside tester: a writer that ran `kvfs stats` every 4
// MiB evicted all 64 objects, then failed).
func TestDoomedStoreFlushedKeepsCache(t *testing.T) {
	const obj = 256 * kib
	for _, m := range allModes {
		t.Run(m.name, func(t *testing.T) {
			k := mountSmall(t, m.opts...)
			n := k.fillCold(obj)
			err := writeFlushed(k.path("doomed"), pattern(99, smallCap+mib))
			wantErrno(t, "a flushed store of capacity + 1 MiB", err, syscall.ENOSPC)
			wantGone(t, k.path("doomed"))
			k.released(0)
			st := k.M.Stats()
			if most := int64(n/4 + 2); st.Evictions > most || st.Objects < int64(n)-most {
				t.Errorf("a doomed store, flushed as it grew, evicted %d of %d objects, want at most %d: %+v", st.Evictions, n, most, st)
			}
			// The next store is reserved for what stores were, not
			// for what the doomed one reached: it evicts about its own
			// size (a re-test: 13 of 64 objects for one of 1 MiB, its
			// reservation a quarter of the capacity). A strict
			// capacity's refusal reserves the next writer for twice
			// what the refused one reached, by design.
			before := k.M.Stats().Evictions
			k.pastGrace(0)
			mustWrite(t, k.path("next"), pattern(97, obj))
			k.released(0)
			if ev := k.M.Stats().Evictions - before; ev > 2 && m.name != "strict" {
				t.Errorf("a %d KiB store after the doomed one evicted %d objects of %d KiB", obj/kib, ev, obj/kib)
			}
			// One that fits is stored whole, its growth past the budget
			// admitted at its last release.
			k.pastGrace(0)
			err = writeFlushed(k.path("fits"), pattern(98, 4*mib))
			if m.name == "strict" && errnoOf(err) == syscall.ENOSPC {
				// Refused past twice its reservation; the next is
				// reserved for more.
				k.pastGrace(0)
				err = writeFlushed(k.path("fits"), pattern(98, 4*mib))
			}
			if err != nil {
				t.Fatalf("a flushed 4 MiB store into the cache: %v", err)
			}
			k.released(0)
			mustRead(t, k.path("fits"), pattern(98, 4*mib))
			if st := k.M.Stats(); st.UsedBytes > st.CapacityBytes || st.UnadmittedBytes != 0 {
				t.Errorf("after the flushed store: %+v", st)
			}
		})
	}
}

// writeFlushed stores data at path in 512 KiB writes, duplicating and
// closing the descriptor after each (a FLUSH, as a forked child's exec
// makes); the error is the first write's or close's.
func writeFlushed(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	for off := 0; off < len(data) && err == nil; off += 512 * kib {
		if _, err = f.Write(data[off:min(off+512*kib, len(data))]); err == nil {
			var dup int
			if dup, err = unix.Dup(int(f.Fd())); err == nil {
				err = unix.Close(dup)
			}
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// TestDoomedStoreKeepsCache: LMCache's fs_native writes a whole object in
// one write(2). One that can never fit, stored into a full cache, costs at
// most what any store costs (its reservation, and growth to its budget:
// twice that, at least a quarter of the capacity), never the cache, in
// every mode.
func TestDoomedStoreKeepsCache(t *testing.T) {
	const obj = 256 * kib
	for _, m := range allModes {
		t.Run(m.name, func(t *testing.T) {
			k := mountSmall(t, m.opts...)
			n := k.fillCold(obj)
			err := writeObject(k.path("doomed"), pattern(99, smallCap+mib))
			wantErrno(t, "store of capacity + 1 MiB", err, syscall.ENOSPC)
			wantGone(t, k.path("doomed"))
			k.released(0)
			st := k.M.Stats()
			if most := int64(n/4 + 2); st.Evictions > most || st.Objects < int64(n)-most {
				t.Errorf("a doomed store evicted %d of %d objects, want at most %d: %+v", st.Evictions, n, most, st)
			}
			missing := int64(0)
			for i := range n {
				if p := k.path(fmt.Sprintf("o%02d", i)); exists(t, p) {
					mustRead(t, p, pattern(i, obj))
				} else {
					missing++
				}
			}
			if missing != st.Evictions {
				t.Errorf("%d objects missing, %d evicted", missing, st.Evictions)
			}
		})
	}
}

// TestRewriteInFullCache: an object opened again for writing in a full
// cache, to be cut, overwritten or rewritten in place, is opened (an
// outside tester: a 13 MiB object in a 16 MiB cache answered ENOSPC to
// `truncate`, `: >` and `open("r+b")`, the writer's own bytes counted as
// another writer's), and the open evicts nothing (`truncate -s 0` of a
// 1 MiB object, reserved a quarter of the capacity, evicted three).
func TestRewriteInFullCache(t *testing.T) {
	for _, m := range allModes {
		t.Run(m.name, func(t *testing.T) {
			k := mountSmall(t, m.opts...)
			// A store of a quarter of the capacity sizes the next
			// writers' reservations; the cold objects then evict it.
			mustWrite(t, k.path("quarter"), pattern(1, smallCap/4))
			n := k.fillCold(mib)
			before := k.M.Stats()
			// The newest: which older ones the fill evicted depends on
			// when each writer's RELEASE came (a kept reservation).
			cut := k.path(fmt.Sprintf("o%02d", n-1))
			f, err := os.OpenFile(cut, os.O_WRONLY, 0)
			if err != nil {
				t.Fatalf("opening a stored 1 MiB object for writing in a full cache: %v", err)
			}
			if err := f.Truncate(0); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			k.released(0)
			if st := k.M.Stats(); st.Evictions != before.Evictions || st.Objects != before.Objects {
				t.Errorf("cutting one of %d objects in a full cache evicted %d: %+v", before.Objects, st.Evictions-before.Evictions, st)
			}
			mustRead(t, cut, nil)

			// One object of nearly the capacity: cut, overwritten and
			// rewritten in place. (A strict capacity stores at most
			// twice the reservation, a quarter of the capacity, into a
			// full cache.)
			size := smallCap - mib
			if m.name == "strict" {
				size = smallCap / 2
			}
			big := k.path("big")
			mustWrite(t, big, pattern(2, size))
			k.pastGrace(0)
			f, err = os.OpenFile(big, os.O_RDWR, 0)
			if err != nil {
				t.Fatalf("opening a %d MiB object of a %d MiB cache for writing: %v", size/mib, smallCap/mib, err)
			}
			if _, err := f.WriteAt(pattern(3, mib), 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatalf("closing the rewrite in place: %v", err)
			}
			want := pattern(2, size)
			copy(want, pattern(3, mib))
			k.released(0)
			mustRead(t, big, want)
			if err := os.WriteFile(big, []byte("hi\n"), 0o644); err != nil { // O_TRUNC
				t.Fatalf("overwriting it: %v", err)
			}
			k.released(0)
			mustRead(t, big, []byte("hi\n"))
			if st := k.M.Stats(); st.UsedBytes > st.CapacityBytes {
				t.Errorf("over the capacity: %+v", st)
			}
		})
	}
}

// TestFlushedStoreWhereReadersHoldTheCache: a writer whose descriptor was
// closed once past twice its reservation (a FLUSH, as a forked child's
// exec makes) grows on where readers hold everything else. Its close
// answers ENOSPC, as any writer's would, and nothing past the capacity is
// published (an outside tester, after a handover to a smaller capacity:
// the close answered success, the object stayed over the capacity, and a
// reconciliation was counted for it).
func TestFlushedStoreWhereReadersHoldTheCache(t *testing.T) {
	for _, m := range allModes {
		if m.name == "strict" {
			// A strict writer is refused past twice its reservation
			// when free space cannot cover it: never unadmitted.
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			k := mountSmall(t, m.opts...)
			n := k.fillCold(mib)
			var readers []*os.File
			defer func() {
				for _, r := range readers {
					r.Close()
				}
			}()
			hold := func(i int) {
				r, err := os.Open(k.path(fmt.Sprintf("o%02d", i)))
				if err != nil {
					t.Fatal(err)
				}
				readers = append(readers, r)
			}
			for i := range n / 2 {
				hold(i)
			}
			f, err := os.OpenFile(k.path("w"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.Write(pattern(5, 3*mib)); err != nil {
				t.Fatal(err)
			}
			dup, err := unix.Dup(int(f.Fd()))
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Close(dup); err != nil {
				t.Fatalf("a FLUSH of 3 MiB, twice past a reservation of 1 MiB, with 4 MiB evictable: %v", err)
			}
			// Every object left is held now: the 2 MiB more cannot fit.
			for i := n / 2; i < n; i++ {
				if exists(t, k.path(fmt.Sprintf("o%02d", i))) {
					hold(i)
				}
			}
			_, werr := f.Write(pattern(6, 2*mib))
			cerr := f.Close()
			if werr == nil && cerr == nil {
				t.Errorf("5 MiB stored where readers hold %d MiB of %d: the close answered success", len(readers), smallCap/mib)
			}
			if werr != nil {
				wantErrno(t, "the write", werr, syscall.ENOSPC)
			} else {
				wantErrno(t, "the close", cerr, syscall.ENOSPC)
			}
			k.released(int64(len(readers)))
			wantGone(t, k.path("w"))
			if st := k.M.Stats(); st.UsedBytes > st.CapacityBytes || st.Reconciliations != 0 {
				t.Errorf("after the refusal: %+v", st)
			}
		})
	}
}
