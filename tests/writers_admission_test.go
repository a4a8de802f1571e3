package tests

// Admission under issue 22's loads: writers that should all fit, an
// overload of fs_native stores with a flood in the same directory, a
// second writer of a published object, a sparse write far past the
// capacity.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSixWritersEmptyCache: in a 64 MiB cache that once held a 16 MiB
// object (stored, then deleted), 6 writers open at once and each stores
// 8 MiB: the cache is empty and 48 MiB fit, so none may get ENOSPC.
func TestSixWritersEmptyCache(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB")
	first := filepath.Join(d.mp, "first")
	putFile(t, first, objectBytes("first", 16*MiB))
	if err := os.Remove(first); err != nil {
		t.Fatal(err)
	}
	waitReleased(t, d.mp)
	const n = 6
	var opened, wg sync.WaitGroup
	opened.Add(n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			name := fmt.Sprintf("w-%d", i)
			fd, err := unix.Open(filepath.Join(d.mp, name), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			opened.Done()
			if err != nil {
				errs[i] = fmt.Errorf("open: %w", err)
				return
			}
			opened.Wait() // all six are open before any writes
			data := objectBytes(name, 8*MiB)
			for off := 0; off < len(data) && err == nil; off += sliceSize {
				err = writeFull(fd, data[off:off+sliceSize])
			}
			if cerr := unix.Close(fd); err == nil && cerr != nil {
				err = fmt.Errorf("close: %w", cerr)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d of %d into an empty 64 MiB cache: %v", i+1, n, err)
			continue
		}
		name := fmt.Sprintf("w-%d", i)
		requireObject(t, filepath.Join(d.mp, name), name, 8*MiB)
	}
	waitReleased(t, d.mp)
	ledgerExact(t, d)
	if st := stats(t, d.mp); st.AdmissionFailures != 0 {
		t.Errorf("admission_failures %d, want 0", st.AdmissionFailures)
	}
}

// TestSecondWriterCloseFails: a first writer publishes an object; a
// second opens it without O_TRUNC and appends past the capacity, so its
// writes cannot be admitted and it gets ENOSPC (at a write or its
// close). The first writer's object must survive intact: the second
// writer's failure removes what it added, not what was published before.
func TestSecondWriterCloseFails(t *testing.T) {
	for _, how := range []string{"append", "pwrite-past-capacity"} {
		t.Run(how, func(t *testing.T) {
			d := mountCache(t, "--capacity", "16MiB")
			obj := filepath.Join(d.mp, "obj.data")
			want := objectBytes("obj", 4*MiB)
			putFile(t, obj, want)
			waitReleased(t, d.mp)
			flags := unix.O_WRONLY | unix.O_CLOEXEC
			if how == "append" {
				flags |= unix.O_APPEND
			}
			fd, err := unix.Open(obj, flags, 0)
			if err != nil {
				t.Fatalf("second writer's open: %v", err)
			}
			chunk := bytes.Repeat([]byte{0xee}, MiB)
			var werr error
			if how == "append" {
				for i := 0; i < 16 && werr == nil; i++ {
					werr = writeFull(fd, chunk)
				}
			} else {
				_, werr = unix.Pwrite(fd, chunk, 20*MiB)
			}
			cerr := unix.Close(fd)
			t.Logf("second writer: write %v, close %v", werr, cerr)
			if errnoOf(werr) != unix.ENOSPC && errnoOf(cerr) != unix.ENOSPC {
				t.Errorf("second writer grew the object past the 16 MiB capacity: write %v, close %v; want ENOSPC from one", werr, cerr)
			}
			waitReleased(t, d.mp)
			got, err := os.ReadFile(obj)
			if err != nil {
				t.Errorf("the first writer's object after the second writer's failure: %v", err)
			} else if err := checkObject(got, "obj", len(want)); err != nil {
				t.Errorf("the first writer's object after the second writer's failure: %v", err)
			}
			ledgerExact(t, d)
		})
	}
}

// TestOvershootSparseWrite: a 4 KiB pwrite at 1 TiB into a 16 MiB cache
// is refused (at the write or the close) or its overshoot bounded;
// either way, once the writer has closed and unlinked, the reported
// overshoot_max_bytes does not stay at 1 TiB for the mount's life.
func TestOvershootSparseWrite(t *testing.T) {
	waitsOnTimers(t)
	d := mountCache(t, "--capacity", "16MiB")
	p := filepath.Join(d.mp, "sparse")
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	_, werr := unix.Pwrite(fd, make([]byte, 4096), 1<<40)
	cerr := unix.Close(fd)
	if errnoOf(werr) != unix.ENOSPC && errnoOf(cerr) != unix.ENOSPC {
		t.Errorf("a 4 KiB write at 1 TiB into a 16 MiB cache: write %v, close %v; want ENOSPC from one", werr, cerr)
	}
	if err := unix.Unlink(p); err != nil && err != unix.ENOENT {
		t.Errorf("unlink: %v", err)
	}
	waitReleased(t, d.mp)
	var st kvfsStats
	bounded := waitFor(func() bool {
		st = stats(t, d.mp)
		return st.OvershootMaxBytes <= st.CapacityBytes
	})
	t.Logf("write %v, close %v; overshoot_max_bytes %d, capacity %d", werr, cerr, st.OvershootMaxBytes, st.CapacityBytes)
	if !bounded {
		t.Errorf("overshoot_max_bytes %d (capacity %d) %v after the writer closed and unlinked: a 4 KiB write at 1 TiB stays the mount's worst overshoot",
			st.OvershootMaxBytes, st.CapacityBytes, hangGuard)
	}
	ledgerExact(t, d)
}

// overload is issue 22's item 4: 16 fs_native writers of 16 MiB objects
// and 4 threads flooding 1 MiB objects, all in one directory (as LMCache
// puts them), into a 128 MiB cache.
type overload struct {
	dir      string
	until    time.Time // the run's length: writers start no store after it, once enough big stores closed
	seq      atomic.Int64
	mu       sync.Mutex
	gaps     []time.Duration // close returned -> link returned, of closed big stores
	counts   map[string]int  // by outcome, big and flood apart
	failures []error         // unexpected errors
}

const (
	overloadWriters = 16
	overloadFlood   = 4
	overloadBig     = 16 * MiB
	overloadSmall   = 1 * MiB
)

func (o *overload) count(what string) {
	o.mu.Lock()
	o.counts[what]++
	o.mu.Unlock()
}

// storing reports whether the big writers start another store: until
// the run's length is up and, on a machine too slow to close
// overloadWriters big stores by then, until they have (or the hang guard
// passes: a large store starved by the flood).
func (o *overload) storing() bool {
	now := time.Now()
	if now.Before(o.until) {
		return true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts["big closed"] < overloadWriters && now.Before(o.until.Add(hangGuard))
}

func (o *overload) fail(err error) {
	o.mu.Lock()
	o.failures = append(o.failures, err)
	o.mu.Unlock()
}

// store is one fs_native store of key, counted under class ("big" or
// "flood"); false stops its caller (an unexpected error).
func (o *overload) store(class, key string, buf []byte) bool {
	fillObject(buf, key)
	final := filepath.Join(o.dir, key+".data")
	tmp := filepath.Join(o.dir, fmt.Sprintf("%s%d.%d", tmpPrefix, os.Getpid(), o.seq.Add(1)))
	fd, err := unix.Open(tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err == unix.ENOSPC {
		o.count(class + " create ENOSPC")
		return true
	}
	if err != nil {
		o.fail(fmt.Errorf("%s: open %s: %w", key, tmp, err))
		return false
	}
	for off := 0; off < len(buf) && err == nil; off += sliceSize {
		err = writeFull(fd, buf[off:min(off+sliceSize, len(buf))])
	}
	cerr := unix.Close(fd)
	closed := time.Now()
	switch {
	case errnoOf(err) == unix.ENOSPC || err == nil && cerr == unix.ENOSPC:
		o.count(class + " write/close ENOSPC")
		unix.Unlink(tmp)
		return true
	case err != nil || cerr != nil:
		o.fail(fmt.Errorf("%s: write %v, close %v", key, err, cerr))
		unix.Unlink(tmp)
		return false
	}
	o.count(class + " closed")
	lerr := unix.Link(tmp, final)
	gap := time.Since(closed)
	if class == "big" {
		o.mu.Lock()
		o.gaps = append(o.gaps, gap)
		o.mu.Unlock()
	}
	switch lerr {
	case nil, unix.EEXIST:
		o.count(class + " published")
	case unix.ENOENT:
		o.count(class + " lost before link")
		return true
	default:
		o.fail(fmt.Errorf("%s: link: %w", key, lerr))
		return false
	}
	if err := unix.Unlink(tmp); err != nil && err != unix.ENOENT {
		o.fail(fmt.Errorf("%s: unlink %s: %w", key, tmp, err))
		return false
	}
	return true
}

func (o *overload) run(d time.Duration) {
	o.until = time.Now().Add(d)
	var writers, flood sync.WaitGroup
	stop := make(chan struct{})
	for w := range overloadWriters {
		writers.Go(func() {
			buf := make([]byte, overloadBig)
			for i := 0; o.storing(); i++ {
				if !o.store("big", fmt.Sprintf("big-%02d-%03d", w, i), buf) {
					return
				}
			}
		})
	}
	o.flood(&flood, stop)
	writers.Wait()
	close(stop)
	flood.Wait()
}

// flood starts overloadFlood threads storing 1 MiB objects until stop.
func (o *overload) flood(wg *sync.WaitGroup, stop chan struct{}) {
	for f := range overloadFlood {
		wg.Go(func() {
			buf := make([]byte, overloadSmall)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if !o.store("flood", fmt.Sprintf("flood-%d-%05d", f, i), buf) {
					return
				}
			}
		})
	}
}

// percentile of sorted durations.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// TestOverloadPublish: under issue 22's overload (16 writers of 16 MiB
// and a flood of 1 MiB stores in the same directory, 128 MiB capacity,
// default grace, stores started for 10 s), at most 2% of the big stores
// whose close succeeded lose their temp file before the link (ENOENT),
// and every published name reads back byte for byte as its key's
// object. Refusing early (ENOSPC at create) is allowed; the test needs
// at least 16 successful closes to mean anything.
func TestOverloadPublish(t *testing.T) {
	d := mountCache(t, "--capacity", "128MiB")
	o := &overload{dir: d.mp, counts: map[string]int{}}
	o.run(10 * time.Second)
	for _, err := range o.failures {
		t.Errorf("unexpected: %v", err)
	}
	closed, lost := o.counts["big closed"], o.counts["big lost before link"]
	t.Logf("outcomes %v; big close->link gap p50 %v, p99 %v, max %v", o.counts,
		percentile(o.gaps, 0.5), percentile(o.gaps, 0.99), percentile(o.gaps, 1))
	if closed < overloadWriters {
		t.Errorf("only %d big stores closed successfully in 10s and %v more; too few to judge (want >= %d): a large store must win against the flood",
			closed, hangGuard, overloadWriters)
	}
	if lost*50 > closed {
		t.Errorf("%d of %d big stores whose close succeeded were lost before their link (%.1f%%, want <= 2%%)",
			lost, closed, 100*float64(lost)/float64(max(closed, 1)))
	}
	waitReleased(t, d.mp)
	wrong, read := checkOverloadNames(t, d.mp)
	t.Logf("%d published names read back, %d wrong", read, wrong)
	ledgerExact(t, d)
}

// checkOverloadNames reads every name in dir back against its key's
// object; a temp file left behind is an error too.
func checkOverloadNames(t *testing.T, dir string) (wrong, read int) {
	return checkStoredNames(t, dir, overloadBig)
}

// checkStoredNames is checkOverloadNames with the size of the big-*
// objects given.
func checkStoredNames(t *testing.T, dir string, bigSize int) (wrong, read int) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		key, ok := strings.CutSuffix(e.Name(), ".data")
		if !ok {
			t.Errorf("left in %s: %s", dir, e.Name())
			continue
		}
		size := overloadSmall
		if strings.HasPrefix(key, "big-") {
			size = bigSize
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // evicted since the listing
		}
		read++
		if err == nil {
			err = checkObject(data, key, size)
		}
		if err != nil {
			wrong++
			t.Errorf("served wrong: %s: %v", e.Name(), err)
		}
	}
	return wrong, read
}

