package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const blk = BlockSize

// ID is what the tests key the ledger by; kvfs uses blob.ID.
type ID = uint64

// release closes a handle and reports whether the inode was released.
func release(l *Ledger[ID], id ID, write bool) bool {
	released, _ := l.Close(id, write)
	return released
}

// touch marks id most recently used, as an open and close do.
func touch(l *Ledger[ID], id ID) {
	if l.Open(id, false) == nil {
		release(l, id, false)
	}
}

// fakeClock is an injectable Config.Now; atomic so that the concurrency
// test may read it while another goroutine advances it.
type fakeClock struct{ ns atomic.Int64 }

func newClock() *fakeClock {
	c := &fakeClock{}
	// Not the Unix epoch: lastClose == 0 means "never closed".
	c.ns.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

const testGrace = 100 * time.Millisecond

func newTest(t testing.TB, capacity int64) (*Ledger[ID], *fakeClock) {
	t.Helper()
	c := newClock()
	l := New[ID](Config{Capacity: capacity, Grace: testGrace, Now: c.Now})
	mustOK(t, l)
	return l, c
}

func mustOK(t testing.TB, l *Ledger[ID]) {
	t.Helper()
	if err := l.CheckInvariants(); err != nil {
		t.Fatalf("invariants: %v", err)
	}
}

// put creates id with the given size and closes it, then lets the grace
// period pass so that it is evictable.
func put(t *testing.T, l *Ledger[ID], c *fakeClock, id ID, size int64) {
	t.Helper()
	if err := l.Create(id, true); err != nil {
		t.Fatalf("Create(%d): %v", id, err)
	}
	mustOK(t, l)
	if v, err := l.Grow(id, size); err != nil || len(v) != 0 {
		t.Fatalf("Grow(%d, %d) = %v, %v", id, size, v, err)
	}
	mustOK(t, l)
	if release(l, id, true) {
		t.Fatalf("Close(%d) released a linked inode", id)
	}
	mustOK(t, l)
	c.Advance(testGrace + time.Millisecond)
}

func ids(v []Victim[ID]) []ID {
	out := make([]ID, 0, len(v))
	for _, x := range v {
		out = append(out, x.ID)
	}
	return out
}

func sameIDs(a, b []ID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func wantStats(t *testing.T, l *Ledger[ID], want Stats) {
	t.Helper()
	if got := l.Stats(); got != want {
		t.Fatalf("stats\n got %+v\nwant %+v", got, want)
	}
}

func TestCharge(t *testing.T) {
	for _, tc := range []struct{ size, want int64 }{
		{-1, 0},
		{0, 0},
		{1, blk},
		{blk - 1, blk},
		{blk, blk},
		{blk + 1, 2 * blk},
		{10 * blk, 10 * blk},
		{1 << 40, 1 << 40},
		{math.MaxInt64 - (blk - 1), math.MaxInt64 - (blk - 1)},
		// Rounding up would overflow: saturate rather than go negative.
		{math.MaxInt64 - (blk - 2), math.MaxInt64},
		{math.MaxInt64, math.MaxInt64},
	} {
		if got := Charge(tc.size); got != tc.want {
			t.Errorf("Charge(%d) = %d, want %d", tc.size, got, tc.want)
		}
	}
}

func TestHugeSizeRefused(t *testing.T) {
	l, _ := newTest(t, 256*blk)
	if err := l.Create(1, true); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - blk, 1 << 62} {
		if _, err := l.Grow(1, size); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Grow(%d) = %v, want ErrTooLarge", size, err)
		}
		mustOK(t, l)
		if _, err := l.SetSize(1, size); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("SetSize(%d) = %v, want ErrTooLarge", size, err)
		}
		mustOK(t, l)
	}
	if st := l.Stats(); st.UsedBytes != 0 || st.AdmissionFailures != 0 {
		t.Fatalf("stats after refusals: %+v", st)
	}
	if v, err := l.Restore(2, math.MaxInt64, 1); err != nil || len(v) != 1 || v[0].ID != 2 {
		t.Fatalf("Restore(huge) = %v, %v", v, err)
	}
	mustOK(t, l)
}

func TestPins(t *testing.T) {
	l, _ := newTest(t, 16*blk)
	if err := l.Create(1, true); err != nil {
		t.Fatal(err)
	}
	mustOK(t, l)
	if err := l.Create(1, false); !errors.Is(err, ErrExists) {
		t.Fatalf("second Create = %v, want ErrExists", err)
	}
	mustOK(t, l)
	wantStats(t, l, Stats{CapacityBytes: 16 * blk, Objects: 1, PinnedObjects: 1})
	if _, err := l.Grow(1, 5000); err != nil {
		t.Fatal(err)
	}
	mustOK(t, l)
	wantStats(t, l, Stats{CapacityBytes: 16 * blk, UsedBytes: 2 * blk, Objects: 1, PinnedObjects: 1, PinnedBytes: 2 * blk})

	steps := []struct {
		name        string
		do          func() bool
		writers     int
		pinnedObjs  int64
		pinnedBytes int64
	}{
		{"open read", func() bool { return l.Open(1, false) == nil }, 1, 1, 2 * blk},
		{"open write", func() bool { return l.Open(1, true) == nil }, 2, 1, 2 * blk},
		{"close write", func() bool { return !release(l, 1, true) }, 1, 1, 2 * blk},
		{"close write", func() bool { return !release(l, 1, true) }, 0, 1, 2 * blk},
		{"close read", func() bool { return !release(l, 1, false) }, 0, 0, 0},
		{"close unpinned", func() bool { return !release(l, 1, false) }, 0, 0, 0},
		{"close unpinned write", func() bool { return !release(l, 1, true) }, 0, 0, 0},
		{"open after close", func() bool { return l.Open(1, false) == nil }, 0, 1, 2 * blk},
		{"grow pinned", func() bool { _, err := l.Grow(1, 3*blk); return err == nil }, 0, 1, 3 * blk},
		{"close again", func() bool { return !release(l, 1, false) }, 0, 0, 0},
	}
	for _, s := range steps {
		if !s.do() {
			t.Fatalf("%s: unexpected result", s.name)
		}
		mustOK(t, l)
		st := l.Stats()
		if l.Writers(1) != s.writers || st.PinnedObjects != s.pinnedObjs || st.PinnedBytes != s.pinnedBytes {
			t.Fatalf("%s: writers %d pinned %d/%d, want %d %d/%d", s.name,
				l.Writers(1), st.PinnedObjects, st.PinnedBytes, s.writers, s.pinnedObjs, s.pinnedBytes)
		}
	}
	if err := l.Open(2, false); !errors.Is(err, ErrGone) {
		t.Fatalf("Open(unknown) = %v, want ErrGone", err)
	}
	mustOK(t, l)
}

