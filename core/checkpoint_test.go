package core

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/internal/usage"
)

// openCore opens a Core over the store in dir, not started.
func openCore(t *testing.T, dir string, cfg Config) (*testCore, LoadReport) {
	t.Helper()
	store, err := blob.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCore{t: t, clock: &testClock{}}
	cfg.Now = tc.clock.Now
	c, rep, err := Open(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc.Core = c
	return tc, rep
}

// crash leaves the store as a killed daemon does: no checkpoint at the
// stop, handles left open; only the store's lock goes with the process.
func (tc *testCore) crash() { tc.store.Close() }

// crashVetted is crash, with what a dead daemon's guard does with the
// closes its writers recorded (blob.VetClosed): no process held them as
// it died, just after them.
func (tc *testCore) crashVetted() {
	dir := tc.store.Dir()
	tc.crash()
	blob.VetClosed(filepath.Join(dir, blob.WritingName), func(blob.ID) bool { return false }, 0)
}

// stored is what the store holds for objects: each inode under data/
// once, charged as the ledger charges it.
func stored(t *testing.T, dir string) int64 {
	t.Helper()
	n, err := usage.Charged(filepath.Join(dir, blob.DataName))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCheckpointThenCrash: a crash after a checkpoint and more changes
// (stores, a delete, an object rewritten in place, a write left open)
// starts from the checkpoint, stat'ing only what changed, never serves
// the half-written object, and once the start-up audit has run the
// ledger holds exactly what the store does.
func TestCheckpointThenCrash(t *testing.T) {
	dir := t.TempDir()
	tc, _ := openCore(t, dir, Config{Capacity: 64 * mib, Grace: time.Millisecond})
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		tc.put(name, 100*kib)
	}
	if err := tc.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	tc.put("after", 200*kib)
	if err := tc.Unlink(blob.RootID, "b"); err != nil {
		t.Fatal(err)
	}
	e, _, err := tc.Lookup(blob.RootID, "c")
	if err != nil {
		t.Fatal(err)
	}
	h, err := tc.Open(e.ID, os.O_RDWR, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write(Interrupt{}, make([]byte, 3*mib), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(); err != nil {
		t.Fatal(err)
	}
	h.Release()
	open, err := tc.Create(blob.RootID, "open", 0o644, blob.Owner{UID: -1, GID: -1}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open.Write(Interrupt{}, make([]byte, mib), 0); err != nil {
		t.Fatal(err)
	}
	tc.crash()

	tc, rep := openCore(t, dir, Config{Capacity: 64 * mib})
	defer tc.Close()
	t.Logf("start after the crash: %+v", rep)
	if !rep.FromSnapshot || rep.Incomplete != 1 || rep.Objects != 5 || rep.Stated != 1 {
		t.Fatalf("start %+v: want 5 objects from the checkpoint, \"after\" stat'ed, \"open\" reclaimed", rep)
	}
	if tc.exists("open") || tc.exists("b") || !tc.exists("after") {
		t.Fatal("served the wrong names")
	}
	// c's new size is served at once; the ledger learns it from the audit.
	e, a, err := tc.Lookup(blob.RootID, "c")
	if err != nil || a.Size != 3*mib {
		t.Fatalf("lookup of c: %v, size %d", err, a.Size)
	}
	if r, err := tc.Audit(); err != nil || r.Vanished+r.Adopted+r.Linked != 0 {
		t.Fatalf("start-up audit: %+v, %v", r, err)
	}
	if got, want := tc.Stats().UsedBytes, stored(t, dir); got != want {
		t.Fatalf("used %d after the audit, the store holds %d", got, want)
	}
	if size, _, _ := tc.ledger.Size(e.ID); size != 3*mib {
		t.Fatalf("ledger size of c %d", size)
	}
	if err := tc.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestReadsCallForCheckpoint: reads alone change the LRU order a crash
// keeps, so once their uses are recorded the checkpoint is behind and
// the loop writes one. Five objects fill a cache; a and b, the oldest,
// are read; after that checkpoint and a crash, a store that must evict
// takes c, the oldest unread, not a (before, nothing but a change of
// the store called for a checkpoint, and the one on disk had the order
// before the reads).
func TestReadsCallForCheckpoint(t *testing.T) {
	dir := t.TempDir()
	tc, _ := openCore(t, dir, Config{Capacity: 5 * mib, Grace: time.Millisecond})
	tc.Start(func(Drop) {})
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		tc.put(name, mib)
	}
	if err := tc.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if tc.behind() {
		t.Fatal("behind right after a checkpoint")
	}
	tc.clock.Skip(time.Second)
	for _, name := range []string{"a", "b"} {
		h, err := tc.Open(tc.lookupID(name), os.O_RDONLY, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	tc.clock.Skip(2 * time.Second)
	tc.recordUses()
	if !tc.behind() {
		t.Fatal("the reads' uses are recorded and the checkpoint is not behind")
	}
	if err := tc.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	tc.crash()
	tc, _ = openCore(t, dir, Config{Capacity: 5 * mib, Grace: time.Millisecond})
	tc.Start(func(Drop) {})
	defer tc.Close()
	tc.put("new", mib)
	if !tc.exists("a") || !tc.exists("b") || tc.exists("c") {
		t.Fatalf("after the crash, a store evicted: a %v, b %v, c %v kept; want a and b kept, c evicted", tc.exists("a"), tc.exists("b"), tc.exists("c"))
	}
}

// TestCheckpointLoop: the background loop writes a checkpoint once the
// store changed. Its waits are the test's ticks: a tick is taken only
// when the loop waits again, so the one after the change returns once
// that change's checkpoint is written.
func TestCheckpointLoop(t *testing.T) {
	const interval = 7 * time.Hour // no other loop waits this long
	ticks := make(chan time.Time)
	tc := newTestCore(t, Config{Capacity: 64 * mib, CheckpointInterval: interval,
		After: func(d time.Duration) <-chan time.Time {
			if d >= interval || d == checkpointSoon {
				return ticks
			}
			return time.After(d)
		}})
	path := filepath.Join(tc.store.Dir(), blob.CheckpointName)
	// Current first, while the loop waits for its first tick: a fresh
	// store starts behind, and a tick now would have the loop write a
	// checkpoint while the put below runs, which may take the put in.
	if err := tc.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if tc.behind() {
		t.Fatal("a checkpoint just written is behind")
	}
	tc.put("x", 10*kib)
	if !tc.behind() {
		t.Fatal("a change left the checkpoint current")
	}
	ticks <- time.Time{} // the loop sees the change
	ticks <- time.Time{} // and waits again: its checkpoint is written
	if tc.behind() {
		t.Fatal("the loop woke after a change and wrote no checkpoint")
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("the loop caught up but wrote no checkpoint: %v", err)
	}
	if st.Size() == 0 {
		t.Fatal("empty checkpoint")
	}
}

// TestCrashMidEvictionTakesEveryName: an eviction unlinks a victim's
// stored names one by one; a crash between two of them (the store copied
// as it stands then, hard links kept) must not leave the object served
// under the names that were left, nor charged twice or lost from the
// ledger: the next start deletes it whole.
func TestCrashMidEvictionTakesEveryName(t *testing.T) {
	dir := t.TempDir()
	tc, _ := openCore(t, dir, Config{Capacity: 4 * mib, Grace: time.Millisecond})
	tc.Start(func(Drop) {})
	names := []string{"victim", "second", "third"}
	id := tc.put(names[0], mib)
	for _, n := range names[1:] {
		if _, err := tc.Link(id, blob.RootID, n); err != nil {
			t.Fatal(err)
		}
	}
	tc.put("keep", mib+4*kib)
	tc.clock.Skip(time.Second)
	snap := filepath.Join(t.TempDir(), "store")
	reaped := 0
	testHookReapedName = func() {
		if reaped++; reaped == 1 {
			if out, err := exec.Command("cp", "-a", dir, snap).CombinedOutput(); err != nil {
				t.Errorf("copying the store: %v: %s", err, out)
			}
		}
	}
	defer func() { testHookReapedName = nil }()
	tc.put("big", 2*mib)
	testHookReapedName = nil
	if reaped != len(names) {
		t.Fatalf("the eviction reaped %d names, want the victim's %d", reaped, len(names))
	}
	if tc.markers() != 0 {
		t.Fatalf("%d markers left after the eviction", tc.markers())
	}
	tc.Close()

	tc, rep := openCore(t, snap, Config{Capacity: 4 * mib})
	defer tc.Close()
	t.Logf("start after the crash: %+v", rep)
	for _, n := range names {
		if tc.exists(n) {
			t.Errorf("%s is served after a crash half-way through its object's eviction", n)
		}
	}
	// "big", whose growth evicted the victim, was still being written.
	if !tc.exists("keep") || tc.exists("big") {
		t.Error("want keep served, and big (being written at the copy) reclaimed")
	}
	if rep.Incomplete != 2 {
		t.Errorf("start reclaimed %d marked objects, want the victim and big", rep.Incomplete)
	}
	if got, want := tc.Stats().UsedBytes, stored(t, snap); got != want || got != mib+4*kib {
		t.Errorf("used %d, the store holds %d; want keep's 1 MiB 4 KiB", got, want)
	}
}

// TestCheckpointUnderStoresIsReadable: a checkpoint taken while clients
// create objects is one a start can read. The capture's first step
// records the next ID to hand out and the LRU order; an object created
// between the two (its ID handed out without the namespace lock) and
// named by the time a later step copies it had an ID past the recorded
// one, and the start refused the whole checkpoint ("bad object") and
// walked the store: under a steady store load, nearly every crash start.
func TestCheckpointUnderStoresIsReadable(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 1 << 40})
	dir := tc.store.Dir()
	// Directories: the first step reads each one's change time between
	// the two, which leaves creates the time to slip in.
	var dirs []blob.ID
	for i := range 50 {
		id, _, err := tc.Mkdir(blob.RootID, fmt.Sprintf("d%d", i), 0o755, nobody)
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, id)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	for w := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				h, err := tc.Create(dirs[i%len(dirs)], fmt.Sprintf("w%d-%d", w, i), 0o644, nobody, true)
				if err == nil {
					h.Flush()
					h.Release()
				}
			}
		}()
	}
	defer func() {
		close(stop)
		for range 4 {
			<-done
		}
	}()
	for i := range 50 {
		if err := tc.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, blob.CheckpointName))
		if err != nil {
			t.Fatal(err)
		}
		s, err := blob.OpenBorrowed(dir)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = s.LoadHandover(data)
		s.Close()
		if err != nil {
			t.Fatalf("checkpoint %d, taken while objects were created, cannot be read: %v", i, err)
		}
	}
}

