package core

import (
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvfs/kvfs/blob"
)

// TestMappingKeepsItsObject: the release of the last handle the kernel
// served from its stored file, while another file has the stored file
// open (a mapping the kernel made from it, which outlives the handle),
// keeps the object pinned, so no eviction unlinks it under the mapping;
// once the other file is closed the next look unpins it, and it is
// evicted like any other. A release not marked MayBeMapped asks nothing.
func TestMappingKeepsItsObject(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib, WaitLimit: 0})
	store := func(name string, mayBeMapped bool) (id blob.ID, other *os.File) {
		t.Helper()
		h, err := tc.Create(blob.RootID, name, 0o644, blob.Owner{UID: -1, GID: -1}, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Write(Interrupt{}, make([]byte, mib), 0); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(); err != nil {
			t.Fatal(err)
		}
		p, _ := tc.store.Path(h.ID())
		if other, err = os.OpenFile(filepath.Join(tc.store.Dir(), "data", p), os.O_RDWR, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Close() })
		if mayBeMapped {
			h.MayBeMapped()
		}
		h.Release()
		return h.ID(), other
	}
	_, mapping := store("mapped", true)
	store("unmarked", false)
	tc.clock.Skip(time.Second) // past their graces
	if st := tc.Stats(); st.PinnedObjects != 1 {
		t.Fatalf("pinned objects %d after the releases, want 1 (the mapped one)", st.PinnedObjects)
	}
	for _, name := range []string{"f1", "f2", "f3", "f4"} {
		tc.put(name, mib)
		tc.clock.Skip(time.Second)
	}
	if !tc.exists("mapped") || tc.exists("unmarked") {
		t.Fatalf("mapped there %v, unmarked %v: want the mapped object kept, the other evicted", tc.exists("mapped"), tc.exists("unmarked"))
	}
	tc.unmapped()
	if !tc.exists("mapped") || tc.Stats().PinnedObjects != 1 {
		t.Fatalf("unpinned while its mapping is there (pinned %d)", tc.Stats().PinnedObjects)
	}
	mapping.Close()
	tc.unmapped()
	if st := tc.Stats(); st.PinnedObjects != 0 {
		t.Fatalf("pinned objects %d once the mapping is gone, want 0", st.PinnedObjects)
	}
	for _, name := range []string{"g1", "g2", "g3", "g4"} {
		tc.put(name, mib)
		tc.clock.Skip(time.Second)
	}
	if tc.exists("mapped") {
		t.Fatal("the object outlived its mapping's pin: want it evicted as the coldest")
	}
}

// TestMappingUnpinnedSoon: an object kept at its release because another
// file still had its stored file open (the kernel's own for the handle,
// closing late on a loaded machine) is unpinned within tens of
// milliseconds once that file closes, not at the next second's look: an
// unlinked object's bytes stayed charged 0.58-0.70 s, and a store
// meanwhile evicted an object for room about to come free (an outside
// tester). In a synctest bubble: its clock moves only when every
// goroutine waits.
func TestMappingUnpinnedSoon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tc := newTestCore(t, Config{Capacity: 4 * mib})
		h, err := tc.Create(blob.RootID, "obj", 0o644, blob.Owner{UID: -1, GID: -1}, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(); err != nil {
			t.Fatal(err)
		}
		p, _ := tc.store.Path(h.ID())
		other, err := os.OpenFile(filepath.Join(tc.store.Dir(), "data", p), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		h.MayBeMapped()
		h.Release()
		if st := tc.Stats(); st.PinnedObjects != 1 {
			t.Fatalf("pinned objects %d after the release with another file open, want 1", st.PinnedObjects)
		}
		other.Close()
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		if st := tc.Stats(); st.PinnedObjects != 0 {
			t.Fatalf("pinned objects %d 50 ms after the other file closed, want 0", st.PinnedObjects)
		}
	})
}