// TestLargeStoreBeatsFlood: one writer storing objects of 0.75 of the
// capacity, the fs_native way, while 4 threads flood the same directory
// with 1 MiB stores (issue 22, item 7: such a store was refused 18 times
// out of 18). Every large store is admitted and published, and reads
// back exactly.
func TestLargeStoreBeatsFlood(t *testing.T) {
	const capacity, big, rounds = 64 * MiB, 48 * MiB, 3
	d := mountCache(t, "--capacity", "64MiB")
	o := &overload{dir: d.mp, counts: map[string]int{}}
	stop := make(chan struct{})
	var flood sync.WaitGroup
	o.flood(&flood, stop)
	buf := make([]byte, big)
	for i := range rounds {
		o.store("big", fmt.Sprintf("big-%d", i), buf)
	}
	close(stop)
	flood.Wait()
	for _, err := range o.failures {
		t.Errorf("unexpected: %v", err)
	}
	t.Logf("outcomes %v (capacity %d, large objects %d)", o.counts, capacity, big)
	if got := o.counts["big published"]; got != rounds {
		t.Errorf("%d of %d large stores published under the flood; want all", got, rounds)
	}
	waitReleased(t, d.mp)
	checkStoredNames(t, d.mp, big)
	ledgerExact(t, d)
}

