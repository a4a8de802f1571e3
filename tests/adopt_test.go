package tests

// Which directories kvfs adopts as a store (issue 8 part 1), from the
// command line: only an empty one, or one that is a kvfs store already.

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// userTree makes the directory of issue 8: data/photos/img1..8.jpg of
// 1 MiB each, data/notes.txt, a symlink data/docs-link -> ../docs and a
// fifo data/fifo.
func userTree(t *testing.T, d string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(d, "data", "photos"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 8; i++ {
		name := "img" + strconv.Itoa(i) + ".jpg"
		putFile(t, filepath.Join(d, "data", "photos", name), objectBytes(name, MiB))
	}
	putFile(t, filepath.Join(d, "data", "notes.txt"), []byte("my notes\n"))
	if err := os.Symlink("../docs", filepath.Join(d, "data", "docs-link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(d, "data", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// storeOwnNames are what kvfs writes into a directory it adopts.
var storeOwnNames = []string{"kvfs.lock", "kvfs.hint", "kvfs.index", "kvfs.reads", "kvfs.format", "writing"}

// refusal is one directory kvfs must not serve.
type refusal struct {
	name  string
	setup func(t *testing.T, dir string) (store, mp string) // under dir
	want  []string                                          // in the one line
	fsck  []string                                          // also refused by fsck, naming these; nil: not asked
}

// TestStoreAdoptionRefused: kvfs mount of a directory that is neither
// empty nor a store, of a stopped store's data/, of a directory inside
// a store, with the store and the mount point inside each other, and
// with the mount point inside a store: exit 2 with one line naming the
// reason, nothing mounted, and every directory involved byte for byte as
// it was (no kvfs.lock, kvfs.hint, kvfs.index, writing/ added, nothing
// deleted, not even created and removed again). kvfs fsck refuses the
// same directories and changes nothing either.
func TestStoreAdoptionRefused(t *testing.T) {
	requireRoot(t)
	mkMp := func(t *testing.T, dir string) string {
		mp := filepath.Join(dir, "mnt")
		if err := os.Mkdir(mp, 0o755); err != nil {
			t.Fatal(err)
		}
		return mp
	}
	cases := []refusal{
		{"user_directory", func(t *testing.T, dir string) (string, string) {
			userTree(t, filepath.Join(dir, "D"))
			return filepath.Join(dir, "D"), mkMp(t, dir)
		}, []string{"D is not empty and is not a kvfs store"}, []string{"not a kvfs store"}},
		{"user_directory_without_data", func(t *testing.T, dir string) (string, string) {
			os.Mkdir(filepath.Join(dir, "D"), 0o755)
			putFile(t, filepath.Join(dir, "D", "notes.txt"), []byte("x"))
			return filepath.Join(dir, "D"), mkMp(t, dir)
		}, []string{"not empty", "not a kvfs store"}, []string{"not a kvfs store"}},
		{"stopped_store_data", func(t *testing.T, dir string) (string, string) {
			makeStore(t, filepath.Join(dir, "S"))
			return filepath.Join(dir, "S", "data"), mkMp(t, dir)
		}, []string{"inside the kvfs store", "/S"}, []string{"inside the kvfs store", "/S: check that"}}, // fsck said "not a kvfs store
		{"store_inside_store", func(t *testing.T, dir string) (string, string) {
			makeStore(t, filepath.Join(dir, "S"))
			os.Mkdir(filepath.Join(dir, "S", "data", "inner"), 0o755)
			return filepath.Join(dir, "S", "data", "inner"), mkMp(t, dir)
		}, []string{"inside the kvfs store", "/S"}, []string{"inside the kvfs store", "/S: check that"}},
		{"new_store_inside_store", func(t *testing.T, dir string) (string, string) {
			makeStore(t, filepath.Join(dir, "S"))
			return filepath.Join(dir, "S", "beside"), mkMp(t, dir)
		}, []string{"inside the kvfs store", "/S"}, nil},
		{"store_inside_mount_point", func(t *testing.T, dir string) (string, string) {
			mp := mkMp(t, dir)
			return filepath.Join(mp, "store"), mp
		}, []string{"must not contain each other"}, nil},
		{"mount_point_inside_its_store", func(t *testing.T, dir string) (string, string) {
			makeStore(t, filepath.Join(dir, "S"))
			os.Mkdir(filepath.Join(dir, "S", "data", "mnt"), 0o755)
			return filepath.Join(dir, "S"), filepath.Join(dir, "S", "data", "mnt")
		}, []string{"must not contain each other"}, nil},
		{"mount_point_inside_another_store", func(t *testing.T, dir string) (string, string) {
			makeStore(t, filepath.Join(dir, "S"))
			os.Mkdir(filepath.Join(dir, "S", "data", "mnt"), 0o755)
			return filepath.Join(dir, "T"), filepath.Join(dir, "S", "data", "mnt")
		}, []string{"mount point", "inside the kvfs store", "/S"}, nil},
		// The store by default, beside the mount point: inside S too, and
		// its refusal named that derived path, never the mount point.
		{"absent_mount_point_inside_a_store", func(t *testing.T, dir string) (string, string) {
			makeStore(t, filepath.Join(dir, "S"))
			mp := filepath.Join(dir, "S", "data", "sub")
			return mp + ".kvfs-store", mp
		}, []string{"mount point ", "S/data/sub is inside the kvfs store", "/S"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkRefusal(t, c) })
	}
}

func checkRefusal(t *testing.T, c refusal) {
	dir := t.TempDir()
	store, mp := c.setup(t, dir)
	_, statErr := os.Lstat(store)
	storeExisted := statErr == nil
	had := map[string]bool{}
	for _, n := range storeOwnNames {
		_, err := os.Lstat(filepath.Join(store, n))
		had[n] = err == nil
	}
	before := listing(t, dir)
	// Should kvfs mount after all, it serves in the foreground until the
	// timeout kills it: its mount must not outlive the test.
	t.Cleanup(func() { detachAll(mp) })
	res := runKvfsTimeout(nil, 10*time.Second, "mount", "--store", store, "--capacity", "2MiB", mp)
	if m, ok := mountAt(mp); ok {
		t.Errorf("%s got mounted (%s)", mp, m.FSType)
	}
	detachAll(mp)
	if after := listing(t, dir); after != before {
		t.Errorf("the refused mount changed %s:\nbefore\n%s\nafter\n%s", dir, before, after)
	}
	requireUsageError(t, res, c.want...)
	if !storeExisted {
		if _, err := os.Lstat(store); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the refused mount created the store %s", store)
		}
	} else {
		for _, n := range storeOwnNames {
			if _, err := os.Lstat(filepath.Join(store, n)); err == nil && !had[n] {
				t.Errorf("the refused mount added %s to %s", n, store)
			}
		}
	}
	if c.fsck == nil {
		return
	}
	for _, args := range [][]string{{"fsck", "--store", store}, {"fsck", "--store", store, "--repair"}} {
		requireUsageError(t, runKvfs(t, args...), append([]string{store}, c.fsck...)...)
	}
	if after := listing(t, dir); after != before {
		t.Errorf("a refused fsck changed %s:\nbefore\n%s\nafter\n%s", dir, before, after)
	}
}

// TestStoreAdoptionAccepted: an empty directory becomes a store marked
// with kvfs.format; a store of the layout before the marker (data/,
// writing/, kvfs.lock, no kvfs.format) is recognised, serves its objects
// byte for byte, and is marked; both mount again, and fsck finds them
// clean. A directory that is not a store is refused however it is named:
// the marker of an unknown format too.
func TestStoreAdoptionAccepted(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	t.Run("empty_directory", func(t *testing.T) {
		store, mp := filepath.Join(dir, "E"), filepath.Join(dir, "E-mnt")
		for _, d := range []string{store, mp} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		d := startDaemon(t, mp, "--store", store, "--capacity", "2MiB")
		putFile(t, filepath.Join(mp, "obj"), objectBytes("obj", 5000))
		d.stop()
		requireFormat(t, store)
		d = startDaemon(t, mp, "--store", store, "--capacity", "2MiB")
		requireObject(t, filepath.Join(mp, "obj"), "obj", 5000)
		d.stop()
		requireFsckClean(t, store)
	})
	t.Run("store_of_the_previous_layout", func(t *testing.T) {
		store, mp := filepath.Join(dir, "L"), filepath.Join(dir, "L-mnt")
		for _, d := range []string{mp, filepath.Join(store, "data", "sub"), filepath.Join(store, "writing")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		putFile(t, filepath.Join(store, "kvfs.lock"), []byte("12345\n"))
		putFile(t, filepath.Join(store, "data", "sub", "old"), objectBytes("old", 70000))
		d := startDaemon(t, mp, "--store", store, "--capacity", "2MiB")
		requireObject(t, filepath.Join(mp, "sub", "old"), "old", 70000)
		if st := assertQuietEqual(t, d); st.Objects != 1 || st.Evictions != 0 {
			t.Errorf("the old store's object: %d objects, %d evictions", st.Objects, st.Evictions)
		}
		d.stop()
		requireFormat(t, store)
		d = startDaemon(t, mp, "--store", store, "--capacity", "2MiB")
		requireObject(t, filepath.Join(mp, "sub", "old"), "old", 70000)
		d.stop()
		requireFsckClean(t, store)
	})
	t.Run("unknown_format", func(t *testing.T) {
		store, mp := filepath.Join(dir, "F"), filepath.Join(dir, "F-mnt")
		for _, d := range []string{mp, store} {
			os.Mkdir(d, 0o755)
		}
		putFile(t, filepath.Join(store, "kvfs.format"), []byte("kvfs store v9\n"))
		before := listing(t, store)
		t.Cleanup(func() { detachAll(mp) })
		requireUsageError(t, runKvfsTimeout(t, 10*time.Second, "mount", "--store", store, "--capacity", "2MiB", mp), "unknown format")
		if _, ok := mountAt(mp); ok {
			unix.Unmount(mp, unix.MNT_DETACH)
			t.Errorf("a store of an unknown format got mounted")
		}
		if after := listing(t, store); after != before {
			t.Errorf("the refused mount changed %s:\n%s", store, after)
		}
	})
}

func requireFormat(t *testing.T, store string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(store, "kvfs.format"))
	if err != nil || !strings.HasPrefix(string(data), "kvfs store v1") {
		t.Errorf("%s not marked: kvfs.format %q, %v", store, data, err)
	}
}

func requireObject(t *testing.T, p, key string, size int) {
	t.Helper()
	data, err := os.ReadFile(p)
	if err == nil {
		err = checkObject(data, key, size)
	}
	if err != nil {
		t.Errorf("%s: %v", p, err)
	}
}

func requireFsckClean(t *testing.T, store string) {
	t.Helper()
	if res := runKvfs(t, "fsck", "--store", store); res.code != 0 {
		t.Errorf("kvfs fsck --store %s: exit %d, %q %q", store, res.code, res.stdout, res.stderr)
	}
}
