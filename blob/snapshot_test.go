package blob

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// snapStore builds a store with directories, hard links across them and
// files of several sizes, and returns it open with its objects in an
// order of our choosing (the "LRU").
func snapStore(t *testing.T) (dir string, s *Store, order []ID, sizes map[ID]int64) {
	t.Helper()
	dir = t.TempDir()
	s, err := Open(dir)
	must(t, "Open", err)
	a := mustMkdir(t, s, RootID, "a")
	b := mustMkdir(t, s, a, "b b")
	mustMkdir(t, s, RootID, "empty")
	sizes = map[ID]int64{}
	for _, spec := range []struct {
		parent ID
		name   string
		size   int
	}{{b, "x", 3}, {RootID, "y", 4097}, {a, "-z\n", 0}, {b, "w", 70000}} {
		id := mustCreate(t, s, spec.parent, spec.name, make([]byte, spec.size))
		sizes[id] = int64(spec.size)
		order = append(order, id)
	}
	must(t, "Link", s.Link(order[0], RootID, "x-link"))
	// Not creation order: the snapshot keeps what it is given.
	order = []ID{order[2], order[0], order[3], order[1]}
	return dir, s, order, sizes
}

func saveWith(t *testing.T, s *Store, order []ID, sizes map[ID]int64) {
	t.Helper()
	must(t, "SaveSnapshot", s.SaveSnapshot(func(fn func(ID, int64)) {
		for _, id := range order {
			fn(id, sizes[id])
		}
	}))
}

// reload closes s and loads the store again.
func reload(t *testing.T, dir string, s *Store) (*Store, []Object, LoadReport) {
	t.Helper()
	s.Close()
	s2, err := Open(dir)
	must(t, "Open", err)
	t.Cleanup(func() { s2.Close() })
	objs, rep, err := s2.Load()
	must(t, "Load", err)
	checkIndex(t, s2)
	return s2, objs, rep
}

// TestSnapshotRoundTrip: a clean stop's snapshot rebuilds the same
// namespace, sizes and order without a walk, and is gone afterwards.
func TestSnapshotRoundTrip(t *testing.T) {
	dir, s, order, sizes := snapStore(t)
	want := namespace(s)
	var wantNames [][]string
	for _, id := range order {
		wantNames = append(wantNames, namesOf(s, id))
	}
	saveWith(t, s, order, sizes)
	s2, objs, rep := reload(t, dir, s)
	if !rep.FromSnapshot || rep.SnapshotUnused != "" {
		t.Fatalf("not loaded from the snapshot: %+v", rep)
	}
	if got := namespace(s2); !slices.Equal(got, want) {
		t.Fatalf("namespace %v\nwant %v", got, want)
	}
	if len(objs) != len(order) || rep.Objects != 4 || rep.Dirs != 3 || charges(objs) != 4096+8192+0+73728 {
		t.Fatalf("objects %+v, report %+v", objs, rep)
	}
	for i, o := range objs {
		if got := namesOf(s2, o.ID); !slices.Equal(got, wantNames[i]) || o.Size != sizes[order[i]] || o.Atime != int64(i) {
			t.Errorf("object %d: names %v size %d atime %d; want %v size %d", i, got, o.Size, o.Atime, wantNames[i], sizes[order[i]])
		}
	}
	if _, err := os.Stat(filepath.Join(dir, SnapshotName)); !os.IsNotExist(err) {
		t.Fatalf("the snapshot outlived the start that used it: %v", err)
	}
	// Without a new save the next start walks.
	_, _, rep = reload(t, dir, s2)
	if rep.FromSnapshot || rep.SnapshotUnused != "none" || rep.Objects != 4 {
		t.Fatalf("second start: %+v", rep)
	}
}

func namesOf(s *Store, id ID) []string {
	var out []string
	for _, l := range s.files[id].links {
		out = append(out, s.childPath(l.Parent, l.Name))
	}
	slices.Sort(out)
	return out
}

