package core

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
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
	if _, err := writer.Write(Interrupt{}, first, 0); err != nil {
		t.Fatal(err)
	}
	// A writer whose object was published while it is open (a close
	// settled it, then a link): it is still being written, so its crash
	// marker stays, and goes with the handover. Below, its predecessor
	// is made one before 2026-12, which cleared such a marker at the
	// publish and says so (WriterState.Early): the successor marks the
	// object again.
	early, err := old.Create(blob.RootID, "early", 0o644, nobody, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := early.Write(Interrupt{}, first, 0); err != nil {
		t.Fatal(err)
	}
	if err := early.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Link(early.ID(), blob.RootID, "early-pub"); err != nil {
		t.Fatal(err)
	}
	// A writer of a whole object, which it has not changed: its marker
	// is intact (its name records the mtime), and the successor clears
	// that one at its release.
	rw, err := old.Open(held, os.O_RDWR, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if old.markers() != 3 {
		t.Fatalf("%d crash markers before the handover; want half's, early's and held's", old.markers())
	}
	ids := map[string]blob.ID{}
	for _, n := range []string{"held", "cold", "a", "b", "c", "half"} {
		ids[n] = old.lookupID(n)
	}

	fr, err := old.Freeze(false)
	if err != nil {
		t.Fatal(err)
	}
	handles := []*Handle{reader, gone, writer, early, rw}
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
	if len(writing) != 3 || len(fr.Writers) != 3 {
		t.Fatalf("frozen: %+v, writing %v; want the three writers", fr, writing)
	}
	for i, w := range fr.Writers {
		if w.ID == early.ID() {
			fr.Writers[i].Early = true
			if err := old.store.ClearIntact(w.ID, blob.Mark{Mtime: w.Intact, Closed: w.Closed}); err != nil {
				t.Fatal(err)
			}
			fr.Writers[i].Intact, fr.Writers[i].Closed = 0, false
		}
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
	if tc.markers() != 3 {
		t.Errorf("%d crash markers; want half's, held's and early's (marked again)", tc.markers())
	}
	buf := make([]byte, mib)
	if n, err := adopted[0].File().ReadAt(buf, 0); n != mib || err != nil {
		t.Errorf("held reader: %d bytes, %v", n, err)
	}
	if _, err := adopted[2].Write(Interrupt{}, first, int64(len(first))); err != nil {
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

// freezeForSuccessor freezes old and opens its store in dir for a
// successor, with the lock old passes.
func freezeForSuccessor(t *testing.T, old *testCore, dir string) (Frozen, *blob.Store) {
	t.Helper()
	fr, err := old.Freeze(false)
	if err != nil {
		t.Fatal(err)
	}
	store, err := blob.OpenLocked(dir, old.store.Lock())
	if err != nil {
		t.Fatal(err)
	}
	return fr, store
}

// TestHandoverHeldPastTheCapacity: a one-phase handover (what a remote
// tier takes) to a capacity smaller than what the old daemon's clients
// hold starts, and evicts only once it starts: until then every stored
// file is there, for the old daemon to serve on should the handover
// fail (an outside tester: the successor failed with "no space" after
// unlinking an object neither uploaded nor kept).
func TestHandoverHeldPastTheCapacity(t *testing.T) {
	dir := t.TempDir()
	old, _ := openCore(t, dir, Config{Capacity: 8 * mib, Grace: time.Millisecond})
	old.Start(func(Drop) {})
	old.put("cold", mib)
	old.clock.Skip(time.Second)
	var handles []*Handle
	held := map[blob.ID]bool{}
	for _, n := range []string{"a", "b", "c"} {
		id := old.put(n, mib)
		h, err := old.Open(id, os.O_RDONLY, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, h)
		held[id] = true
	}
	old.clock.Skip(time.Second)
	fr, store := freezeForSuccessor(t, old, dir)
	tc := &testCore{t: t, clock: old.clock}
	c, _, err := Open(store, Config{Capacity: 2 * mib, Grace: time.Millisecond, Now: tc.clock.Now, Held: held})
	if err != nil {
		t.Fatalf("a handover to 2 MiB with 3 MiB held: %v", err)
	}
	tc.Core = c
	defer tc.Close()
	if _, err := os.Stat(filepath.Join(dir, blob.DataName, "cold")); err != nil {
		t.Fatalf("cold, unheld, unlinked before the successor started: %v", err)
	}
	for _, h := range handles {
		if _, err := c.AdoptHandle(h.State(), h.File()); err != nil {
			t.Fatal(err)
		}
	}
	c.EndHandover(fr)
	c.Start(func(Drop) {})
	if tc.exists("cold") {
		t.Error("cold, unheld, kept past the capacity")
	}
	for _, n := range []string{"a", "b", "c"} {
		if !tc.exists(n) {
			t.Errorf("%s, held open, is gone after the handover", n)
		}
	}
	if st := c.Stats(); st.Reconciliations != 0 || st.UsedBytes != 3*mib {
		t.Errorf("after the handover: %+v", st)
	}
}

// TestHandoverKeepsReservationsWithinRoom: a successor adopts the old
// daemon's writers without evicting for their reservations: it cannot
// know how much of each the old daemon had taken back for later stores,
// and a full one each evicted the object the old daemon kept (an outside
// tester: a handover at the same capacity evicted the only complete
// object, nothing else having happened).
func TestHandoverKeepsReservationsWithinRoom(t *testing.T) {
	dir := t.TempDir()
	old, _ := openCore(t, dir, Config{Capacity: 16 * mib, Grace: time.Millisecond, WriteReserve: 4 * mib})
	old.Start(func(Drop) {})
	var writers []*Handle
	held := map[blob.ID]bool{}
	for i := range 4 {
		h, err := old.Create(blob.RootID, fmt.Sprint("w", i), 0o644, nobody, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Write(Interrupt{}, make([]byte, 512*kib), 0); err != nil {
			t.Fatal(err)
		}
		writers = append(writers, h)
		held[h.ID()] = true
	}
	old.put("big", 4*mib) // takes back what the writers reserved and did not write
	if !old.exists("big") {
		t.Fatal("big not stored")
	}
	fr, store := freezeForSuccessor(t, old, dir)
	var writing []blob.ID
	for _, h := range writers {
		writing = append(writing, h.ID())
	}
	store.KeepMarkers(writing)
	tc := &testCore{t: t, clock: old.clock}
	c, _, err := Open(store, Config{Capacity: 16 * mib, Grace: time.Millisecond, Now: tc.clock.Now, Held: held, WriteReserve: 4 * mib})
	if err != nil {
		t.Fatal(err)
	}
	tc.Core = c
	defer tc.Close()
	c.ExpectWriters(fr.Writers)
	for _, h := range writers {
		if _, err := c.AdoptHandle(h.State(), h.File()); err != nil {
			t.Fatal(err)
		}
	}
	c.EndHandover(fr)
	c.Start(func(Drop) {})
	if st := c.Stats(); !tc.exists("big") || st.Evictions != 0 || st.UsedBytes > st.CapacityBytes {
		t.Errorf("after a handover at the same capacity: big kept %v; %+v", tc.exists("big"), st)
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
	fr, err := old.Freeze(false)
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
		_, err = h.Write(Interrupt{}, make([]byte, mib), 0)
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

// TestTwoPhaseHandoverMatchesPredecessor: a successor that preloads the
// checkpoint a serving Core captures for it (PrepareHandover, Preload),
// while that Core's clients store, delete, rename, link, read and make
// and remove directories, during the capture and after it, then applies
// what the serving Core says changed since, in rounds (HandoverRound,
// Apply), and then what the frozen Core says changed since (Freeze,
// Join), serves exactly
// the predecessor's namespace with the same IDs, and its ledger holds
// the same objects at the same sizes in the same LRU order.
func TestTwoPhaseHandoverMatchesPredecessor(t *testing.T) {
	for seed := range uint64(5) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { twoPhaseHandover(t, seed) })
	}
}

func twoPhaseHandover(t *testing.T, seed uint64) {
	dir := t.TempDir()
	old, _ := openCore(t, dir, Config{Capacity: 64 * mib, Grace: time.Millisecond})
	old.Start(func(Drop) {})
	r := rand.New(rand.NewPCG(seed, 1))
	dirs := []blob.ID{blob.RootID}
	for i := range 4 {
		id, _, err := old.Mkdir(blob.RootID, fmt.Sprintf("d%d", i), 0o755, nobody)
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, id)
	}
	n := 0
	// step makes one random change as a client would; errors (a name
	// taken or absent, a directory not empty) are a client's lot.
	step := func(c *testCore) {
		d := dirs[r.IntN(len(dirs))]
		name := fmt.Sprintf("o%d", r.IntN(60))
		switch op := r.IntN(10); {
		case op < 3:
			n++
			h, err := c.Create(d, fmt.Sprintf("new%d", n), 0o644, nobody, true)
			if err != nil {
				return
			}
			h.Write(Interrupt{}, make([]byte, 1+r.IntN(64*kib)), 0)
			h.Flush()
			h.Release()
		case op < 4:
			c.Unlink(d, name)
		case op < 5:
			c.Rename(d, name, dirs[r.IntN(len(dirs))], fmt.Sprintf("o%d", r.IntN(60)), 0)
		case op < 6:
			if e, _, err := c.Lookup(d, name); err == nil && !e.Dir {
				c.Link(e.ID, dirs[r.IntN(len(dirs))], fmt.Sprintf("l%d", r.IntN(1000)))
			}
		case op < 8:
			if e, _, err := c.Lookup(d, name); err == nil && !e.Dir {
				if h, err := c.Open(e.ID, os.O_RDONLY, false, nil); err == nil {
					h.Release()
				}
			}
		case op < 9:
			if e, _, err := c.Lookup(d, name); err == nil && !e.Dir {
				if h, err := c.Open(e.ID, os.O_RDWR, true, nil); err == nil {
					h.Write(Interrupt{}, make([]byte, 1+r.IntN(32*kib)), int64(r.IntN(64*kib)))
					h.Flush()
					h.Release()
				}
			}
		default:
			if id, _, err := c.Mkdir(d, fmt.Sprintf("sub%d", r.IntN(4)), 0o755, nobody); err == nil {
				dirs = append(dirs, id)
			} else {
				c.Rmdir(d, fmt.Sprintf("sub%d", r.IntN(4)))
			}
		}
	}
	for i := range 200 {
		h, err := old.Create(dirs[i%len(dirs)], fmt.Sprintf("o%d", i%60), 0o644, nobody, true)
		if err != nil {
			continue
		}
		h.Write(Interrupt{}, make([]byte, 1+r.IntN(64*kib)), 0)
		h.Flush()
		h.Release()
	}
	for range 100 {
		step(old)
	}
	// Changes during the capture, between its steps.
	stop, stepped := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	go func() {
		defer close(stepped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			step(old)
			mu.Unlock()
		}
	}()
	data, err := old.PrepareHandover()
	close(stop)
	<-stepped
	if err != nil {
		t.Fatal(err)
	}
	tc, rep := preload(t, old, data, Config{Capacity: 64 * mib, Grace: time.Millisecond})
	c := tc.Core
	// Rounds while the old Core serves on: each says what changed since
	// the last, and the successor applies it.
	for range 2 {
		for range 150 {
			step(old)
		}
		d, err := old.HandoverRound()
		if err != nil {
			t.Fatal(err)
		}
		var got blob.Delta
		if sent, err := json.Marshal(d); err != nil {
			t.Fatal(err)
		} else if err := json.Unmarshal(sent, &got); err != nil {
			t.Fatal(err)
		}
		c.Apply(&got)
	}
	for range 150 {
		step(old)
	}
	frozen, err := old.Freeze(false)
	if err != nil {
		t.Fatal(err)
	}
	// As package mount passes it: in JSON.
	sent, err := json.Marshal(frozen)
	if err != nil {
		t.Fatal(err)
	}
	var fr Frozen
	if err := json.Unmarshal(sent, &fr); err != nil {
		t.Fatal(err)
	}
	if fr.Delta == nil || fr.Taken != rep.SnapshotTaken {
		t.Fatalf("frozen: delta %v, taken %d; the successor loaded %d", fr.Delta != nil, fr.Taken, rep.SnapshotTaken)
	}
	t.Logf("%d objects preloaded; the delta: %d objects, %d gone, %d directories, %d gone",
		rep.Objects, len(fr.Delta.Objects), len(fr.Delta.Gone), len(fr.Delta.Dirs), len(fr.Delta.GoneDirs))
	join(t, tc, old, fr)
	defer tc.Close()
	if got, want := describe(t, c), describe(t, old.Core); got != want {
		t.Errorf("the successor serves\n%s\nthe predecessor served\n%s", got, want)
	}
	if err := c.CheckInvariants(); err != nil {
		t.Error(err)
	}
	if got, want := c.Stats().UsedBytes, stored(t, dir); got != want {
		t.Errorf("used %d, the store holds %d", got, want)
	}
}

// describe is a Core's namespace (every path with its ID) and its
// ledger's LRU order with sizes.
func describe(t *testing.T, c *Core) string {
	var b strings.Builder
	var walk func(id blob.ID, path string)
	walk = func(id blob.ID, path string) {
		ents, _, err := c.ListPage(id, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		sort.Slice(ents, func(i, j int) bool { return ents[i].Name < ents[j].Name })
		for _, e := range ents {
			fmt.Fprintf(&b, "%s/%s %d %v\n", path, e.Name, e.ID, e.Dir)
			if e.Dir {
				walk(e.ID, path+"/"+e.Name)
			}
		}
	}
	walk(blob.RootID, "")
	b.WriteString("LRU:")
	lru := c.ledger.Walk()
	defer lru.Close()
	for more := true; more; {
		more, _ = lru.Next(1<<20, func(id blob.ID, size int64) { fmt.Fprintf(&b, " %d:%d", id, size) })
	}
	return b.String()
}

// TestTwoPhaseHandoverKeepsGrace: an object closed during a handover's
// rounds, and not touched again, is in its grace period at the freeze:
// the last round asks for it again, so the successor keeps its grace.
func TestTwoPhaseHandoverKeepsGrace(t *testing.T) {
	dir := t.TempDir()
	old, _ := openCore(t, dir, Config{Capacity: 64 * mib, Grace: time.Minute})
	old.Start(func(Drop) {})
	old.put("old", mib)
	old.clock.Skip(2 * time.Minute) // old's grace is over
	data, err := old.PrepareHandover()
	if err != nil {
		t.Fatal(err)
	}
	tc, _ := preload(t, old, data, Config{Capacity: 64 * mib, Grace: time.Minute})
	c := tc.Core
	fresh := old.put("fresh", mib)
	d, err := old.HandoverRound()
	if err != nil {
		t.Fatal(err)
	}
	c.Apply(d)
	fr, err := old.Freeze(false)
	if err != nil {
		t.Fatal(err)
	}
	if len(fr.Graced) != 1 || fr.Graced[0].ID != fresh {
		t.Fatalf("frozen in grace: %+v; want fresh (%d)", fr.Graced, fresh)
	}
	join(t, tc, old, fr)
	defer tc.Close()
	if g := c.ledger.InGrace(); len(g) != 1 || g[0].ID != fresh {
		t.Fatalf("the successor's objects in grace: %+v; want fresh", g)
	}
}

// preload builds a successor of old from the checkpoint it prepared,
// over the same store, borrowed, on old's clock.
func preload(t *testing.T, old *testCore, data []byte, cfg Config) (*testCore, LoadReport) {
	t.Helper()
	store, err := blob.OpenBorrowed(old.store.Dir())
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCore{t: t, clock: old.clock}
	cfg.Now = tc.clock.Now
	c, rep, err := Preload(store, data, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc.Core = c
	return tc, rep
}

// join hands tc old's store lock and frozen state, and starts it.
func join(t *testing.T, tc *testCore, old *testCore, fr Frozen) {
	t.Helper()
	if err := tc.TakeStore(old.StoreLock()); err != nil {
		t.Fatal(err)
	}
	if err := tc.Join(fr); err != nil {
		t.Fatal(err)
	}
	tc.EndHandover(fr)
	tc.Start(func(Drop) {})
}

// TestNoCheckpointWhileHandingOver: from PrepareHandover until the
// handover is cancelled (or frozen), no running checkpoint is written:
// a freeze would wait for it with every request stopped (1.2 s at a
// million objects). A clean one (a stop) still is.
func TestNoCheckpointWhileHandingOver(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 64 * mib})
	tc.put("a", kib)
	if _, err := tc.PrepareHandover(); err != nil {
		t.Fatal(err)
	}
	tc.put("b", kib)
	if err := tc.Checkpoint(); !errors.Is(err, errHandingOver) {
		t.Fatalf("a running checkpoint while a handover is prepared: %v", err)
	}
	tc.CancelHandover()
	if err := tc.Checkpoint(); err != nil {
		t.Fatalf("a running checkpoint after the handover was cancelled: %v", err)
	}
}
