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

	"github.com/kvfs/kvfs/internal/loopfs"
	"golang.org/x/sys/unix"
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

// TestFlatDirFullExt4Index fills one directory of a store on an ext4 made
// without large_dir (1 KiB blocks and 255-byte names: about 20,000 fit)
// through the mount, until ext4's directory index refuses a name. The
// daemon warns of the directory, at half its estimated limit, before the
// refusal; the refused create gets ENOSPC, and the daemon says the
// directory is full and how to lift the limit (tune2fs -O large_dir and
// the device). Everything stored before stays, counted exactly; another
// directory still takes names, and so does the full one where a name
// left room.
func TestFlatDirFullExt4Index(t *testing.T) {
	requireRoot(t)
	root := loopfs.Mount(t, loopfs.Spec{Mkfs: []string{"mkfs.ext4", "-q", "-F", "-b", "1024", "-N", "60000", "-O", "^large_dir"},
		Size: 128 << 20, NoMkfs: "this mkfs.ext4 cannot make the file system"})
	store, mp := filepath.Join(root, "store"), filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, mp, "--store", store, "--capacity", "64MiB")
	dir := filepath.Join(mp, "flat")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	name := func(i int) string { return filepath.Join(dir, fmt.Sprintf("%08d", i)+strings.Repeat("k", 247)) }
	create := func(i int) error {
		fd, err := unix.Open(name(i), unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
		if err == nil {
			err = unix.Close(fd)
		}
		return err
	}
	n, refused := 0, error(nil)
	for ; n < 60000 && refused == nil; n++ {
		refused = create(n)
	}
	n-- // the refused one
	if !errors.Is(refused, unix.ENOSPC) {
		t.Fatalf("after %d names: %v, want ENOSPC from ext4's full directory index", n, refused)
	}
	// The daemon logs the refusal as it answers it: the line may come a
	// moment after the client has its ENOSPC.
	d.printed("is full: ext4's directory index")
	out := d.out.String()
	warned := strings.Index(out, "filling ext4's directory index")
	full := strings.Index(out, "is full: ext4's directory index")
	if warned < 0 || full < 0 || warned > full {
		t.Fatalf("after %d names the daemon should have warned of the directory, then said it is full; output:\n%s", n, tail(out, 3000))
	}
	if fix := "tune2fs -O large_dir /dev/loop"; !strings.Contains(out[full:], fix) {
		t.Errorf("the full directory's error does not say %q; output:\n%s", fix, tail(out, 2000))
	}
	if st := stats(t, mp); st.Objects != int64(n) {
		t.Errorf("%d names stored before the refusal, stats count %d objects", n, st.Objects)
	}
	if got := len(lsF(t, dir)); got != n {
		t.Errorf("ls -f lists %d names, %d were stored", got, n)
	}
	if err := os.Mkdir(filepath.Join(mp, "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	putFile(t, filepath.Join(mp, "other", "obj"), []byte("elsewhere"))
	// A name removed frees its slot for a name of the same hash: itself.
	if err := os.Remove(name(0)); err != nil {
		t.Fatal(err)
	}
	if err := create(0); err != nil {
		t.Errorf("storing a name again where it was removed: %v", err)
	}
	t.Logf("%d names of 255 bytes fitted in one directory; the warning came first", n)
}

// TestFullDiskIsNotAFullDirectory: a store whose disk is full refuses a
// new name with ENOSPC, and the daemon does not take it for a directory
// ext4's index cannot grow (whose advice, tune2fs -O large_dir, cannot
// be undone). Before, it did whenever ext4 still had the blocks it keeps
// back, which statfs's Bfree counts and no mkdir may take (an outside
// tester's finding).
func TestFullDiskIsNotAFullDirectory(t *testing.T) {
	requireRoot(t)
	root := loopfs.Mount(t, loopfs.Spec{Mkfs: []string{"mkfs.ext4", "-q", "-F"}, Size: 32 << 20,
		NoMkfs: "this mkfs.ext4 cannot make the file system"})
	store, mp := filepath.Join(root, "store"), filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, mp, "--store", store, "--capacity", "16MiB")
	// Fill the disk beside the store, as root, until it refuses.
	filler, err := os.Create(filepath.Join(root, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 1<<20)
	for err == nil {
		_, err = filler.Write(block)
	}
	filler.Close()
	var refused error
	for i := 0; i < 5000 && refused == nil; i++ {
		refused = os.Mkdir(filepath.Join(mp, fmt.Sprintf("d%d", i)), 0o755)
	}
	if !errors.Is(refused, unix.ENOSPC) {
		t.Fatalf("mkdir on a full disk: %v, want ENOSPC", refused)
	}
	if out := d.out.String(); strings.Contains(out, "is full: ext4's directory index") {
		t.Fatalf("a full disk was reported as a full directory index:\n%s", tail(out, 2000))
	}
	os.Remove(filepath.Join(root, "filler"))
	d.stop()
}