func TestGrowAndSetSize(t *testing.T) {
	l, _ := newTest(t, 16*blk)
	if err := l.Create(1, true); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		op         string
		arg        int64
		size, used int64
	}{
		{"grow", 1, 1, blk},
		{"grow", 4096, 4096, blk},
		{"grow", 4097, 4097, 2 * blk},
		{"grow", 100, 4097, 2 * blk}, // out-of-order write: never shrinks
		{"grow", 0, 4097, 2 * blk},
		{"set", 100, 100, blk},
		{"set", 0, 0, 0},
		{"set", 3*blk + 1, 3*blk + 1, 4 * blk},
		{"grow", 3 * blk, 3*blk + 1, 4 * blk},
		{"set", 16 * blk, 16 * blk, 16 * blk},
		{"set", 2 * blk, 2 * blk, 2 * blk},
	} {
		var err error
		if s.op == "grow" {
			_, err = l.Grow(1, s.arg)
		} else {
			_, err = l.SetSize(1, s.arg)
		}
		if err != nil {
			t.Fatalf("%s(%d): %v", s.op, s.arg, err)
		}
		mustOK(t, l)
		size, charge, ok := l.Size(1)
		if !ok || size != s.size || charge != Charge(s.size) || l.Stats().UsedBytes != s.used {
			t.Fatalf("%s(%d): size %d charge %d used %d, want size %d used %d",
				s.op, s.arg, size, charge, l.Stats().UsedBytes, s.size, s.used)
		}
	}
}

