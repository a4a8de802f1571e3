package ledger

import (
	"errors"
	"testing"
	"time"
)

// Six writers open into an empty cache that reserves a quarter of it
// each: the fifth and sixth take back what the first ones reserved and
// have not written, and every writer's release settles, because what
// they wrote fits.
func TestReservationsTakenBack(t *testing.T) {
	l, _ := newTest(t, 16*blk)
	for id := ID(1); id <= 6; id++ {
		if err := l.Create(id, true); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Reserve(id, 4*blk); err != nil {
			t.Fatalf("writer %d: reserve: %v", id, err)
		}
		mustOK(t, l)
	}
	if st := l.Stats(); st.UsedBytes > 16*blk {
		t.Fatalf("reservations pass the capacity: %+v", st)
	}
	// The oldest writers gave theirs up first.
	if _, c, _ := l.Size(1); c != 0 {
		t.Fatalf("writer 1 keeps a charge of %d", c)
	}
	for id := ID(1); id <= 6; id++ {
		if _, err := l.SettleLast(id, 2*blk); err != nil {
			t.Fatalf("writer %d: settle: %v", id, err)
		}
		mustOK(t, l)
	}
	if st := l.Stats(); st.UsedBytes != 12*blk || st.AdmissionFailures != 0 {
		t.Fatalf("after settling: %+v", st)
	}
}

// Written bytes are never taken back: a reservation is only a guess.
func TestReclaimSparesWrittenBytes(t *testing.T) {
	l, _ := newTest(t, 8*blk)
	l.Create(1, true)
	l.Reserve(1, 8*blk)
	l.Observe(1, 6*blk)
	l.Create(2, true)
	if _, err := l.Reserve(2, 4*blk); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("reserve past written bytes: %v", err)
	}
	if _, err := l.Reserve(2, 2*blk); err != nil {
		t.Fatalf("reserve of the unwritten rest: %v", err)
	}
	if size, c, _ := l.Size(1); size != 6*blk || c != 6*blk {
		t.Fatalf("writer 1: size %d charge %d", size, c)
	}
	mustOK(t, l)
}

// With firm reservations (a passthrough mount, whose writers' bytes land
// before the ledger sees them) nothing reserved is taken back: a writer
// that finds the rest of the cache reserved waits (WaitHint) for the
// others' writing to end, and then gets the room they gave back. A close
// (Settle) is not that end: a duplicate of the descriptor may write on
// into the reservation (a Popen child after its parent's close).
func TestFirmReservationsNotTakenBack(t *testing.T) {
	c := newClock()
	l := New[ID](Config{Capacity: 8 * blk, Grace: testGrace, Now: c.Now, FirmReservations: true})
	l.Create(1, true)
	l.Reserve(1, 8*blk)
	l.Observe(1, 2*blk)
	l.Create(2, true)
	if _, err := l.Reserve(2, 4*blk); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("reserve where another writer holds a firm reservation: %v, want ErrNoSpace", err)
	}
	if _, err := l.Grow(2, 4*blk); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("growth where another writer holds a firm reservation: %v, want ErrNoSpace", err)
	}
	if w := l.WaitHint(4 * blk); w == 0 {
		t.Fatal("WaitHint 0 where a writer's unwritten reservation will be given back")
	}
	if size, c, _ := l.Size(1); size != 2*blk || c != 8*blk {
		t.Fatalf("writer 1: size %d charge %d, want its whole reservation kept", size, c)
	}
	if _, err := l.Settle(1, 2*blk); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Grow(2, 4*blk); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("growth into the reservation of a writer closed once: %v, want ErrNoSpace", err)
	}
	if _, err := l.SettleLast(1, 2*blk); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Grow(2, 4*blk); err != nil {
		t.Fatalf("growth once the other writer's writing ended: %v", err)
	}
	mustOK(t, l)
}

// A refused writer's object is cut back, and its reservation goes with
// it when no other writer holds the object: nothing more is admitted to
// it, so it keeps no room from others while its descriptors close.
func TestCutGivesReservationBack(t *testing.T) {
	l := New[ID](Config{Capacity: 8 * blk, Grace: testGrace, Now: newClock().Now, FirmReservations: true})
	l.Create(1, true)
	l.Reserve(1, 4*blk)
	l.Observe(1, 3*blk)
	l.Cut(1, 0)
	mustOK(t, l)
	if size, c, _ := l.Size(1); size != 0 || c != 0 {
		t.Fatalf("cut writer: size %d charge %d, want nothing", size, c)
	}
	// With a second writer open, the reservation is theirs too.
	l.Create(2, true)
	l.Reserve(2, 4*blk)
	l.Open(2, true)
	l.Cut(2, 0)
	mustOK(t, l)
	if _, c, _ := l.Size(2); c != 4*blk {
		t.Fatalf("cut writer beside another: charge %d, want the reservation kept", c)
	}
	// Never grown back: a writer that truncated left nothing to go back to.
	l.Observe(2, 5*blk)
	l.Cut(2, 6*blk)
	if size, _, _ := l.Size(2); size != 5*blk {
		t.Fatalf("cut past the size: size %d, want it left at 5 blocks", size)
	}
	mustOK(t, l)
}

