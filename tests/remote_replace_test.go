package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/internal/s3test"
)

// TestRemoteRewriteSupersedes: names A uploaded and then changed on A
// (an O_TRUNC rewrite, a rename over it, a truncate by name) reach the
// bucket with their new bytes, and once A evicts them A and a node
// that never had them load the new bytes, not the first upload's.
func TestRemoteRewriteSupersedes(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a", "--capacity", "8MiB")
	old := map[string][]byte{}
	for _, key := range []string{"ow", "rn", "tr", "rw"} {
		old[key] = objectBytes(key+" v1", 64<<10)
		putFile(t, finalPath(a.mp, key), old[key])
	}
	before := a.uploaded()
	// Opened read-write and read, not changed (numpy's memmap r+,
	// open(..., "r+b")): the bucket's copy stands; nothing is deleted
	// or sent again (before: its open deleted the key, and its release
	// uploaded the same bytes).
	rw, err := os.OpenFile(finalPath(a.mp, "rw"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	rw.Close()
	if f := a.uploaded(); f.Deletes != before.Deletes || f.Uploads != before.Uploads {
		t.Errorf("an unchanged read-write open: deletes %d -> %d, uploads %d -> %d; want none", before.Deletes, f.Deletes, before.Uploads, f.Uploads)
	}
	want := map[string][]byte{
		"ow": objectBytes("ow v2, longer", 96<<10),
		"rn": objectBytes("rn v2", 32<<10),
		"tr": old["tr"][:1000],
	}
	putFile(t, finalPath(a.mp, "ow"), want["ow"])
	tmp := finalPath(a.mp, "rn") + ".tmp"
	putFile(t, tmp, want["rn"])
	if err := os.Rename(tmp, finalPath(a.mp, "rn")); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(finalPath(a.mp, "tr"), int64(len(want["tr"]))); err != nil {
		t.Fatal(err)
	}
	f := a.uploaded()
	for key, w := range want {
		if got, _ := remoteObject(t, srv, key); !bytes.Equal(got, w) {
			t.Errorf("%s: the bucket holds %d bytes (the first upload's: %v), want the %d written since",
				key, len(got), bytes.Equal(got, old[key]), len(w))
		}
	}
	if f.Deletes < 3 || f.Uploads != 7 {
		t.Errorf("A's figures %+v: want each name's key deleted and uploaded again", f)
	}
	// Colder than these fillers (temp names: never uploaded), the three
	// names are evicted.
	for i := range 4 {
		putFile(t, filepath.Join(a.mp, fmt.Sprintf("fill-%d.tmp", i)), objectBytes("fill", 2*MiB))
	}
	for key := range want {
		if _, err := os.Stat(filepath.Join(a.store, "data", key+".data")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s is still in A's store (%v); the test needs it evicted", key, err)
		}
	}
	b := startRemoteNode(t, srv, dir, "b")
	for key, w := range want {
		a.mustLoad(key, w)
		b.mustLoad(key, w)
	}
	b.stop()
	a.stop()
}

// TestRemoteRenameOverRemoteOnly: on a node that holds a name only in
// the bucket (looked up with stat, or never: the rename looks it up
// itself), `mv tmp name` replaces the fleet's object, as a rename over
// a local file does: the bucket ends with this node's bytes, and this
// node loads them again once it evicts its copy. Before, the upload
// found the key present and skipped it, so the node's own object
// reverted to the bucket's after an eviction (an outside tester, 4 of
// 4).
func TestRemoteRenameOverRemoteOnly(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a")
	b := startRemoteNode(t, srv, dir, "b", "--capacity", "8MiB")
	for _, key := range []string{"seen", "unseen"} {
		putFile(t, finalPath(a.mp, key), objectBytes(key+" from a", 64<<10))
		a.uploaded()
	}
	if _, err := os.Stat(finalPath(b.mp, "seen")); err != nil {
		t.Fatalf("b does not find a's upload: %v", err)
	}
	want := map[string][]byte{}
	for _, key := range []string{"seen", "unseen"} {
		want[key] = objectBytes(key+" from b", 48<<10)
		tmp := finalPath(b.mp, key) + ".tmp"
		putFile(t, tmp, want[key])
		if err := os.Rename(tmp, finalPath(b.mp, key)); err != nil {
			t.Fatal(err)
		}
	}
	// The same bytes renamed over a name the fleet holds (a content-
	// keyed store, LMCache's temp name and os.replace) leave the key
	// alone: no delete, no upload, so no other node misses it.
	same := objectBytes("same from either", 64<<10)
	putFile(t, finalPath(a.mp, "same"), same)
	a.uploaded()
	tmp := finalPath(b.mp, "same") + ".tmp"
	putFile(t, tmp, same)
	if err := os.Rename(tmp, finalPath(b.mp, "same")); err != nil {
		t.Fatal(err)
	}
	f := b.uploaded()
	for key, w := range want {
		if got, _ := remoteObject(t, srv, key); !bytes.Equal(got, w) {
			t.Errorf("%s: the bucket holds %d bytes after b renamed its own over the name, want b's %d", key, len(got), len(w))
		}
	}
	if got, _ := remoteObject(t, srv, "same"); !bytes.Equal(got, same) || f.Deletes != 2 || f.Uploads != 2 || f.AlreadyPresent != 1 {
		t.Errorf("b's figures %+v, the bucket's object the same bytes: %v; want the two keys replaced, the third left alone (already present)", f, bytes.Equal(got, same))
	}
	for i := range 4 {
		putFile(t, filepath.Join(b.mp, fmt.Sprintf("fill-%d.tmp", i)), objectBytes("fill", 2*MiB))
	}
	for key, w := range want {
		if _, err := os.Stat(filepath.Join(b.store, "data", key+".data")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s is still in b's store (%v); the test needs it evicted", key, err)
		}
		b.mustLoad(key, w)
	}
	b.stop()
	a.stop()
}

// TestRemoteDirectoryRenameCopies: with a shared tier, a directory's
// rename is refused with EXDEV, and mv copies the tree and removes it,
// object by object, which the bucket follows: the keys move with the
// names. Renamed in place, the bucket kept every key under the old path
// and got none under the new one; other nodes read the old names, and
// an rm after the move left the old keys for good (an outside tester).
func TestRemoteDirectoryRenameCopies(t *testing.T) {
	srv := s3test.New(t)
	a := startRemoteNode(t, srv, t.TempDir(), "a")
	if err := os.MkdirAll(filepath.Join(a.mp, "d", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for _, key := range []string{"f1", "f2"} {
		want[key] = objectBytes(key, 64<<10)
		putFile(t, finalPath(filepath.Join(a.mp, "d", "x"), key), want[key])
	}
	a.uploaded()
	err := os.Rename(filepath.Join(a.mp, "d", "x"), filepath.Join(a.mp, "d", "y"))
	if !errors.Is(err, syscall.EXDEV) {
		t.Fatalf("rename(2) of a directory with a shared tier: %v, want EXDEV", err)
	}
	if out, err := exec.Command("mv", filepath.Join(a.mp, "d", "x"), filepath.Join(a.mp, "d", "y")).CombinedOutput(); err != nil {
		t.Fatalf("mv: %v\n%s", err, out)
	}
	a.uploaded()
	for key, w := range want {
		if got, err := os.ReadFile(finalPath(filepath.Join(a.mp, "d", "y"), key)); err != nil || !bytes.Equal(got, w) {
			t.Errorf("d/y/%s after mv: %d bytes (%v)", key, len(got), err)
		}
		if got, _ := remoteObject(t, srv, "d/y/"+key); !bytes.Equal(got, w) {
			t.Errorf("the bucket holds %d bytes under d/y/%s, want the %d moved there", len(got), key, len(w))
		}
		if got, _ := remoteObject(t, srv, "d/x/"+key); got != nil {
			t.Errorf("the bucket still holds d/x/%s after the mv", key)
		}
	}
	a.stop()
}
