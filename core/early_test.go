package core

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/ledger"
)

// loadingStore is a store that held "old", of old bytes, and the files
// of stored (names to sizes; "name=other" a second name of other) at a
// clean stop, opened again, and its Preview taking stores up to budget:
// a start serving while it loads, before core.Open.
func loadingStore(t *testing.T, old int, budget int64, stored ...string) (*blob.Store, *Preview) {
	t.Helper()
	dir := t.TempDir()
	tc, _ := openCore(t, dir, Config{Capacity: 64 * mib})
	tc.Start(func(Drop) {})
	tc.put("old", old)
	for _, f := range stored {
		name, size, _ := strings.Cut(f, ":")
		if name, other, ok := strings.Cut(name, "="); ok {
			if _, err := tc.Link(tc.lookupID(other), blob.RootID, name); err != nil {
				t.Fatal(err)
			}
			continue
		}
		n, err := strconv.Atoi(size)
		if err != nil {
			t.Fatal(err)
		}
		tc.put(name, n)
	}
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
// Stored files removed or moved while loading are gone from their names,
// and their bytes, once off the disk, back in the budget. Names removed
// are made again, before the load and after it, one by a writer open at
// the switch.
func TestEarlyStoresSettled(t *testing.T) {
	store, pre := loadingStore(t, 10000, 64*kib, "s1:1000", "s2:2000", "s3:3000", "s4:4000", "hl:5000", "hl2=hl")
	used := func(want int64) {
		t.Helper()
		if got := pre.early.used.Load(); got != want {
			t.Fatalf("%d bytes of the budget taken, want %d", got, want)
		}
	}
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
	used(8192 + 8192 + 4096) // a, tmp and w1, by 4 KiB blocks
	// Stored files: removed (a name of two, and the one of another,
	// whose bytes come back), moved, and not moved while it has two.
	if err := pre.Unlink("hl2"); err != nil {
		t.Fatalf("an unlink of a stored name while loading: %v", err)
	}
	used(20480)
	if err := pre.Unlink("s1"); err != nil {
		t.Fatalf("an unlink of a stored name while loading: %v", err)
	}
	used(20480 - 4096)
	put("s1", 1500) // made again, before the load: it indexes this one
	used(20480)
	if err := pre.Rename("s2", "s2new", 0); err != nil {
		t.Fatalf("a rename of a stored file while loading: %v", err)
	}
	if err := pre.Rename("old", "s2new", 0); !errors.Is(err, ErrWait) {
		t.Fatalf("a rename over a name moved to while loading: %v, want ErrWait", err)
	}
	if err := pre.Rename("s3", "old", 0); !errors.Is(err, ErrWait) {
		t.Fatalf("a rename over a stored name while loading: %v, want ErrWait", err)
	}
	if err := pre.Unlink(""); !errors.Is(err, ErrWait) {
		t.Fatalf("an unlink of the root while loading: %v, want ErrWait", err)
	}
	used(20480)

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
	c.AwaitEarly()
	c.Start(func(Drop) {})

	// After it, before the switch: the index has none of these.
	put("late", 9000)
	if _, err := pre.Link("late", "late2"); err != nil {
		t.Fatal(err)
	}
	if err := pre.Unlink("a"); err != nil {
		t.Fatal(err)
	}
	if err := pre.Rename("b", "c", 0); err != nil {
		t.Fatal(err)
	}
	w2 := open("w2", 4000)
	if _, err := w1.Write(make([]byte, 3000), 3000); err != nil {
		t.Fatal(err)
	}
	// Stored files the load indexed.
	used(20480 + 12288 - 8192 + 4096 + 4096) // late; a's bytes back; w2; w1 grown
	if err := pre.Unlink("s3"); err != nil {
		t.Fatal(err)
	}
	if err := pre.Rename("s4", "s4new", 0); err != nil {
		t.Fatal(err)
	}
	if err := pre.Rename("hl", "hlx", 0); err != nil {
		t.Fatalf("a rename of a stored file left with one name: %v", err)
	}
	if err := pre.Unlink("hlx"); err != nil {
		t.Fatal(err)
	}
	used(32768 - 4096 - 8192) // s3's bytes and hl's back
	// Made again after the load, which indexed what they named before:
	// a name made while loading and one stored, whose writer is open
	// at the switch.
	put("a", 2500)
	s3 := open("s3", 3000)
	big := open("big", 0)
	if _, err := big.Write(make([]byte, 52*kib), 0); !errors.Is(err, ErrWait) {
		t.Fatalf("a write past the budget: %v, want ErrWait", err)
	}

	writers := c.TakeEarly(pre)
	if len(writers) != 4 {
		t.Fatalf("%d writers handed to the core, want 4", len(writers))
	}
	// Settling them changed the index for kvfs's own changes, none made
	// behind its back: no reconciliation (an outside tester saw 4,292
	// after one loading start under load, and warnings of objects
	// vanished that its clients had deleted through the mount).
	if r := c.Stats().Reconciliations; r != 0 {
		t.Errorf("%d reconciliations counted for the stores taken while loading", r)
	}
	// The complete stores are published as their releases would have
	// been (the remote tier uploads them); the writers' at their release.
	pubs := func() []string {
		pubMu.Lock()
		defer pubMu.Unlock()
		return slices.Sorted(slices.Values(published))
	}
	if got := pubs(); !slices.Equal(got, []string{"a", "c", "late", "late2", "s1", "s2new", "s4new"}) {
		t.Fatalf("published at the switch: %v", got)
	}
	if _, _, err := pre.Create("new", 0o644, nobody); !errors.Is(err, ErrWait) {
		t.Fatalf("a create after the switch: %v, want ErrWait", err)
	}
	// The writers go on through the core, as fusefs hands them on.
	for f, size := range map[*EarlyFile]int{w1: 8000, w2: 4000, big: 52 * kib, s3: 3000} {
		h := f.Handle()
		if _, err := f.Write([]byte{1}, 0); !errors.Is(err, ErrWait) || h == nil {
			t.Fatalf("a write after the switch: %v (handle %v), want ErrWait", err, h)
		}
		if _, err := h.Write(Interrupt{}, make([]byte, size), 0); err != nil {
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
	if s := c.Stats(); s.Objects != 11 || s.UsedBytes != tc.storeBytes() || s.Stores != 8 {
		t.Fatalf("%d objects, %d bytes charged, %d stores; want 11, the %d bytes the store holds, 8",
			s.Objects, s.UsedBytes, s.Stores, tc.storeBytes())
	}
	if got := pubs(); !slices.Equal(got, []string{"a", "big", "c", "late", "late2", "s1", "s2new", "s3", "s4new", "w1", "w2"}) {
		t.Fatalf("published: %v", got)
	}
	want := map[string]int64{"old": 10000, "c": 7000, "late": 9000, "late2": 9000, "w1": 8000, "w2": 4000, "big": 52 * kib,
		"s2new": 2000, "s4new": 4000, "s1": 1500, "a": 2500, "s3": 3000}
	for name, size := range want {
		_, a, err := c.Lookup(blob.RootID, name)
		if err != nil || a.Size != size {
			t.Fatalf("%s: size %d (%v), want %d", name, a.Size, err, size)
		}
	}
	for _, name := range []string{"b", "tmp", "s2", "s4", "hl", "hl2", "hlx"} {
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
	for seed := range int64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { earlyRandom(t, seed) })
	}
}

func earlyRandom(t *testing.T, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 1))
	store, pre := loadingStore(t, 5000, 1*mib, "s:6000", "hl:7000", "hl2=hl")
	var err error

	// file is the model of a made file, or of a stored one (ef nil;
	// stored: its names in the store as the load finds them).
	type file struct {
		ef     *EarlyFile
		size   int64
		open   bool
		names  int
		stored bool
	}
	old, s, hl := &file{size: 5000, names: 1, stored: true}, &file{size: 6000, names: 1, stored: true}, &file{size: 7000, names: 2, stored: true}
	names := []string{"old", "s", "hl", "hl2", "n0", "n1", "n2", "n3"}
	at := map[string]*file{"old": old, "s": s, "hl": hl, "hl2": hl}
	made := map[string]bool{} // the names Preview made (a stored file's new ones too)
	var files []*file
	var c *Core
	// used is the budget the model's files take: a made file's bytes
	// while it has a name or a writer; a stored file's, given back once
	// it has neither.
	used := func() (n int64) {
		for _, f := range append([]*file{old, s, hl}, files...) {
			switch {
			case f.names > 0 || f.open:
				if !f.stored {
					n += ledger.Charge(f.size)
				}
			case f.stored:
				n -= ledger.Charge(f.size)
			}
		}
		return n
	}
	free := func(name string) bool { return at[name] == nil }
	loadAt := r.IntN(40)
	for step := range 40 {
		if step == loadAt {
			if c, _, err = Open(store, Config{Capacity: 64 * mib}); err != nil {
				t.Fatal(err)
			}
			c.AwaitEarly() // as the mount does: the audit waits for TakeEarly
			c.Start(func(Drop) {})
		}
		name, other := names[r.IntN(len(names))], names[r.IntN(len(names))]
		op := r.IntN(6)
		t.Logf("step %d (load at %d): op %d %s %s", step, loadAt, op, name, other)
		switch op {
		case 0:
			ef, _, err := pre.Create(name, 0o644, nobody)
			if free(name) != (err == nil) || err != nil && !errors.Is(err, ErrWait) {
				t.Fatalf("step %d: create %s: %v (free %v)", step, name, err, free(name))
			}
			if err == nil {
				f := &file{ef: ef, open: true, names: 1}
				at[name], made[name], files = f, true, append(files, f)
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
			// Links of made names only: a stored file's are the load's.
			f := at[name]
			_, err := pre.Link(name, other)
			if (made[name] && free(other)) != (err == nil) {
				t.Fatalf("step %d: link %s %s: %v", step, name, other, err)
			}
			if err == nil {
				at[other], made[other] = f, true
				f.names++
			}
		case 4:
			f := at[name]
			err := pre.Unlink(name)
			if (f != nil) != (err == nil) {
				t.Fatalf("step %d: unlink %s: %v", step, name, err)
			}
			if err == nil {
				delete(at, name)
				delete(made, name)
				f.names--
			}
		case 5:
			// A stored file's name moves only while it is its one.
			f := at[name]
			ok := f != nil && free(other) && (made[name] || f.names == 1)
			err := pre.Rename(name, other, 0)
			if ok != (err == nil) {
				t.Fatalf("step %d: rename %s %s: %v", step, name, other, err)
			}
			if err == nil {
				at[other], made[other] = f, true
				delete(at, name)
				delete(made, name)
			}
		}
		if got, want := pre.early.used.Load(), used(); got != want {
			t.Fatalf("step %d: %d bytes of the budget taken, want %d", step, got, want)
		}
	}
	if c == nil {
		if c, _, err = Open(store, Config{Capacity: 64 * mib}); err != nil {
			t.Fatal(err)
		}
		c.AwaitEarly()
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
		if _, err := h.Write(Interrupt{}, []byte{7}, f.size); err != nil {
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
	if s := c.Stats(); s.UsedBytes != tc.storeBytes() || s.Objects != int64(len(objects)) {
		t.Fatalf("%d objects, %d bytes charged; want %d, the %d bytes the store holds",
			s.Objects, s.UsedBytes, len(objects), tc.storeBytes())
	}
	for _, name := range names {
		_, a, err := c.Lookup(blob.RootID, name)
		f := at[name]
		switch {
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

// TestEarlyStoresKeepStoredNames: a Preview that keeps stored names (a
// mount with a shared tier) leaves their unlinks and renames to the
// index, and still takes stores of new names and changes of them.
func TestEarlyStoresKeepStoredNames(t *testing.T) {
	store, pre := loadingStore(t, 5000, 1*mib)
	defer store.Close()
	pre.KeepStoredNames()
	if err := pre.Unlink("old"); !errors.Is(err, ErrWait) {
		t.Fatalf("an unlink of a stored name: %v, want ErrWait", err)
	}
	if err := pre.Rename("old", "moved", 0); !errors.Is(err, ErrWait) {
		t.Fatalf("a rename of a stored name: %v, want ErrWait", err)
	}
	f, _, err := pre.Create("new", 0o644, nobody)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Release(); err != nil {
		t.Fatal(err)
	}
	if err := pre.Rename("new", "new2", 0); err != nil {
		t.Fatalf("a rename of a name made while loading: %v", err)
	}
	if err := pre.Unlink("new2"); err != nil {
		t.Fatalf("an unlink of a name made while loading: %v", err)
	}
	if _, err := store.StatPath("old"); err != nil {
		t.Fatalf("the stored name: %v", err)
	}
}

// TestEarlyStoresDirs: directories made while loading (as vLLM's file
// tier makes them for its chunks), before the load, which indexes them
// itself, and after it, which the switch indexes, nested and empty, hold
// the stores made in them; a mkdir over a held name or under no
// directory waits.
func TestEarlyStoresDirs(t *testing.T) {
	store, pre := loadingStore(t, 5000, 1*mib)
	mkdir := func(rel string) {
		t.Helper()
		if _, err := pre.Mkdir(rel, 0o755, nobody); err != nil {
			t.Fatalf("mkdir %s while loading: %v", rel, err)
		}
	}
	put := func(rel string, n int) {
		t.Helper()
		f, _, err := pre.Create(rel, 0o644, nobody)
		if err != nil {
			t.Fatalf("create %s while loading: %v", rel, err)
		}
		if _, err := f.Write(make([]byte, n), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Release(); err != nil {
			t.Fatal(err)
		}
	}
	mkdir("a")
	mkdir("a/b")
	put("a/b/x", 3000)
	for _, rel := range []string{"old", "a/b", "none/c", "old/c"} {
		if _, err := pre.Mkdir(rel, 0o755, nobody); !errors.Is(err, ErrWait) {
			t.Fatalf("mkdir %s while loading: %v, want ErrWait", rel, err)
		}
	}
	c, _, err := Open(store, Config{Capacity: 64 * mib})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.AwaitEarly()
	c.Start(func(Drop) {})
	tc := &testCore{Core: c, t: t, clock: &testClock{}}
	mkdir("a/b2")
	put("a/b2/y", 4000)
	mkdir("a/b/c")
	put("a/b/c/z", 1000)
	mkdir("e")
	mkdir("e/f")
	c.TakeEarly(pre)

	lookup := func(rel string) (blob.Entry, Attr, error) {
		e, a, err := blob.Entry{ID: RootID, Dir: true}, Attr{}, error(nil)
		for _, name := range strings.Split(rel, "/") {
			if e, a, err = c.Lookup(e.ID, name); err != nil {
				break
			}
		}
		return e, a, err
	}
	for rel, size := range map[string]int64{"a/b/x": 3000, "a/b2/y": 4000, "a/b/c/z": 1000} {
		if e, a, err := lookup(rel); err != nil || e.Dir || a.Size != size {
			t.Fatalf("%s once loaded: %+v, %d bytes (%v), want a file of %d", rel, e, a.Size, err, size)
		}
	}
	for _, rel := range []string{"a", "a/b", "a/b2", "a/b/c", "e", "e/f"} {
		if e, _, err := lookup(rel); err != nil || !e.Dir {
			t.Fatalf("%s once loaded: %+v (%v), want a directory", rel, e, err)
		}
	}
	if s := c.Stats(); s.Objects != 4 || s.UsedBytes != tc.storeBytes() {
		t.Fatalf("%d objects, %d bytes charged; want 4, the %d bytes the store holds", s.Objects, s.UsedBytes, tc.storeBytes())
	}
	if err := c.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestEarlyWriterRefusedAtSwitch: a writer open at the switch whose
// object the index cannot keep (here larger than the capacity) is no
// core handle, and from then on each write and flush of it answers
// ErrNoSpace, as a core writer refused for space does: its object is
// gone with its name, so nothing it writes can ever be published. A
// writer that lost its names while loading (unlinked while open) is
// no refusal: it goes on within the budget, as an unlinked writer does.
func TestEarlyWriterRefusedAtSwitch(t *testing.T) {
	store, pre := loadingStore(t, 10000, mib)
	big, _, err := pre.Create("big", 0o644, nobody)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := big.Write(make([]byte, 128*kib), 0); err != nil {
		t.Fatal(err)
	}
	nameless, _, err := pre.Create("nameless", 0o644, nobody)
	if err != nil {
		t.Fatal(err)
	}
	if err := pre.Unlink("nameless"); err != nil {
		t.Fatal(err)
	}
	c, _, err := Open(store, Config{Capacity: 64 * kib})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.AwaitEarly()
	c.Start(func(Drop) {})
	if writers := c.TakeEarly(pre); len(writers) != 0 {
		t.Fatalf("%d writers went on as core handles, want none", len(writers))
	}
	if big.Handle() != nil || !big.Refused() {
		t.Fatalf("the writer past the capacity: handle %v, refused %v; want none, refused", big.Handle(), big.Refused())
	}
	if _, _, err := c.Lookup(RootID, "big"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lookup of the refused writer's name: %v, want ErrNotFound", err)
	}
	if _, err := big.Write(make([]byte, 4096), 128*kib); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a write of the refused writer: %v, want ErrNoSpace", err)
	}
	if err := big.Flush(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a flush of the refused writer: %v, want ErrNoSpace", err)
	}
	if nameless.Refused() {
		t.Fatal("a writer that lost its names while loading counts as refused")
	}
	if _, err := nameless.Write(make([]byte, 4096), 0); err != nil {
		t.Fatalf("a write of a writer unlinked while loading: %v", err)
	}
	if err := nameless.Flush(); err != nil {
		t.Fatalf("a flush of a writer unlinked while loading: %v", err)
	}
	for _, f := range []*EarlyFile{big, nameless} {
		if err := f.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestEarlyPublishWaitsForRelease: a link or rename that publishes a
// store taken while loading, whose writer's close returned, waits (at
// most releaseWait) for the RELEASE the kernel sends after that close,
// so the publish returns with the store's crash marker gone: a kill
// after LMCache's link and unlink of the temporary name left a
// completed store marked, and the next start deleted it. A writer still
// open (not closed) is not waited for; nor, after the switch, is its
// core handle's publish left out: the core's link waits for it too. In
// a synctest bubble: its clock moves only when every goroutine waits.
func TestEarlyPublishWaitsForRelease(t *testing.T) {
	store, pre := loadingStore(t, 1000, mib)
	marked := func(f *EarlyFile) bool {
		t.Helper()
		inos, err := store.WritingInodes()
		if err != nil {
			t.Fatal(err)
		}
		return inos[f.ino]
	}
	synctest.Test(t, func(t *testing.T) {
		closed := func(name string) *EarlyFile {
			t.Helper()
			f, _, err := pre.Create(name, 0o644, nobody)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(make([]byte, 8*kib), 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Flush(); err != nil {
				t.Fatal(err)
			}
			return f
		}
		async := func(publish func() error) (<-chan error, time.Time) {
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- publish() }()
			synctest.Wait()
			return done, start
		}

		// Released while the link waits: it returns then, unmarked.
		f := closed("tmp1")
		done, _ := async(func() error { _, err := pre.Link("tmp1", "final1"); return err })
		select {
		case err := <-done:
			t.Fatalf("the link of a closed store returned (%v) before its release", err)
		default:
		}
		if err := f.Release(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("the link went on waiting after the release")
		}
		if marked(f) {
			t.Fatal("a published store is still marked as being written")
		}

		// No release comes: the rename waits releaseWait, no more.
		g := closed("tmp2")
		done, start := async(func() error { return pre.Rename("tmp2", "final2", 0) })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != releaseWait {
			t.Errorf("the rename waited %v for a release that did not come; want %v", waited, releaseWait)
		}

		// A writer not closed yet: its link does not wait.
		h, _, err := pre.Create("tmp3", 0o644, nobody)
		if err != nil {
			t.Fatal(err)
		}
		done, start = async(func() error { _, err := pre.Link("tmp3", "final3"); return err })
		if err := <-done; err != nil || time.Since(start) != 0 {
			t.Fatalf("the link of a writer still open: %v after %v; want no wait", err, time.Since(start))
		}

		// Closed while loading, open at the switch: the core's link of
		// it waits for its core handle's release.
		c, _, err := Open(store, Config{Capacity: 64 * mib})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.AwaitEarly()
		c.Start(func(Drop) {})
		writers := c.TakeEarly(pre)
		if len(writers) != 2 || g.Handle() == nil {
			t.Fatalf("%d writers went on as core handles, want tmp2's and tmp3's", len(writers))
		}
		id := g.Handle().ID()
		done, _ = async(func() error { _, err := c.Link(id, RootID, "final2b"); return err })
		select {
		case err := <-done:
			t.Fatalf("the core's link of a store closed while loading returned (%v) before its release", err)
		default:
		}
		if err := g.Release(); !errors.Is(err, ErrWait) {
			t.Fatalf("release of a writer handed on: %v, want ErrWait", err)
		}
		g.Handle().Release()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if marked(g) {
			t.Fatal("a published store is still marked as being written after the switch")
		}
		if err := h.Release(); !errors.Is(err, ErrWait) {
			t.Fatal(err)
		}
		h.Handle().Release()
		if err := c.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	})
}
