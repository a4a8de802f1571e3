package blob

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDetachedCrash: a daemon killed while it fetched an object (its
// file still nameless, or named but not yet complete) leaves nothing
// that a start-up serves, and no marker.
func TestDetachedCrash(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	must(t, "Open", err)
	mustCreate(t, s, RootID, "kept", []byte("kept"))
	half := s.NewID()
	f, err := s.CreateDetached(half, 0o644)
	must(t, "CreateDetached", err)
	f.Write(make([]byte, 5000))
	f.Close()
	named := s.NewID()
	f, err = s.CreateDetached(named, 0o644)
	must(t, "CreateDetached", err)
	f.Write(make([]byte, 9000))
	f.Close()
	must(t, "LinkDetached", s.LinkDetached(RootID, "fetched", named, 0))
	if err := s.LinkDetached(RootID, "kept", half, 0); err != unix.EEXIST {
		t.Errorf("LinkDetached over a taken name: %v, want EEXIST", err)
	}
	s.Close() // the crash: no ClearWriting, no snapshot

	s, err = Open(dir)
	must(t, "Open again", err)
	defer s.Close()
	objects, rep, err := s.Load()
	must(t, "Load", err)
	// Both fetches are reclaimed, and reported: the nameless one too (an
	// outside tester read incomplete_reclaimed 0 after a kill during a
	// fetch).
	if len(objects) != 1 || rep.Incomplete != 1 || rep.Nameless != 1 || rep.NamelessByte != 5000 {
		t.Errorf("after the crash: %d objects, %d incomplete, %d nameless of %d bytes; want the kept one, and both fetches reclaimed",
			len(objects), rep.Incomplete, rep.Nameless, rep.NamelessByte)
	}
	if _, err := s.Lookup(RootID, "fetched"); err != ErrNotFound {
		t.Errorf("a fetch unfinished at the crash is served: %v", err)
	}
	if names := dataNames(t, dir); len(names) != 1 || names[0] != "kept" {
		t.Errorf("data/ holds %v", names)
	}
	if ents, _ := ReadMarkers(filepath.Join(dir, WritingName)); len(ents) != 0 {
		t.Errorf("writing/ still holds %d entries", len(ents))
	}
}

func TestResolve(t *testing.T) {
	s, err := Open(t.TempDir())
	must(t, "Open", err)
	defer s.Close()
	d := mustMkdir(t, s, RootID, "d")
	id := mustCreate(t, s, d, "f", nil)
	if e, err := s.Resolve("d/f"); err != nil || e.ID != id || e.Dir {
		t.Errorf("Resolve(d/f) = %+v, %v", e, err)
	}
	if e, err := s.Resolve("d"); err != nil || e.ID != d || !e.Dir {
		t.Errorf("Resolve(d) = %+v, %v", e, err)
	}
	for _, p := range []string{"d/f/g", "x", "d/x", ""} {
		if _, err := s.Resolve(p); err != ErrNotFound {
			t.Errorf("Resolve(%q): %v, want ErrNotFound", p, err)
		}
	}
	if p, ok := s.NamePath(d, "g"); !ok || p != "d/g" {
		t.Errorf("NamePath = %q %v", p, ok)
	}
}
