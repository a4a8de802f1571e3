package blob

import (
	"maps"
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
	if got, want := s.readUses(), map[ID]int64{1: 30, 2: 50, 3: 40}; !maps.Equal(got, want) {
		t.Fatalf("before the trim: %v, want %v", got, want)
	}
	must(t, "TrimUses", s.TrimUses(mark))
	if got, want := s.readUses(), map[ID]int64{2: 50, 3: 40}; !maps.Equal(got, want) {
		t.Fatalf("after the trim: %v, want %v", got, want)
	}
	must(t, "NoteUses", s.NoteUses([]Use{{4, 60}}))
	must(t, "TrimUses", s.TrimUses(s.UsesMark()))
	if got := s.readUses(); len(got) != 0 {
		t.Fatalf("after a trim of everything: %v", got)
	}
}