// A publish step ends the grace period: the object is plain LRU at once,
// and a writer's close after it starts no new one.
func TestEndGrace(t *testing.T) {
	l, _ := newTest(t, 4*blk)
	l.Create(1, true)
	l.Settle(1, 2*blk)
	release(l, 1, true)
	l.Create(2, true)
	if _, err := l.Settle(2, 4*blk); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("evicted an object in its grace period: %v", err)
	}
	l.EndGrace(1)
	l.Open(1, true)
	release(l, 1, true) // a later writer's close: no new grace
	v, err := l.Settle(2, 4*blk)
	if err != nil || len(v) != 1 || v[0].ID != 1 {
		t.Fatalf("published object not evictable: %v %v", v, err)
	}
	mustOK(t, l)
}

func TestOverloaded(t *testing.T) {
	l, _ := newTest(t, 8*blk)
	l.Create(1, true)
	l.Reserve(1, 8*blk)
	if l.Overloaded(2, 4*blk) {
		t.Fatal("a reservation alone overloads the cache")
	}
	l.Observe(1, 6*blk)
	if !l.Overloaded(2, 4*blk) || l.Overloaded(2, 2*blk) {
		t.Fatal("written bytes not counted")
	}
	// Its own bytes do not overload an object's writer.
	if l.Overloaded(1, 4*blk) || l.Overloaded(1, 8*blk) || !l.Overloaded(1, 9*blk) {
		t.Fatal("a writer's own bytes counted as another's")
	}
}

// Changed is closed when a close may have freed space.
func TestChanged(t *testing.T) {
	l, _ := newTest(t, 8*blk)
	l.Create(1, false)
	ch := l.Changed()
	select {
	case <-ch:
		t.Fatal("closed before anything changed")
	default:
	}
	release(l, 1, false)
	select {
	case <-ch:
	default:
		t.Fatal("not closed by a close")
	}
}

// overshoot_max_bytes forgets an excess two windows later.
func TestOvershootWindow(t *testing.T) {
	l, c := newTest(t, 4*blk)
	l.Create(1, true)
	l.Observe(1, 8*blk)
	l.Settle(1, 0)
	release(l, 1, true)
	if st := l.Stats(); st.OvershootMaxBytes != 4*blk {
		t.Fatalf("overshoot %d, want %d", st.OvershootMaxBytes, 4*blk)
	}
	c.Advance(OvershootWindow)
	if st := l.Stats(); st.OvershootMaxBytes != 4*blk {
		t.Fatalf("forgotten after one window: %d", st.OvershootMaxBytes)
	}
	c.Advance(OvershootWindow + time.Second)
	if st := l.Stats(); st.OvershootMaxBytes != 0 {
		t.Fatalf("overshoot %d after two windows", st.OvershootMaxBytes)
	}
	mustOK(t, l)
}

// A writer that ends in a cache over its capacity for others' bytes (a
// smaller capacity, its objects held open) is no reconciliation: it left
// nothing unadmitted (an outside tester saw one counted for every writer
// refused after a handover to a smaller capacity).
func TestEndWritingOverCapacityIsNoReconciliation(t *testing.T) {
	l, _ := newTest(t, 8*blk)
	for i := ID(1); i <= 6; i++ {
		l.Create(i, false)
		l.SetSize(i, blk)
	}
	l.SetCapacity(4 * blk)
	l.Create(9, true)
	if _, err := l.Settle(9, blk); err == nil {
		t.Fatal("a block admitted where 6 of 4 are held")
	}
	l.Settle(9, 0)
	l.Close(9, true)
	if st := l.Stats(); st.Reconciliations != 0 || st.UsedBytes != 6*blk {
		t.Fatalf("after the writer: %+v", st)
	}
	mustOK(t, l)
}

// TestReserveFreeShare: a guessed reservation takes half the free room
// there is, in whole blocks, where that is at least the least asked,
// and evicts nothing; with less, it changes nothing.
func TestReserveFreeShare(t *testing.T) {
	l, _ := newTest(t, 16*blk)
	stored(l, 1, 10*blk)
	l.Create(2, true)
	if err := l.ReserveFreeShare(2, 8*blk, 2*blk); err != nil {
		t.Fatalf("6 blocks free, 8 asked, 2 at least: %v", err)
	}
	if st := l.Stats(); st.UsedBytes != 13*blk || st.Objects != 2 || st.Evictions != 0 {
		t.Fatalf("after it: %+v; want 3 of the 6 free blocks reserved, nothing evicted", st)
	}
	l.Create(3, true)
	if err := l.ReserveFreeShare(3, blk, blk); err != nil {
		t.Fatalf("3 blocks free, 1 asked: %v", err)
	}
	if st := l.Stats(); st.UsedBytes != 14*blk || st.Evictions != 0 {
		t.Fatalf("after the second: %+v; want the 1 block asked reserved", st)
	}
	l.Create(4, true)
	if err := l.ReserveFreeShare(4, 2*blk, 2*blk); !errors.Is(err, ErrBusy) {
		t.Fatalf("2 blocks free, 2 at least: %v, want ErrBusy (half is 1)", err)
	}
	if st := l.Stats(); st.UsedBytes != 14*blk || st.Evictions != 0 {
		t.Fatalf("a refused one changed the ledger: %+v", st)
	}
}

