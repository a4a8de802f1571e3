package core

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/ledger"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

// testClock is real time plus what a test skipped.
// testClock is the wall clock plus what tests skipped, or, frozen, the
// moment it froze plus that.
type testClock struct{ skipped, frozen atomic.Int64 }

func (c *testClock) Now() time.Time {
	if at := c.frozen.Load(); at != 0 {
		return time.Unix(0, at+c.skipped.Load())
	}
	return time.Now().Add(time.Duration(c.skipped.Load()))
}

func (c *testClock) Skip(d time.Duration) { c.skipped.Add(int64(d)) }

// Freeze stops the clock where it is: only Skip moves it then.
func (c *testClock) Freeze() { c.frozen.Store(c.Now().UnixNano() - c.skipped.Load()) }

// testCore is a Core over a fresh store, without FUSE.
type testCore struct {
	*Core
	t     *testing.T
	clock *testClock
	mu    sync.Mutex
	drops []Drop
}

func newTestCore(t *testing.T, cfg Config) *testCore {
	t.Helper()
	store, err := blob.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCore{t: t, clock: &testClock{}}
	if cfg.Grace == 0 {
		cfg.Grace = 50 * time.Millisecond
	}
	cfg.Now = tc.clock.Now
	c, _, err := Open(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc.Core = c
	c.Start(func(d Drop) {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		tc.drops = append(tc.drops, d)
	})
	t.Cleanup(func() {
		if err := c.CheckInvariants(); err != nil {
			t.Errorf("invariants at the end: %v", err)
		}
		c.Close()
	})
	return tc
}

// put stores a closed object of size bytes.
func (tc *testCore) put(name string, size int) blob.ID {
	tc.t.Helper()
	h := tc.flushed(name, size)
	h.Release()
	return h.ID()
}

// flushed creates name, writes size bytes and closes it (a FLUSH): its
// RELEASE is the caller's.
func (tc *testCore) flushed(name string, size int) *Handle {
	tc.t.Helper()
	h, err := tc.Create(blob.RootID, name, 0o644, blob.Owner{UID: -1, GID: -1}, true)
	if err != nil {
		tc.t.Fatalf("create %s: %v", name, err)
	}
	if size > 0 {
		if _, err := h.Write(Interrupt{}, make([]byte, size), 0); err != nil {
			tc.t.Fatalf("write %s: %v", name, err)
		}
	}
	if err := h.Flush(); err != nil {
		tc.t.Fatalf("flush %s: %v", name, err)
	}
	return h
}

func (tc *testCore) exists(name string) bool {
	_, _, err := tc.Lookup(blob.RootID, name)
	return err == nil
}

// TestEvictionAtomicWithNames: an eviction and a lookup, create, link or
// rename of the same name are ordered; each sees the name entirely before
// or entirely after the eviction (issue: LMCache took a link EEXIST from
// a name being evicted as "another writer published", and lost its
// store). A hook holds the eviction inside its critical section until
// the other operation is parked on the namespace lock (read from its
// goroutine's stack, not hoped for with a yield): that operation must
// not finish before then, and must then see the name gone.
func TestEvictionAtomicWithNames(t *testing.T) {
	for _, op := range []string{"lookup", "create", "link", "rename"} {
		t.Run(op, func(t *testing.T) {
			tc := newTestCore(t, Config{Capacity: 4 * mib, WaitLimit: time.Second})
			tc.put("victim", mib)
			tc.put("src", 10)
			tc.put("keep", mib)
			tc.clock.Skip(time.Second)
			done := make(chan error, 1)
			var early, outside, hooked atomic.Bool
			testHookDropping = func() {
				testHookDropping = nil
				hooked.Store(true)
				if tc.Core.mu.TryRLock() {
					tc.Core.mu.RUnlock()
					outside.Store(true)
				}
				// Wait until the probe is provably waiting for the lock
				// the eviction holds; if it finishes instead, it saw the
				// half-way state.
				finished, _ := goParked(func() { done <- probe(tc, op) }, "core.(*Core)", lockWaits...)
				early.Store(finished)
			}
			defer func() { testHookDropping = nil }()
			// Evict "victim" (the coldest) to admit 2 MiB (twice the
			// reservation: what a daemon writer may evict for).
			tc.put("big", 2*mib)
			switch {
			case !hooked.Load():
				t.Fatal("no eviction ran the hook: the test exercised nothing")
			case outside.Load():
				t.Fatal("the eviction dropped names without holding the namespace lock")
			case early.Load():
				t.Fatalf("%s finished while the eviction was half-way", op)
			}
			if err := <-done; err != nil {
				t.Fatalf("%s during an eviction: %v", op, err)
			}
			if op == "lookup" && tc.exists("victim") {
				t.Fatal("victim not evicted")
			}
		})
	}
}

// probe does op on the victim's name and checks it saw the name after
// the eviction: absent, free to create, free to link or rename to.
func probe(tc *testCore, op string) error {
	switch op {
	case "lookup":
		if _, _, err := tc.Lookup(blob.RootID, "victim"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("lookup of an evicted name: %v, want ErrNotFound", err)
		}
	case "create":
		h, err := tc.Create(blob.RootID, "victim", 0o644, blob.Owner{UID: -1, GID: -1}, false)
		if err != nil {
			return fmt.Errorf("create over an evicted name: %v", err)
		}
		h.Release()
	case "link":
		e, _, err := tc.Lookup(blob.RootID, "src")
		if err == nil {
			_, err = tc.Link(e.ID, blob.RootID, "victim")
		}
		if err != nil {
			return fmt.Errorf("link to an evicted name: %v", err)
		}
	case "rename":
		if err := tc.Rename(blob.RootID, "src", blob.RootID, "victim", 0); err != nil {
			return fmt.Errorf("rename onto an evicted name: %v", err)
		}
	}
	return nil
}

// TestReservationAtOpen: a writer is admitted the size of the objects
// stored lately when it opens, evicting for it then; its close gives back
// what it did not use.
func TestReservationAtOpen(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 8 * mib, WaitLimit: time.Second})
	for i := range 8 {
		tc.put(fmt.Sprintf("o%d", i), mib)
	}
	tc.clock.Skip(time.Second)
	if r := tc.Reservation(); r != mib {
		t.Fatalf("reservation %d, want 1 MiB", r)
	}
	h, err := tc.Create(blob.RootID, "new", 0o644, blob.Owner{UID: -1, GID: -1}, true)
	if err != nil {
		t.Fatal(err)
	}
	if st := tc.Stats(); st.Evictions != 1 || st.ReservedBytes != mib || tc.exists("o0") {
		t.Fatalf("after the open: %+v; want o0 evicted for a 1 MiB reservation", st)
	}
	// Written past the daemon, as FUSE passthrough does.
	if _, err := h.File().WriteAt(make([]byte, mib/2), 0); err != nil {
		t.Fatal(err)
	}
	tc.Poll()
	if st := tc.Stats(); st.Evictions != 1 || st.UsedBytes != 8*mib {
		t.Fatalf("growth within the reservation: %+v", st)
	}
	if err := h.Flush(); err != nil {
		t.Fatal(err)
	}
	h.Release()
	if st := tc.Stats(); st.UsedBytes != 7*mib+mib/2 || st.ReservedBytes != 0 || st.Stores != 9 {
		t.Fatalf("after the close: %+v", st)
	}
}

