package fusefs_test

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/internal/usage"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/mountinfo"
	"github.com/kvfs/kvfs/mount"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

// kvfsMount is one in-process kvfs mount made by mountKVFS.
type kvfsMount struct {
	t     *testing.T
	Mnt   string // the mount point
	Store string // the store directory
	M     *mount.Mount
	Opts  mount.Options
	clock *testClock
	errs  *observer.ObservedLogs // what kvfs logged at Error level
}

// testClock is the mount's clock of grace periods: real time, plus what
// a test skipped, so that floods see grace periods end by themselves and
// a test that needs objects evictable now skips ahead instead of sleeping.
type testClock struct{ skipped atomic.Int64 }

func (c *testClock) Now() time.Time { return time.Now().Add(time.Duration(c.skipped.Load())) }

// pastGrace makes every object closed so far evictable. A writer's
// RELEASE starts its grace period, so it first waits for the RELEASEs of
// what the test closed (see released).
func (k *kvfsMount) pastGrace(held int64) {
	k.t.Helper()
	k.released(held)
	k.clock.skipped.Add(int64(2*k.Opts.Grace + time.Millisecond))
}

// released waits until only the held objects the test keeps open are
// pinned: close(2) returns before the kernel's RELEASE of the handle
// reaches kvfs, and RELEASE is what unpins the object, starts a writer's
// grace period and moves the object to the hot end of the LRU.
func (k *kvfsMount) released(held int64) {
	k.t.Helper()
	st := k.settled(func(st core.Stats) bool { return st.PinnedObjects == held && k.M.Releasing() == 0 })
	if st.PinnedObjects != held {
		k.t.Fatalf("%d objects pinned, want only the %d held open", st.PinnedObjects, held)
	}
	if n := k.M.Releasing(); n != 0 {
		k.t.Fatalf("%d releases still under way (their objects not yet published)", n)
	}
}

// mountOpt adjusts the options of a mount before it starts.
type mountOpt func(*mount.Options)

func withCapacity(n int64) mountOpt       { return func(o *mount.Options) { o.Capacity = n } }
func withGrace(d time.Duration) mountOpt  { return func(o *mount.Options) { o.Grace = d } }
func withWait(d time.Duration) mountOpt   { return func(o *mount.Options) { o.WaitLimit = d } }
func withCache(d time.Duration) mountOpt  { return func(o *mount.Options) { o.CacheTimeout = d } }
func withPassthrough(on bool) mountOpt    { return func(o *mount.Options) { o.Passthrough = on } }
func withStrict() mountOpt                { return func(o *mount.Options) { o.StrictCapacity = true } }
func blocksFor(size int64) int64          { return ceil4096(size) / 512 }
func errnoOf(err error) (e syscall.Errno) { errors.As(err, &e); return e }

// ceil4096 is the charge of size bytes: rounded up to the ledger's block.
func ceil4096(size int64) int64 {
	return (max(size, 0) + core.BlockSize - 1) / core.BlockSize * core.BlockSize
}

// mountKVFS mounts a fresh kvfs (64 MiB, 50ms grace, 1s wait limit, the
// production cache timeout, passthrough on) in a temporary directory and
// serves it until the test ends. Cleanup checks the ledger's invariants
// and the drift equality, unmounts, waits for the server to stop, and
// fails the test on a leftover mount, a leaked descriptor or an
// Error-level log line.
func mountKVFS(t *testing.T, opts ...mountOpt) *kvfsMount {
	t.Helper()
	base := t.TempDir()
	fdsBefore := openFDs(t)
	obsCore, errs := observer.New(zapcore.ErrorLevel)
	log := zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel))
	o := mount.Options{
		Mountpoint:   filepath.Join(base, "mnt"),
		Store:        filepath.Join(base, "store"),
		Capacity:     64 * mib,
		Grace:        50 * time.Millisecond,
		WaitLimit:    time.Second,
		CacheTimeout: mount.DefaultCacheTimeout,
		Passthrough:  true,
	}
	for _, opt := range opts {
		opt(&o)
	}
	clock := &testClock{}
	o.Now = clock.Now
	o.Logger = zap.New(zapcore.NewTee(log.Core(), obsCore))
	if err := os.MkdirAll(o.Mountpoint, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := mount.Start(o)
	if err != nil {
		t.Fatalf("mount.Start: %v", err)
	}
	k := &kvfsMount{t: t, Mnt: m.Mountpoint, Store: m.Store, M: m, Opts: m.Options, clock: clock, errs: errs}
	served := make(chan struct{})
	go func() {
		defer close(served)
		m.Wait()
	}()
	t.Cleanup(func() { k.teardown(served, fdsBefore) })
	return k
}

