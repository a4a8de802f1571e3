package blob

import (
	"testing"
)

// TestCrowdedDirs: a watched store reports a directory once, when a
// name is about to be added to one holding half its limit, whether by a
// create, a mkdir, a link or a rename, with the limit for the new name's
// length; a directory under half, and one with no limit, are not
// reported.
func TestCrowdedDirs(t *testing.T) {
	s := newStore(t)
	var got []Crowded
	s.WatchDirs(func(nameLen int) int {
		if nameLen > 10 {
			return 0 // names this long: no limit
		}
		return 8
	}, func(c Crowded) { got = append(got, c) })
	flat := mustMkdir(t, s, RootID, "flat")
	for _, n := range []string{"a", "b", "c", "d"} {
		mustCreate(t, s, flat, n, nil)
	}
	if len(got) != 0 {
		t.Fatalf("reported before half the limit: %+v", got)
	}
	mustCreate(t, s, flat, "e", nil)
	mustMkdir(t, s, flat, "f")
	if len(got) != 1 || got[0] != (Crowded{Dir: "flat", Names: 4, Limit: 8}) {
		t.Fatalf("after 6 names in flat (limit 8): %+v, want flat once, at 4 names", got)
	}
	other := mustMkdir(t, s, RootID, "other")
	for _, n := range []string{"long-names-only-1", "long-names-only-2", "long-names-only-3", "long-names-only-4", "long-names-only-5"} {
		mustCreate(t, s, other, n, nil)
	}
	if len(got) != 1 {
		t.Fatalf("a directory whose names have no limit was reported: %+v", got)
	}
	id := mustCreate(t, s, other, "x", nil)
	if len(got) != 2 || got[1].Dir != "other" || got[1].Names != 5 {
		t.Fatalf("a short name added to other's five: %+v", got)
	}
	third := mustMkdir(t, s, RootID, "third")
	for _, n := range []string{"p", "q", "r", "s"} {
		mustCreate(t, s, third, n, nil)
	}
	must(t, "Link", s.Link(id, third, "linked"))
	if len(got) != 3 || got[2].Dir != "third" {
		t.Fatalf("a link into third's four: %+v", got)
	}
	fourth := mustMkdir(t, s, RootID, "fourth")
	for _, n := range []string{"p", "q", "r", "s"} {
		mustCreate(t, s, fourth, n, nil)
	}
	if _, err := s.Rename(third, "p", fourth, "moved", 0); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[3].Dir != "fourth" {
		t.Fatalf("a rename into fourth's four: %+v", got)
	}
	if _, err := s.Rename(fourth, "q", fourth, "r", 0); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("a rename over a name adds none, but was reported: %+v", got)
	}
}