// TestPassthroughWriterPolled: the poller admits a passthrough writer's
// growth before its close, evicting ahead of it.
func TestPassthroughWriterPolled(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib, WaitLimit: time.Second, Passthrough: true, PollInterval: time.Hour})
	for i := range 4 {
		tc.put(fmt.Sprintf("o%d", i), mib)
	}
	tc.clock.Skip(time.Second)
	h, err := tc.Create(blob.RootID, "w", 0o644, blob.Owner{UID: -1, GID: -1}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if _, err := h.File().WriteAt(make([]byte, 2*mib), 0); err != nil {
		t.Fatal(err)
	}
	if n := tc.Poll(); n != 1 {
		t.Fatalf("Poll watched %d writers, want 1", n)
	}
	st := tc.Stats()
	if st.Evictions != 2 || st.UsedBytes != 4*mib || st.UnadmittedBytes != 0 {
		t.Fatalf("after polling a 2 MiB writer: %+v; want two evictions, all admitted", st)
	}
	if size, _, _ := tc.ledger.Size(h.ID()); size != 2*mib {
		t.Fatalf("ledger size %d, want 2 MiB", size)
	}
}

// TestUnreservedWriter: a writer admitted no reservation as it opens
// says so (Unreserved), so that the adapter serves its writes through the
// core, where each is admitted before it lands: before any object was
// published (no size to reserve) once the first writers' guesses took the
// free space, in a cache full of objects in their grace, and for an
// existing object with no room to grow. One that gets its reservation
// may write straight to the store.
func TestUnreservedWriter(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib, Grace: time.Hour, Passthrough: true, PollInterval: time.Hour})
	create := func(name string) *Handle {
		t.Helper()
		h, err := tc.Create(blob.RootID, name, 0o644, blob.Owner{UID: -1, GID: -1}, true)
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return h
	}
	// No size known yet: the first writers are reserved a quarter of the
	// capacity each from free space, and the next finds none.
	var first []*Handle
	for i := range 5 {
		h := create(fmt.Sprintf("first%d", i))
		first = append(first, h)
		if h.Unreserved() != (i == 4) {
			t.Fatalf("writer %d of 5, no size known: Unreserved %v, %+v", i, h.Unreserved(), tc.Stats())
		}
	}
	if st := tc.Stats(); st.ReservedBytes != 4*mib || st.Evictions != 0 {
		t.Fatalf("5 writers with no size known: %+v; want 4 reserved a quarter each, nothing evicted", st)
	}
	for _, h := range first {
		h.Release()
	}
	for i := range 4 {
		tc.put(fmt.Sprintf("o%d", i), mib)
	}
	h := create("in-grace")
	if !h.Unreserved() {
		t.Fatalf("a writer in a cache full of objects in their grace got a reservation: %+v", tc.Stats())
	}
	h.Release()
	// An existing object's writer: its reservation (at most what it
	// holds) admits no growth, and no free room is left for any.
	h, err := tc.Open(tc.lookupID("o0"), os.O_RDWR, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Unreserved() {
		t.Fatalf("a writer of an existing object with no room to grow counts as reserved: %+v", tc.Stats())
	}
	h.Release()
	tc.clock.Skip(2 * time.Hour)
	h = create("evicting")
	if h.Unreserved() || tc.Stats().ReservedBytes != mib {
		t.Fatalf("a writer that could evict for its reservation: Unreserved %v, %+v", h.Unreserved(), tc.Stats())
	}
	h.Release()
	// Room to grow by one object, none left beside it for the next
	// store: that room is theirs (a passthrough writer's is never taken
	// back).
	if err := tc.Unlink(blob.RootID, "o1"); err != nil {
		t.Fatal(err)
	}
	h, err = tc.Open(tc.lookupID("o2"), os.O_RDWR, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Unreserved() || tc.Stats().ReservedBytes != 0 {
		t.Fatalf("a writer of an existing object that would take the last free room: Unreserved %v, %+v", h.Unreserved(), tc.Stats())
	}
	h.Release()
	if err := tc.Unlink(blob.RootID, "o3"); err != nil {
		t.Fatal(err)
	}
	h, err = tc.Open(tc.lookupID("o2"), os.O_RDWR, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if h.Unreserved() || tc.Stats().ReservedBytes != mib {
		t.Fatalf("a writer of an existing object with free room to grow by one object and one beside: Unreserved %v, %+v", h.Unreserved(), tc.Stats())
	}
}

// fullWriter is a passthrough writer of a new object name in a 4 MiB
// cache that holds a (1 MiB, in its grace), polled only when a test asks.
func fullWriter(t *testing.T, name string) (*testCore, *Handle) {
	tc := newTestCore(t, Config{Capacity: 4 * mib, WaitLimit: 0, Passthrough: true, PollInterval: time.Hour})
	tc.put("a", mib)
	tc.clock.Skip(time.Second)
	h, err := tc.Create(blob.RootID, name, 0o644, blob.Owner{UID: -1, GID: -1}, true)
	if err != nil {
		t.Fatal(err)
	}
	return tc, h
}

// TestCloseRefusesWhatCannotFit: a passthrough writer that outgrew what
// can be admitted fails its close with ENOSPC, its object is removed and
// its names dropped, and nothing else is evicted for it.
func TestCloseRefusesWhatCannotFit(t *testing.T) {
	tc, h := fullWriter(t, "big")
	if _, err := h.File().WriteAt(make([]byte, 5*mib), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("close of a 5 MiB object on a 4 MiB cache: %v, want ErrNoSpace", err)
	}
	h.Release()
	if tc.exists("big") || !tc.exists("a") {
		t.Fatalf("after the refusal: big present %v, a present %v", tc.exists("big"), tc.exists("a"))
	}
	st := tc.Stats()
	if st.Evictions != 0 || st.AdmissionFailures != 1 || st.UsedBytes != mib || st.OvershootMaxBytes < 2*mib {
		t.Fatalf("after the refusal: %+v", st)
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if len(tc.drops) != 1 || tc.drops[0].Why != Refused || len(tc.drops[0].Names) != 1 {
		t.Fatalf("drops %+v, want the refused object's name", tc.drops)
	}
}

// TestPollerRefusesPastCapacity: a passthrough writer that grows past
// the capacity, and so can never be admitted, is refused by the poller
// while it still writes: its name goes, its stored file is cut to
// nothing each time it grows, nothing else is evicted for it, and its
// close answers ENOSPC. Before, its bytes stayed on disk until that
// close: 27 GB in a 64 MiB cache from one writer that held its
// descriptor for ten minutes.
func TestPollerRefusesPastCapacity(t *testing.T) {
	tc, h := fullWriter(t, "big")
	stored := func() int64 {
		st, err := h.File().Stat()
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	// Within the capacity: admitted as before, the name kept.
	if _, err := h.File().WriteAt(make([]byte, 2*mib), 0); err != nil {
		t.Fatal(err)
	}
	tc.Poll()
	if !tc.exists("big") || stored() != 2*mib {
		t.Fatalf("a writer within the capacity: present %v, %d bytes stored", tc.exists("big"), stored())
	}
	for round, off := range []int64{2 * mib, 5 * mib, 9 * mib} {
		if _, err := h.File().WriteAt(make([]byte, 3*mib), off); err != nil {
			t.Fatal(err)
		}
		tc.Poll()
		if tc.exists("big") || stored() != 0 {
			t.Fatalf("round %d: a writer past the capacity: present %v, %d bytes stored", round, tc.exists("big"), stored())
		}
		if st := tc.Stats(); st.UsedBytes != mib || st.UnadmittedBytes != 0 || st.Evictions != 0 || !tc.exists("a") {
			t.Fatalf("round %d, after the cut: %+v; want a alone, 1 MiB used", round, st)
		}
	}
	if err := h.Flush(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("close of the refused writer: %v, want ErrNoSpace", err)
	}
	h.Release()
	if st := tc.Stats(); st.UsedBytes != mib || st.Objects != 1 || st.PinnedObjects != 0 || st.ReservedBytes != 0 {
		t.Fatalf("after the release: %+v", st)
	}
	if err := tc.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if onDisk := tc.storeBytes(); onDisk != mib {
		t.Fatalf("the store holds %d bytes, want 1 MiB", onDisk)
	}
}

// TestStatfsOverCapacity: while writers past the daemon hold more than
// the capacity, df's Used (Blocks - Free) is what the ledger says is
// used, as du's is, not the capacity.
func TestStatfsOverCapacity(t *testing.T) {
	tc, h := fullWriter(t, "w")
	defer h.Release()
	if _, err := h.File().WriteAt(make([]byte, 3*mib+mib/2), 0); err != nil { // grace keeps a: over by 1/2 MiB
		t.Fatal(err)
	}
	tc.Poll()
	st, fs := tc.Stats(), tc.Statfs()
	if st.UsedBytes <= st.CapacityBytes {
		t.Fatalf("the writer is not over the capacity: %+v", st)
	}
	if used := int64(fs.Blocks-fs.Free) * int64(fs.BlockSize); used != st.UsedBytes || fs.Free != 0 {
		t.Fatalf("statfs: %+v says %d used, the ledger %d", fs, used, st.UsedBytes)
	}
}

// TestUnlinkIdempotent: deleting a name kvfs no longer has succeeds and
// changes nothing.
func TestUnlinkIdempotent(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib})
	tc.put("a", 100)
	for range 2 {
		if err := tc.Unlink(blob.RootID, "a"); err != nil {
			t.Fatalf("unlink: %v", err)
		}
	}
	if st := tc.Stats(); st.Objects != 0 || st.UsedBytes != 0 {
		t.Fatalf("after unlinks: %+v", st)
	}
}

// TestConcurrentCore runs creates (through the daemon and past it),
// opens, links, renames, unlinks and polls from several goroutines on a
// small cache, with the race detector watching; the ledger's invariants
// and the drift equality hold at the end: used bytes == the charges of
// the inodes the names hold == the charges of the files the store holds.
// Every operation's error is one the contract allows for it.
func TestConcurrentCore(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 2 * mib, WaitLimit: 50 * time.Millisecond, Grace: time.Millisecond, PollInterval: time.Millisecond, Passthrough: true})
	names := []string{"a", "b", "c", "d", "e", "f"}
	// Three directories: changes in different ones run at once, and
	// links, renames and evictions cross them.
	dirs := []blob.ID{blob.RootID}
	for _, d := range []string{"x", "y"} {
		id, _, err := tc.Mkdir(blob.RootID, d, 0o755, blob.Owner{UID: -1, GID: -1})
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, id)
	}
	var wg sync.WaitGroup
	var ok, stores atomic.Int64
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range 300 {
				stored, err := randomCoreOp(tc, r, names, dirs...)
				switch {
				case err == nil:
					ok.Add(1)
					if stored {
						stores.Add(1)
					}
				case errors.Is(err, ErrNotFound), errors.Is(err, ErrExists), errors.Is(err, ErrNoSpace), errors.Is(err, ErrStale):
				default:
					t.Errorf("unexpected error: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() == 0 || stores.Load() == 0 {
		t.Fatalf("%d operations and %d stores succeeded: the test exercises nothing", ok.Load(), stores.Load())
	}
	if err := tc.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	named := map[blob.ID]int64{}
	for _, d := range dirs {
		for _, n := range names {
			if e, a, err := tc.Lookup(d, n); err == nil && !e.Dir {
				named[e.ID] = ledger.Charge(a.Size)
			}
		}
	}
	var held int64
	for _, c := range named {
		held += c
	}
	st := tc.Stats()
	if st.UsedBytes != held || st.Objects != int64(len(named)) || st.PinnedObjects != 0 || st.ReservedBytes != 0 || st.UnadmittedBytes != 0 {
		t.Fatalf("at rest: %+v; the names hold %d objects of %d bytes", st, len(named), held)
	}
	if onDisk := tc.storeBytes(); onDisk != held {
		t.Fatalf("the store holds %d bytes, the names %d", onDisk, held)
	}
}

// storeBytes is the charge of every file the store holds, once an inode.
func (tc *testCore) storeBytes() int64 {
	tc.t.Helper()
	n, err := storeCharges(tc.store)
	if err != nil {
		tc.t.Fatal(err)
	}
	return n
}

// storeCharges is the charge of every file s holds, once an inode.
func storeCharges(s *blob.Store) (int64, error) {
	seen := map[uint64]bool{}
	var n int64
	err := s.WalkDirs(nil, func(_ string, names []blob.WalkedName) {
		for _, f := range names {
			if !f.Dir && !seen[f.Ino] {
				seen[f.Ino] = true
				n += ledger.Charge(f.Size)
			}
		}
	}, func(string) {})
	return n, err
}

// randomCoreOp does one random operation; stored says it was a create
// that completed.
func randomCoreOp(tc *testCore, r *rand.Rand, names []string, dirs ...blob.ID) (stored bool, err error) {
	if len(dirs) == 0 {
		dirs = []blob.ID{blob.RootID}
	}
	name := names[r.IntN(len(names))]
	dir := func() blob.ID { return dirs[r.IntN(len(dirs))] }
	in, to := dir(), dir()
	owner := blob.Owner{UID: -1, GID: -1}
	switch r.IntN(6) {
	case 0, 1:
		h, err := tc.Create(in, name, 0o644, owner, true)
		if err != nil {
			return false, err
		}
		size := 1 + r.IntN(700*kib)
		if r.IntN(2) == 0 {
			_, err = h.Write(Interrupt{}, make([]byte, size), 0)
		} else {
			_, err = h.File().WriteAt(make([]byte, size), 0)
		}
		err = errors.Join(err, h.Flush())
		h.Release()
		return err == nil, err
	case 2:
		e, _, err := tc.Lookup(in, name)
		if err != nil {
			return false, err
		}
		h, err := tc.Open(e.ID, os.O_RDONLY, false, nil)
		if err != nil {
			return false, err
		}
		h.Release()
	case 3:
		e, _, err := tc.Lookup(in, name)
		if err == nil {
			_, err = tc.Link(e.ID, to, names[r.IntN(len(names))])
		}
		return false, err
	case 4:
		return false, tc.Rename(in, name, to, names[r.IntN(len(names))], 0)
	case 5:
		return false, tc.Unlink(in, name)
	}
	return false, nil
}

// TestAbandonedCreateDropsNames: a create that fails after the ledger
// took its entry gives that entry back under the namespace lock, so an
// eviction its close makes (here: the ledger is over capacity after a
// reconcile that could not trim) drops the victim's names too, and the
// ledger never forgets an object the store still names.
func TestAbandonedCreateDropsNames(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib, Grace: time.Hour})
	a := tc.put("a", mib)
	b := tc.put("b", mib)
	rb, err := tc.Open(b, os.O_RDONLY, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Release()
	path, _ := tc.BackingPath(b)
	if err := os.Truncate(path, 3*mib+mib/2); err != nil { // behind kvfs's back
		t.Fatal(err)
	}
	if _, err := tc.Getattr(b, nil); err != nil {
		t.Fatal(err)
	}
	if st := tc.Stats(); st.UsedBytes != 4*mib+mib/2 || !tc.exists("a") {
		t.Fatalf("after the reconcile: %+v, a present %v; want 4.5 MiB used, a kept by its grace", st, tc.exists("a"))
	}
	tc.clock.Skip(2 * time.Hour)
	// A create gets no reservation where there is no room for one (it
	// does not wait or fail for it); one the store refuses fails after
	// the ledger took its entry.
	long := strings.Repeat("x", 300)
	if _, err := tc.Create(blob.RootID, long, 0o644, blob.Owner{UID: -1, GID: -1}, true); !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Fatalf("create of a name the store refuses: %v, want ENAMETOOLONG", err)
	}
	_, _, known := tc.ledger.Size(a)
	_, err = tc.store.Lookup(blob.RootID, "a")
	if named := err == nil; known || named {
		t.Fatalf("a: ledger knows it %v, store names it %v; want it evicted from both", known, named)
	}
	if st := tc.Stats(); st.UsedBytes != 3*mib+mib/2 || st.Objects != 1 || tc.exists(long) {
		t.Fatalf("after the failed create: %+v, x present %v", st, tc.exists(long))
	}
}