// teardown is mountKVFS's cleanup.
func (k *kvfsMount) teardown(served chan struct{}, fdsBefore map[string]string) {
	t := k.t
	t.Helper()
	if err := k.M.CheckInvariants(); err != nil {
		t.Errorf("ledger invariants before unmount: %v", err)
	}
	assertNoDrift(t, k.Mnt, k.M, k.Store)
	if err := k.M.Unmount(); err != nil {
		t.Errorf("unmount %s: %v", k.Mnt, err)
	}
	select {
	case <-served:
	case <-time.After(30 * time.Second):
		t.Errorf("server of %s still running 30s after unmount", k.Mnt)
	}
	if isKVFSMount(k.Mnt) {
		t.Errorf("a fuse.kvfs mount is left at %s; detaching it", k.Mnt)
		unix.Unmount(k.Mnt, unix.MNT_DETACH)
	}
	// go-fuse's Serve closes /dev/fuse just after Wait returns, so give
	// it a moment.
	var leaked []string
	eventually(func() bool {
		leaked = newFDs(fdsBefore, openFDs(t))
		return len(leaked) == 0
	})
	if len(leaked) > 0 {
		t.Errorf("file descriptors leaked by the mount or the test: %v", leaked)
	}
	// kvfs logs at Error level only what it could not map to an errno
	// (answered EIO) and panics in handlers.
	for _, e := range k.errs.All() {
		t.Errorf("kvfs logged at error level: %s %v", e.Message, e.ContextMap())
	}
}

// isKVFSMount reports whether /proc/self/mountinfo lists a fuse.kvfs
// mount at mp.
func isKVFSMount(mp string) bool {
	for _, m := range mountinfo.Read() {
		if m.Point == mp && m.FSType == mount.FSType {
			return true
		}
	}
	return false
}

// openFDs maps the test process's open descriptors to what they point at.
func openFDs(t *testing.T) map[string]string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("listing fds: %v", err)
	}
	fds := make(map[string]string, len(ents))
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
			fds[e.Name()] = target
		}
	}
	return fds
}

// newFDs lists descriptors open now that were not before, apart from
// those opened once per process and kept: the Go runtime's poller, and
// go-fuse's splice pipe pool and the /dev/null it drains pipes into.
func newFDs(before, after map[string]string) []string {
	var leaked []string
	for fd, target := range after {
		if before[fd] == target || target == os.DevNull ||
			strings.HasPrefix(target, "anon_inode:[event") || strings.HasPrefix(target, "pipe:") {
			continue
		}
		leaked = append(leaked, fd+" -> "+target)
	}
	return leaked
}

// driftReport is the four numbers the drift check compares.
type driftReport struct{ statfs, du, ledger, store int64 }

func (d driftReport) equal() bool {
	return d.statfs == d.du && d.du == d.ledger && d.ledger == d.store
}

// assertNoDrift checks SPEC's drift equality with nothing open: statfs
// used == du of the mount == used_bytes == the charge of what the store
// holds under data/. Releases reach the daemon after close(2) returns,
// so it waits for them to land.
func assertNoDrift(t *testing.T, mnt string, m *mount.Mount, storeDir string) {
	t.Helper()
	var d driftReport
	var err error
	eventually(func() bool {
		d, err = measureDrift(mnt, m, storeDir)
		return err == nil && d.equal() && m.Stats().PinnedObjects == 0
	})
	if err != nil {
		t.Errorf("drift check: %v", err)
		return
	}
	if !d.equal() {
		t.Errorf("drift: statfs used %d, du of mount %d, ledger used %d, store holds %d", d.statfs, d.du, d.ledger, d.store)
	}
	if st := m.Stats(); st.PinnedObjects != 0 || st.ShadowBytes != 0 {
		t.Errorf("with nothing open: %d objects still pinned (%d bytes), shadow %d", st.PinnedObjects, st.PinnedBytes, st.ShadowBytes)
	}
	if n := countMarkers(filepath.Join(storeDir, "writing")); n != 0 {
		t.Errorf("with nothing open the store's writing/ still holds %d markers", n)
	}
}