func TestTooLarge(t *testing.T) {
	l, _ := newTest(t, 4*blk)
	if err := l.Create(1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Grow(1, 2*blk); err != nil {
		t.Fatal(err)
	}
	for i, f := range []func() ([]Victim[ID], error){
		func() ([]Victim[ID], error) { return l.Grow(1, 4*blk+1) },
		func() ([]Victim[ID], error) { return l.SetSize(1, 5*blk) },
		func() ([]Victim[ID], error) { return l.Grow(1, 1<<40) },
	} {
		v, err := f()
		if !errors.Is(err, ErrTooLarge) || v != nil {
			t.Fatalf("case %d: %v, %v; want ErrTooLarge", i, v, err)
		}
		mustOK(t, l)
		if size, _, _ := l.Size(1); size != 2*blk {
			t.Fatalf("case %d: size changed to %d", i, size)
		}
		// A refusal is not an ENOSPC answered: the caller counts those.
		if got := l.Stats().AdmissionFailures; got != 0 {
			t.Fatalf("case %d: admission_failures %d", i, got)
		}
	}
	// Exactly the capacity fits.
	if _, err := l.Grow(1, 4*blk); err != nil {
		t.Fatalf("Grow to capacity: %v", err)
	}
	mustOK(t, l)
	// Too large on restore: the object itself is the victim, uncharged.
	v, err := l.Restore(2, 4*blk+1, 1)
	if err != nil || len(v) != 1 || v[0].ID != 2 || v[0].Charge != 0 {
		t.Fatalf("Restore(too large) = %v, %v", v, err)
	}
	mustOK(t, l)
	if _, _, ok := l.Size(2); ok {
		t.Fatal("too-large restore was admitted")
	}
}

func TestEvictLRUOrder(t *testing.T) {
	l, c := newTest(t, 4*blk)
	for id := ID(1); id <= 4; id++ {
		put(t, l, c, id, blk)
	}
	// LRU: 1 2 3 4. Opening and closing 1 makes it most recent.
	if err := l.Open(1, false); err != nil {
		t.Fatal(err)
	}
	mustOK(t, l)
	release(l, 1, false)
	mustOK(t, l)
	c.Advance(testGrace + time.Millisecond)
	// LRU: 2 3 4 1. Touch 2 too.
	touch(l, 2)
	mustOK(t, l)
	// LRU: 3 4 1 2.
	if err := l.Create(5, true); err != nil {
		t.Fatal(err)
	}
	v, err := l.Grow(5, blk)
	if err != nil || !sameIDs(ids(v), []ID{3}) || v[0].Charge != blk {
		t.Fatalf("Grow(5) victims %v, %v; want [3]", v, err)
	}
	mustOK(t, l)
	// Open (pinned) 4: skipped; next coldest are 1 then 2.
	if err := l.Open(4, false); err != nil {
		t.Fatal(err)
	}
	v, err = l.Grow(5, 3*blk)
	if err != nil || !sameIDs(ids(v), []ID{1, 2}) {
		t.Fatalf("Grow(5, 3 blocks) victims %v, %v; want [1 2]", v, err)
	}
	mustOK(t, l)
	wantStats(t, l, Stats{
		CapacityBytes: 4 * blk, UsedBytes: 4 * blk, Objects: 2,
		PinnedObjects: 2, PinnedBytes: 4 * blk,
		Evictions: 3, EvictedBytes: 3 * blk,
	})
	for _, id := range []ID{1, 2, 3} {
		if _, _, ok := l.Size(id); ok {
			t.Fatalf("victim %d still present", id)
		}
		if err := l.Open(id, false); !errors.Is(err, ErrGone) {
			t.Fatalf("Open(victim %d) = %v, want ErrGone", id, err)
		}
	}
}

func TestPinnedAndGraceNotEvicted(t *testing.T) {
	l, c := newTest(t, 3*blk)
	// 1: read-pinned; 2: write-pinned; 3: closed just now.
	put(t, l, c, 1, blk)
	if err := l.Open(1, false); err != nil {
		t.Fatal(err)
	}
	if err := l.Create(2, true); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Grow(2, blk); err != nil {
		t.Fatal(err)
	}
	if err := l.Create(3, true); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Grow(3, blk); err != nil {
		t.Fatal(err)
	}
	release(l, 3, true)
	mustOK(t, l)
	if err := l.Create(4, true); err != nil {
		t.Fatal(err)
	}
	before := l.Stats()
	c.Advance(testGrace - time.Millisecond)
	v, err := l.Grow(4, 1)
	if !errors.Is(err, ErrNoSpace) || v != nil {
		t.Fatalf("within grace: %v, %v; want ErrNoSpace", v, err)
	}
	mustOK(t, l)
	if hint := l.WaitHint(blk); hint <= 0 {
		t.Fatalf("WaitHint with grace-held space = %v, want > 0", hint)
	}
	after := l.Stats()
	if after != before {
		t.Fatalf("refusal changed stats\n got %+v\nwant %+v", after, before)
	}
	c.Advance(2 * time.Millisecond) // now past the grace period
	v, err = l.Grow(4, 1)
	if err != nil || !sameIDs(ids(v), []ID{3}) {
		t.Fatalf("after grace: %v, %v; want victim 3", v, err)
	}
	mustOK(t, l)
}

func TestNoSpaceEvictsNothing(t *testing.T) {
	l, c := newTest(t, 4*blk)
	put(t, l, c, 1, blk)
	put(t, l, c, 2, blk)
	if err := l.Create(3, true); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Grow(3, 2*blk); err != nil {
		t.Fatal(err)
	}
	mustOK(t, l)
	if err := l.Create(4, true); err != nil {
		t.Fatal(err)
	}
	before := l.Stats()
	// 3 blocks needed, only 2 evictable: nothing may be evicted.
	for _, f := range []func() ([]Victim[ID], error){
		func() ([]Victim[ID], error) { return l.Grow(4, 3*blk) },
		func() ([]Victim[ID], error) { return l.SetSize(4, 3*blk) },
		func() ([]Victim[ID], error) { return l.SetSize(4, 4*blk) },
	} {
		v, err := f()
		if !errors.Is(err, ErrNoSpace) || v != nil {
			t.Fatalf("got %v, %v; want nil, ErrNoSpace", v, err)
		}
		mustOK(t, l)
	}
	after := l.Stats()
	if after.Evictions != before.Evictions || after.EvictedBytes != before.EvictedBytes ||
		after.UsedBytes != before.UsedBytes || after.Objects != before.Objects ||
		after.AdmissionFailures != before.AdmissionFailures {
		t.Fatalf("refusals changed stats\nbefore %+v\n after %+v", before, after)
	}
	for _, id := range []ID{1, 2} {
		if _, _, ok := l.Size(id); !ok {
			t.Fatalf("%d lost by a refused admission", id)
		}
	}
	// Writers hold the rest: retrying cannot help.
	if hint := l.WaitHint(3 * blk); hint != 0 {
		t.Fatalf("WaitHint = %v, want 0", hint)
	}
}

func TestLinkCountsOnce(t *testing.T) {
	l, _ := newTest(t, 16*blk)
	if err := l.Create(1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Grow(1, 10000); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := l.Link(1); err != nil {
			t.Fatal(err)
		}
		mustOK(t, l)
	}
	if err := l.Link(2); !errors.Is(err, ErrGone) {
		t.Fatalf("Link(unknown) = %v", err)
	}
	release(l, 1, true)
	mustOK(t, l)
	wantStats(t, l, Stats{CapacityBytes: 16 * blk, UsedBytes: 3 * blk, Objects: 1})
	for i := 0; i < 3; i++ {
		if l.Unlink(1) {
			t.Fatalf("Unlink %d of 4 released", i+1)
		}
		mustOK(t, l)
		if got := l.Stats().UsedBytes; got != 3*blk {
			t.Fatalf("used %d after unlink %d", got, i+1)
		}
	}
	if !l.Unlink(1) {
		t.Fatal("last Unlink of a closed inode did not release")
	}
	mustOK(t, l)
	if l.Unlink(1) {
		t.Fatal("Unlink after release released again")
	}
	wantStats(t, l, Stats{CapacityBytes: 16 * blk})
}

func TestShadowBytes(t *testing.T) {
	l, _ := newTest(t, 16*blk)
	if err := l.Create(1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Grow(1, 2*blk); err != nil {
		t.Fatal(err)
	}
	if err := l.Open(1, false); err != nil {
		t.Fatal(err)
	}
	if l.Unlink(1) {
		t.Fatal("Unlink of an open inode released it")
	}
	mustOK(t, l)
	wantStats(t, l, Stats{CapacityBytes: 16 * blk, UsedBytes: 2 * blk, Objects: 1,
		PinnedObjects: 1, PinnedBytes: 2 * blk, ShadowBytes: 2 * blk})
	if l.Unlink(1) { // no names left: harmless
		t.Fatal("second Unlink released")
	}
	mustOK(t, l)
	// A write through the open handle grows the shadow too.
	if _, err := l.Grow(1, 3*blk); err != nil {
		t.Fatal(err)
	}
	mustOK(t, l)
	if st := l.Stats(); st.ShadowBytes != 3*blk || st.UsedBytes != 3*blk {
		t.Fatalf("after grow: %+v", st)
	}
	if release(l, 1, true) {
		t.Fatal("Close with a handle left released")
	}
	mustOK(t, l)
	released := 0
	for i := 0; i < 3; i++ {
		if release(l, 1, false) {
			released++
		}
		mustOK(t, l)
	}
	if released != 1 {
		t.Fatalf("released %d times, want once", released)
	}
	wantStats(t, l, Stats{CapacityBytes: 16 * blk})
}

func TestLinkRevivesShadow(t *testing.T) {
	l, _ := newTest(t, 16*blk)
	if err := l.Create(1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Grow(1, blk); err != nil {
		t.Fatal(err)
	}
	l.Unlink(1)
	mustOK(t, l)
	if err := l.Link(1); err != nil { // linkat of an O_TMPFILE-style inode
		t.Fatal(err)
	}
	mustOK(t, l)
	if st := l.Stats(); st.ShadowBytes != 0 || st.UsedBytes != blk {
		t.Fatalf("after relink: %+v", st)
	}
	if release(l, 1, true) {
		t.Fatal("Close of a relinked inode released it")
	}
	mustOK(t, l)
}

func TestUnknownIDsHarmless(t *testing.T) {
	l, c := newTest(t, 4*blk)
	put(t, l, c, 1, blk)
	before := l.Stats()
	const x = ID(99)
	checks := []struct {
		name string
		ok   bool
	}{
		{"Unlink", !l.Unlink(x)},
		{"Close read", !release(l, x, false)},
		{"Close write", !release(l, x, true)},
		{"Forget", !l.Forget(x)},
		{"Reconcile", !l.Reconcile(x, blk)},
		{"Open", errors.Is(l.Open(x, false), ErrGone)},
		{"Link", errors.Is(l.Link(x), ErrGone)},
		{"Writers", l.Writers(x) == 0},
	}
	touch(l, x)
	for _, f := range []func() ([]Victim[ID], error){
		func() ([]Victim[ID], error) { return l.Grow(x, blk) },
		func() ([]Victim[ID], error) { return l.SetSize(x, blk) },
	} {
		v, err := f()
		checks = append(checks, struct {
			name string
			ok   bool
		}{"resize", v == nil && errors.Is(err, ErrGone)})
	}
	_, _, ok := l.Size(x)
	checks = append(checks, struct {
		name string
		ok   bool
	}{"Size", !ok})
	for _, ck := range checks {
		if !ck.ok {
			t.Errorf("%s on unknown ID misbehaved", ck.name)
		}
	}
	mustOK(t, l)
	wantStats(t, l, before)
}

func TestRestore(t *testing.T) {
	l, _ := newTest(t, 3*blk)
	var evicted []ID
	for id := ID(1); id <= 5; id++ {
		v, err := l.Restore(id, blk, 1)
		if err != nil {
			t.Fatalf("Restore(%d): %v", id, err)
		}
		mustOK(t, l)
		evicted = append(evicted, ids(v)...)
	}
	if !sameIDs(evicted, []ID{1, 2}) {
		t.Fatalf("restore evicted %v, want the coldest [1 2]", evicted)
	}
	if _, err := l.Restore(3, blk, 1); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate Restore = %v", err)
	}
	mustOK(t, l)
	// A multi-block restore evicts several, coldest first; links count once.
	v, err := l.Restore(6, 2*blk, 2)
	if err != nil || !sameIDs(ids(v), []ID{3, 4}) {
		t.Fatalf("Restore(6) = %v, %v; want [3 4]", v, err)
	}
	mustOK(t, l)
	wantStats(t, l, Stats{CapacityBytes: 3 * blk, UsedBytes: 3 * blk, Objects: 2,
		Evictions: 4, EvictedBytes: 4 * blk})
	if l.Unlink(6) || !l.Unlink(6) {
		t.Fatal("restored nlink 2 not honoured")
	}
	mustOK(t, l)
	// Restore after start-up with only pinned objects: refused, nothing lost.
	if err := l.Create(7, true); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Grow(7, 2*blk); err != nil || v != nil {
		t.Fatalf("Grow(7) = %v, %v", v, err)
	}
	if err := l.Open(5, false); err != nil {
		t.Fatal(err)
	}
	if l.Capacity() != 3*blk {
		t.Fatalf("Capacity() = %d", l.Capacity())
	}
	v, err = l.Restore(8, blk, 1)
	if !errors.Is(err, ErrNoSpace) || v != nil {
		t.Fatalf("Restore with all pinned = %v, %v; want ErrNoSpace", v, err)
	}
	mustOK(t, l)
	if _, _, ok := l.Size(8); ok || l.Stats().UsedBytes != 3*blk {
		t.Fatalf("refused restore changed the ledger: %+v", l.Stats())
	}
}

// TestRestoreAll: restoring a start's objects at once leaves the ledger
// as restoring them one by one does (victims, order, stats), and stops
// at a duplicate with the victims of the objects before it.
func TestRestoreAll(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	type obj struct {
		id    ID
		size  int64
		nlink int
	}
	var objs []obj
	for id := ID(1); id <= 500; id++ {
		objs = append(objs, obj{id, rng.Int64N(4 * blk), 1 + rng.IntN(3)})
	}
	at := func(i int) (ID, int64, int) { return objs[i].id, objs[i].size, objs[i].nlink }
	one, _ := newTest(t, 100*blk)
	var want []ID
	for i := range objs {
		v, err := one.Restore(at(i))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ids(v)...)
	}
	all, _ := newTest(t, 100*blk)
	v, err := all.RestoreAll(len(objs), at)
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, all)
	if len(want) == 0 || !sameIDs(ids(v), want) {
		t.Fatalf("RestoreAll evicted %v, one by one %v", ids(v), want)
	}
	if got, w := order(all), order(one); got != w {
		t.Fatalf("order after RestoreAll:%s\none by one:%s", got, w)
	}
	if got, w := all.Stats(), one.Stats(); got != w {
		t.Fatalf("stats after RestoreAll %+v, one by one %+v", got, w)
	}

	dup, _ := newTest(t, 2*blk)
	sizes := []int64{blk, blk, blk, blk}
	v, err = dup.RestoreAll(4, func(i int) (ID, int64, int) { return []ID{1, 2, 3, 2}[i], sizes[i], 1 })
	if !errors.Is(err, ErrExists) || !sameIDs(ids(v), []ID{1}) {
		t.Fatalf("RestoreAll with a duplicate = %v, %v; want [1], ErrExists", ids(v), err)
	}
	mustOK(t, dup)
}

