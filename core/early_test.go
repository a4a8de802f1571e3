package core

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/kvfs/kvfs/blob"
)

// loadingStore is a store that held "old", of old bytes, at a clean
// stop, opened again, and its Preview taking stores up to budget: a
// start serving while it loads, before core.Open.
func loadingStore(t *testing.T, old int, budget int64) (*blob.Store, *Preview) {
	t.Helper()
	dir := t.TempDir()
	tc, _ := openCore(t, dir, Config{Capacity: 64 * mib})
	tc.Start(func(Drop) {})
	tc.put("old", old)
	if err := tc.Close(); err != nil {
		t.Fatal(err)
	}
	store, err := blob.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	pre, err := NewPreview(store)
	if err != nil {
		t.Fatal(err)
	}
	pre.AllowStores(budget)
	return store, pre
}

// TestEarlyStoresSettled: stores taken while the index loads, before the
// load and after it (so that the load indexed some of their names and not
// others), are settled exactly when the index is taken: names made and
// removed are gone (one the load had indexed too), new names are adopted
// or linked, a size the load read mid-write is corrected, a write past
// the budget waits, writers still open go on as core handles, and the
// ledger then charges exactly what the store holds, with no marker left.
func TestEarlyStoresSettled(t *testing.T) {
	store, pre := loadingStore(t, 10000, 64*kib)
	open := func(name string, size int) *EarlyFile {
		t.Helper()
		f, _, err := pre.Create(name, 0o644, nobody)
		if err != nil {
			t.Fatalf("create %s while loading: %v", name, err)
		}
		if size > 0 {
			if _, err := f.Write(bytes.Repeat([]byte{byte(len(name))}, size), 0); err != nil {
				t.Fatalf("write %s while loading: %v", name, err)
			}
		}
		return f
	}
	put := func(name string, size int) {
		t.Helper()
		if err := open(name, size).Release(); err != nil {
			t.Fatalf("release %s: %v", name, err)
		}
	}
	// Before the load: it lists the root and indexes these.
	put("a", 5000)
	put("tmp", 7000)
	if _, err := pre.Link("tmp", "b"); err != nil {
		t.Fatal(err)
	}
	if err := pre.Unlink("tmp"); err != nil {
		t.Fatal(err)
	}
	w1 := open("w1", 3000)
	if _, _, err := pre.Create("old", 0o644, nobody); !errors.Is(err, ErrWait) {
		t.Fatalf("a create of a stored name while loading: %v, want ErrWait", err)
	}
	if err := pre.Unlink("old"); !errors.Is(err, ErrWait) {
		t.Fatalf("an unlink of a stored name while loading: %v, want ErrWait", err)
	}

	var pubMu sync.Mutex
	var published []string
	c, _, err := Open(store, Config{Capacity: 64 * mib, Published: func(p string) {
		pubMu.Lock()
		defer pubMu.Unlock()
		published = append(published, p)
	}})
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCore{Core: c, t: t, clock: &testClock{}}
	t.Cleanup(func() { c.Close() })
	c.Start(func(Drop) {})

	// After it, before the switch: the index has none of these.
	put("late", 9000)
	if _, err := pre.Link("late", "late2"); err != nil {
		t.Fatal(err)
	}
	if err := pre.Unlink("a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pre.Create("a", 0o644, nobody); !errors.Is(err, ErrWait) {
		t.Fatalf("a create of a name made and removed while loading: %v, want ErrWait", err)
	}
	if err := pre.Rename("b", "c", 0); err != nil {
		t.Fatal(err)
	}
	w2 := open("w2", 4000)
	if _, err := w1.Write(make([]byte, 3000), 3000); err != nil {
		t.Fatal(err)
	}
	big := open("big", 0)
	if _, err := big.Write(make([]byte, 32*kib), 0); !errors.Is(err, ErrWait) {
		t.Fatalf("a write past the budget: %v, want ErrWait", err)
	}

	writers := c.TakeEarly(pre)
	if len(writers) != 3 {
		t.Fatalf("%d writers handed to the core, want 3", len(writers))
	}
	// The complete stores are published as their releases would have
	// been (the remote tier uploads them); the writers' at their release.
	pubs := func() []string {
		pubMu.Lock()
		defer pubMu.Unlock()
		return slices.Sorted(slices.Values(published))
	}
	if got := pubs(); !slices.Equal(got, []string{"c", "late", "late2"}) {
		t.Fatalf("published at the switch: %v", got)
	}
	if _, _, err := pre.Create("new", 0o644, nobody); !errors.Is(err, ErrWait) {
		t.Fatalf("a create after the switch: %v, want ErrWait", err)
	}
	// The writers go on through the core, as fusefs hands them on.
	for f, size := range map[*EarlyFile]int{w1: 8000, w2: 4000, big: 32 * kib} {
		h := f.Handle()
		if _, err := f.Write([]byte{1}, 0); !errors.Is(err, ErrWait) || h == nil {
			t.Fatalf("a write after the switch: %v (handle %v), want ErrWait", err, h)
		}
		if _, err := h.Write(make([]byte, size), 0); err != nil {
			t.Fatalf("a write through the core's handle: %v", err)
		}
		if err := h.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := f.Release(); !errors.Is(err, ErrWait) {
			t.Fatalf("release after the switch: %v, want ErrWait", err)
		}
		h.Release()
	}

	// Before any lookup, which would mend a stale name itself.
	if s := c.Stats(); s.Objects != 6 || s.UsedBytes != tc.storeBytes() {
		t.Fatalf("%d objects, %d bytes charged; want 6, the %d bytes the store holds", s.Objects, s.UsedBytes, tc.storeBytes())
	}
	if got := pubs(); !slices.Equal(got, []string{"big", "c", "late", "late2", "w1", "w2"}) {
		t.Fatalf("published: %v", got)
	}
	want := map[string]int64{"old": 10000, "c": 7000, "late": 9000, "late2": 9000, "w1": 8000, "w2": 4000, "big": 32 * kib}
	for name, size := range want {
		_, a, err := c.Lookup(blob.RootID, name)
		if err != nil || a.Size != size {
			t.Fatalf("%s: size %d (%v), want %d", name, a.Size, err, size)
		}
	}
	for _, name := range []string{"a", "b", "tmp"} {
		if _, _, err := c.Lookup(blob.RootID, name); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: %v, want gone", name, err)
		}
	}
	if tc.lookupID("late") != tc.lookupID("late2") {
		t.Fatal("two names of one file stored while loading are two objects")
	}
	if n := tc.markers(); n != 0 {
		t.Fatalf("%d crash markers left", n)
	}
	if err := c.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestEarlyStoresRandom drives stores while loading with random
