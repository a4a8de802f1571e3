package blob

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
)

// The journal of uses keeps, past a checkpoint's trim, what was
// journaled while the checkpoint was taken, and a start reads each
// object's last use.
func TestUsesTrimKeepsTheTail(t *testing.T) {
	_, s := openUnracy(t)
	must(t, "NoteUses", s.NoteUses([]Use{{1, 10}, {2, 20}, {1, 30}}))
	mark := s.UsesMark()
	must(t, "NoteUses", s.NoteUses([]Use{{3, 40}, {2, 50}}))
	if got, want := s.readUses(), map[uint64]int64{1: 30, 2: 50, 3: 40}; !maps.Equal(got, want) {
		t.Fatalf("before the trim: %v, want %v", got, want)
	}
	must(t, "TrimUses", s.TrimUses(mark))
	if got, want := s.readUses(), map[uint64]int64{2: 50, 3: 40}; !maps.Equal(got, want) {
		t.Fatalf("after the trim: %v, want %v", got, want)
	}
	must(t, "NoteUses", s.NoteUses([]Use{{4, 60}}))
	must(t, "TrimUses", s.TrimUses(s.UsesMark()))
	if got := s.readUses(); len(got) != 0 {
		t.Fatalf("after a trim of everything: %v", got)
	}
}

// A journal that would pass usesMax is compacted to each inode's last
// use, and a checkpoint's mark taken before the compaction trims
// nothing after it.
func TestUsesCompacted(t *testing.T) {
	_, s := openUnracy(t)
	per := usesMax / useSize / 4
	batch := make([]Use, per)
	for round := range 4 {
		for i := range batch {
			batch[i] = Use{uint64(i % 1000), int64(round*per + i)}
		}
		must(t, "NoteUses", s.NoteUses(batch))
	}
	mark := s.UsesMark()
	must(t, "NoteUses", s.NoteUses([]Use{{5000, 1 << 40}}))
	if st, err := os.Stat(filepath.Join(s.Dir(), UsesName)); err != nil || st.Size() != 1001*useSize {
		t.Fatalf("after the compaction: %v, %v; want 1,001 uses", st, err)
	}
	got := s.readUses()
	last999 := int64(3*per + (per-1)/1000*1000 - 1) // the last round's last use of inode 999
	if len(got) != 1001 || got[999] != last999 || got[5000] != 1<<40 {
		t.Fatalf("after the compaction: %d inodes, 999 at %d, 5000 at %d", len(got), got[999], got[5000])
	}
	must(t, "TrimUses", s.TrimUses(mark))
	if got := s.readUses(); len(got) != 1001 {
		t.Fatalf("a trim by a mark from before the compaction left %d inodes, want all 1,001", len(got))
	}
}