// TestAuditAdoptsEvictsAndDrops: files added, deleted and resized in the
// store behind kvfs's back are settled by an audit, which evicts what no
// longer fits (its reaping takes directory locks: under -tags lockcheck
// a reap while the audit still held one panics), and leaves the ledger
// charging exactly what the store holds.
func TestAuditAdoptsEvictsAndDrops(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib})
	tc.put("old", 2*mib)
	tc.put("gone", mib)
	sub, _, err := tc.Mkdir(blob.RootID, "sub", 0o755, blob.Owner{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	tc.put("grown", 10)
	tc.clock.Skip(time.Second)
	data := filepath.Join(tc.store.Dir(), blob.DataName)
	if err := os.Remove(filepath.Join(data, "gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "grown"), make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(data, "sub", "new"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "sub", "new", "adopted"), make([]byte, 3*mib), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := tc.Audit()
	if err != nil {
		t.Fatal(err)
	}
	if r.Vanished != 1 || r.Adopted != 1 || r.Resized != 1 {
		t.Errorf("audit %+v, want 1 vanished, 1 adopted, 1 resized", r)
	}
	if tc.exists("gone") || tc.exists("old") {
		t.Errorf("gone (deleted behind kvfs) or old (evicted for the adopted file) is still served")
	}
	if _, _, err := tc.Lookup(sub, "new"); err != nil {
		t.Errorf("the directory made behind kvfs is not served: %v", err)
	}
	if held, charged := tc.storeBytes(), tc.Stats().UsedBytes; held != charged {
		t.Errorf("the store holds %d bytes, the ledger charges %d", held, charged)
	}
}

// TestAuditWalksInBatches: an audit walks a directory larger than a
// walk's batch (and than a page of the index's names) a batch at a time,
// and still settles what changed behind kvfs's back anywhere in it:
// names gone, sizes changed, files added, and new names of indexed files
// in a directory walked before or after the file's own.
func TestAuditWalksInBatches(t *testing.T) {
	// The objects are made in the store before the core opens it (the
	// start adopts them): made through the core, under the race
	// detector, they took 25 s of the suite.
	dir := t.TempDir()
	store, err := blob.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	store.Close()
	const n = 2*4096 + 100
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, blob.DataName, fmt.Sprintf("o%05d", i)), []byte{1}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tc, _ := openCore(t, dir, Config{Capacity: 1 << 30, Grace: 50 * time.Millisecond})
	who := blob.Owner{UID: -1, GID: -1}
	sub, _, err := tc.Mkdir(blob.RootID, "sub", 0o755, who)
	if err != nil {
		t.Fatal(err)
	}
	h, err := tc.Create(sub, "inner", 0o644, who, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write(Interrupt{}, []byte("inner"), 0); err != nil {
		t.Fatal(err)
	}
	h.Flush()
	h.Release()
	data := filepath.Join(tc.store.Dir(), blob.DataName)
	behind := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"o00010", "o04000", "o08290"} {
		behind(os.Remove(filepath.Join(data, name)))
	}
	for _, name := range []string{"o00020", "o06000"} {
		behind(os.WriteFile(filepath.Join(data, name), []byte("five!"), 0o644))
	}
	for _, name := range []string{"new1", "new2", "new3"} {
		behind(os.WriteFile(filepath.Join(data, name), []byte("new"), 0o644))
	}
	behind(os.Link(filepath.Join(data, "o00030"), filepath.Join(data, "sub", "alias")))
	behind(os.Link(filepath.Join(data, "sub", "inner"), filepath.Join(data, "alias2")))
	r, err := tc.Audit()
	if err != nil {
		t.Fatal(err)
	}
	if want := (AuditReport{Vanished: 3, Resized: 2, Adopted: 3, Linked: 2}); r != want {
		t.Errorf("audit %+v, want %+v", r, want)
	}
	if e, _, err := tc.Lookup(sub, "alias"); err != nil || e.ID != tc.lookupID("o00030") {
		t.Errorf("sub/alias, a new name of o00030: %+v, %v", e, err)
	}
	if e, _, err := tc.Lookup(blob.RootID, "alias2"); err != nil || e.ID != h.ID() {
		t.Errorf("alias2, a new name of sub/inner: %+v, %v", e, err)
	}
	if st := tc.Stats(); st.Objects != n-3+1+3 {
		t.Errorf("%d objects, want %d", st.Objects, n-3+1+3)
	}
	if held, charged := tc.storeBytes(), tc.Stats().UsedBytes; held != charged {
		t.Errorf("the store holds %d bytes, the ledger charges %d", held, charged)
	}
}

// TestDoomedNameTakenBeforeReap: an evicted name is out of the index at
// once, but its stored name is unlinked after (reap). A create, link or
// rename to the name in between must unlink the evicted bytes first (or
// its store step fails with EEXIST), and the reap after must leave the
// new object alone. Fails if either side of that ordering is removed.
func TestDoomedNameTakenBeforeReap(t *testing.T) {
	for _, op := range []string{"create", "link", "rename"} {
		t.Run(op, func(t *testing.T) {
			tc := newTestCore(t, Config{Capacity: 4 * mib, WaitLimit: time.Second})
			tc.put("victim", mib)
			tc.put("src", 10)
			tc.put("keep", mib)
			tc.clock.Skip(time.Second)
			var probed error
			testHookReaping = func() {
				testHookReaping = nil
				switch op {
				case "create":
					tc.put("victim", 5)
				case "link":
					id := tc.lookupID("src")
					_, probed = tc.Link(id, blob.RootID, "victim")
				case "rename":
					probed = tc.Rename(blob.RootID, "src", blob.RootID, "victim", 0)
				}
			}
			defer func() { testHookReaping = nil }()
			tc.put("big", 2*mib) // evicts "victim", the coldest
			if probed != nil {
				t.Fatalf("%s to the evicted name before its reap: %v", op, probed)
			}
			want := int64(10)
			if op == "create" {
				want = 5
			}
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(tc.store.Dir(), blob.DataName, "victim"), &st); err != nil || st.Size != want {
				t.Fatalf("the store's victim after the reap: %v, size %d, want the new object of %d bytes", err, st.Size, want)
			}
			if e, a, err := tc.Lookup(blob.RootID, "victim"); err != nil || a.Size != want {
				t.Fatalf("lookup of the new victim: %v %+v %v", e, a.Size, err)
			}
			if held, charged := tc.storeBytes(), tc.Stats().UsedBytes; held != charged {
				t.Errorf("the store holds %d bytes, the ledger charges %d", held, charged)
			}
		})
	}
}

// TestUnlinkOfEvictedNameBeforeReap: an unlink of a name an eviction has
// just dropped from the index, before the eviction unlinked the stored
// name, succeeds and removes the stored name itself: once the client is
// told the name is gone, a crash (a start from what the store holds)
// cannot bring the object back.
func TestUnlinkOfEvictedNameBeforeReap(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib, WaitLimit: time.Second})
	tc.put("victim", mib)
	tc.put("small", 10)
	tc.put("keep", mib)
	tc.clock.Skip(time.Second)
	stored := filepath.Join(tc.store.Dir(), blob.DataName, "victim")
	var unlinked error
	var called, left bool
	testHookReaping = func() {
		testHookReaping = nil
		called = true
		unlinked = tc.Unlink(blob.RootID, "victim")
		_, err := os.Lstat(stored)
		left = err == nil
	}
	defer func() { testHookReaping = nil }()
	tc.put("big", 2*mib) // evicts "victim", the coldest
	if !called {
		t.Fatal("no eviction dropped a name")
	}
	if unlinked != nil {
		t.Fatalf("unlink of the evicted name before its reap: %v", unlinked)
	}
	if left {
		t.Fatal("the unlink of the evicted name answered, and its stored name was still there: a crash now would serve it again")
	}
	if held, charged := tc.storeBytes(), tc.Stats().UsedBytes; held != charged {
		t.Errorf("the store holds %d bytes, the ledger charges %d", held, charged)
	}
}