// TestCheckpointSoonAfterCrash: a start after a crash, which had no
// checkpoint to start from, writes its first one checkpointSoon after
// it, not a whole interval later (a daemon crashing again within the
// interval left none, and every start of a crash loop listed the whole
// store again: an outside tester), which the next crash's start uses.
func TestCheckpointSoonAfterCrash(t *testing.T) {
	const interval = 7 * time.Hour
	dir := t.TempDir()
	first, _ := openCore(t, dir, Config{Capacity: 64 * mib})
	first.Start(func(Drop) {})
	first.put("x", 10*kib)
	first.crash()
	waits := make(chan time.Duration, 4)
	ticks := make(chan time.Time)
	after := func(d time.Duration) <-chan time.Time {
		if d >= interval || d == checkpointSoon {
			waits <- d
			return ticks
		}
		return time.After(d)
	}
	tc, rep := openCore(t, dir, Config{Capacity: 64 * mib, CheckpointInterval: interval, After: after})
	if rep.FromSnapshot {
		t.Fatal("the crashed store started from a checkpoint: the test needs one that did not")
	}
	tc.Start(func(Drop) {})
	if d := <-waits; d != checkpointSoon {
		t.Fatalf("the first wait after a crash start is %v, want %v", d, checkpointSoon)
	}
	ticks <- time.Time{}
	if d := <-waits; d != interval {
		t.Fatalf("the wait after the first checkpoint is %v, want the interval", d)
	}
	if tc.behind() {
		t.Fatal("the first checkpoint after the crash start was not written")
	}
	tc.crash()
	again, rep := openCore(t, dir, Config{Capacity: 64 * mib})
	defer again.Close()
	if !rep.FromSnapshot {
		t.Fatal("a second crash, after that checkpoint, did not start from it")
	}
}
