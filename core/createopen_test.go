package core

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/blob"
	"golang.org/x/sys/unix"
)

// TestCreateOrOpen: open(2) with O_CREAT creates a free name, opens a
// taken one as it is (or cut to 0 bytes for O_TRUNC), answers EEXIST
// with O_EXCL and EISDIR for a directory.
func TestCreateOrOpen(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib})
	h, how, err := tc.CreateOrOpen(RootID, "new", unix.O_CREAT|unix.O_WRONLY, 0o644, nobody)
	if err != nil || how != Created {
		t.Fatalf("create of a free name: %v, %v; want Created", how, err)
	}
	h.Release()
	id := tc.put("kept", 10000)
	h, how, err = tc.CreateOrOpen(RootID, "kept", unix.O_CREAT|unix.O_RDONLY, 0o644, nobody)
	if err != nil || how != Opened || h.ID() != id {
		t.Fatalf("create of a taken name: %v, %v; want the object %d Opened", how, err, id)
	}
	if a, err := h.Attr(); err != nil || a.Size != 10000 {
		t.Fatalf("what it opened: size %d, %v; want 10000 bytes, as it was", a.Size, err)
	}
	h.Release()
	if _, _, err := tc.CreateOrOpen(RootID, "kept", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644, nobody); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("O_EXCL create of a taken name: %v; want EEXIST", err)
	}
	h, how, err = tc.CreateOrOpen(RootID, "kept", unix.O_CREAT|unix.O_TRUNC|unix.O_WRONLY, 0o644, nobody)
	if err != nil || how != Truncated || h.ID() != id {
		t.Fatalf("O_TRUNC create of a taken name: %v, %v; want the object %d Truncated", how, err, id)
	}
	if a, err := h.Attr(); err != nil || a.Size != 0 {
		t.Fatalf("after O_TRUNC: size %d, %v; want 0", a.Size, err)
	}
	h.Release()
	if a, err := tc.Getattr(id, nil); err != nil || a.Size != 0 || a.Charge != 0 {
		t.Fatalf("after its writer's release: size %d, charge %d, %v; want 0 and 0", a.Size, a.Charge, err)
	}
	if _, _, err := tc.Mkdir(RootID, "dir", 0o755, nobody); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tc.CreateOrOpen(RootID, "dir", unix.O_CREAT|unix.O_RDONLY, 0o644, nobody); !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("create of a directory's name: %v; want EISDIR", err)
	}
}

// TestCreateOrOpenNameGoes: a name taken at the create and gone at the
// open is created after all (open(O_CREAT) never answers ENOENT).
func TestCreateOrOpenNameGoes(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib})
	old := tc.put("x", 10)
	t.Cleanup(func() { testHookTaken = nil })
	testHookTaken = func() {
		testHookTaken = nil
		if err := tc.Unlink(RootID, "x"); err != nil {
			t.Error(err)
		}
	}
	h, how, err := tc.CreateOrOpen(RootID, "x", unix.O_CREAT|unix.O_WRONLY, 0o644, nobody)
	if err != nil || how != Created || h.ID() == old {
		t.Fatalf("create of a name removed after the create found it: %v, %v; want a new object Created", how, err)
	}
	h.Release()
	if testHookTaken != nil {
		t.Fatal("the create never found the name taken")
	}
}

// TestCreateOrOpenGivesUp: a name the store holds and the index does not
// that a create cannot replace (a directory made behind kvfs's back, not
// audited yet; a file gives way, see TestCreateOverAFilePutBehindTheBack)
// is taken for every create and gone for every open: after createRaces
// tries the answer is ESTALE, not a loop for ever.
func TestCreateOrOpenGivesUp(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib})
	stray := filepath.Join(tc.store.Dir(), blob.DataName, "stray")
	if err := os.Mkdir(stray, 0o755); err != nil {
		t.Fatal(err)
	}
	tries := 0
	t.Cleanup(func() { testHookTaken = nil })
	testHookTaken = func() { tries++ }
	_, _, err := tc.CreateOrOpen(RootID, "stray", unix.O_CREAT|unix.O_WRONLY, 0o644, nobody)
	if !errors.Is(err, ErrStale) || tries != createRaces+1 {
		t.Fatalf("create of a name only the store holds: %v after %d tries; want ErrStale after %d", err, tries, createRaces+1)
	}
}

// TestCreateOverAFilePutBehindTheBack: a file put in the store behind
// kvfs's back, not adopted yet (the audit's), gives way to a create of
// its name: the create answered ESTALE until the next audit (an outside
// tester: with --allow-other one user's planted file kept another's
// name).
func TestCreateOverAFilePutBehindTheBack(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 8 * mib})
	planted := filepath.Join(tc.store.Dir(), blob.DataName, "race")
	if err := os.WriteFile(planted, []byte("planted"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, how, err := tc.CreateOrOpen(blob.RootID, "race", os.O_WRONLY|os.O_CREATE, 0o644, nobody)
	if err != nil || how != Created {
		t.Fatalf("create over a file put in the store behind kvfs's back: %v (%v), want a new object", err, how)
	}
	if _, err := h.Write(Interrupt{}, []byte("mine"), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(); err != nil {
		t.Fatal(err)
	}
	h.Release()
	if got := string(tc.readName("race")); got != "mine" {
		t.Errorf("race holds %q, want the create's bytes", got)
	}
	if st := tc.Stats(); st.Objects != 1 || st.UsedBytes != 4096 {
		t.Errorf("after: %+v; want one object of one block", st)
	}
}

// TestMkdirOverAnEntryPutBehindTheBack: an empty directory or a file put
// in the store behind kvfs's back, not adopted yet, gives way to a mkdir
// of its name, as to a create: mkdir answered EEXIST where stat said
// ENOENT, until the audit (an outside tester). A directory that holds
// something stays, for the audit to adopt.
func TestMkdirOverAnEntryPutBehindTheBack(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 8 * mib})
	data := filepath.Join(tc.store.Dir(), blob.DataName)
	if err := errors.Join(os.Mkdir(filepath.Join(data, "empty"), 0o700), os.WriteFile(filepath.Join(data, "file"), []byte("x"), 0o644),
		os.MkdirAll(filepath.Join(data, "full", "inner"), 0o755)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"empty", "file"} {
		id, _, err := tc.Mkdir(RootID, name, 0o755, nobody)
		if err != nil {
			t.Fatalf("mkdir over %s put in the store: %v", name, err)
		}
		if e, _, err := tc.Lookup(RootID, name); err != nil || !e.Dir || e.ID != id {
			t.Errorf("%s after the mkdir: %+v, %v; want the new directory", name, e, err)
		}
	}
	if _, _, err := tc.Mkdir(RootID, "full", 0o755, nobody); !errors.Is(err, ErrExists) {
		t.Errorf("mkdir over a directory holding something put in the store: %v, want EEXIST", err)
	}
}
