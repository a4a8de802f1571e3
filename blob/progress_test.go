package blob

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvfs/kvfs/ledger"
)

// recorder is a Progress that keeps what it was told.
type recorder struct {
	mu                  sync.Mutex
	expect, found, done int64
	calls               int
}

func (r *recorder) Expect(n int64) { r.mu.Lock(); r.expect = n; r.mu.Unlock() }
func (r *recorder) Found(n int64)  { r.mu.Lock(); r.found += n; r.calls++; r.mu.Unlock() }
func (r *recorder) Done()          { r.mu.Lock(); r.done++; r.mu.Unlock() }

// fillData writes files straight into a store's data/: a directory with
// more than foundEvery of them, and smaller ones.
func fillData(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	for d, count := range map[string]int{"big": 2*foundEvery + 500, "a": 100, "a/b": 7} {
		p := filepath.Join(dir, DataName, d)
		must(t, "MkdirAll", os.MkdirAll(p, 0o755))
		for i := range count {
			must(t, "WriteFile", os.WriteFile(filepath.Join(p, fmt.Sprint(i)), []byte("x"), 0o644))
			n++
		}
	}
	return n
}

// TestLoadReportsProgress: a walking start-up expects what the last one
// found, reports every file it finds, in batches, and says when it ends.
func TestLoadReportsProgress(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	must(t, "Open", err)
	s.Close()
	files := fillData(t, dir)
	must(t, "WriteFile", os.WriteFile(filepath.Join(dir, HintName), []byte("1234\n"), 0o644))
	s, err = Open(dir)
	must(t, "Open", err)
	defer s.Close()
	var r recorder
	s.ReportTo(&r)
	objects, _, err := s.Load()
	must(t, "Load", err)
	if r.expect != 1234 || r.found != files || r.done != 1 || int64(len(objects)) != files {
		t.Fatalf("expected %d, found %d, done %d times; want 1234, %d, 1 (loaded %d)", r.expect, r.found, r.done, files, len(objects))
	}
	if r.calls < 3 || r.calls > 6 {
		t.Errorf("%d reports for %d files; want them in batches of %d", r.calls, files, foundEvery)
	}
}

// TestFsckReportsProgress: fsck's walk reports the same way.
func TestFsckReportsProgress(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	must(t, "Open", err)
	s.Close()
	files := fillData(t, dir)
	must(t, "WriteFile", os.WriteFile(filepath.Join(dir, HintName), []byte("99\n"), 0o644))
	var r recorder
	rep, err := FsckWith(dir, false, ledger.Charge, &r)
	must(t, "Fsck", err)
	if r.expect != 99 || r.found != files || r.done != 1 || rep.Objects != files {
		t.Fatalf("expected %d, found %d, done %d times; want 99, %d, 1 (checked %d)", r.expect, r.found, r.done, files, rep.Objects)
	}
}