// TestHoldIsNoUse: Hold pins an object without moving it in the LRU, so
// the coldest unpinned object is still the victim, and Unhold drops the
// pin, again without moving it.
func TestHoldIsNoUse(t *testing.T) {
	l, _ := newTest(t, 3*blk)
	for _, id := range []ID{1, 2, 3} {
		l.Create(id, false)
		l.SetSize(id, blk)
		l.Close(id, false)
	}
	if err := l.Hold(2); err != nil {
		t.Fatal(err)
	}
	l.Unhold(2)
	l.Create(4, true)
	victims, err := l.Reserve(4, blk)
	if err != nil || len(victims) != 1 || victims[0].ID != 1 {
		t.Fatalf("victims %v (%v): want 1, the coldest; a hold is no use", victims, err)
	}
	l.Create(5, true)
	if victims, err = l.Reserve(5, blk); err != nil || len(victims) != 1 || victims[0].ID != 2 {
		t.Fatalf("victims %v (%v): want 2, next in the LRU", victims, err)
	}
}

// TestBudgetWithoutReservation: a writer given a budget and no
// reservation evicts for its growth only up to that budget's bound (a
// quarter of the capacity here); past it its bytes are unadmitted. With
// no budget, its growth evicted the whole cache.
func TestBudgetWithoutReservation(t *testing.T) {
	const n = 64
	l, _ := newTest(t, n*blk)
	fill(t, l, 1, n)
	l.Create(1000, true)
	l.Budget(1000, blk)
	for size := int64(blk); size <= n*blk; size += blk {
		if _, err := l.Grow(1000, size); err != nil {
			t.Fatalf("Grow(%d): %v", size, err)
		}
	}
	if st := l.Stats(); st.Evictions != n/4 || st.UnadmittedBytes != n*blk-n/4*blk {
		t.Fatalf("after the growth: %d evicted, %d unadmitted bytes; want %d and the rest", st.Evictions, st.UnadmittedBytes, n/4)
	}
	mustOK(t, l)
}

// TestReserveEvictingAtMost: a reservation that may evict only objects
// freeing at most a bound takes cold objects of about its size, and
// changes nothing where the coldest would free more.
func TestReserveEvictingAtMost(t *testing.T) {
	l, _ := newTest(t, 16*blk)
	stored(l, 1, 12*blk)
	for _, id := range []ID{2, 3, 4} { // one block each, warmer than 1
		stored(l, id, blk)
	}
	l.Create(100, true)
	if _, err := l.ReserveEvictingAtMost(100, 2*blk, 4*blk); !errors.Is(err, ErrBusy) {
		t.Fatalf("2 blocks where the coldest is 12: %v, want ErrBusy", err)
	}
	if st := l.Stats(); st.Evictions != 0 || st.UsedBytes != 15*blk {
		t.Fatalf("a refused one changed the ledger: %+v", st)
	}
	l.Unlink(1)
	v, err := l.ReserveEvictingAtMost(100, 2*blk, 4*blk)
	if err != nil || len(v) != 0 {
		t.Fatalf("2 blocks with 13 free: %v, %v", v, err)
	}
	l.Create(101, true)
	v, err = l.ReserveEvictingAtMost(101, 12*blk, 12*blk)
	if err != nil || !sameIDs(ids(v), []ID{2}) {
		t.Fatalf("12 blocks with 11 free: victims %v, %v; want 2, the coldest", v, err)
	}
	mustOK(t, l)
}

// stored makes id a closed object of size bytes, the most recent.
func stored(l *Ledger[ID], id ID, size int64) {
	l.Create(id, false)
	l.SetSize(id, size)
	l.Close(id, false)
}

// TestShed: shedding for inodes evicts that many objects from the cold
// end, sparing those held open and those in their grace period, and as
// many as may go when fewer may.
func TestShed(t *testing.T) {
	l, clock := newTest(t, 16*blk)
	for _, id := range []ID{1, 2, 3, 4} {
		stored(l, id, blk)
	}
	clock.Advance(2 * testGrace)
	l.Create(5, true) // written and closed now: in its grace period
	l.SetSize(5, blk)
	l.Close(5, true)
	if err := l.Open(2, false); err != nil {
		t.Fatal(err)
	}
	if v := l.Shed(2); !sameIDs(ids(v), []ID{1, 3}) {
		t.Fatalf("shed 2: victims %v, want 1 and 3 (2 is held open)", ids(v))
	}
	mustOK(t, l)
	if v := l.Shed(10); !sameIDs(ids(v), []ID{4}) {
		t.Fatalf("shed 10: victims %v, want only 4 (2 held, 5 in its grace period)", ids(v))
	}
	if st := l.Stats(); st.Objects != 2 || st.UsedBytes != 2*blk || st.Evictions != 3 {
		t.Fatalf("after shedding: %+v", st)
	}
	mustOK(t, l)
}
