package ledger

import (
	"fmt"
	"math"
	"testing"
)

// order is the ledger's LRU order with sizes.
func order(l *Ledger[ID]) string {
	out := ""
	each(l, func(id ID, size int64) { out += fmt.Sprintf(" %d:%d", id, size) })
	return out
}

// TestPlaceAndSetCapacity: a handover's successor puts entries exactly
// where its predecessor had them (Place: after a given entry, or first;
// an entry it has already moves), drops those gone (Drop), and only
// then fits its capacity (SetCapacity), evicting the coldest and never
// a pinned entry.
func TestPlaceAndSetCapacity(t *testing.T) {
	c := newClock()
	l := New[ID](Config{Capacity: math.MaxInt64, Grace: testGrace, Now: c.Now})
	for id := ID(1); id <= 4; id++ {
		if _, err := l.Restore(id, int64(id)*blk, 1); err != nil {
			t.Fatal(err)
		}
	}
	l.Place(5, 5*blk, 1, 2, false) // new, after 2
	l.Place(4, 6*blk, 2, 0, true)  // moved first, resized
	l.Place(1, blk, 1, 3, false)   // moved after 3
	l.Drop(2)
	mustOK(t, l)
	if got, want := order(l), fmt.Sprintf(" 4:%d 5:%d 3:%d 1:%d", 6*blk, 5*blk, 3*blk, blk); got != want {
		t.Fatalf("order %q, want %q", got, want)
	}
	if err := l.Open(4, false); err != nil {
		t.Fatal(err)
	}
	// The open made 4 the most recently used. 15 blocks held; fitting
	// 9 must evict 5 and 3, the coldest, keeping 1 and the pinned 4.
	victims := l.SetCapacity(9 * blk)
	mustOK(t, l)
	if len(victims) != 2 || victims[0].ID != 5 || victims[1].ID != 3 {
		t.Fatalf("victims %+v, want 5 and 3", victims)
	}
	if got, want := order(l), fmt.Sprintf(" 1:%d 4:%d", blk, 6*blk); got != want || l.Capacity() != 9*blk {
		t.Fatalf("order %q capacity %d, want %q and %d", got, l.Capacity(), want, 9*blk)
	}
	// Fitting 5 blocks would have to evict the pinned 4 too: what can
	// go goes (1), and the cache stays over its capacity, by 4, until
	// 4's reader closes and a Trim takes it.
	if v := l.SetCapacity(5 * blk); len(v) != 1 || v[0].ID != 1 || !l.Over() {
		t.Fatalf("victims %+v of a capacity only the pinned entry could meet (over: %v); want 1, and over", v, l.Over())
	}
	if v := l.Trim(); len(v) != 0 {
		t.Fatalf("Trim with only the pinned entry left: %+v", v)
	}
	l.Close(4, false)
	if v := l.Trim(); len(v) != 1 || v[0].ID != 4 || l.Over() {
		t.Fatalf("Trim after the reader's close: %+v (over: %v); want 4", v, l.Over())
	}
	mustOK(t, l)
}

// A successor serves requests before its start fits the handed-over
// ledger to its capacity: the race detector found a truncate's Capacity
// racing SetCapacity after a takeover (an outside tester, 1 handover in
// 16 under load). Capacity reads under the ledger's lock.
func TestCapacityWhileSet(t *testing.T) {
	l := New[uint64](Config{Capacity: 1 << 20})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 1000 {
			l.SetCapacity(int64(1<<20 + i*4096))
		}
	}()
	for {
		select {
		case <-done:
			if got := l.Capacity(); got != 1<<20+999*4096 {
				t.Fatalf("capacity %d after the last set", got)
			}
			return
		default:
			if c := l.Capacity(); c < 1<<20 {
				t.Fatalf("capacity %d", c)
			}
		}
	}
}

// TestSetCapacityEvictsWhatCanNeverFitFirst: a smaller capacity evicts
// first the objects larger than all of it, wherever they are in the LRU:
// they can never fit, and evicting the colder ones before them kept
// nothing (an outside tester's handover from 64 MiB to 32 MiB: 24 MiB
// of cold objects evicted, then a recent 40 MiB one).
func TestSetCapacityEvictsWhatCanNeverFitFirst(t *testing.T) {
	c := newClock()
	l := New[ID](Config{Capacity: 64 * blk, Grace: testGrace, Now: c.Now})
	for id := ID(1); id <= 8; id++ {
		if _, err := l.Restore(id, 3*blk, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Restore(9, 40*blk, 1); err != nil { // the most recent
		t.Fatal(err)
	}
	victims := l.SetCapacity(32 * blk)
	mustOK(t, l)
	if len(victims) != 1 || victims[0].ID != 9 {
		t.Fatalf("victims %+v, want the 40-block entry alone", victims)
	}
	if st := l.Stats(); st.Objects != 8 || st.UsedBytes != 24*blk {
		t.Fatalf("after: %d objects, %d bytes; want the 8 small ones", st.Objects, st.UsedBytes)
	}
}