// sequences of creates, writes, releases, links, renames and unlinks
// over a few names, the load run at a random point among them, against a
// model of what each should do; after the switch the writers still open
// go on through the core. Then the index must hold exactly the model's
// names at the model's sizes, the ledger charge exactly what the store
// holds, and no marker be left.
func TestEarlyStoresRandom(t *testing.T) {
	for seed := range int64(60) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { earlyRandom(t, seed) })
	}
}

func earlyRandom(t *testing.T, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 1))
	store, pre := loadingStore(t, 5000, 1*mib)
	var err error

	type file struct {
		ef   *EarlyFile
		size int64
		open bool
	}
	names := []string{"old", "n0", "n1", "n2", "n3", "n4"}
	at := map[string]*file{} // the model: made names
	gone := map[string]bool{}
	var files []*file
	var c *Core
	loadAt := r.IntN(40)
	for step := range 40 {
		if step == loadAt {
			if c, _, err = Open(store, Config{Capacity: 64 * mib}); err != nil {
				t.Fatal(err)
			}
			c.Start(func(Drop) {})
		}
		name, other := names[r.IntN(len(names))], names[r.IntN(len(names))]
		free := name != "old" && at[name] == nil && !gone[name]
		switch op := r.IntN(6); op {
		case 0:
			ef, _, err := pre.Create(name, 0o644, nobody)
			if free != (err == nil) || err != nil && !errors.Is(err, ErrWait) {
				t.Fatalf("step %d: create %s: %v (free %v)", step, name, err, free)
			}
			if err == nil {
				f := &file{ef: ef, open: true}
				at[name], files = f, append(files, f)
			}
		case 1, 2:
			if len(files) == 0 {
				continue
			}
			f := files[r.IntN(len(files))]
			if !f.open {
				continue
			}
			off, n := int64(r.IntN(20000)), 1+r.IntN(20000)
			if _, err := f.ef.Write(make([]byte, n), off); err != nil {
				t.Fatalf("step %d: write: %v", step, err)
			}
			f.size = max(f.size, off+int64(n))
			if op == 2 {
				if err := f.ef.Release(); err != nil {
					t.Fatalf("step %d: release: %v", step, err)
				}
				f.open = false
			}
		case 3:
			f := at[name]
			okNew := other != "old" && at[other] == nil && !gone[other]
			_, err := pre.Link(name, other)
			if (f != nil && okNew) != (err == nil) {
				t.Fatalf("step %d: link %s %s: %v", step, name, other, err)
			}
			if err == nil {
				at[other] = f
			}
		case 4:
			f := at[name]
			err := pre.Unlink(name)
			if (f != nil) != (err == nil) {
				t.Fatalf("step %d: unlink %s: %v", step, name, err)
			}
			if err == nil {
				delete(at, name)
				gone[name] = true
			}
		case 5:
			f := at[name]
			okNew := other != "old" && at[other] == nil && !gone[other]
			err := pre.Rename(name, other, 0)
			if (f != nil && okNew) != (err == nil) {
				t.Fatalf("step %d: rename %s %s: %v", step, name, other, err)
			}
			if err == nil {
				at[other] = f
				delete(at, name)
				gone[name] = true
			}
		}
	}
	if c == nil {
		if c, _, err = Open(store, Config{Capacity: 64 * mib}); err != nil {
			t.Fatal(err)
		}
		c.Start(func(Drop) {})
	}
	t.Cleanup(func() { c.Close() })
	tc := &testCore{Core: c, t: t, clock: &testClock{}}
	c.TakeEarly(pre)
	for _, f := range files {
		if !f.open {
			continue
		}
		h := f.ef.Handle()
		if err := f.ef.Release(); h != nil && !errors.Is(err, ErrWait) || h == nil && err != nil {
			t.Fatalf("release after the switch: %v (handle %v)", err, h)
		}
		if h == nil {
			f.size = -1 // no name left: gone with its release
			continue
		}
		if _, err := h.Write([]byte{7}, f.size); err != nil {
			t.Fatal(err)
		}
		f.size++
		if err := h.Flush(); err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	// Before any lookup, which would mend a stale name itself.
	objects := map[*file]bool{}
	for _, f := range at {
		objects[f] = true
	}
	if s := c.Stats(); s.UsedBytes != tc.storeBytes() || s.Objects != int64(len(objects))+1 {
		t.Fatalf("%d objects, %d bytes charged; want %d, the %d bytes the store holds",
			s.Objects, s.UsedBytes, len(objects)+1, tc.storeBytes())
	}
	for _, name := range names {
		_, a, err := c.Lookup(blob.RootID, name)
		f := at[name]
		switch {
		case name == "old":
			if err != nil || a.Size != 5000 {
				t.Fatalf("old: %d bytes (%v)", a.Size, err)
			}
		case f == nil:
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("%s: %v, want gone", name, err)
			}
		case err != nil || a.Size != f.size:
			t.Fatalf("%s: %d bytes (%v), want %d", name, a.Size, err, f.size)
		}
	}
	if n := tc.markers(); n != 0 {
		t.Fatalf("%d crash markers left", n)
	}
	if err := c.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestEarlyStoresNoBudget: with no budget (a store on a disk that other
// files fill past the capacity), every store waits for the index.
func TestEarlyStoresNoBudget(t *testing.T) {
	store, err := blob.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	pre, err := NewPreview(store)
	if err != nil {
		t.Fatal(err)
	}
	pre.AllowStores(0)
	if _, _, err := pre.Create("new", 0o644, nobody); !errors.Is(err, ErrWait) {
		t.Fatalf("a create with no budget: %v, want ErrWait", err)
	}
	if names, err := blob.ReadMarkers(filepath.Join(store.Dir(), blob.WritingName)); err != nil || len(names) != 0 {
		t.Fatalf("markers after a create that waits: %v (%v)", names, err)
	}
}
