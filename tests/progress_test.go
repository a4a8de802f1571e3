package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// fillStoreBehind writes files straight into an unmounted store's data/
// (as a restore from backup would) and removes the snapshot, so the
// next start-up walks the store: one directory of more files than a
// walker reports at once, and smaller ones.
func fillStoreBehind(t *testing.T, store string) int {
	t.Helper()
	n := 0
	for dir, count := range map[string]int{"big": 2500, "a": 300, "a/b": 200} {
		p := filepath.Join(store, "data", dir)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range count {
			if err := os.WriteFile(filepath.Join(p, fmt.Sprint(i)), []byte("kv"), 0o644); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if err := os.Remove(filepath.Join(store, "kvfs.index")); err != nil {
		t.Fatal(err)
	}
	return n
}

// progressCounts are the object counts of the progress lines in out.
func progressCounts(t *testing.T, out string, line *regexp.Regexp) []int {
	t.Helper()
	var counts []int
	for _, m := range line.FindAllStringSubmatch(out, -1) {
		n, err := strconv.Atoi(m[1])
		if err != nil {
			t.Fatal(err)
		}
		counts = append(counts, n)
	}
	return counts
}

// checkCounts: at least min lines, counts rising, none past total.
func checkCounts(t *testing.T, what string, counts []int, min, total int, out string) {
	t.Helper()
	ok := len(counts) >= min
	for i, n := range counts {
		ok = ok && n > 0 && n <= total && (i == 0 || n >= counts[i-1])
	}
	if !ok {
		t.Errorf("%s: progress counts %v; want at least %d lines rising to at most %d. Output:\n%s", what, counts, min, total, out)
	}
}

var (
	loadLine = regexp.MustCompile(`\tload\t.*loading store\t\{"objects": (\d+), "expected": 0, "per_second": \d+`)
	fsckLine = regexp.MustCompile(`kvfs fsck: checking store: (\d+) objects of about (\d+) \(\d+%\), \d+/s\n`)
)

// TestProgressLines: a start-up that walks a store of a few thousand
// objects, and fsck of it, report their progress in lines with a count
// and a rate when their output is no terminal (here, at every step).
func TestProgressLines(t *testing.T) {
	requireRoot(t)
	_, mp, store := mountDirs(t)
	startDaemon(t, mp, "--store", store).stop()
	total := fillStoreBehind(t, store)

	d := startDaemon(t, mp, "--store", store, "--progress-interval", "0")
	if st := stats(t, mp); st.Objects != int64(total) {
		t.Fatalf("%d objects loaded, want %d", st.Objects, total)
	}
	out := d.out.String()
	checkCounts(t, "start-up", progressCounts(t, out, loadLine), 3, total, out)
	if strings.Contains(out, "\r") {
		t.Errorf("a bar drawn on a pipe:\n%q", out)
	}
	d.stop()

	res := runKvfs(t, "fsck", "--store", store, "--progress-interval", "0")
	if res.code != 0 {
		t.Fatalf("kvfs fsck: exit %d: %s%s", res.code, res.stdout, res.stderr)
	}
	checkCounts(t, "fsck", progressCounts(t, res.stderr, fsckLine), 3, total, res.stderr)
	if m := fsckLine.FindStringSubmatch(res.stderr); m == nil || m[2] != strconv.Itoa(total) {
		t.Errorf("fsck expected %v objects, want the %d the last start-up found", m, total)
	}
	if !strings.Contains(res.stdout, fmt.Sprintf("%d objects", total)) {
		t.Errorf("fsck's report: %q", res.stdout)
	}
}

// TestProgressIntervalRefused: a negative interval is a usage error.
func TestProgressIntervalRefused(t *testing.T) {
	for _, args := range [][]string{
		{"mount", "--progress-interval", "-1s", t.TempDir()},
		{"fsck", "--store", t.TempDir(), "--progress-interval", "-1s"},
	} {
		res := runKvfs(t, args...)
		if res.code != 2 || !strings.Contains(res.stderr, "--progress-interval -1s") {
			t.Errorf("kvfs %v: exit %d, stderr %q; want exit 2 naming the flag", args, res.code, res.stderr)
		}
	}
}