func measureDrift(mnt string, m *mount.Mount, storeDir string) (driftReport, error) {
	var d driftReport
	var sf unix.Statfs_t
	if err := unix.Statfs(mnt, &sf); err != nil {
		return d, fmt.Errorf("statfs: %w", err)
	}
	d.statfs = int64(sf.Blocks-sf.Bfree) * sf.Bsize
	var err error
	if d.du, err = usage.Du(mnt); err != nil {
		return d, fmt.Errorf("du of mount: %w", err)
	}
	d.ledger = m.Stats().UsedBytes
	if d.store, err = usage.Charged(filepath.Join(storeDir, "data")); err != nil {
		return d, fmt.Errorf("store walk: %w", err)
	}
	return d, nil
}

// pattern is n deterministic bytes that differ per seed and per offset,
// so a misplaced or stale block shows up. Not instrumented by the race
// detector (its buffer is its own until it returns): a byte at a time,
// instrumented, it took three quarters of the CPU of the race-built
// tests that store and read megabytes (TestDoomedStoreKeepsCache, 16 s
// of its 20).
//
//go:norace
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// writeObject stores data at path the way a connector does: create,
// write, close, reporting every error.
func writeObject(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func mustWrite(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := writeObject(path, data); err != nil {
		t.Fatalf("storing %s: %v", path, err)
	}
}

// mustRead checks that path holds exactly want.
func mustRead(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: read %d bytes that differ from the %d stored (first difference at %d)", path, len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// wantErrno checks that err is exactly the errno want.
func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if got := errnoOf(err); got != want {
		t.Errorf("%s: got %v, want %v", what, err, want)
	}
}

// hangGuard bounds every wait in these tests. It is no verdict on speed:
// a wait that runs into it is waiting for an event that is not coming (a
// hang), which a slow machine is not. It is shorter than the kernel's
// default name cache timeout, so a name the kernel forgets only when its
// entry expires is never taken for one kvfs told it to forget.
const hangGuard = 50 * time.Second

// eventually reports whether cond came to hold before hangGuard passed,
// polling it: for states nothing announces (the ledger's figures, the
// kernel's cached names).
func eventually(cond func() bool) bool {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	guard := time.After(hangGuard)
	for !cond() {
		select {
		case <-tick.C:
		case <-guard:
			return cond()
		}
	}
	return true
}

// settled returns the ledger's stats once cond holds (or at the hang
// guard): the
// kernel sends a release after close(2) has returned, so an unlinked
// object can stay charged as shadow bytes for a moment.
func (k *kvfsMount) settled(cond func(core.Stats) bool) core.Stats {
	var st core.Stats
	eventually(func() bool {
		st = k.M.Stats().Stats
		return cond(st)
	})
	return st
}

// capSampler samples the ledger and statfs while a flood runs and
// records the worst over-capacity moment.
type capSampler struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	samples atomic.Int64
	worst   atomic.Int64 // most used seen
	bad     atomic.Value // string: first violation
}

func sampleCapacity(k *kvfsMount, strict bool) *capSampler {
	s := &capSampler{stop: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			st := k.M.Stats()
			var sf unix.Statfs_t
			statfsErr := unix.Statfs(k.Mnt, &sf)
			s.samples.Add(1)
			if st.UsedBytes > s.worst.Load() {
				s.worst.Store(st.UsedBytes)
			}
			// Admitted bytes never pass the capacity; with passthrough a
			// writer may outgrow what could be admitted (unadmitted
			// bytes, on disk until its close), strictly never.
			if st.UsedBytes-st.UnadmittedBytes > st.CapacityBytes || strict && st.UsedBytes > st.CapacityBytes {
				s.bad.CompareAndSwap(nil, fmt.Sprintf("used %d (unadmitted %d) > capacity %d", st.UsedBytes, st.UnadmittedBytes, st.CapacityBytes))
			}
			if statfsErr == nil && sf.Bfree > sf.Blocks {
				s.bad.CompareAndSwap(nil, fmt.Sprintf("statfs bfree %d > blocks %d", sf.Bfree, sf.Blocks))
			}
			select {
			case <-s.stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return s
}

// check stops the sampler and fails the test on any violation.
func (s *capSampler) check(t *testing.T) {
	t.Helper()
	close(s.stop)
	s.wg.Wait()
	if v := s.bad.Load(); v != nil {
		t.Errorf("capacity exceeded during the flood: %s", v)
	}
	t.Logf("capacity sampler: %d samples, most used %d", s.samples.Load(), s.worst.Load())
}

// countMarkers counts the crash markers under a store's writing/: files
// in its subdirectories, or directly under it.
func countMarkers(writing string) int {
	ents, _ := os.ReadDir(writing)
	n := 0
	for _, e := range ents {
		if !e.IsDir() {
			n++
			continue
		}
		sub, _ := os.ReadDir(filepath.Join(writing, e.Name()))
		n += len(sub)
	}
	return n
}