// TestDoomedRedirectKeepsCache: a store that can never fit, written by a
// shell redirect or dd (which open, dup2 onto the standard output and
// close the first descriptor: its FLUSH settles the writer while the
// duplicate writes on), costs the cache at most what a store's
// reservation may evict for (twice the largest recent object here:
// two objects), not the cache, each time. Before, it emptied the cache
// on its way to ENOSPC (8 of 8 objects).
func TestDoomedRedirectKeepsCache(t *testing.T) {
	for _, c := range []struct {
		name, script string
		flags        []string
		// empties: this test's children store that many empty files
		// first, so the doomed store's process is one of a parent whose
		// children stored only empty objects: it is reserved nothing,
		// and was bounded by nothing.
		empties int
	}{
		{"redirect", "head -c 20971520 /dev/zero > big", nil, 0},
		{"redirect-no-passthrough", "head -c 20971520 /dev/zero > big", []string{"--no-passthrough"}, 0},
		{"dd", "dd if=/dev/zero of=big bs=1M count=20 2>&1", nil, 0},
		{"after-empty-stores", "head -c 20971520 /dev/zero > big", nil, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := mountCache(t, append([]string{"--capacity", "16MiB", "--grace", "0s", "--wait-limit", "500ms"}, c.flags...)...)
			for i := range 8 {
				putFile(t, filepath.Join(d.mp, fmt.Sprintf("o%d", i)), objectBytes(fmt.Sprint(i), 2*MiB))
			}
			for i := range c.empties {
				empty := exec.Command("/bin/sh", "-c", fmt.Sprintf(": > empty%d", i))
				empty.Dir = d.mp
				if out, err := empty.CombinedOutput(); err != nil {
					t.Fatalf("an empty store: %v, %s", err, out)
				}
			}
			waitReleased(t, d.mp)
			// Again: the first one's dup2 and close settled its object at
			// 0 bytes, which sized the next store of the same parent's
			// children as one of empty objects, reserved nothing and so
			// bounded by nothing: it emptied the cache (an outside
			// tester: rounds 2-4 each evicted 28 of 28 objects).
			for round := range 3 {
				before := stats(t, d.mp).Evictions
				cmd := exec.Command("/bin/sh", "-c", c.script)
				cmd.Dir = d.mp
				out, err := cmd.CombinedOutput()
				if err == nil || !strings.Contains(string(out), "No space left on device") {
					t.Errorf("round %d: %s of 20 MiB into a 16 MiB cache: %v, %q; want ENOSPC", round, c.script, err, out)
				}
				waitReleased(t, d.mp)
				if n := stats(t, d.mp).Evictions - before; n > 2 {
					t.Errorf("round %d: the doomed store evicted %d of the objects; want at most 2", round, n)
				}
				if _, err := os.Lstat(filepath.Join(d.mp, "big")); err == nil {
					t.Errorf("round %d: the refused store is published", round)
				}
			}
			// And the next store of the shell's children is sized as a
			// store, not as an empty object (reserved nothing, so
			// written through the daemon, and bounded by nothing but
			// its budget's floor).
			writes := stats(t, d.mp).FuseRequests["WRITE"]
			next := exec.Command("/bin/sh", "-c", "head -c 1048576 /dev/zero > next")
			next.Dir = d.mp
			if out, err := next.CombinedOutput(); err != nil {
				t.Fatalf("a 1 MiB redirect after the refused ones: %v, %s", err, out)
			}
			if n := stats(t, d.mp).FuseRequests["WRITE"] - writes; c.flags == nil && c.empties == 0 && n != 0 {
				t.Errorf("a 1 MiB redirect after the refused ones: %d WRITE requests, want none (passthrough: it was reserved room)", n)
			}
			ledgerExact(t, d)
			assertQuietEqual(t, d)
			d.stop()
		})
	}
}

