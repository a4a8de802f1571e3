package tests

// What the store's own disk does under kvfs: it goes read-only after an
// error, it fills up behind kvfs's back, it runs out of inodes.

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvfs/kvfs/internal/loopfs"

	"golang.org/x/sys/unix"
)

// storeDisk mounts a small ext4 file system made with the extra mkfs
// arguments and mount options, for a store, and returns where.
func storeDisk(t *testing.T, size int64, opts string, mkfs ...string) string {
	t.Helper()
	requireRoot(t)
	return loopfs.Mount(t, loopfs.Spec{Mkfs: append([]string{"mkfs.ext4", "-q", "-F"}, mkfs...), Opts: opts, Size: size,
		NoMkfs: "this mkfs.ext4 cannot make the file system", NoMount: "this kernel cannot mount the ext4 image"})
}

// TestUnlinkOnAReadOnlyStore: a store whose file system turned read-only
// (ext4's errors=remount-ro after an error) refuses unlink, link and
// rename, and kvfs says so and keeps every name and its charge. Before,
// rm exited 0 and the name left the mount and the ledger, while the
// store kept the object, which the next start (or the audit) served
// again (an outside tester, 3 of 3).
func TestUnlinkOnAReadOnlyStore(t *testing.T) {
	root := storeDisk(t, 32<<20, "errors=remount-ro")
	m, ok := mountAt(root)
	if !ok {
		t.Fatalf("%s is not a mount", root)
	}
	trigger := filepath.Join("/sys/fs/ext4", filepath.Base(m.Source), "trigger_fs_error")
	if _, err := os.Stat(trigger); err != nil {
		t.Skipf("this kernel cannot fail an ext4 file system on purpose: %v", err)
	}
	mp := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(root, "store")
	d := startDaemon(t, mp, "--store", store, "--capacity", "16MiB")
	for _, name := range []string{"a", "b"} {
		putFile(t, filepath.Join(mp, name), objectBytes(name, 100_000))
	}
	before := waitReleased(t, mp)
	if err := os.WriteFile(trigger, []byte("kvfs test\n"), 0); err != nil {
		t.Fatal(err)
	}
	// ext4 turns read-only from a work queue, just after, and its mount
	// flags still say rw (emergency_ro): a create shows it.
	probe := filepath.Join(root, "probe")
	if !waitFor(func() bool { return errors.Is(os.WriteFile(probe, nil, 0o600), unix.EROFS) }) {
		t.Fatalf("the store's file system is not read-only %v after the error", hangGuard)
	}
	if err := os.Remove(filepath.Join(mp, "a")); !errors.Is(err, unix.EROFS) {
		t.Errorf("rm of a name on a read-only store: %v, want EROFS", err)
	}
	if err := os.Link(filepath.Join(mp, "a"), filepath.Join(mp, "c")); !errors.Is(err, unix.EROFS) {
		t.Errorf("ln on a read-only store: %v, want EROFS", err)
	}
	if err := os.Rename(filepath.Join(mp, "a"), filepath.Join(mp, "b")); !errors.Is(err, unix.EROFS) {
		t.Errorf("mv over a name on a read-only store: %v, want EROFS", err)
	}
	ents, err := os.ReadDir(mp)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("the mount lists %v after the refused changes, want [a b]", names)
	}
	for _, name := range []string{"a", "b"} {
		got, err := os.ReadFile(filepath.Join(mp, name))
		if err == nil {
			err = checkObject(got, name, 100_000)
		}
		if err != nil {
			t.Errorf("%s after the refused changes: %v", name, err)
		}
	}
	if st := stats(t, mp); st.UsedBytes != before.UsedBytes || st.Objects != before.Objects {
		t.Errorf("the ledger holds %d objects, %d bytes after the refused changes; %d, %d before",
			st.Objects, st.UsedBytes, before.Objects, before.UsedBytes)
	}
	d.stop() // a daemon whose store turned read-only still stops, exit 0
}