// lookupID is the ID a name in the root has.
func (tc *testCore) lookupID(name string) blob.ID {
	tc.t.Helper()
	e, _, err := tc.Lookup(blob.RootID, name)
	if err != nil {
		tc.t.Fatalf("lookup %s: %v", name, err)
	}
	return e.ID
}

// TestAuditLoopSpacedOut: the periodic audit waits AuditInterval after
// a short audit, and auditSpacing times as long as one that took long
// (here every reading of the clock is a minute later, so each audit
// takes a minute or more).
func TestAuditLoopSpacedOut(t *testing.T) {
	store, err := blob.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Unix(1e9, 0)
	waits := make(chan time.Duration, 4)
	fire := make(chan time.Time, 1)
	cfg := Config{
		Capacity:      64 * mib,
		AuditInterval: 10 * time.Second,
		Now: func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			now = now.Add(time.Minute)
			return now
		},
		After: func(d time.Duration) <-chan time.Time {
			if d < 10*time.Second { // the record loop's second
				return make(chan time.Time)
			}
			waits <- d
			return fire
		},
	}
	c, _, err := Open(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Start(func(Drop) {})
	defer c.Close()
	if d := <-waits; d != 10*time.Second {
		t.Fatalf("first wait %v, want the interval", d)
	}
	fire <- time.Time{}
	if d := <-waits; d < auditSpacing*time.Minute {
		t.Fatalf("wait after an audit of a minute or more: %v, want at least %v", d, auditSpacing*time.Minute)
	}
}