// TestTwoStoresThatCannotBothFit: two passthrough writers in an empty
// 16 MiB cache, 9 MiB each written in turns and seen by the daemon (18
// MiB used, 2 of them unadmitted), close at once: one store is kept and
// the other refused, never both. Each close saw the other's bytes leave
// no room and gave up at once, before either's refusal freed them (both
// refused in 5 of 6 runs of an outsider's test); now the older writer
// waits for the other's bytes to go.
// TestBurstLargerThanTheCache: 32 threads store 96 objects of 4 MiB by
// temp name and rename (SGLang HiCache's file backend, LMCache's
// local_disk with os.replace) into 32 MiB, so four times what the cache
// holds is written at once. The writers in flight finish and are
// published, each making room for the next: every store succeeds, and
// the cache ends full of the last ones. Before, a writer that found the
// cache full of others' bytes was refused at its create or at once at
// its writes, though those writers were about to finish (an outside
// tester: 16 threads, up to 49 of 100 refused; 64 threads, 142-187 of
// 200).
func TestBurstLargerThanTheCache(t *testing.T) {
	d := mountCache(t, "--capacity", "32MiB")
	const threads, stores, size = 32, 96, 4 * MiB
	var refused atomic.Int64
	errs := make(chan error, stores)
	inPool(threads, stores, func(i int) {
		key := fmt.Sprintf("key-%03d", i)
		tmp := filepath.Join(d.mp, fmt.Sprintf("%s.tmp.%d", key, i))
		err := os.WriteFile(tmp, objectBytes(key, size), 0o644)
		if err == nil {
			err = os.Rename(tmp, filepath.Join(d.mp, key))
		}
		if errnoOf(err) == unix.ENOSPC {
			refused.Add(1)
			os.Remove(tmp)
		} else if err != nil {
			errs <- fmt.Errorf("%s: %w", key, err)
		}
	})
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := refused.Load(); n != 0 {
		t.Errorf("%d of %d stores refused (ENOSPC); want none: the writers in flight finish and make room", n, stores)
	}
	st := waitReleased(t, d.mp)
	ents, err := os.ReadDir(d.mp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		key := e.Name()
		b, err := os.ReadFile(filepath.Join(d.mp, key))
		if err != nil || !bytes.Equal(b, objectBytes(key, size)) {
			t.Errorf("%s: %d bytes (%v), not its object", key, len(b), err)
		}
	}
	if int64(len(ents)) != st.Objects || st.Objects+st.Evictions != stores || st.UsedBytes != 32*MiB {
		t.Errorf("%d names, stats %+v; want 8 objects filling the cache and the other %d evicted", len(ents), st, stores-8)
	}
	ledgerExact(t, d)
}

func TestTwoStoresThatCannotBothFit(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	for round := range 4 {
		name := func(i int) string { return filepath.Join(d.mp, fmt.Sprintf("r%d-t%d", round, i)) }
		var fds [2]int
		for i := range fds {
			fd, err := unix.Open(name(i), unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			fds[i] = fd
		}
		chunk := bytes.Repeat([]byte{'x'}, MiB)
		for range 9 {
			for _, fd := range fds {
				if err := writeFull(fd, chunk); err != nil {
					t.Fatalf("write: %v", err)
				}
			}
		}
		// Read in this process (statsHere).
		used := func() int64 { return statsHere(t, d.mp).UsedBytes }
		if !waitFor(func() bool { return used() == 18*MiB }) {
			t.Fatalf("the daemon never saw the 18 MiB written: used %d", used())
		}
		var errs [2]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, fd := range fds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = unix.Close(fd)
			}()
		}
		close(start)
		wg.Wait()
		waitReleased(t, d.mp)
		keptOne(t, round, name, errs)
		assertQuietEqual(t, d)
		for i := range fds {
			os.Remove(name(i))
		}
	}
	d.stop()
}