func TestReconcileTrim(t *testing.T) {
	l, c := newTest(t, 4*blk)
	for id := ID(1); id <= 4; id++ {
		put(t, l, c, id, blk)
	}
	if l.Trim() != nil {
		t.Fatal("Trim under capacity evicted")
	}
	if l.Reconcile(4, blk) {
		t.Fatal("Reconcile to the same size reported a change")
	}
	if !l.Reconcile(4, 3*blk) {
		t.Fatal("Reconcile did not apply")
	}
	mustOK(t, l) // over capacity is allowed once reconciled
	if st := l.Stats(); st.UsedBytes != 6*blk || st.Reconciliations != 1 {
		t.Fatalf("after reconcile: %+v", st)
	}
	v := l.Trim()
	mustOK(t, l)
	if !sameIDs(ids(v), []ID{1, 2}) {
		t.Fatalf("Trim victims %v, want [1 2]", v)
	}
	if st := l.Stats(); st.UsedBytes != 4*blk || st.UsedBytes > st.CapacityBytes {
		t.Fatalf("after trim: %+v", st)
	}
	if l.Trim() != nil {
		t.Fatal("second Trim evicted")
	}
	// Reconcile shrinking needs no trim.
	if !l.Reconcile(4, 0) {
		t.Fatal("Reconcile to 0 did not apply")
	}
	mustOK(t, l)
	if st := l.Stats(); st.UsedBytes != blk || st.Reconciliations != 2 {
		t.Fatalf("after shrink: %+v", st)
	}
}

func TestForget(t *testing.T) {
	l, c := newTest(t, 8*blk)
	put(t, l, c, 1, blk)
	if err := l.Create(2, true); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Grow(2, 2*blk); err != nil {
		t.Fatal(err)
	}
	l.Unlink(2) // shadow and pinned
	mustOK(t, l)
	for _, id := range []ID{1, 2} {
		if !l.Forget(id) {
			t.Fatalf("Forget(%d) = false", id)
		}
		mustOK(t, l)
		if l.Forget(id) {
			t.Fatalf("second Forget(%d) = true", id)
		}
	}
	if release(l, 2, true) {
		t.Fatal("Close after Forget released")
	}
	mustOK(t, l)
	wantStats(t, l, Stats{CapacityBytes: 8 * blk, Reconciliations: 2})
}

func TestWaitHint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(*testing.T, *Ledger[ID], *fakeClock)
		n      int64
		waitOK bool
	}{
		{"read pin", func(t *testing.T, l *Ledger[ID], c *fakeClock) {
			put(t, l, c, 1, 4*blk)
			if err := l.Open(1, false); err != nil {
				t.Fatal(err)
			}
		}, blk, true},
		{"grace", func(t *testing.T, l *Ledger[ID], c *fakeClock) {
			put(t, l, c, 1, 4*blk)
			l.Open(1, true)
			release(l, 1, true) // closed now, within the grace period
		}, blk, true},
		{"writer", func(t *testing.T, l *Ledger[ID], c *fakeClock) {
			l.Create(1, true)
			l.Grow(1, 4*blk)
		}, blk, false},
		{"writer and reader", func(t *testing.T, l *Ledger[ID], c *fakeClock) {
			l.Create(1, true)
			l.Grow(1, 2*blk)
			put(t, l, c, 2, 2*blk)
			l.Open(2, false)
		}, 2 * blk, true},
		{"more than writers leave", func(t *testing.T, l *Ledger[ID], c *fakeClock) {
			l.Create(1, true)
			l.Grow(1, 2*blk)
			put(t, l, c, 2, 2*blk)
			l.Open(2, false)
		}, 3 * blk, false},
		{"larger than capacity", func(t *testing.T, l *Ledger[ID], c *fakeClock) {}, 5 * blk, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, c := newTest(t, 4*blk)
			tc.setup(t, l, c)
			mustOK(t, l)
			got := l.WaitHint(tc.n)
			if tc.waitOK && got <= 0 || !tc.waitOK && got != 0 {
				t.Fatalf("WaitHint(%d) = %v, want wait %v", tc.n, got, tc.waitOK)
			}
		})
	}
}

func TestStatsJSON(t *testing.T) {
	l, c := newTest(t, 8*blk)
	put(t, l, c, 1, 1)
	b, err := json.Marshal(l.Stats())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]int64
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{
		"capacity_bytes": 8 * blk, "used_bytes": blk, "objects": 1,
		"pinned_objects": 0, "pinned_bytes": 0, "shadow_bytes": 0,
		"evictions": 0, "evicted_bytes": 0, "admission_failures": 0,
	}
	for k, v := range want {
		got, ok := m[k]
		if !ok {
			t.Errorf("stats JSON lacks %q: %s", k, b)
		} else if got != v {
			t.Errorf("%s = %d, want %d", k, got, v)
		}
	}
}

