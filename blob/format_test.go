package blob

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// userDir makes a directory that holds a user's files, with a data/
// subdirectory as a store has.
func userDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "D")
	must(t, "mkdir", os.MkdirAll(filepath.Join(d, "data", "photos"), 0o755))
	for i := range 8 {
		must(t, "write", os.WriteFile(filepath.Join(d, "data", "photos", "img"+string(rune('1'+i))+".jpg"), make([]byte, 1<<20), 0o644))
	}
	must(t, "write", os.WriteFile(filepath.Join(d, "data", "notes.txt"), []byte("mine"), 0o644))
	must(t, "symlink", os.Symlink("../docs", filepath.Join(d, "data", "docs-link")))
	must(t, "mkfifo", syscall.Mkfifo(filepath.Join(d, "data", "fifo"), 0o644))
	return d
}

// TestOpenRefusesUserDirectory: a directory with a user's files is never
// adopted, and refusing it writes nothing anywhere.
func TestOpenRefusesUserDirectory(t *testing.T) {
	d := userDir(t)
	before := treeSnapshot(t, d)
	_, err := Open(d)
	if !errors.Is(err, ErrNotStore) || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Open of a user's directory = %v, want ErrNotStore saying it is not empty", err)
	}
	if after := treeSnapshot(t, d); !slices.Equal(before, after) {
		t.Fatalf("a refused Open changed the directory:\nbefore %v\nafter  %v", before, after)
	}
	if _, err := os.Lstat(filepath.Join(d, LockName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused Open left %s: %v", LockName, err)
	}
}

// TestOpenMarksAndRecognises: an empty or absent directory becomes a
// marked store; a marked store opens again; an old store of this layout
// is recognised once and marked; an unknown format is refused.
func TestOpenMarksAndRecognises(t *testing.T) {
	base := t.TempDir()
	for _, dir := range []string{filepath.Join(base, "absent", "deeper"), mkdirIn(t, base, "empty")} {
		s, err := Open(dir)
		must(t, "Open "+dir, err)
		s.Close()
		if data, err := os.ReadFile(filepath.Join(dir, FormatName)); err != nil || string(data) != formatV1 {
			t.Fatalf("%s: format file %q, %v", dir, data, err)
		}
		s, err = Open(dir)
		must(t, "reopen "+dir, err)
		s.Close()
	}

	legacy := mkdirIn(t, base, "legacy")
	// remote/ (the upload journal) is part of a store too.
	for _, d := range []string{DataName, WritingName, RemoteName, filepath.Join(DataName, "sub")} {
		must(t, "mkdir", os.Mkdir(filepath.Join(legacy, d), 0o755))
	}
	must(t, "lock", os.WriteFile(filepath.Join(legacy, LockName), nil, 0o644))
	must(t, "hint", os.WriteFile(filepath.Join(legacy, HintName), []byte("3\n"), 0o644))
	s, err := Open(legacy)
	must(t, "Open legacy", err)
	s.Close()
	if !IsStore(legacy) {
		t.Fatal("legacy store not marked")
	}
	if _, err := os.Stat(filepath.Join(legacy, FormatName)); err != nil {
		t.Fatalf("legacy store not marked: %v", err)
	}

	// A start that stopped between taking the lock and the mark.
	half := mkdirIn(t, base, "half")
	must(t, "lock", os.WriteFile(filepath.Join(half, LockName), nil, 0o644))
	s, err = Open(half)
	must(t, "Open half-made", err)
	s.Close()

	for i, edited := range []string{"kvfs store v1", "kvfs store v1\r\n", "kvfs store v1\n\n"} {
		dir := mkdirIn(t, base, fmt.Sprintf("edited%d", i))
		must(t, "format", os.WriteFile(filepath.Join(dir, FormatName), []byte(edited), 0o644))
		s, err := Open(dir)
		must(t, fmt.Sprintf("Open of a store whose format file holds %q", edited), err)
		s.Close()
	}

	future := mkdirIn(t, base, "future")
	must(t, "format", os.WriteFile(filepath.Join(future, FormatName), []byte("kvfs store v9\n"), 0o644))
	if _, err := Open(future); !errors.Is(err, ErrNotStore) || !strings.Contains(err.Error(), "unknown format") {
		t.Fatalf("Open of an unknown format = %v", err)
	}
}

// TestOpenRefusesNested: a store inside another store (its data/, its
// writing/, anywhere below) is refused without writing anything.
func TestOpenRefusesNested(t *testing.T) {
	outer := filepath.Join(t.TempDir(), "outer")
	s, err := Open(outer)
	must(t, "Open", err)
	mustMkdir(t, s, RootID, "objects")
	s.Close()
	for _, inner := range []string{
		filepath.Join(outer, DataName),
		filepath.Join(outer, DataName, "objects"),
		filepath.Join(outer, DataName, "new"),
		filepath.Join(outer, WritingName),
		filepath.Join(outer, "beside"),
	} {
		before := treeSnapshot(t, outer)
		_, err := Open(inner)
		if !errors.Is(err, ErrNotStore) || !strings.Contains(err.Error(), "inside the kvfs store "+outer) {
			t.Fatalf("Open(%s) = %v, want a refusal naming the outer store", inner, err)
		}
		if after := treeSnapshot(t, outer); !slices.Equal(before, after) {
			t.Fatalf("a refused Open(%s) changed the outer store", inner)
		}
	}
	if dir, ok := StoreAbove(filepath.Join(outer, DataName, "objects", "x")); !ok || dir != outer {
		t.Fatalf("StoreAbove = %q, %v", dir, ok)
	}
	// An object named as the store's mark, at the cache's root: the
	// store is still the outer one.
	must(t, "write", os.WriteFile(filepath.Join(outer, DataName, FormatName), []byte("an object"), 0o644))
	if dir, ok := StoreAbove(filepath.Join(outer, DataName, "objects", "x")); !ok || dir != outer {
		t.Fatalf("StoreAbove with an object named %s = %q, %v; want %s", FormatName, dir, ok, outer)
	}
}

func mkdirIn(t *testing.T, base, name string) string {
	t.Helper()
	d := filepath.Join(base, name)
	must(t, "mkdir", os.Mkdir(d, 0o755))
	return d
}
