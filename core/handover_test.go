package core

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfs/kvfs/blob"
)

// TestHandoverKeepsHandles: a Core frozen with a reader of a named
// object, a writer half-way through a new object and a reader of an
// object unlinked while open hands them to a successor over the same
// store (its lock passed, as package mount passes it) with a smaller
// capacity: the successor numbers every name as before, keeps the
// writer's crash marker, serves the readers on, never evicts what they
// hold, publishes the writer's object at its release, lets the
// unlinked object's bytes go at its reader's, and ends with its ledger
// equal to the store.
func TestHandoverKeepsHandles(t *testing.T) {
	dir := t.TempDir()
	old, _ := openCore(t, dir, Config{Capacity: 64 * mib, Grace: time.Millisecond})
	old.Start(func(Drop) {})
	held := old.put("held", mib)
	// Opened first, so the coldest of all at the freeze.
	reader, err := old.Open(held, os.O_RDONLY, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	old.clock.Skip(time.Second)
	old.put("cold", 4*mib)
	for i := range 3 {
		old.put(string(rune('a'+i)), mib)
	}
	old.put("doomed", 2*mib)
	e, _, _ := old.Lookup(blob.RootID, "doomed")
	gone, err := old.Open(e.ID, os.O_RDONLY, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Unlink(blob.RootID, "doomed"); err != nil {
		t.Fatal(err)
	}
	writer, err := old.Create(blob.RootID, "half", 0o644, nobody, true)
	if err != nil {
		t.Fatal(err)
	}
	first := bytes.Repeat([]byte{7}, 512*kib)
	if _, err := writer.Write(first, 0); err != nil {
		t.Fatal(err)
	}
	// A writer whose object was published while it is open (its last
	// close settled it, then a link): its crash marker went early, and
	// must not come back with the handover.
	early, err := old.Create(blob.RootID, "early", 0o644, nobody, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := early.Write(first, 0); err != nil {
		t.Fatal(err)
	}
	if err := early.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Link(early.ID(), blob.RootID, "early-pub"); err != nil {
		t.Fatal(err)
	}
	if old.markers() != 1 {
		t.Fatalf("%d crash markers before the handover; want half's only", old.markers())
	}
	ids := map[string]blob.ID{}
	for _, n := range []string{"held", "cold", "a", "b", "c", "half"} {
		ids[n] = old.lookupID(n)
	}

	fr, err := old.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	handles := []*Handle{reader, gone, writer, early}
	states := make([]HandleState, len(handles))
	heldIDs := map[blob.ID]bool{}
	var writing []blob.ID
	for i, h := range handles {
		states[i] = h.State()
		heldIDs[h.ID()] = true
		if states[i].Writing {
			writing = append(writing, h.ID())
		}
	}
	if len(writing) != 2 || len(fr.Writers) != 2 {
		t.Fatalf("frozen: %+v, writing %v; want the two writers", fr, writing)
	}

	store, err := blob.OpenLocked(dir, old.store.Lock())
	if err != nil {
		t.Fatal(err)
	}
	store.KeepMarkers(writing)
	tc := &testCore{t: t, clock: old.clock}
	// 5 MiB: the 8.5 MiB named and the 2 MiB unnamed do not fit; held,
	// the coldest, must stay, and cold, the next, goes.
	c, rep, err := Open(store, Config{Capacity: 5 * mib, Grace: time.Millisecond, Now: tc.clock.Now, Held: heldIDs})
	if err != nil {
		t.Fatal(err)
	}
	tc.Core = c
	defer tc.Close()
	if rep.SnapshotTaken != fr.Taken {
		t.Fatalf("successor loaded the checkpoint of %d, the predecessor wrote %d", rep.SnapshotTaken, fr.Taken)
	}
	c.ExpectWriters(fr.Writers)
	adopted := make([]*Handle, len(handles))
	for i, h := range handles {
		if adopted[i], err = c.AdoptHandle(states[i], h.File()); err != nil {
			t.Fatalf("adopting %+v: %v", states[i], err)
		}
	}
	c.EndHandover(fr)
	c.Start(func(Drop) {})
	t.Logf("successor's start: %+v; %+v", rep, c.Stats())

	// a, b and c may go to fit the capacity too; what is there has its
	// ID.
	for n, id := range ids {
		e, _, err := tc.Lookup(blob.RootID, n)
		switch {
		case err != nil && (n == "held" || n == "half"):
			t.Errorf("%s, held open, is gone after the handover: %v", n, err)
		case err == nil && e.ID != id:
			t.Errorf("%s: ID %d after the handover, was %d", n, e.ID, id)
		}
	}
	if tc.exists("cold") || tc.exists("doomed") {
		t.Error("cold (the coldest, unheld) kept, or doomed named again")
	}
	if tc.markers() != 1 {
		t.Errorf("%d crash markers; want half's", tc.markers())
	}
	buf := make([]byte, mib)
	if n, err := adopted[0].File().ReadAt(buf, 0); n != mib || err != nil {
		t.Errorf("held reader: %d bytes, %v", n, err)
	}
	if _, err := adopted[2].Write(first, int64(len(first))); err != nil {
		t.Fatalf("writer after the handover: %v", err)
	}
	if err := adopted[2].Flush(); err != nil {
		t.Fatal(err)
	}
	for _, h := range adopted {
		h.Release()
	}
	if tc.markers() != 0 {
		t.Errorf("%d crash markers after the writers' releases", tc.markers())
	}
	if !tc.exists("early-pub") || !tc.exists("early") {
		t.Error("the object published while open is gone")
	}
	if _, a, err := tc.Lookup(blob.RootID, "half"); err != nil || a.Size != mib {
		t.Errorf("half after its release: size %d, %v", a.Size, err)
	}
	if err := c.CheckInvariants(); err != nil {
		t.Error(err)
	}
	if got, want := c.Stats().UsedBytes, stored(t, dir); got != want {
		t.Errorf("used %d, the store holds %d", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, blob.DataName, "held")); err != nil {
		t.Errorf("held: %v", err)
	}
}

// TestHandoverKeepsGrace: an object closed just before a handover has
// its publish step (link, rename) still to come; the successor keeps it
// from eviction for the rest of its grace period, as the old daemon
// would have: a store that needs its room is refused, not served by
// evicting it.
func TestHandoverKeepsGrace(t *testing.T) {
	dir := t.TempDir()
	old, _ := openCore(t, dir, Config{Capacity: 64 * mib, Grace: time.Minute})
	old.Start(func(Drop) {})
	old.put("old", mib)
	old.clock.Skip(2 * time.Minute) // old's grace is over
	fresh := old.put("fresh", 3*mib)
	fr, err := old.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	if len(fr.Graced) != 1 || fr.Graced[0].ID != fresh {
		t.Fatalf("frozen in grace: %+v; want fresh", fr.Graced)
	}
	store, err := blob.OpenLocked(dir, old.store.Lock())
	if err != nil {
		t.Fatal(err)
	}
	graced := map[blob.ID]int64{}
	for _, g := range fr.Graced {
		graced[g.ID] = g.LastClose
	}
	tc := &testCore{t: t, clock: old.clock}
	c, _, err := Open(store, Config{Capacity: 3*mib + 512*kib, Grace: time.Minute, Now: tc.clock.Now, Graced: graced})
	if err != nil {
		t.Fatal(err)
	}
	tc.Core = c
	defer tc.Close()
	c.EndHandover(fr)
	c.Start(func(Drop) {})
	h, err := c.Create(blob.RootID, "next", 0o644, nobody, true)
	if err == nil {
		_, err = h.Write(make([]byte, mib), 0)
		if err == nil {
			err = h.Flush()
		}
		h.Release()
	}
	if !tc.exists("fresh") {
		t.Fatalf("fresh, closed a moment before the handover, was evicted for a new store (%v)", err)
	}
	if err == nil {
		t.Fatal("a store that could only fit by evicting fresh was admitted")
	}
}