// TestConcurrent is for -race: private and shared IDs under contention,
// with a checker taking snapshots mid-flight.
func TestConcurrent(t *testing.T) {
	const (
		workers  = 8
		ops      = 1500
		shared   = 16
		capacity = 64 * blk
	)
	c := newClock()
	l := New[ID](Config{Capacity: capacity, Grace: time.Millisecond, Now: c.Now})
	for id := ID(1); id <= shared; id++ {
		if err := l.Create(id, true); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Grow(id, blk); err != nil {
			t.Fatal(err)
		}
		release(l, id, true)
	}
	mustOK(t, l)

	var wg sync.WaitGroup
	errc := make(chan error, workers+1)
	stop := make(chan struct{})
	go func() { // checker and clock
		defer close(errc)
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.Advance(time.Millisecond)
			if err := l.CheckInvariants(); err != nil {
				errc <- err
				return
			}
			if st := l.Stats(); st.UsedBytes > st.CapacityBytes {
				errc <- fmt.Errorf("used %d > capacity %d", st.UsedBytes, st.CapacityBytes)
				return
			}
			runtime.Gosched()
		}
	}()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := uint64(w)*0x9e3779b97f4a7c15 + 1
			next := func(n int) int {
				rng ^= rng << 13
				rng ^= rng >> 7
				rng ^= rng << 17
				return int(rng % uint64(n))
			}
			base := ID(1000 + w*10*ops) // private, never reused
			mine := base
			for i := 0; i < ops; i++ {
				switch next(4) {
				case 0: // private object: create, write, maybe unlink open
					mine++
					if err := l.Create(mine, true); err != nil {
						panic(err)
					}
					for k := 0; k < 3; k++ {
						l.Grow(mine, int64(next(8*blk)))
					}
					if next(3) == 0 {
						l.Unlink(mine)
					}
					release(l, mine, true)
				case 1: // shared reader
					id := ID(1 + next(shared))
					if l.Open(id, false) == nil {
						l.Grow(id, int64(next(4*blk)))
						release(l, id, false)
					}
				case 2: // shared links
					id := ID(1 + next(shared))
					if l.Link(id) == nil {
						l.Unlink(id)
					}
				case 3: // reopen a recent private object, or unlink it
					id := mine - ID(next(4))
					if id <= base {
						break
					}
					if next(2) == 0 {
						l.Unlink(id)
					} else if l.Open(id, true) == nil {
						l.SetSize(id, int64(next(4*blk)))
						release(l, id, true)
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	for err := range errc {
		t.Fatal(err)
	}
	mustOK(t, l)
	st := l.Stats()
	if st.UsedBytes > st.CapacityBytes || st.PinnedObjects != 0 || st.ShadowBytes != 0 {
		t.Fatalf("final stats: %+v", st)
	}
	if st.Evictions == 0 {
		t.Fatalf("test exerted no eviction pressure: %+v", st)
	}
}

func BenchmarkGrow(b *testing.B) {
	b.Run("noevict", func(b *testing.B) {
		l := New[ID](Config{Capacity: math.MaxInt64})
		l.Create(1, true)
		var end int64
		for b.Loop() {
			end += 512
			if _, err := l.Grow(1, end); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("evict", func(b *testing.B) {
		// Full ledger: every new block evicts the coldest object.
		const n = 10000
		l := New[ID](Config{Capacity: n * blk})
		for id := ID(0); id < n; id++ {
			l.Restore(id, blk, 1)
		}
		id := ID(n)
		for b.Loop() {
			l.Create(id, true)
			if _, err := l.Grow(id, blk); err != nil {
				b.Fatal(err)
			}
			release(l, id, true)
			id++
		}
	})
}

func BenchmarkOpenClose(b *testing.B) {
	const n = 1024
	l := New[ID](Config{Capacity: n * blk})
	for id := ID(0); id < n; id++ {
		l.Restore(id, blk, 1)
	}
	var i ID
	for b.Loop() {
		id := i % n
		if err := l.Open(id, false); err != nil {
			b.Fatal(err)
		}
		release(l, id, false)
		i++
	}
}

// BenchmarkRestore1M measures a restart over a million objects (one
// RestoreAll, as Core.Open does): ns/op is the whole restore, B/obj the
// heap the ledger keeps per object.
func BenchmarkRestore1M(b *testing.B) {
	const n = 1_000_000
	var bytesPerObj float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		l := New[ID](Config{Capacity: n * blk})
		if _, err := l.RestoreAll(n, func(i int) (ID, int64, int) { return ID(i), blk, 1 }); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if got := l.Stats().Objects; got != n {
			b.Fatalf("objects %d", got)
		}
		bytesPerObj = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
		runtime.KeepAlive(l)
		b.StartTimer()
	}
	b.ReportMetric(bytesPerObj, "B/obj")
}

// TestWalkOrder: a walk lists inodes least recently used first, with
// sizes.
func TestWalkOrder(t *testing.T) {
	l := New[ID](Config{Capacity: 1 << 20, Grace: time.Second})
	for _, id := range []ID{1, 2, 3} {
		if _, err := l.Restore(id, int64(id)*10, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Open(1, false); err != nil {
		t.Fatal(err)
	}
	release(l, 1, false)
	var got []ID
	var sizes []int64
	each(l, func(id ID, size int64) { got, sizes = append(got, id), append(sizes, size) })
	if !slices.Equal(got, []ID{2, 3, 1}) || !slices.Equal(sizes, []int64{20, 30, 10}) {
		t.Fatalf("walk: %v %v, want [2 3 1] [20 30 10]", got, sizes)
	}
}

// fill restores n closed one-block objects with IDs from first on.
func fill(t *testing.T, l *Ledger[ID], first ID, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if v, err := l.Restore(first+ID(i), blk, 1); err != nil || len(v) != 0 {
			t.Fatalf("restore %d: %v, %v", first+ID(i), v, err)
		}
	}
}

func TestReserveAndSettle(t *testing.T) {
	l, _ := newTest(t, 8*blk)
	fill(t, l, 1, 8)
	if err := l.Create(100, true); err != nil {
		t.Fatal(err)
	}
	v, err := l.Reserve(100, 2*blk)
	if err != nil || !sameIDs(ids(v), []ID{1, 2}) {
		t.Fatalf("Reserve = %v, %v; want the two coldest evicted", v, err)
	}
	mustOK(t, l)
	wantStats(t, l, Stats{CapacityBytes: 8 * blk, UsedBytes: 8 * blk, Objects: 7, PinnedObjects: 1,
		PinnedBytes: 2 * blk, Evictions: 2, EvictedBytes: 2 * blk, ReservedBytes: 2 * blk})
	// Writing within the reservation admits nothing more.
	if v, err := l.Observe(100, 2*blk-1); err != nil || len(v) != 0 {
		t.Fatalf("Observe within the reservation = %v, %v", v, err)
	}
	// A second reservation never shrinks the first.
	if v, err := l.Reserve(100, blk); err != nil || len(v) != 0 {
		t.Fatalf("smaller Reserve = %v, %v", v, err)
	}
	// A close (a FLUSH) settles and keeps the reservation: a duplicate of
	// the descriptor may write on.
	if v, err := l.Settle(100, blk); err != nil || len(v) != 0 {
		t.Fatalf("Settle = %v, %v", v, err)
	}
	mustOK(t, l)
	if _, charge, _ := l.Size(100); charge != 2*blk {
		t.Fatalf("charge after a close %d, want the reservation's two blocks", charge)
	}
	// Kept, and shown nowhere: st_blocks and the stats say what the
	// object holds, as a client that closed its file expects.
	if _, shown, _, _ := l.Shown(100); shown != blk {
		t.Fatalf("charge shown after a close %d, want one block", shown)
	}
	if st := l.Stats(); st.UsedBytes != 7*blk || st.ReservedBytes != 0 || st.PinnedBytes != blk {
		t.Fatalf("after a close: %+v; want the kept block unshown", st)
	}
	// A close known not to end the writing (another process's, which
	// goes on) shows what an earlier close kept, in the same step, and
	// keeps nothing itself.
	if v, err := l.SettleShown(100, blk); err != nil || len(v) != 0 {
		t.Fatalf("SettleShown = %v, %v", v, err)
	}
	if _, shown, _, _ := l.Shown(100); shown != 2*blk {
		t.Fatalf("charge shown after another process's close %d, want the reservation's two blocks", shown)
	}
	if st := l.Stats(); st.UsedBytes != 8*blk || st.ReservedBytes != blk || st.KeptBytes != 0 {
		t.Fatalf("after another process's close: %+v; want the reservation shown, nothing kept", st)
	}
	if v, err := l.Settle(100, blk); err != nil || len(v) != 0 {
		t.Fatalf("Settle = %v, %v", v, err)
	}
	// Admission counts it: the cache is full.
	if err := l.Create(101, true); err != nil {
		t.Fatal(err)
	}
	if err := l.ReserveFree(101, blk); !errors.Is(err, ErrBusy) {
		t.Fatalf("ReserveFree into the kept block: %v, want ErrBusy", err)
	}
	release(l, 101, true)
	// The release settles exactly and gives the rest back.
	if v, err := l.SettleLast(100, blk); err != nil || len(v) != 0 {
		t.Fatalf("SettleLast = %v, %v", v, err)
	}
	mustOK(t, l)
	if _, charge, _ := l.Size(100); charge != blk {
		t.Fatalf("charge after the release %d, want one block", charge)
	}
	if _, v := l.Close(100, true); len(v) != 0 {
		t.Fatalf("Close evicted %v", v)
	}
	mustOK(t, l)
	if st := l.Stats(); st.UsedBytes != 7*blk || st.ReservedBytes != 0 || st.Objects != 8 {
		t.Fatalf("after close: %+v", st)
	}
}

func TestReserveNeedsWriter(t *testing.T) {
	l, _ := newTest(t, 8*blk)
	fill(t, l, 1, 1)
	for _, f := range []func() ([]Victim[ID], error){
		func() ([]Victim[ID], error) { return l.Reserve(1, blk) },
		func() ([]Victim[ID], error) { return l.Observe(1, 2*blk) },
		func() ([]Victim[ID], error) { return l.Settle(1, 2*blk) },
	} {
		if _, err := f(); !errors.Is(err, ErrNotWriter) {
			t.Fatalf("got %v, want ErrNotWriter", err)
		}
	}
	if _, err := l.Reserve(9, blk); !errors.Is(err, ErrGone) {
		t.Fatalf("Reserve of unknown = %v", err)
	}
	mustOK(t, l)
}

// A passthrough writer evicts for its growth up to twice its
// reservation; past that its bytes are charged unadmitted, evict nobody,
// and the object can be settled only if it fits in full.
func TestObserveBudget(t *testing.T) {
	l, _ := newTest(t, 10*blk)
	fill(t, l, 1, 9)
	if err := l.Create(100, true); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Reserve(100, blk); err != nil || len(v) != 0 {
		t.Fatalf("Reserve = %v, %v", v, err)
	}
	v, err := l.Observe(100, 2*blk)
	if err != nil || !sameIDs(ids(v), []ID{1}) {
		t.Fatalf("Observe within budget = %v, %v; want 1 evicted", v, err)
	}
	for _, size := range []int64{3 * blk, 12 * blk, 40 * blk} {
		if v, err := l.Observe(100, size); err != nil || len(v) != 0 {
			t.Fatalf("Observe(%d) past budget = %v, %v; want nothing evicted", size, v, err)
		}
		mustOK(t, l)
	}
	st := l.Stats()
	if st.UnadmittedBytes != 38*blk || st.UsedBytes != 48*blk || st.OvershootMaxBytes != 38*blk || st.Evictions != 1 {
		t.Fatalf("past budget: %+v", st)
	}
	// Older, smaller reports change nothing.
	if v, err := l.Observe(100, blk); err != nil || len(v) != 0 {
		t.Fatalf("stale Observe = %v, %v", v, err)
	}
	if _, err := l.Settle(100, 40*blk); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Settle too large = %v", err)
	}
	// The caller removes the object: its bytes go, and nothing more was
	// evicted for it.
	if _, err := l.SetSize(100, 0); err != nil {
		t.Fatal(err)
	}
	l.Unlink(100)
	if released, v := l.Close(100, true); !released || len(v) != 0 {
		t.Fatalf("Close = %v, %v", released, v)
	}
	mustOK(t, l)
	if st := l.Stats(); st.Objects != 8 || st.UsedBytes != 8*blk || st.UnadmittedBytes != 0 || st.OvershootMaxBytes != 38*blk {
		t.Fatalf("after the doomed store: %+v", st)
	}
}

// A store that can never fit, written in growing steps into a full cache,
// costs at most twice its reservation or a quarter of the capacity, not
// the cache. Also when a
// duplicate of its descriptor closed early (a shell's redirect, dd): that
// close settles the writer and gives its reservation back, and the
// growth after it was unbounded and emptied the cache. Also when it was
// never reserved, only given the least budget (core's writer of a
// process that stored only empty objects lately; with none, a shell's
// doomed `cat > big` emptied the cache: an outside tester).
func TestDoomedStoreKeepsCache(t *testing.T) {
	const n = 200
	for _, how := range []string{"Observe", "Grow", "GrowWithin"} {
		for _, dup := range []bool{false, true} {
			for _, reserved := range []bool{true, false} {
				doomedStoreKeepsCache(t, n, how, dup, reserved)
			}
		}
	}
}

func doomedStoreKeepsCache(t *testing.T, n int, how string, dup, reserved bool) {
	l := full(t, n)
	if reserved {
		if _, err := l.Reserve(1000, blk); err != nil {
			t.Fatal(err)
		}
	} else {
		l.Budget(1000, 1)
	}
	if dup {
		if _, err := l.Settle(1000, 0); err != nil {
			t.Fatal(err)
		}
	}
	grow := map[string]func(ID, int64) ([]Victim[ID], error){"Observe": l.Observe, "Grow": l.Grow, "GrowWithin": l.GrowWithin}[how]
	var err error
	for size := int64(blk); size <= int64(n+1)*blk; size += blk {
		if _, err = grow(1000, size); err != nil {
			break
		}
	}
	want := map[string]error{"Observe": nil, "Grow": ErrTooLarge, "GrowWithin": ErrPastBudget}[how]
	if !errors.Is(err, want) {
		t.Fatalf("%s past the budget of a full cache, to past the capacity: %v, want %v", how, err, want)
	}
	if st := l.Stats(); st.Evictions > int64(n/4) {
		t.Fatalf("%s (dup %v, reserved %v): a doomed store evicted %d objects, want at most a quarter of %d", how, dup, reserved, st.Evictions, n)
	}
	mustOK(t, l)
}

// fullWithWriter is full with writer 1000 reserved a block.
func fullWithWriter(t *testing.T, n int) *Ledger[ID] {
	t.Helper()
	l := full(t, n)
	if _, err := l.Reserve(1000, blk); err != nil {
		t.Fatal(err)
	}
	return l
}

// full is a ledger of n blocks holding n closed one-block objects
// (1..n), and writer 1000 created, reserved nothing.
func full(t *testing.T, n int) *Ledger[ID] {
	t.Helper()
	l, _ := newTest(t, int64(n)*blk)
	fill(t, l, 1, n)
	if err := l.Create(1000, true); err != nil {
		t.Fatal(err)
	}
	return l
}

// A store larger than its budget (twice its reservation, at least a
// quarter of the capacity), written by the daemon into a full cache, is
// not refused: past its budget its bytes are charged unadmitted, and its
// close evicts for them, all or nothing (an outside tester: a full cache
// of 1 MiB objects refused every 8 MiB store with the daemon writing, on
// every retry). Within the budget its growth evicts as it comes: a
// larger store than the objects before it (reserved one block) is not
// over the capacity while it writes (an outside tester: 8 MiB after 100
// KB objects, 8 MiB over).
func TestGrowPastBudgetAdmittedAtClose(t *testing.T) {
	const n, budget = 64, 64 / 4
	l := fullWithWriter(t, n)
	for size := int64(blk); size <= budget*blk; size += blk {
		if _, err := l.Grow(1000, size); err != nil {
			t.Fatalf("Grow(%d) within the budget, cold objects to evict: %v", size, err)
		}
		if st := l.Stats(); st.UnadmittedBytes != 0 || st.UsedBytes > st.CapacityBytes {
			t.Fatalf("Grow(%d) within the budget: %+v; want it admitted", size, st)
		}
	}
	for size := int64(budget+1) * blk; size <= 2*budget*blk; size += blk {
		if _, err := l.Grow(1000, size); err != nil {
			t.Fatalf("Grow(%d) past the budget, cold objects to evict: %v", size, err)
		}
	}
	st := l.Stats()
	if st.Evictions != budget || st.UnadmittedBytes != budget*blk {
		t.Fatalf("before the close: %d evicted, %d unadmitted bytes; want %d (the budget) and %d", st.Evictions, st.UnadmittedBytes, budget, budget*blk)
	}
	if _, v := l.Close(1000, true); len(v) != budget {
		t.Fatalf("the close evicted %d objects, want %d more", len(v), budget)
	}
	mustOK(t, l)
	if st := l.Stats(); st.UsedBytes != n*blk || st.UnadmittedBytes != 0 || st.Objects != n-2*budget+1 {
		t.Fatalf("after the close: %+v", st)
	}
}

// The last writer's close admits what it never settled.
func TestCloseAdmitsUnsettled(t *testing.T) {
	l, _ := newTest(t, 6*blk)
	fill(t, l, 1, 3)
	if err := l.Create(100, true); err != nil {
		t.Fatal(err)
	}
	for _, id := range []ID{2, 3} {
		if err := l.Open(id, false); err != nil {
			t.Fatal(err)
		}
	}
	// No reservation: growth evicts as it goes, from what is not pinned.
	if v, err := l.Observe(100, 4*blk); err != nil || !sameIDs(ids(v), []ID{1}) {
		t.Fatalf("Observe = %v, %v; want 1 evicted", v, err)
	}
	if v, err := l.Observe(100, 6*blk); err != nil || len(v) != 0 {
		t.Fatalf("Observe with nothing evictable = %v, %v", v, err)
	}
	if st := l.Stats(); st.UnadmittedBytes != 2*blk {
		t.Fatalf("growth with nothing evictable: %+v", st)
	}
	release(l, 2, false)
	release(l, 3, false)
	if _, v := l.Close(100, true); !sameIDs(ids(v), []ID{2, 3}) {
		t.Fatalf("Close evicted %v, want 2 and 3", v)
	}
	mustOK(t, l)
	if st := l.Stats(); st.UsedBytes != 6*blk || st.UnadmittedBytes != 0 || st.Reconciliations != 0 {
		t.Fatalf("after close: %+v", st)
	}
}

// TestCloseFree: a writer's close that fits closes as Close does, with no
// eviction; one that would have to evict (its writer left bytes
// unadmitted) changes nothing and answers ErrBusy, and Close then
// evicts.
func TestCloseFree(t *testing.T) {
	l, c := newTest(t, 16<<10)
	put(t, l, c, 1, 8<<10)
	if err := l.Create(2, true); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Grow(2, 4<<10); err != nil || len(v) != 0 {
		t.Fatalf("Grow = %v, %v", v, err)
	}
	if released, err := l.CloseFree(2, true); released || err != nil {
		t.Fatalf("CloseFree of a writer that fits = %v, %v", released, err)
	}
	mustOK(t, l)
	if w := l.Writers(2); w != 0 {
		t.Fatalf("writers after CloseFree: %d", w)
	}
	// A writer whose growth could not be admitted while 1 was read-pinned.
	if err := l.Open(1, false); err != nil {
		t.Fatal(err)
	}
	if err := l.Create(3, true); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Observe(3, 8<<10); err != nil || len(v) != 0 {
		t.Fatalf("Observe = %v, %v", v, err)
	}
	release(l, 1, false)
	c.Advance(testGrace + time.Millisecond)
	before := l.Stats()
	if _, err := l.CloseFree(3, true); !errors.Is(err, ErrBusy) {
		t.Fatalf("CloseFree of a writer that must evict: %v, want ErrBusy", err)
	}
	if after := l.Stats(); after != before || l.Writers(3) != 1 {
		t.Fatalf("CloseFree that answered ErrBusy changed the ledger: %+v -> %+v", before, after)
	}
	if _, v := l.Close(3, true); !sameIDs(ids(v), []ID{2}) {
		t.Fatalf("Close evicted %v, want [2], the coldest", ids(v))
	}
	mustOK(t, l)
}

// TestYields: of writers stuck on each other, the youngest that holds
// room gives way; a writer holding none waits for it; once nothing moves
// (stalled), the youngest that waits gives way, whatever it holds; and
// while one that gave way is still being written, no other does.
func TestYields(t *testing.T) {
	l, _ := newTest(t, 64*blk)
	createWriters(t, l, 1, 2, 3)
	for id, size := range map[ID]int64{1: 20 * blk, 2: 20 * blk} {
		if _, err := l.Grow(id, size); err != nil {
			t.Fatal(err)
		}
	}
	// 3, the youngest, holds nothing: 2 is the youngest holding room.
	if yields(l, 1, false) || !yields(l, 2, false) || yields(l, 3, false) {
		t.Fatalf("Yields before a stall: 1 %v, 2 %v, 3 %v; want only 2", yields(l, 1, false), yields(l, 2, false), yields(l, 3, false))
	}
	// Stalled, waiting counts, not holding: 3 waits, so it gives way
	// (its process holds room elsewhere), and 2 no longer does.
	l.Waiting(3, true)
	if !yields(l, 3, true) || yields(l, 2, true) || yields(l, 1, true) {
		t.Fatalf("Yields stalled with 3 waiting: 1 %v, 2 %v, 3 %v; want only 3", yields(l, 1, true), yields(l, 2, true), yields(l, 3, true))
	}
	// But not where 2, older and holding room, waits too: 3, behind it,
	// would free nothing; 2 gives way.
	l.Waiting(2, true)
	if yields(l, 3, true) || !yields(l, 2, true) || yields(l, 1, true) {
		t.Fatalf("Yields stalled with 2 waiting holding room and 3 behind it: 1 %v, 2 %v, 3 %v; want only 2", yields(l, 1, true), yields(l, 2, true), yields(l, 3, true))
	}
	l.Waiting(2, false)
	l.Waiting(3, false)
	if !l.GiveWay(2, true) {
		t.Fatal("stalled with no one else waiting: 2 does not give way")
	}
	// 2 gave way: until its writing ends nobody else does, 1 included.
	if yields(l, 1, false) || yields(l, 1, true) || yields(l, 3, true) {
		t.Fatal("a writer gave way while the one that gave way before still holds its room")
	}
	release(l, 2, true)
	if !yields(l, 1, false) {
		t.Fatal("after the one that gave way ended: 1, the only one holding room, does not give way")
	}
	mustOK(t, l)
}

// TestInertWritersDoNotYield: stalled, a waiting writer that holds
// nothing and whose process (Group) holds no other room does not give
// way, its refusal freeing nothing; one whose process holds room
// elsewhere does, and so does one of no known process.
func TestInertWritersDoNotYield(t *testing.T) {
	l, _ := newTest(t, 64*blk)
	createWriters(t, l, 1, 2, 3)
	l.Group(1, 10)
	l.Group(2, 20)
	l.Group(3, 30)
	l.Waiting(2, true)
	l.Waiting(3, true)
	if yields(l, 3, true) || yields(l, 2, true) || !l.Inert(3) || !l.Inert(2) {
		t.Fatalf("stalled, two writers of their own processes holding nothing: 2 yields %v, 3 yields %v, inert %v %v; want neither to yield",
			yields(l, 2, true), yields(l, 3, true), l.Inert(2), l.Inert(3))
	}
	// 1 holds room and is of 3's process: 3's refusal may free it.
	l.Group(1, 30)
	if _, err := l.Grow(1, 8*blk); err != nil {
		t.Fatal(err)
	}
	if !yields(l, 3, true) || l.Inert(3) || yields(l, 2, true) {
		t.Fatalf("3's process holds room: 3 yields %v (inert %v), 2 yields %v; want 3 only", yields(l, 3, true), l.Inert(3), yields(l, 2, true))
	}
	// A writer of no known process gives way as before.
	createWriters(t, l, 4)
	l.Waiting(4, true)
	if !yields(l, 4, true) || l.Inert(4) {
		t.Fatalf("a writer of no known process: yields %v, inert %v; want it to give way", yields(l, 4, true), l.Inert(4))
	}
	for _, id := range []ID{2, 3, 4} {
		l.Waiting(id, false)
	}
	mustOK(t, l)
}

// TestBehind: a writer that holds no room comes after an older writer
// that holds room and waits for more; not after one that waits holding
// nothing, nor after a younger one; a writer that holds room is behind
// no one.
func TestBehind(t *testing.T) {
	l, _ := newTest(t, 64*blk)
	createWriters(t, l, 1, 2, 3)
	if _, err := l.Grow(1, 8*blk); err != nil {
		t.Fatal(err)
	}
	if l.Behind(2) || l.Behind(3) {
		t.Fatal("behind a writer that does not wait")
	}
	l.Waiting(1, true)
	if !l.Behind(2) || !l.Behind(3) || l.Behind(1) {
		t.Fatalf("with 1 holding room and waiting: Behind 1 %v, 2 %v, 3 %v; want 2 and 3", l.Behind(1), l.Behind(2), l.Behind(3))
	}
	l.Waiting(1, false)
	l.Waiting(3, true) // younger, and holds nothing
	if l.Behind(2) {
		t.Fatal("2 is behind a younger writer that holds nothing")
	}
	l.Waiting(3, false)
	mustOK(t, l)
}

// yields is GiveWay's answer for id's writer, noting nothing.
func yields(l *Ledger[ID], id ID, stalled bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.yields(id, stalled)
}

// createWriters creates ids as objects being written, oldest first.
func createWriters(t *testing.T, l *Ledger[ID], ids ...ID) {
	t.Helper()
	for _, id := range ids {
		if err := l.Create(id, true); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEmptyObjectsAreNotEvictedForRoom: an eviction for bytes passes over
// empty objects, which free none (an outside tester's lock and marker
// files were evicted for nothing); an eviction for inodes (Shed) takes
// them as any other.
func TestEmptyObjectsAreNotEvictedForRoom(t *testing.T) {
	l, c := newTest(t, 4*blk)
	put(t, l, c, 1, 0)
	for id := ID(2); id <= 5; id++ {
		put(t, l, c, id, blk)
	}
	createWriters(t, l, 6)
	if v, err := l.Grow(6, blk); err != nil || len(v) != 1 || v[0].ID != 2 {
		t.Fatalf("Grow(6) evicted %v (%v); want 2, the coldest object that holds bytes, not the empty 1", ids(v), err)
	}
	release(l, 6, true)
	if v := l.Shed(1); len(v) != 1 || v[0].ID != 1 {
		t.Fatalf("Shed(1) = %v; want the empty object, the coldest", ids(v))
	}
	mustOK(t, l)
}

// A shrink of a writer's object that holds unadmitted bytes is never
// refused: the bytes were on the disk already, and the part of the new
// size past what was admitted stays unadmitted. It was an admission of
// the new size, which waited for room and failed with ENOSPC while
// readers pinned the cache (an outside tester: `kvfs put --direct`'s
// cut-back after a refused write waited the wait limit a second time
// and answered ENOSPC).
func TestShrinkOfUnadmittedNeverRefused(t *testing.T) {
	l, _ := newTest(t, 8*blk)
	fill(t, l, 1, 7)
	for id := ID(1); id <= 7; id++ {
		if err := l.Open(id, false); err != nil { // readers pin them all
			t.Fatal(err)
		}
	}
	if err := l.Create(100, true); err != nil {
		t.Fatal(err)
	}
	for _, f := range []func(ID, int64) error{l.SetSizeFree, func(id ID, n int64) error { _, err := l.SetSize(id, n); return err }} {
		if _, err := l.Observe(100, 4*blk); err != nil { // 1 block free
			t.Fatal(err)
		}
		if st := l.Stats(); st.UnadmittedBytes < 3*blk {
			t.Fatalf("after the growth: %+v, want at least 3 blocks unadmitted", st)
		}
		if err := f(100, 3*blk); err != nil {
			t.Fatalf("a shrink to 3 blocks of 4, at most one admitted: %v", err)
		}
		mustOK(t, l)
		if st := l.Stats(); st.UsedBytes != 10*blk || st.UnadmittedBytes < 2*blk || st.UnadmittedBytes > 3*blk || st.Evictions != 0 {
			t.Fatalf("after the shrink: %+v, want 10 blocks used, 2 or 3 of them unadmitted, nothing evicted", st)
		}
	}
	if _, err := l.SetSize(100, 0); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.UnadmittedBytes != 0 || st.UsedBytes != 7*blk {
		t.Fatalf("after the cut to 0: %+v, want nothing unadmitted, the 7 readers' objects used", st)
	}
	mustOK(t, l)
}