// TestTwoStrictStoresThatCannotBothFit: with --strict-capacity, two
// writers of 9 MiB started at once into 16 MiB each pass their budget
// (twice a first writer's guess of a quarter of the capacity), where
// growth takes free space only: the older waits for the other's
// refusal and is kept. Both were refused, nothing stored, in 4 to 6 of
// 10 rounds (an outside tester).
func TestTwoStrictStoresThatCannotBothFit(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB", "--strict-capacity")
	chunk := bytes.Repeat([]byte{'x'}, MiB)
	for round := range 4 {
		name := func(i int) string { return filepath.Join(d.mp, fmt.Sprintf("r%d-t%d", round, i)) }
		var errs [2]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range errs {
			wg.Go(func() {
				<-start
				fd, err := unix.Open(name(i), unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
				if err != nil {
					errs[i] = err
					return
				}
				for range 9 {
					if err = writeFull(fd, chunk); err != nil {
						break
					}
				}
				if cerr := unix.Close(fd); err == nil {
					err = cerr
				}
				errs[i] = err
			})
		}
		close(start)
		wg.Wait()
		keptOne(t, round, name, errs)
		waitReleased(t, d.mp)
		for i := range errs {
			os.Remove(name(i))
		}
	}
	ledgerExact(t, d)
}

// keptOne checks that of two stores that could not both fit, whose
// writers ended with errs, exactly one is kept, and that the other was
// refused for space and for nothing else.
func keptOne(t *testing.T, round int, name func(int) string, errs [2]error) {
	t.Helper()
	kept := 0
	for i, err := range errs {
		if _, serr := os.Stat(name(i)); serr == nil {
			kept++
		}
		if err != nil && errnoOf(err) != unix.ENOSPC {
			t.Errorf("round %d: writer %d: %v, want success or ENOSPC", round, i, err)
		}
	}
	if kept != 1 {
		t.Errorf("round %d: %d of the two stores kept (%v, %v); want one", round, kept, errs[0], errs[1])
	}
}

// TestWriterPastCapacityCut: a passthrough writer that holds its
// descriptor while it writes 16 times the capacity (dd fed 512 MiB into
// a 32 MiB cache) never holds more than the capacity in the store: once
// it passes the capacity it can never be admitted, so the daemon's
// poller refuses it at once and cuts what it writes as it writes, where
// before its bytes stayed until its close (an outside tester's writer
// held 27 GB in a 64 MiB cache). Its close answers ENOSPC, and the cache
// keeps what it held.
func TestWriterPastCapacityCut(t *testing.T) {
	const capacity = 32 << 20
	d := mountCache(t, "--capacity", "32MiB")
	putFile(t, filepath.Join(d.mp, "kept"), objectBytes("kept", 4*MiB))
	w := startDDWriter(t, filepath.Join(d.mp, "big"))
	zeros := make([]byte, 1<<20)
	var most int64
	for fed := int64(1 << 20); fed <= 16*capacity; fed += 1 << 20 {
		if _, err := w.feed.Write(zeros); err != nil {
			t.Fatalf("the writer stopped after %d bytes: %v; dd said %q", fed, err, w.stderr.String())
		}
		if fed%(8<<20) == 0 {
			n, err := duCommand(d.store)
			if err != nil {
				t.Fatal(err)
			}
			most = max(most, n)
		}
	}
	w.feed.Close()
	<-w.exited
	t.Logf("the store held at most %d bytes (capacity %d); dd: %v %q", most, capacity, w.err, w.stderr.String())
	if most > 2*capacity {
		t.Errorf("the store held %d bytes while one open writer wrote past the capacity %d", most, capacity)
	}
	if w.err == nil || !strings.Contains(w.stderr.String(), "No space left on device") {
		t.Errorf("dd of 512 MiB into a 32 MiB cache: %v, %q; want ENOSPC at its close", w.err, w.stderr.String())
	}
	// The overshoot gauge counts what the store held, not the size the
	// cut file reached (it said 478 MiB over, an outside tester).
	if st := stats(t, d.mp); st.OvershootMaxBytes > 2*capacity {
		t.Errorf("overshoot_max_bytes %d after a writer cut at the capacity %d; the store held at most %d", st.OvershootMaxBytes, capacity, most)
	}
	waitReleased(t, d.mp)
	if _, err := os.Lstat(filepath.Join(d.mp, "big")); err == nil {
		t.Error("the refused store is published")
	}
	got, err := os.ReadFile(filepath.Join(d.mp, "kept"))
	if err != nil || checkObject(got, "kept", 4*MiB) != nil {
		t.Errorf("kept after the refused writer: %v", err)
	}
	ledgerExact(t, d)
}

// TestFinalNameWritersTurnOver: LMCache's local_disk writes each object
// under its final name (open "wb", write, close) and never links or
// renames it, so the grace that guards a temp file until its publish
// guarded each of its objects for the whole grace: a full cache of them
// could not turn over, and its writer's bytes went over the capacity
// meanwhile (an outside tester: used over the capacity in 287 of 295
// samples, 6 stores a second). kvfs learns a process stores that way
// (core/clients.go: directStreak creates with no publish) and ends its
// objects' grace at their release. With a 1-hour grace and a 1 s wait,
// 40 objects of 4 MiB through a 48 MiB cache all store, with nothing
// over the capacity at any moment; before, the 13th failed with ENOSPC.
func TestFinalNameWritersTurnOver(t *testing.T) {
	d := mountCache(t, "--capacity", "48MiB", "--grace", "1h", "--wait-limit", "1s")
	for i := range 64 { // what kvfs learns from
		putFile(t, filepath.Join(d.mp, fmt.Sprintf("small%d", i)), []byte("x"))
	}
	for i := range 40 {
		name := fmt.Sprintf("chunk%d.data", i)
		if err := os.WriteFile(filepath.Join(d.mp, name), objectBytes(name, 4*MiB), 0o644); err != nil {
			t.Fatalf("store %d of a final-name writer into a full cache: %v", i, err)
		}
	}
	waitReleased(t, d.mp)
	st := ledgerExact(t, d)
	if st.OvershootMaxBytes != 0 || st.Evictions < 28 {
		t.Errorf("after 40 stores of 4 MiB into 48 MiB: %+v; want nothing over the capacity and the oldest evicted", st)
	}
	got, err := os.ReadFile(filepath.Join(d.mp, "chunk39.data"))
	if err != nil || checkObject(got, "chunk39.data", 4*MiB) != nil {
		t.Errorf("the last chunk: %v", err)
	}
}

// TestFinalNameWritersInAFullCache: 4 threads store 8 MiB objects under
// their final names (LMCache's local_disk) into a 48 MiB cache with the
// default grace, so the cache is soon full of objects no one may evict
// yet. Each writer then opens without a reservation and waits for room;
// with passthrough its bytes reached the store anyway, unadmitted, and
// used reached 80 MiB (an outside tester, 3 of 3 runs). A writer without
// its reservation now writes through the daemon, and no reservation is
// taken back from a passthrough writer: nothing is ever over the
// capacity.
func TestFinalNameWritersInAFullCache(t *testing.T) {
	d := mountCache(t, "--capacity", "48MiB")
	const writers, stores = 4, 4
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range stores {
				name := fmt.Sprintf("w%d-%d.data", w, i)
				if err := os.WriteFile(filepath.Join(d.mp, name), objectBytes(name, 8*MiB), 0o644); err != nil {
					errs <- fmt.Errorf("store %s: %w", name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitReleased(t, d.mp)
	st := ledgerExact(t, d)
	if st.OvershootMaxBytes != 0 || st.UnadmittedBytes != 0 {
		t.Errorf("after %d stores of 8 MiB into 48 MiB by %d threads: overshoot_max %d, unadmitted %d; want nothing ever over the capacity",
			writers*stores, writers, st.OvershootMaxBytes, st.UnadmittedBytes)
	}
	if st.Evictions < writers*stores-6 {
		t.Errorf("%d evictions after %d stores of 8 MiB into 48 MiB, want at least %d", st.Evictions, writers*stores, writers*stores-6)
	}
}

// TestStoresBesideAWriterHoldingMostOfTheCache: on a new mount (no size
// known yet), a writer that holds 28 MiB of a 32 MiB cache open leaves
// room for one 4 MiB store at a time, and a pool's stores take turns in
// it. A writer with no size to go by was to wait for a quarter of the
// capacity (8 MiB), which never came while the 28 MiB were held: every
// store was refused (an outside tester: 60 of 60 with --wait-limit 1s,
// 39 of 60 with 5s). The mount also warns that its --wait-limit is
// shorter than its --grace.
func TestStoresBesideAWriterHoldingMostOfTheCache(t *testing.T) {
	d := mountCache(t, "--capacity", "32MiB", "--wait-limit", "3s", "--grace", "4s")
	held, err := os.Create(filepath.Join(d.mp, "held"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := held.Write(objectBytes("held", 28*MiB)); err != nil {
		t.Fatal(err)
	}
	// A child that inherits the held descriptor closes it as it exits, as
	// Python's subprocess does at every fork: that close's size is no
	// store's (it sized every later reservation at a quarter of the
	// capacity, and all the stores were refused: an outside tester).
	child := exec.Command("true")
	child.ExtraFiles = []*os.File{held}
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	const threads, stores, size = 8, 24, 4 * MiB
	var refused atomic.Int64
	inPool(threads, stores, func(i int) {
		key := fmt.Sprintf("key-%03d", i)
		tmp := filepath.Join(d.mp, key+".tmp")
		err := os.WriteFile(tmp, objectBytes(key, size), 0o644)
		if err == nil {
			err = os.Rename(tmp, filepath.Join(d.mp, key))
		}
		if err != nil {
			refused.Add(1)
			t.Logf("%s: %v", key, err)
			os.Remove(tmp)
		}
	})
	if n := refused.Load(); n != 0 {
		t.Errorf("%d of %d stores failed beside the held writer; want none: 4 MiB is free for each in turn", n, stores)
	}
	if err := held.Close(); err != nil {
		t.Fatalf("the held writer's close: %v", err)
	}
	waitReleased(t, d.mp)
	if b, err := os.ReadFile(filepath.Join(d.mp, "held")); err != nil || !bytes.Equal(b, objectBytes("held", 28*MiB)) {
		t.Errorf("the held object: %d bytes (%v)", len(b), err)
	}
	ledgerExact(t, d)
	if !strings.Contains(d.out.String(), "--wait-limit is shorter than --grace") {
		t.Errorf("no warning of a --wait-limit shorter than --grace in the daemon's log:\n%s", d.out.String())
	}
}

// waitingWriter opens argv[1] and writes 4 MiB in one write(2), which
// waits for room, and prints what it returned and its errno; SIGUSR1
// has a handler (so it interrupts the call, which is not restarted).
const waitingWriter = `
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
signal.signal(signal.SIGUSR1, lambda *a: None)
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
buf = ctypes.create_string_buffer(4 << 20)
n = libc.write(fd, buf, 4 << 20)
print(n, ctypes.get_errno(), flush=True)
os.close(fd)
`

// TestWaitingWriterSignalledOrKilled: a writer waiting for room in a
// cache full of objects open for reading, stopped and continued (Ctrl-Z
// and fg) and sent a signal it handles, waits on and stores once the
// room comes, as a write to a regular file does: the kernel hands a
// caller whatever kvfs answers an interrupted request, EINTR included,
// even under SA_RESTART (an outside tester's C program lost its store
// to a Ctrl-Z and fg). A writer killed while it waits has its wait end
// at once: it waited out --wait-limit (10 minutes here), holding its
// place among the waiting writers.
func TestWaitingWriterSignalledOrKilled(t *testing.T) {
	py := requirePython(t)
	for _, mode := range []string{"passthrough", "daemon"} {
		t.Run(mode, func(t *testing.T) {
			flags := []string{"--capacity", "16MiB", "--grace", "0s", "--wait-limit", "10m"}
			if mode == "daemon" {
				flags = append(flags, "--no-passthrough")
			}
			d := mountCache(t, flags...)
			var readers []*os.File
			closeReaders := func() {
				for _, f := range readers {
					f.Close()
				}
				readers = nil
			}
			defer closeReaders()
			for i := range 8 {
				p := filepath.Join(d.mp, fmt.Sprintf("o%d", i))
				putFile(t, p, objectBytes(p, 2*MiB))
				f, err := os.Open(p)
				if err != nil {
					t.Fatal(err)
				}
				readers = append(readers, f)
			}
			start := func(name string) (*exec.Cmd, *strings.Builder) {
				cmd := exec.Command(py, "-c", waitingWriter, filepath.Join(d.mp, name))
				var out strings.Builder
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				if !waitFor(func() bool { return stats(t, d.mp).WaitingForRoom > 0 }) {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("the writer never waited for room: %s", out.String())
				}
				return cmd, &out
			}

			killed, _ := start("killed")
			// A killed writer exits only once its request is answered
			// (the kernel waits for the answer to a request the daemon
			// read).
			died := make(chan error, 1)
			go func() { died <- killed.Wait() }()
			killed.Process.Kill()
			if !waitFor(func() bool { return len(died) > 0 && stats(t, d.mp).WaitingForRoom == 0 }) {
				t.Fatal("the killed writer's request still waits for room")
			}

			cmd, out := start("new")
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			// A stop interrupts the request (the kernel sends INTERRUPT
			// and waits on for the answer, the writer in D state); so
			// does a signal with a handler.
			cmd.Process.Signal(syscall.SIGSTOP)
			if !waitFor(func() bool { return processRunState(cmd.Process.Pid) == 'D' }) {
				t.Fatal("the stopped writer's request was never interrupted")
			}
			cmd.Process.Signal(syscall.SIGCONT)
			cmd.Process.Signal(syscall.SIGUSR1)
			// Answered EINTR, it ended within milliseconds.
			if waitWithin(2*time.Second, func() bool { return len(exited) > 0 }) {
				t.Fatalf("the stopped and signalled writer ended while the cache was full: %s", out.String())
			}
			closeReaders()
			if err := <-exited; err != nil {
				t.Fatalf("the writer: %v: %s", err, out.String())
			}
			if got, want := strings.TrimSpace(out.String()), fmt.Sprintf("%d 0", 4*MiB); got != want {
				t.Errorf("the stopped, continued and signalled write returned %q (bytes written, errno); want %q", got, want)
			}
			st := waitReleased(t, d.mp)
			if st.AdmissionFailures != 0 || st.WaitingForRoom != 0 {
				t.Errorf("after: %+v; want nothing refused or waiting", st)
			}
			ledgerExact(t, d)
		})
	}
}

// processRunState is the state letter of process pid (0: not known).
func processRunState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	j := bytes.LastIndexByte(b, ')')
	if err != nil || j < 0 || j+2 >= len(b) {
		return 0
	}
	return b[j+2]
}

// TestWriteRetriedAfterENOSPC: a write through the daemon refused for
// space (readers pin the cache) answers ENOSPC and stores nothing; the
// writer retries the piece on the same descriptor once the readers are
// gone, writes the rest, and its close succeeds with the whole object,
// as on any file system, also in two halves. One that skips the piece,
// writes only half of it, or writes an earlier piece again instead is
// refused at its close (its object would have a hole: a re-test found a
// half retry published with 512 KiB of zeros). Before, every writer
// refused once was refused at its close, its later writes answered
// success (an outside tester, 2 of 2).
func TestWriteRetriedAfterENOSPC(t *testing.T) {
	noPassthrough := []string{"--no-passthrough"}
	for _, c := range []struct {
		name  string
		flags []string
		flag  int // O_APPEND: the kernel writes through the daemon
		// retry is what the writer does with the refused piece: writes
		// it again ("whole", or in two "halves"), writes its first
		// "half" only, writes an earlier piece again ("lower"), or
		// "skip"s it; then it writes the pieces after it.
		retry string
	}{
		{"append-retry", nil, os.O_APPEND, "whole"},
		{"pwrite-retry", noPassthrough, 0, "whole"},
		{"pwrite-retry-in-halves", noPassthrough, 0, "halves"},
		{"pwrite-half", noPassthrough, 0, "half"},
		{"pwrite-lower", noPassthrough, 0, "lower"},
		{"pwrite-skip", noPassthrough, 0, "skip"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := mountCache(t, append([]string{"--capacity", "16MiB", "--grace", "0s", "--wait-limit", "300ms"}, c.flags...)...)
			var readers []*os.File
			for i := range 13 {
				putFile(t, filepath.Join(d.mp, fmt.Sprintf("r%d", i)), objectBytes(fmt.Sprint(i), MiB))
			}
			waitReleased(t, d.mp)
			for i := range 13 {
				f, err := os.Open(filepath.Join(d.mp, fmt.Sprintf("r%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				readers = append(readers, f)
			}
			const pieces = 6
			want := objectBytes("w", pieces*MiB)
			w, err := os.OpenFile(filepath.Join(d.mp, "w"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC|c.flag, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			write := func(i int) error {
				p := want[i*MiB : (i+1)*MiB]
				if c.flag != 0 {
					_, err := w.Write(p)
					return err
				}
				_, err := w.WriteAt(p, int64(i*MiB))
				return err
			}
			refused := -1
			for i := range pieces {
				if err := write(i); err != nil {
					if !errors.Is(err, unix.ENOSPC) {
						t.Fatalf("write %d: %v, want ENOSPC or success", i, err)
					}
					refused = i
					break
				}
			}
			if refused < 0 {
				t.Fatalf("6 MiB written beside 13 MiB pinned in 16 MiB: no write refused")
			}
			for _, f := range readers {
				f.Close()
			}
			if !waitFor(func() bool { return stats(t, d.mp).PinnedObjects == 1 }) {
				t.Fatalf("the readers' objects still pinned: %+v", stats(t, d.mp))
			}
			part := func(i, from, to int) error {
				_, err := w.WriteAt(want[i*MiB+from:i*MiB+to], int64(i*MiB+from))
				return err
			}
			var errs []error
			switch c.retry {
			case "whole":
				errs = append(errs, write(refused))
			case "halves":
				errs = append(errs, part(refused, 0, MiB/2), part(refused, MiB/2, MiB))
			case "half":
				errs = append(errs, part(refused, 0, MiB/2))
			case "lower":
				errs = append(errs, write(0))
			}
			for i := refused + 1; i < pieces; i++ {
				errs = append(errs, write(i))
			}
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("writes after the readers closed: %v", err)
			}
			err = w.Close()
			path := filepath.Join(d.mp, "w")
			if c.retry != "whole" && c.retry != "halves" {
				if !errors.Is(err, unix.ENOSPC) {
					t.Errorf("the close of a writer that left part of its refused piece unwritten (%s): %v, want ENOSPC", c.retry, err)
				}
				if !waitFor(func() bool {
					// The kernel's cached name goes with kvfs's notice,
					// sent after the close's answer (a fresh-clone CI
					// run looked before it came; kvfs had removed it).
					_, err := os.Lstat(path)
					return errors.Is(err, fs.ErrNotExist)
				}) {
					t.Error("the object with a hole where its refused piece was is kept")
				}
			} else {
				if err != nil {
					t.Errorf("the close of a writer that retried its refused piece %d: %v", refused, err)
				}
				got, err := os.ReadFile(path)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("the retried object: %d bytes (%v), want its %d", len(got), err, len(want))
				}
			}
			waitReleased(t, d.mp)
			ledgerExact(t, d)
		})
	}
}

// TestStoreWaitsForAnIdleWriter: a store that needs the room an open,
// idle writer of a stored object holds (opened for writing, writing
// nothing, or rewriting in place) waits for that writer's close, up to
// --wait-limit, as it waits for a reader's; with passthrough it was
// refused after 0.3 s, as if the two were writers stuck on each other
// (an outside tester: a 2 GiB fallocate beside a 5 GiB object held
// open O_WRONLY, 10 of 10). Two stores that wait for each other still
// give way (TestTwoStoresThatCannotBothFit).
func TestStoreWaitsForAnIdleWriter(t *testing.T) {
	for _, mode := range [][]string{nil, {"--no-passthrough"}} {
		t.Run(fmt.Sprintf("%v", mode), func(t *testing.T) {
			d := mountCache(t, append([]string{"--capacity", "16MiB", "--grace", "0s", "--wait-limit", "10s"}, mode...)...)
			h := filepath.Join(d.mp, "H")
			// 2 MiB left: J is reserved nothing at its create.
			putFile(t, h, objectBytes("H", 14*MiB))
			waitReleased(t, d.mp)
			writer, err := os.OpenFile(h, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer writer.Close()
			j, err := os.Create(filepath.Join(d.mp, "J"))
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			done := make(chan error, 1)
			go func() { done <- unix.Fallocate(int(j.Fd()), 0, 0, 8*MiB) }()
			// J's admission waits for H's room; H's writer is idle.
			if !waitFor(func() bool { return stats(t, d.mp).WaitingForRoom > 0 }) {
				t.Fatalf("J's fallocate did not wait: %v", <-done)
			}
			select {
			case err := <-done:
				t.Fatalf("J's fallocate ended while H's writer was open: %v; want it to wait for H's close", err)
			case <-time.After(time.Second): // past the 0.3 s it gave way after
			}
			if err := writer.Close(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("J's fallocate once H's writer closed: %v", err)
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			waitReleased(t, d.mp)
			ledgerExact(t, d)
		})
	}
}

// oneThreadOpensMany: a process of one thread opens n files for
// writing (f0 ... f<n-1>), then writes 4 KiB into each and closes them.
// With "hold", a child forked first keeps f0 open (closing its copies
// of the others before the parent writes) until the parent is done;
// with "exits", a child forked first keeps them all open for a second,
// then exits; with "child-writes-K", a child forked first, holding them
// all, writes 4 KiB of "c" at 4 KiB into fK (f4: the file the parent's
// write waits on), and exits; "child-first-K" is the same with the
// child's write made first (the parent writes 0.2 s later). Any error
// ends it with status 1.
const oneThreadOpensMany = `
import os, sys, time
d, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
hold = mode == "hold"
fds = [os.open(os.path.join(d, "f%d" % i), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644) for i in range(n)]
if mode == "exits" and os.fork() == 0:
    time.sleep(1)
    os._exit(0)
writer = 0
if mode.startswith("child-writes-") or mode.startswith("child-first-"):
    k = int(mode.rsplit("-", 1)[1])
    first = mode.startswith("child-first-")
    writer = os.fork()
    if writer == 0:
        if not first:
            time.sleep(0.1)
        try:
            os.pwrite(fds[k], b"c" * 4096, 4096)
        except OSError as e:
            print("the child's write into f%d:" % k, e, file=sys.stderr)
            os._exit(1)
        os._exit(0)
    if first:
        time.sleep(0.2)
if hold:
    done_r, done_w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        for fd in fds[1:] + [done_w, ready_r]:
            os.close(fd)
        os.write(ready_w, b"r")
        os.read(done_r, 1)
        os._exit(0)
    os.close(done_r)
    os.close(ready_w)
    os.read(ready_r, 1)
for i, fd in enumerate(fds):
    os.write(fd, bytes([65 + i]) * 4096)
for fd in fds:
    os.close(fd)
if hold:
    os.close(done_w)
    os.waitpid(pid, 0)
if writer and os.waitpid(writer, 0)[1] != 0:
    sys.exit(1)
`

// TestOneThreadOpensMoreThanTheCacheReserves: a process of one thread
// that opens more files for writing than an empty cache can reserve
// before it writes any (8 into 256 MiB, the first four reserved a
// quarter each) stores them all: while its one thread waits in the
// fifth file's first write, nothing can write to its first four, so
// what they reserved and did not write is taken back for it. With
// passthrough (the default as root) reservations are firm, and the
// fifth and every later file were refused at the wait limit (4 of 8,
// 20 s). The same with a child holding the first file: that one's
// reservation stays, the others' do not; and with a child that holds
// them all for a second, then exits: the wait asks again, and goes on
// once it is gone (an outside tester: asked once, the fifth file was
// refused at the wait limit, 6 of 6); and with a child of one thread
// that writes into the file the parent waits on, or into another of
// them: blocked behind the parent's write (the kernel's lock of the
// file), or waiting for room itself, it cannot write into the others
// meanwhile (an outside tester: into the same file, both waited out the
// wait limit, 2 of 2; into another, the child's write was refused at
// 0.3 s, 3 of 3); and with the child's write into that file made
// first, the parent's then waiting for the file's lock behind it (a
// re-test: with 16 MiB writes, 4 of 4 waited out the limit).
func TestOneThreadOpensMoreThanTheCacheReserves(t *testing.T) {
	py := requirePython(t)
	for _, hold := range []string{"alone", "hold", "exits", "child-writes-4", "child-writes-5", "child-first-4"} {
		t.Run(hold, func(t *testing.T) {
			d := mountCache(t, "--capacity", "256MiB")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if out, err := exec.CommandContext(ctx, py, "-c", oneThreadOpensMany, d.mp, "8", hold).CombinedOutput(); err != nil {
				t.Fatalf("one thread opening 8 files, then writing 4 KiB into each (%s): %v: %s", hold, err, out)
			}
			st := waitReleased(t, d.mp)
			if st.Objects != 8 || st.AdmissionFailures != 0 {
				t.Errorf("after 8 stores of 4 KiB into an empty 256 MiB cache: %d objects, %d admission failures; want 8 and none", st.Objects, st.AdmissionFailures)
			}
			for i := range 8 {
				want := bytes.Repeat([]byte{byte(65 + i)}, 4096)
				if hold == "child-writes-"+strconv.Itoa(i) || hold == "child-first-"+strconv.Itoa(i) {
					want = append(want, bytes.Repeat([]byte("c"), 4096)...)
				}
				b, err := os.ReadFile(filepath.Join(d.mp, fmt.Sprintf("f%d", i)))
				if err != nil || !bytes.Equal(b, want) {
					t.Errorf("f%d: %d bytes, %v; want its %d", i, len(b), err, len(want))
				}
			}
			ledgerExact(t, d)
		})
	}
}

// TestStoppedWaiterBesideAStore: with --strict-capacity and a reader
// holding the whole cache, a writer stopped (SIGSTOP) while its first
// write waits for room does not make the next store give way: that
// store holds nothing, nor does its process elsewhere, so its refusal
// would free nothing; it waits for the reader, as it does alone, and is
// stored once the reader closes (an outside tester: refused 0.31 s in,
// 3 of 3, where alone it waited 2.09 s and was stored).
func TestStoppedWaiterBesideAStore(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB", "--strict-capacity", "--wait-limit", "30s")
	big := filepath.Join(d.mp, "big")
	putFile(t, big, objectBytes(big, 16*MiB))
	reader, err := os.Open(big)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	dd := func(name string, mib int) (*exec.Cmd, chan error) {
		cmd := exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(d.mp, name), "bs=1M", fmt.Sprintf("count=%d", mib))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		return cmd, done
	}
	stopped, stoppedDone := dd("stopped", 8)
	defer func() { stopped.Process.Signal(syscall.SIGCONT); stopped.Process.Kill(); <-stoppedDone }()
	if !waitFor(func() bool { return stats(t, d.mp).WaitingForRoom >= 1 }) {
		t.Fatal("the first writer never waited for room")
	}
	stopped.Process.Signal(syscall.SIGSTOP)
	_, storeDone := dd("store", 2)
	if !waitFor(func() bool { return stats(t, d.mp).WaitingForRoom >= 2 }) {
		t.Fatal("the store never waited for room")
	}
	// Past the stall's wait (0.3 s) several times over: it waits on.
	if waitWithin(2*time.Second, func() bool { return len(storeDone) > 0 }) {
		t.Fatalf("the store ended while the reader held the cache: %v (gave way beside the stopped writer); %+v", <-storeDone, stats(t, d.mp))
	}
	reader.Close()
	if err := <-storeDone; err != nil {
		t.Fatalf("the store once the reader closed: %v; %+v", err, stats(t, d.mp))
	}
	if st, err := os.Stat(filepath.Join(d.mp, "store")); err != nil || st.Size() != 2*MiB {
		t.Fatalf("the stored object: %v, %v; want 2 MiB", st, err)
	}
}
