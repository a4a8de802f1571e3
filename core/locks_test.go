package core

import (
	"testing"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/internal/lockorder"
)

// TestLocksPerStore counts the locks an fs_native store takes (create a
// temp name, write through the stored file as passthrough does, close,
// link to the final name, unlink the temp name, release), and holds the
// namespace lock's exclusive holds to the three commits (create, link,
// unlink), which make no syscall. It needs the counting build.
func TestLocksPerStore(t *testing.T) {
	if !lockorder.Enabled {
		t.Skip("built without -tags lockcheck: locks are not counted (make unit runs it)")
	}
	tc := newTestCore(t, Config{Capacity: 64 * mib, Passthrough: true})
	owner := blob.Owner{UID: -1, GID: -1}
	data := make([]byte, 256*kib)
	store := func(i int) {
		tmp, final := "tmp", "obj"+string(rune('a'+i))
		h, err := tc.Create(blob.RootID, tmp, 0o644, owner, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.File().WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := tc.Link(h.ID(), blob.RootID, final); err != nil {
			t.Fatal(err)
		}
		if err := tc.Unlink(blob.RootID, tmp); err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	store(0)
	const n = 20
	before := lockorder.Counts()
	for i := 1; i <= n; i++ {
		store(i)
	}
	after := lockorder.Counts()
	per := func(r lockorder.Rank, kind int) float64 {
		return float64(after[r][kind]-before[r][kind]) / n
	}
	for _, l := range []struct {
		name string
		rank lockorder.Rank
	}{{"directory", rankDir}, {"tree", rankTree}, {"marker", rankMarker}, {"handle", rankHandle},
		{"Core.mu", rankCore}, {"writersMu", rankWriters}, {"sizesMu", rankSizes}, {"doomedMu", rankDoomed}} {
		t.Logf("per store: %-10s %.1f exclusive, %.1f shared", l.name, per(l.rank, 0), per(l.rank, 1))
	}
	if x := per(rankCore, 0); x > 3 {
		t.Errorf("Core.mu taken exclusively %.1f times a store, want at most 3 (the commits of create, link and unlink)", x)
	}
}