// TestLinkFromMovingName: a link whose source name is renamed in its
// own directory between the plan and the link(2), every time it plans
// without that directory's lock, still links: it plans again holding
// the source directory's lock, which keeps the name where it is. (The
// race TestConcurrentCore met under -race: link y/c failed with ENOENT
// after three unlocked retries.)
func TestLinkFromMovingName(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 8 * mib})
	owner := blob.Owner{UID: -1, GID: -1}
	x, _, err := tc.Mkdir(blob.RootID, "x", 0o755, owner)
	if err != nil {
		t.Fatal(err)
	}
	y, _, err := tc.Mkdir(blob.RootID, "y", 0o755, owner)
	if err != nil {
		t.Fatal(err)
	}
	h, err := tc.Create(x, "a0", 0o644, owner, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write(Interrupt{}, make([]byte, kib), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(); err != nil {
		t.Fatal(err)
	}
	h.Release()
	e, _, err := tc.Lookup(x, "a0")
	if err != nil {
		t.Fatal(err)
	}
	moves := 0
	testHookLinkPlanned = func() {
		// Another client's rename, which takes x's lock: the link holds
		// only y's here.
		done := make(chan error)
		go func() { done <- tc.Rename(x, fmt.Sprintf("a%d", moves), x, fmt.Sprintf("a%d", moves+1), 0) }()
		if err := <-done; err != nil {
			t.Errorf("rename under the link: %v", err)
		}
		moves++
	}
	defer func() { testHookLinkPlanned = nil }()
	a, err := tc.Link(e.ID, y, "c")
	if err != nil {
		t.Fatalf("link while its source moved %d times: %v", moves, err)
	}
	if moves == 0 || a.Links != 2 {
		t.Fatalf("after %d moves: %d links, want 2", moves, a.Links)
	}
	if got, _, err := tc.Lookup(y, "c"); err != nil || got.ID != e.ID {
		t.Fatalf("y/c: %+v, %v; want object %d", got, err, e.ID)
	}
	if err := tc.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestAuditSaysWhyAnOversizedFileGoes: a file put in the store behind
// kvfs's back that is larger than the whole capacity is removed at once,
// and a warning names it (before, only a debug line did: an outside
// tester's 2 MiB file vanished from a 1 MiB cache without a trace).
func TestAuditSaysWhyAnOversizedFileGoes(t *testing.T) {
	seen, logs := observer.New(zap.WarnLevel)
	tc := newTestCore(t, Config{Capacity: mib, Logger: zap.New(seen)})
	tc.put("kept", 100*kib)
	big := filepath.Join(tc.store.Dir(), blob.DataName, "big")
	if err := os.WriteFile(big, make([]byte, 2*mib), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Audit(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(big); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the oversized file is still in the store: %v", err)
	}
	if !tc.exists("kept") {
		t.Error("the oversized file evicted another object")
	}
	found := logs.FilterMessageSnippet("larger than the capacity").All()
	if len(found) != 1 || found[0].ContextMap()["path"] != "big" {
		t.Errorf("warnings %v, want one naming big", logs.All())
	}
}

// TestAuditHardLinkInPlaceOfAName: a stored name replaced behind kvfs's
// back by a hard link to another object becomes that object's second
// name, charged once; the object the name held is gone. Before, the
// audit took the link for the first object resized, and charged the one
// inode twice, which the checkpoint then kept across restarts (an
// outside tester's finding).
func TestAuditHardLinkInPlaceOfAName(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib})
	a := tc.put("a", 100000)
	tc.put("c", 10000)
	data := filepath.Join(tc.store.Dir(), blob.DataName)
	if err := os.Remove(filepath.Join(data, "c")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(data, "a"), filepath.Join(data, "c")); err != nil {
		t.Fatal(err)
	}
	r, err := tc.Audit()
	if err != nil {
		t.Fatal(err)
	}
	if r.Vanished != 1 || r.Linked != 1 || r.Resized != 0 {
		t.Errorf("audit %+v, want c's old object vanished and c linked to a", r)
	}
	if id := tc.lookupID("c"); id != a {
		t.Errorf("c is object %d, want a's %d", id, a)
	}
	if st := tc.Stats(); st.Objects != 1 || st.UsedBytes != ledger.Charge(100000) {
		t.Errorf("after the audit: %d objects, %d bytes used; want 1 and %d", st.Objects, st.UsedBytes, ledger.Charge(100000))
	}
	if got := tc.storeBytes(); got != tc.Stats().UsedBytes {
		t.Errorf("the store holds %d bytes, the ledger %d", got, tc.Stats().UsedBytes)
	}
}

// TestGrownPastTheCapacityGoesAlone: an object whose stored file grew
// behind kvfs's back past the whole capacity goes alone, as a file put
// in the store that large does; the others stay. Evicting toward its
// size took every other object first, then it (an outside tester: a
// 40 MB append to one object's stored file emptied a 32 MiB cache).
func TestGrownPastTheCapacityGoesAlone(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 8 * mib, Grace: time.Hour})
	for i := range 6 {
		tc.put(fmt.Sprintf("o%d", i), mib)
	}
	victim := tc.put("victim", 4096)
	path, _ := tc.BackingPath(victim)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 10*mib)) // behind kvfs's back
	f.Close()
	if _, err := tc.Getattr(victim, nil); !errors.Is(err, ErrStale) && !errors.Is(err, ErrNotFound) {
		t.Errorf("getattr of the object grown past the capacity: %v, want it gone", err)
	}
	if tc.exists("victim") {
		t.Error("the object grown past the capacity is still served")
	}
	for i := range 6 {
		if !tc.exists(fmt.Sprintf("o%d", i)) {
			t.Errorf("o%d was evicted for an object that could never fit", i)
		}
	}
	if st := tc.Stats(); st.UsedBytes != 6*mib || st.Objects != 6 || st.Evictions != 0 {
		t.Errorf("after: %+v; want the six others, nothing evicted", st)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stored file of the removed object: %v, want it deleted", err)
	}
}
