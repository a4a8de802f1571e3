package blob

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/ledger"
	"golang.org/x/sys/unix"
)

// crashed is a store left as a daemon's crash leaves it, and what a
// start-up should make of it.
type crashed struct {
	dir string
	// Complete files by one of their names, and what Load must report.
	objects map[string]Object
	// Every name that must remain in data/, and nothing else.
	kept []string
	// Names in data/ of files still being written at the crash.
	incomplete []string
	// Entries that are neither directories nor regular files.
	foreign []string
	// Markers in writing/ whose file has no name in data/.
	stale      int
	wantReport LoadReport
	wantBytes  int64 // the objects' charges
}

var (
	atimeLater = time.Unix(1_700_000_100, 123_456_789)
	mtimeLater = time.Unix(1_700_000_200, 987_654_321)
	earlier    = time.Unix(1_700_000_000, 0)
)

// crashStore builds a crashed store: complete files (one with three names
// in three directories, one empty), files with a writer open at the crash
// (one new, one hard-linked, one reopened for writing), a marker whose
// file lost its name, and a planted symlink, fifo and relative symlink.
func crashStore(t *testing.T) crashed {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir)
	must(t, "Open", err)
	d := mustMkdir(t, s, RootID, "d")
	e := mustMkdir(t, s, d, "e")
	mustCreate(t, s, RootID, "c1", bytes.Repeat([]byte{1}, 10))
	c2 := mustCreate(t, s, d, "c2", bytes.Repeat([]byte{2}, 5000))
	must(t, "Link", s.Link(c2, e, "c2b"))
	must(t, "Link", s.Link(c2, RootID, "c2c"))
	mustCreate(t, s, e, "empty", nil)

	writeOpen := func(parent ID, name string, n int) ID {
		id, f, err := create(s, parent, name, 0o644, nobody)
		must(t, "Create", err)
		_, err = f.Write(bytes.Repeat([]byte{9}, n))
		must(t, "write", err)
		f.Close() // the daemon died before ClearWriting
		return id
	}
	writeOpen(RootID, "inc1", 100)
	inc2 := writeOpen(d, "inc2", 3000)
	must(t, "Link", s.Link(inc2, e, "inc2b"))
	re := mustCreate(t, s, RootID, "reopened", bytes.Repeat([]byte{3}, 50))
	f, err := s.Open(re, os.O_RDWR|os.O_APPEND)
	must(t, "Open", err)
	must(t, "MarkWriting", s.MarkWriting(f, re))
	_, err = f.Write(bytes.Repeat([]byte{4}, 30))
	must(t, "write", err)
	f.Close()
	writeOpen(RootID, "stale", 7)
	_, err = s.Unlink(RootID, "stale")
	must(t, "Unlink", err)
	checkIndex(t, s)
	s.Close()

	data := filepath.Join(dir, DataName)
	must(t, "symlink", os.Symlink("/etc", filepath.Join(data, "d", "evil")))
	must(t, "mkfifo", unix.Mkfifo(filepath.Join(data, "d", "e", "fifo"), 0o644))
	must(t, "symlink", os.Symlink("c1", filepath.Join(data, "tolink")))
	must(t, "chtimes", os.Chtimes(filepath.Join(data, "c1"), atimeLater, earlier))
	must(t, "chtimes", os.Chtimes(filepath.Join(data, "d", "c2"), earlier, mtimeLater))
	must(t, "chtimes", os.Chtimes(filepath.Join(data, "d", "e", "empty"), earlier, earlier))

	return crashed{
		dir: dir,
		objects: map[string]Object{
			"c1":        {Size: 10, Links: 1, Atime: atimeLater.UnixNano()},
			"d/c2":      {Size: 5000, Links: 3, Atime: mtimeLater.UnixNano()},
			"d/e/empty": {Size: 0, Links: 1, Atime: earlier.UnixNano()},
		},
		kept:       []string{"c1", "c2c", "d", "d/c2", "d/e", "d/e/c2b", "d/e/empty"},
		incomplete: []string{"d/e/inc2b", "d/inc2", "inc1", "reopened"},
		foreign:    []string{"d/e/fifo", "d/evil", "tolink"},
		stale:      1,
		wantBytes:  ledger.Charge(10) + ledger.Charge(5000),
		wantReport: LoadReport{
			Objects:        3,
			Dirs:           2,
			Incomplete:     3, // inodes, however many names each had
			IncompleteByte: 100 + 3000 + 80,
			Nameless:       1, // the marker whose file lost its name
			NamelessByte:   7,
			Foreign:        3,
			SnapshotUnused: "none",
			Stated:         3,
		},
	}
}

