package tests

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestFlatDirListing fills one directory through the mount with 50,000
// small objects (0-1 KiB) under a capacity that holds about 30,000, so
// eviction runs while it fills, far past one ext4 index block (about
// 40,000 names of this length), and lists it with the real `ls -f` and
// os.ReadDir: while eviction runs, each listing has no duplicates and
// every name in it either stats or was evicted in between (ENOENT, and
// absent from the final listing: every name is written once); once
// quiet, both listings agree with each other and with `kvfs stats`.
func TestFlatDirListing(t *testing.T) {
	const names, workers = 50000, 4
	d := mountCache(t, "--capacity", "120MiB", "--grace", "10ms")
	dir := filepath.Join(d.mp, "flat")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1024)
			for i := w; i < names; i += workers {
				if err := os.WriteFile(filepath.Join(dir, flatName(i)), buf[:i%1025], 0o644); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var during []string
	for range 2 {
		during = append(during, lsF(t, dir)...)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("storing: %v", err)
	}
	final := lsF(t, dir)
	set := distinct(t, "ls -f (final)", final)
	read := readDirNames(t, dir)
	if len(read) != len(final) || len(distinct(t, "os.ReadDir", read)) != len(set) {
		t.Fatalf("os.ReadDir listed %d names, ls -f %d", len(read), len(final))
	}
	for _, n := range read {
		if !set[n] {
			t.Fatalf("os.ReadDir lists %s, ls -f does not", n)
		}
	}
	st := stats(t, d.mp)
	if st.Evictions == 0 || int64(len(final)) != st.Objects || len(final) < names/2 {
		t.Fatalf("listed %d of %d names; stats: %d objects, %d evictions", len(final), names, st.Objects, st.Evictions)
	}
	for _, n := range final {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Fatalf("listed once quiet, but %v", err)
		}
	}
	gone := 0
	for _, n := range during {
		_, err := os.Stat(filepath.Join(dir, n))
		switch {
		case errors.Is(err, fs.ErrNotExist) && !set[n]:
			gone++
		case err != nil:
			t.Fatalf("listed while filling: %s: %v", n, err)
		}
	}
	if int64(gone) > st.Evictions {
		t.Fatalf("%d names listed while filling are gone, %d evictions", gone, st.Evictions)
	}
	t.Logf("%d names kept of %d, %d evictions; %d listed while filling, %d of them evicted since", len(final), names, st.Evictions, len(during), gone)
}

func flatName(i int) string { return fmt.Sprintf("llama@0x%08x@0@%016x.data", i%7, i) }

// lsF runs the real `ls -f` (unsorted, as getdents gives) and checks one
// listing has no name twice.
func lsF(t *testing.T, dir string) []string {
	t.Helper()
	out, err := exec.Command("ls", "-f", dir).Output()
	if err != nil {
		t.Fatalf("ls -f: %v", err)
	}
	var names []string
	for _, n := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if n != "." && n != ".." && n != "" {
			names = append(names, n)
		}
	}
	distinct(t, "ls -f", names)
	return names
}

func readDirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("os.ReadDir: %v", err)
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names
}

// distinct fails on a name listed twice.
func distinct(t *testing.T, what string, names []string) map[string]bool {
	t.Helper()
	set := make(map[string]bool, len(names))
	for _, n := range names {
		if set[n] {
			t.Fatalf("%s lists %s twice", what, n)
		}
		set[n] = true
	}
	return set
}