// TestSnapshotRefused: any name changed behind kvfs's back after the
// save, a damaged file, or a write left open makes the start walk the
// store instead, and the walk sees the change.
func TestSnapshotRefused(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, dir string)
		why    string
	}{
		{"file added", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "data", "a", "b b", "new"), []byte("n"), 0o644)
		}, `directory "a/b b" changed`},
		{"file removed", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "data", "y"))
		}, `directory "." changed`},
		{"file renamed in place", func(t *testing.T, dir string) {
			os.Rename(filepath.Join(dir, "data", "a", "-z\n"), filepath.Join(dir, "data", "a", "zz"))
		}, `directory "a" changed`},
		{"directory added deep", func(t *testing.T, dir string) {
			os.Mkdir(filepath.Join(dir, "data", "empty", "sub"), 0o755)
		}, `directory "empty" changed`},
		{"directory replaced", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "data", "empty")
			os.Remove(p)
			os.Mkdir(p, 0o755)
		}, `changed`},
		{"damaged", func(t *testing.T, dir string) {
			p := filepath.Join(dir, SnapshotName)
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 1
			os.WriteFile(p, b, 0o644)
		}, "checksum mismatch"},
		{"truncated", func(t *testing.T, dir string) {
			p := filepath.Join(dir, SnapshotName)
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)-9], 0o644)
		}, "checksum mismatch"},
		{"not an index", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, SnapshotName), []byte("hello"), 0o644)
		}, "not a kvfs index"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, s, order, sizes := snapStore(t)
			saveWith(t, s, order, sizes)
			c.change(t, dir)
			s2, objs, rep := reload(t, dir, s)
			if rep.FromSnapshot || !strings.Contains(rep.SnapshotUnused, c.why) {
				t.Fatalf("report %+v; want a walk because %q", rep, c.why)
			}
			// The walk found what is on disk: compare with a
			// second, snapshot-free load.
			want := namespace(s2)
			s3, objs3, _ := reload(t, dir, s2)
			if got := namespace(s3); !slices.Equal(got, want) || len(objs3) != len(objs) {
				t.Fatalf("walk after a refused snapshot %v\ndiffers from a plain walk %v", want, got)
			}
			if _, err := os.Stat(filepath.Join(dir, SnapshotName)); !os.IsNotExist(err) {
				t.Fatalf("a refused snapshot was left behind: %v", err)
			}
		})
	}
}

// TestSnapshotNotAfterOpenWrite: a marker in writing/ (a write open at
// the stop) means the snapshot cannot describe the store: it is removed
// unread and the incomplete object is reclaimed by the walk.
func TestSnapshotNotAfterOpenWrite(t *testing.T) {
	dir, s, order, sizes := snapStore(t)
	id, f, err := create(s, RootID, "open", 0o644, nobody)
	must(t, "Create", err)
	f.Write([]byte("half"))
	f.Close()
	sizes[id] = 4
	saveWith(t, s, append(order, id), sizes)
	_, objs, rep := reload(t, dir, s)
	if rep.FromSnapshot || rep.SnapshotUnused != "a write was open at the stop" || rep.Incomplete != 1 || len(objs) != 4 {
		t.Fatalf("report %+v, %d objects", rep, len(objs))
	}
	if _, err := os.Stat(filepath.Join(dir, SnapshotName)); !os.IsNotExist(err) {
		t.Fatalf("snapshot left behind: %v", err)
	}
}

// TestSnapshotSkipsNamelessObjects: an object with no name (unlinked
// while open) is not in the snapshot.
func TestSnapshotSkipsNamelessObjects(t *testing.T) {
	dir, s, order, sizes := snapStore(t)
	saveWith(t, s, append([]ID{999999}, order...), sizes)
	_, objs, rep := reload(t, dir, s)
	if !rep.FromSnapshot || len(objs) != len(order) {
		t.Fatalf("report %+v, %d objects", rep, len(objs))
	}
}

// TestSnapshotNotSavedOverUnseenChanges: names put in the store or taken
// from it behind kvfs's back while it ran, and not yet audited, stop the
// save: a snapshot would hide them from the next start's walk.
func TestSnapshotNotSavedOverUnseenChanges(t *testing.T) {
	for name, change := range map[string]func(dir string){
		"symlink planted": func(dir string) { os.Symlink("/etc/passwd", filepath.Join(dir, "data", "a", "evil")) },
		"file added":      func(dir string) { os.WriteFile(filepath.Join(dir, "data", "new"), nil, 0o644) },
		"file removed":    func(dir string) { os.Remove(filepath.Join(dir, "data", "a", "b b", "w")) },
		"file replaced by a directory": func(dir string) {
			os.Remove(filepath.Join(dir, "data", "y"))
			os.Mkdir(filepath.Join(dir, "data", "y"), 0o755)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir, s, order, sizes := snapStore(t)
			change(dir)
			err := s.SaveSnapshot(func(fn func(ID, int64)) {
				for _, id := range order {
					fn(id, sizes[id])
				}
			})
			if err == nil {
				t.Fatal("saved a snapshot of an index the store no longer matches")
			}
			t.Logf("refused: %v", err)
			for _, n := range []string{SnapshotName, SnapshotName + ".tmp"} {
				if _, err := os.Stat(filepath.Join(dir, n)); !os.IsNotExist(err) {
					t.Errorf("%s left behind: %v", n, err)
				}
			}
			s.Close()
		})
	}
}