func dataNames(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, line := range treeSnapshot(t, filepath.Join(dir, DataName)) {
		if name, _, _ := strings.Cut(line, " "); name != "." {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func TestLoadAfterCrash(t *testing.T) {
	c := crashStore(t)
	s, err := Open(c.dir)
	must(t, "Open", err)
	defer s.Close()
	objs, rep, err := s.Load()
	must(t, "Load", err)
	checkIndex(t, s)

	if rep != c.wantReport {
		t.Errorf("LoadReport = %+v\nwant         %+v", rep, c.wantReport)
	}
	if got := dataNames(t, c.dir); !slices.Equal(got, c.kept) {
		t.Errorf("data/ after Load = %v\nwant %v", got, c.kept)
	}
	if ents, _ := ReadMarkers(filepath.Join(c.dir, WritingName)); len(ents) != 0 {
		t.Errorf("writing/ after Load holds %d entries", len(ents))
	}
	if _, err := os.Stat("/etc"); err != nil {
		t.Fatal("Load followed the planted symlink")
	}

	// Each complete inode once, under the ID its names resolve to.
	if len(objs) != len(c.objects) {
		t.Fatalf("Load returned %d objects, want %d: %+v", len(objs), len(c.objects), objs)
	}
	byID := map[ID]Object{}
	for _, o := range objs {
		if _, dup := byID[o.ID]; dup || o.ID <= RootID {
			t.Fatalf("object ID %d twice or invalid", o.ID)
		}
		byID[o.ID] = o
	}
	for rel, want := range c.objects {
		id := lookupPath(t, s, rel)
		got, ok := byID[id]
		want.ID = id
		if !ok || got != want {
			t.Errorf("object %s = %+v, want %+v", rel, got, want)
		}
	}
	c2 := lookupPath(t, s, "d/c2")
	for _, rel := range []string{"c2c", "d/e/c2b"} {
		if id := lookupPath(t, s, rel); id != c2 {
			t.Errorf("%s is id %d, d/c2 is %d", rel, id, c2)
		}
	}

	// The loaded store works: new names, links, renames, removal.
	d := lookupPath(t, s, "d")
	n := mustCreate(t, s, d, "new", []byte("n"))
	if n <= c2 {
		t.Errorf("new id %d not above the loaded ones", n)
	}
	must(t, "Link", s.Link(c2, d, "c2d"))
	if s.Links(c2) != 4 {
		t.Errorf("Links = %d", s.Links(c2))
	}
	mustRename(t, s, RootID, "d", RootID, "moved", 0)
	wantPath(t, s, n, "moved/new")
	if got := s.Drop(c2); len(got) != 4 {
		t.Errorf("Drop returned %d names", len(got))
	}
	checkIndex(t, s)
}

// lookupPath resolves a slash-separated path through the index.
func lookupPath(t *testing.T, s *Store, rel string) ID {
	t.Helper()
	id := RootID
	for _, name := range strings.Split(rel, "/") {
		e, err := s.Lookup(id, name)
		if err != nil {
			t.Fatalf("Lookup %s (at %q): %v", rel, name, err)
		}
		id = e.ID
	}
	return id
}

func TestLoadIsIdempotent(t *testing.T) {
	c := crashStore(t)
	s, err := Open(c.dir)
	must(t, "Open", err)
	first, _, err := s.Load()
	must(t, "Load", err)
	names := dataNames(t, c.dir)
	s.Close()

	s, err = Open(c.dir)
	must(t, "Open", err)
	defer s.Close()
	again, rep, err := s.Load()
	must(t, "second Load", err)
	checkIndex(t, s)
	want := c.wantReport
	want.Incomplete, want.IncompleteByte, want.Foreign, want.Nameless, want.NamelessByte = 0, 0, 0, 0, 0
	want.SnapshotUnused = "none"
	if rep != want {
		t.Errorf("second LoadReport = %+v, want %+v", rep, want)
	}
	if len(again) != len(first) {
		t.Errorf("second Load found %d objects, first %d", len(again), len(first))
	}
	if got := dataNames(t, c.dir); !slices.Equal(got, names) {
		t.Errorf("second Load changed data/: %v, was %v", got, names)
	}
	// Load on a store in use replaces the index wholesale.
	if _, _, err := s.Load(); err != nil {
		t.Fatal(err)
	}
	checkIndex(t, s)
}

func TestLoadEmptyStore(t *testing.T) {
	s := newStore(t)
	objs, rep, err := s.Load()
	if err != nil || len(objs) != 0 || rep != (LoadReport{SnapshotUnused: "none"}) {
		t.Fatalf("Load of an empty store = %v, %+v, %v", objs, rep, err)
	}
	checkIndex(t, s)
}

// A clean stop (every writer finished) loses nothing, and the loaded
// namespace is the one that was served, hard links included.
func TestLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	must(t, "Open", err)
	a := mustMkdir(t, s, RootID, "a")
	b := mustMkdir(t, s, a, "b")
	x := mustCreate(t, s, b, "x", []byte("xyz"))
	must(t, "Link", s.Link(x, RootID, "xl"))
	mustCreate(t, s, a, "y", make([]byte, 4097))
	mustMkdir(t, s, RootID, "emptydir")
	want := namespace(s)
	s.Close()

	s, err = Open(dir)
	must(t, "Open", err)
	defer s.Close()
	objs, rep, err := s.Load()
	must(t, "Load", err)
	checkIndex(t, s)
	if got := namespace(s); !slices.Equal(got, want) {
		t.Fatalf("loaded namespace %v\nwant %v", got, want)
	}
	if len(objs) != 2 || rep.Objects != 2 || charges(objs) != 4096+8192 || rep.Dirs != 3 {
		t.Fatalf("Load = %+v, %+v", objs, rep)
	}
}

// charges is what the ledger charges for objects.
func charges(objs []Object) (n int64) {
	for _, o := range objs {
		n += ledger.Charge(o.Size)
	}
	return n
}

// TestLoadRemovesPathsPastPathMax: a store holding a path past MaxPath
// under data/ (made behind kvfs's back, or by an older kvfs) mounts: the
// too-deep entry goes with everything beneath it and the rest is served.
// Before, the start failed naming the path, after a checkpoint or
// without one. fsck reports it, and its repair removes it.
func TestLoadRemovesPathsPastPathMax(t *testing.T) {
	for _, withCheckpoint := range []bool{false, true} {
		t.Run(fmt.Sprintf("checkpoint=%v", withCheckpoint), func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir)
			must(t, "Open", err)
			mustCreate(t, s, RootID, "kept", []byte("kept"))
			seg := strings.Repeat("d", 250)
			deepest := RootID
			for range 16 { // 16 × 251 - 1 = 4,015 bytes
				deepest = mustMkdir(t, s, deepest, seg)
			}
			mustCreate(t, s, deepest, "fits", []byte("fits"))
			if withCheckpoint {
				saveCheckpoint(t, s, ids(s))
			}
			want := namespace(s)
			// Behind kvfs's back: a 17th level (4,266 bytes) and a file
			// whose name carries its path past MaxPath.
			fd, err := unix.Open(filepath.Join(dir, "data"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
			must(t, "open data", err)
			for range 16 {
				next, err := unix.Openat(fd, seg, unix.O_RDONLY|unix.O_DIRECTORY, 0)
				must(t, "openat", err)
				unix.Close(fd)
				fd = next
			}
			must(t, "mkdirat", unix.Mkdirat(fd, seg, 0o755))
			sub, err := unix.Openat(fd, seg, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			must(t, "openat", err)
			f, err := unix.Openat(sub, "lost", unix.O_CREAT|unix.O_WRONLY, 0o644)
			must(t, "create", err)
			unix.Close(f)
			unix.Close(sub)
			f, err = unix.Openat(fd, strings.Repeat("f", 100), unix.O_CREAT|unix.O_WRONLY, 0o644)
			must(t, "create", err)
			unix.Close(f)
			unix.Close(fd)
			s.Close()

			found, err := Fsck(dir, false, ledger.Charge)
			must(t, "Fsck", err)
			if len(found.Problems) != 2 {
				t.Fatalf("fsck found %q, want the two paths past PATH_MAX", found.Problems)
			}
			rep, got := loadNamespace(t, dir)
			if rep.TooDeep != 2 || rep.Objects != 2 || rep.FromSnapshot != withCheckpoint {
				t.Fatalf("Load = %+v, want 2 objects kept and 2 entries too deep removed", rep)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("loaded namespace %v\nwant %v", got, want)
			}
			again, err := Fsck(dir, false, ledger.Charge)
			must(t, "Fsck", err)
			if len(again.Problems) != 0 {
				t.Fatalf("fsck after the start found %q", again.Problems)
			}
		})
	}
}

// TestLoadKeepsIntactUnchanged: an object marked intact (a writer opened
// it whole) that nothing changed before the crash is kept by the start,
// and its marker removed; one written, truncated or cut after its marker
// is reclaimed. fsck tells the two apart; a handover's kept markers are
// kept whichever kind they are.
func TestLoadKeepsIntactUnchanged(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	must(t, "Open", err)
	if !s.fineTimes() {
		t.Skip("this file system's timestamps are too coarse to tell a change from none: kvfs marks plainly here")
	}
	change := map[string]func(f *os.File) error{
		"unchanged": func(*os.File) error { return nil },
		"written":   func(f *os.File) error { _, err := f.WriteAt([]byte("x"), 0); return err },
		"same-size": func(f *os.File) error { return f.Truncate(3) },
		"cut":       func(f *os.File) error { return f.Truncate(0) },
		"kept":      func(f *os.File) error { _, err := f.WriteAt([]byte("x"), 0); return err },
	}
	ids := map[string]ID{}
	for name, fn := range change {
		id := mustCreate(t, s, RootID, name, []byte("abc"))
		ids[name] = id
		f, err := s.Open(id, os.O_RDWR)
		must(t, "Open "+name, err)
		mark, err := s.MarkIntact(f, id)
		must(t, "MarkIntact", err)
		if mark.Mtime == 0 {
			t.Fatalf("%s: marked plainly", name)
		}
		must(t, "change "+name, fn(f))
		f.Close()
	}
	// The checkpoint a handover's successor loads, with every object
	// being written: it keeps the IDs the kept markers are named by (a
	// walk would number the files anew, in the order it meets them).
	var busy []ID
	for _, id := range ids {
		busy = append(busy, id)
	}
	saveCheckpoint(t, s, busy, busy...)
	s.Close()

	found, err := Fsck(dir, false, ledger.Charge)
	must(t, "Fsck", err)
	var kept, incomplete int
	for _, p := range found.Problems {
		switch {
		case strings.Contains(p, "not changed (kept)"):
			kept++
		case strings.HasPrefix(p, "incomplete object"):
			incomplete++
		}
	}
	if kept != 1 || incomplete != 4 {
		t.Fatalf("fsck: %d kept and %d incomplete, want 1 and 4: %q", kept, incomplete, found.Problems)
	}

	rep, got := loadNamespace(t, dir, func(s *Store) { s.KeepMarkers([]ID{ids["kept"]}) })
	if rep.Incomplete != 3 || !slices.Equal(got, []string{"dir .", "file kept", "file unchanged"}) {
		t.Fatalf("Load: %+v, namespace %q; want the unchanged and the kept objects only", rep, got)
	}
	left, err := ReadMarkers(filepath.Join(dir, WritingName))
	if err != nil || len(left) != 1 {
		t.Fatalf("markers after the start: %q, %v; want the kept one", left, err)
	}
}

// TestRemarkRecordsAClose: a writer's object whose close recorded its
// state in the marker (Remark) is kept by a start after a crash that
// came before its release, once the dead daemon's guard vetted the
// record (VetClosed), if nothing changed the object since; one written
// after the close, empty at it (a parent that hands its descriptor to a
// child closes it first), still held as the daemon died, or closed
// before the vetting's cutoff is reclaimed; and so is every one, where
// no guard vetted the records (killed too, a power loss). A second
// close records again, under the one marker.
func TestRemarkRecordsAClose(t *testing.T) {
	for _, c := range []struct {
		name     string
		vet      bool
		cutoff   time.Duration // before now
		distrust bool          // a process holds a file of the dead mount
		trusted  int           // of the 4 closed records (not "held")
		kept     []string
	}{
		{"vetted", true, time.Hour, false, 3, []string{"closed", "closed twice"}},
		// None held these as the daemon died, and none can open
		// them since (an outside tester's readers of other files).
		{"vetted, other files held", true, time.Hour, true, 3, []string{"closed", "closed twice"}},
		{"vetted late", true, -time.Hour, false, 0, nil},
		{"not vetted", false, 0, false, 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, held := closedStores(t)
			if c.vet {
				plain, trusted := VetClosed(filepath.Join(dir, WritingName), func(id ID) bool { return id == held }, time.Now().Add(-c.cutoff).UnixNano())
				if plain+trusted != 4 || trusted != c.trusted {
					t.Errorf("VetClosed: %d made plain, %d trusted; want %d trusted of the 4 closed", plain, trusted, c.trusted)
				}
			}
			var rep LoadReport
			var got []string
			if c.distrust {
				rep, got = loadNamespace(t, dir, (*Store).DistrustIntact)
			} else {
				rep, got = loadNamespace(t, dir)
			}
			want := []string{"dir ."}
			for _, k := range c.kept {
				want = append(want, "file "+k)
			}
			if rep.Incomplete != int64(5-len(c.kept)) || !slices.Equal(got, want) {
				t.Fatalf("Load: %+v, namespace %q; want %q", rep, got, want)
			}
			if left, err := ReadMarkers(filepath.Join(dir, WritingName)); err != nil || len(left) != 0 {
				t.Fatalf("markers after the start: %q, %v; want none", left, err)
			}
		})
	}
}

// closedStores is a store a crash left with five objects being
// written, four of them closed by their opener (Remark): "closed",
// "closed twice", "written after" (the close), "held" (a process held
// it as the daemon died: its ID is returned), and "empty" (at its
// close).
func closedStores(t *testing.T) (dir string, held ID) {
	dir = t.TempDir()
	s, err := Open(dir)
	must(t, "Open", err)
	if !s.fineTimes() {
		t.Skip("this file system's timestamps are too coarse to tell a change from none: kvfs marks plainly here")
	}
	cases := map[string]func(t *testing.T, f *os.File, id ID){
		"closed": func(t *testing.T, f *os.File, id ID) {
			remark(t, s, f, id, Mark{})
		},
		"held": func(t *testing.T, f *os.File, id ID) {
			remark(t, s, f, id, Mark{})
			held = id
		},
		"closed twice": func(t *testing.T, f *os.File, id ID) {
			first := remark(t, s, f, id, Mark{})
			if _, err := f.WriteAt([]byte("more"), 3); err != nil {
				t.Fatal(err)
			}
			if again := remark(t, s, f, id, first); again == first {
				t.Fatal("a write after a close left the mtime the marker records")
			}
		},
		"written after": func(t *testing.T, f *os.File, id ID) {
			remark(t, s, f, id, Mark{})
			if _, err := f.WriteAt([]byte("x"), 0); err != nil {
				t.Fatal(err)
			}
		},
		"empty": func(t *testing.T, f *os.File, id ID) {
			must(t, "Truncate", f.Truncate(0))
			if mark, err := s.Remark(id, fstat(t, f), Mark{}); err != nil || mark != (Mark{}) {
				t.Fatalf("Remark of an empty file: %+v, %v; want it left plain", mark, err)
			}
		},
	}
	for name, fn := range cases {
		id, f, err := create(s, RootID, name, 0o644, nobody)
		must(t, "Create", err)
		if _, err := f.Write([]byte("abc")); err != nil {
			t.Fatal(err)
		}
		fn(t, f, id)
		f.Close()
	}
	s.Close() // a crash: the markers stay
	return dir, held
}

// loadNamespace opens the store in dir again, sets it up with each of
// prep (KeepMarkers, as a handover's successor does, DistrustIntact),
// loads it, checks its index, and closes it: what the load reported,
// and the namespace it loaded.
func loadNamespace(t *testing.T, dir string, prep ...func(*Store)) (LoadReport, []string) {
	t.Helper()
	s, err := Open(dir)
	must(t, "Open", err)
	defer s.Close()
	for _, p := range prep {
		p(s)
	}
	_, rep, err := s.Load()
	must(t, "Load", err)
	checkIndex(t, s)
	return rep, namespace(s)
}

// fstat is f's attributes now.
func fstat(t *testing.T, f *os.File) *unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	must(t, "Fstat", unix.Fstat(int(f.Fd()), &st))
	return &st
}

// remark is Remark of a marked file that holds bytes: its marker
// records its mtime, as closed, under one name.
func remark(t *testing.T, s *Store, f *os.File, id ID, old Mark) Mark {
	t.Helper()
	mark, err := s.Remark(id, fstat(t, f), old)
	must(t, "Remark", err)
	if mark.Mtime == 0 || !mark.Closed {
		t.Fatalf("Remark recorded %+v", mark)
	}
	names, err := ReadMarkers(filepath.Join(s.Dir(), WritingName))
	must(t, "ReadMarkers", err)
	n := 0
	for _, name := range names {
		base := filepath.Base(name)
		if m, ok := IntactMark(name); ok && m == mark && strings.HasPrefix(base, writingName(id)+intactSep) {
			n++
		} else if base == writingName(id) || strings.HasPrefix(base, writingName(id)+intactSep) {
			t.Fatalf("marker %s left beside the one Remark made", name)
		}
	}
	if n != 1 {
		t.Fatalf("%d markers of %d recording %+v, want 1", n, id, mark)
	}
	return mark
}
