package core

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/blob"
	"golang.org/x/sys/unix"
)

// putBytes stores a closed object holding data.
func (tc *testCore) putBytes(name, data string) blob.ID {
	tc.t.Helper()
	h, err := tc.Create(blob.RootID, name, 0o644, blob.Owner{UID: -1, GID: -1}, true)
	if err != nil {
		tc.t.Fatalf("create %s: %v", name, err)
	}
	if _, err := h.Write([]byte(data), 0); err != nil {
		tc.t.Fatalf("write %s: %v", name, err)
	}
	if err := h.Flush(); err != nil {
		tc.t.Fatalf("flush %s: %v", name, err)
	}
	h.Release()
	return h.ID()
}

// TestReadsOffTheLock: a read of a stored file makes its syscall with no
// namespace lock held (readStored), and a change of names committed
// between its look at the index and its syscall makes it read again under
// the lock: it never answers for one object with another's bytes.
func TestReadsOffTheLock(t *testing.T) {
	t.Run("open", func(t *testing.T) {
		tc := newTestCore(t, Config{Capacity: 4 * mib})
		a := tc.putBytes("a", "first object")
		testHookReadStored = func() {
			testHookReadStored = nil
			// Off the lock: a commit goes through, as it could not while
			// the read held it.
			if !tc.Core.mu.TryLock() {
				t.Error("the read holds the namespace lock across its syscall")
			} else {
				tc.Core.mu.Unlock()
			}
			if err := tc.Unlink(blob.RootID, "a"); err != nil {
				t.Error(err)
			}
			tc.putBytes("a", "another one")
		}
		defer func() { testHookReadStored = nil }()
		h, err := tc.Open(a, unix.O_RDONLY, false, nil)
		if err == nil {
			b, _ := io.ReadAll(h.File())
			h.Release()
			t.Fatalf("open of the removed object read %q", b)
		}
		if !errors.Is(err, ErrStale) {
			t.Fatalf("open of the removed object: %v, want ErrStale", err)
		}
		if n := tc.counters.readsRedone.Load(); n != 1 {
			t.Fatalf("%d reads made again, want 1", n)
		}
	})
	t.Run("lookup", func(t *testing.T) {
		tc := newTestCore(t, Config{Capacity: 4 * mib})
		tc.putBytes("a", "first object")
		b := tc.putBytes("b", strings.Repeat("the one renamed over it", 9))
		testHookReadStored = func() {
			testHookReadStored = nil
			if err := tc.Rename(blob.RootID, "b", blob.RootID, "a", 0); err != nil {
				t.Error(err)
			}
		}
		defer func() { testHookReadStored = nil }()
		e, a, err := tc.Lookup(blob.RootID, "a")
		if err != nil {
			t.Fatalf("lookup across a rename over the name: %v", err)
		}
		if e.ID != b || a.Size != 9*23 {
			t.Fatalf("lookup found object %d of %d bytes, want %d of %d", e.ID, a.Size, b, 9*23)
		}
		if n := tc.counters.readsRedone.Load(); n != 1 {
			t.Fatalf("%d reads made again, want 1", n)
		}
	})
	t.Run("elsewhere", func(t *testing.T) {
		// A change in another directory leaves the read as it was.
		tc := newTestCore(t, Config{Capacity: 4 * mib})
		tc.putBytes("a", "first object")
		d, _, err := tc.Mkdir(blob.RootID, "d", 0o755, blob.Owner{UID: -1, GID: -1})
		if err != nil {
			t.Fatal(err)
		}
		testHookReadStored = func() {
			testHookReadStored = nil
			h, err := tc.Create(d, "x", 0o644, blob.Owner{UID: -1, GID: -1}, true)
			if err != nil {
				t.Error(err)
				return
			}
			h.Release()
		}
		defer func() { testHookReadStored = nil }()
		if _, a, err := tc.Lookup(blob.RootID, "a"); err != nil || a.Size != 12 {
			t.Fatalf("lookup: %v, %d bytes", err, a.Size)
		}
		if n := tc.counters.readsRedone.Load(); n != 0 {
			t.Fatalf("%d reads made again, want 0", n)
		}
	})
}
