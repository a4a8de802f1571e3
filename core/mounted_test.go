package core

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/kvfs/kvfs/blob"
)

// TestStartWithAMountInTheStore: another file system mounted on a stored
// directory (a user's FUSE server on a directory they own, which
// fusermount allows) is never entered: a start, from the checkpoint or
// by a walk, serves the rest, and the directory shows empty (an outside
// tester: a user's FUSE mount without allow_other made every start fail
// with "loading store: open evil/fm: permission denied"; one that never
// answered hung the daemon's audit for good).
func TestStartWithAMountInTheStore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a tmpfs on a stored directory")
	}
	dir := t.TempDir()
	start := func() (*Core, LoadReport) {
		t.Helper()
		store, err := blob.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		c, rep, err := Open(store, Config{Capacity: 4 * mib})
		if err != nil {
			t.Fatalf("start with a file system mounted in the store: %v", err)
		}
		c.Start(func(Drop) {})
		return c, rep
	}
	who := blob.Owner{UID: -1, GID: -1}
	c, _ := start()
	evil, _, err := c.Mkdir(blob.RootID, "evil", 0o755, who)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Mkdir(evil, "fm", 0o755, who); err != nil {
		t.Fatal(err)
	}
	h, err := c.Create(evil, "x", 0o644, who, true)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	c.Close()

	fm := filepath.Join(dir, blob.DataName, "evil", "fm")
	if err := unix.Mount("tmpfs", fm, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("needs root that may mount a tmpfs: %v", err)
	}
	defer unix.Unmount(fm, unix.MNT_DETACH)
	if err := os.WriteFile(filepath.Join(fm, "inside"), []byte("not the store's"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, walk := range []bool{false, true} {
		if walk {
			if err := os.Remove(filepath.Join(dir, blob.CheckpointName)); err != nil {
				t.Fatal(err)
			}
		}
		c, rep := start()
		ev, _, err := c.Lookup(blob.RootID, "evil")
		if err != nil {
			t.Fatalf("walk=%v: %v", walk, err)
		}
		evil := ev.ID
		t.Logf("walk=%v: from the checkpoint %v (%q), %d mounted", walk, rep.FromSnapshot, rep.SnapshotUnused, rep.Mounted)
		if walk && (rep.Mounted != 1 || rep.MountedOne != "evil/fm") {
			t.Errorf("walk: %d mounted (%q), want 1 (evil/fm)", rep.Mounted, rep.MountedOne)
		}
		if _, _, err := c.Lookup(evil, "x"); err != nil {
			t.Errorf("walk=%v: the object beside the mount: %v", walk, err)
		}
		e, _, err := c.Lookup(evil, "fm")
		if err != nil || !e.Dir {
			t.Errorf("walk=%v: the directory mounted on: %v, %v", walk, e, err)
		} else if _, _, err := c.Lookup(e.ID, "inside"); !errors.Is(err, ErrNotFound) {
			t.Errorf("walk=%v: a file of the mounted file system: %v, want ErrNotFound", walk, err)
		}
		if _, err := c.Audit(); err != nil {
			t.Errorf("walk=%v: audit: %v", walk, err)
		}
		if st := c.Stats(); st.Objects != 1 {
			t.Errorf("walk=%v: %d objects, want 1", walk, st.Objects)
		}
		c.Close()
	}
}

// TestBindMountOnAStoredFile: a file bind-mounted on a stored file's name
// is not the store's and is not opened through it: the open answers
// ErrStale (ESTALE), as for a name replaced behind kvfs's back, not
// EXDEV, and the mounted file is left as it was.
func TestBindMountOnAStoredFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: bind-mounts a file on a stored file")
	}
	tc := newTestCore(t, Config{Capacity: 4 * mib})
	id := tc.putBytes("o", "the store's")
	stored, ok := tc.BackingPath(id)
	if !ok {
		t.Fatal("no backing path")
	}
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("not the store's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(outside, stored, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("needs root that may bind-mount: %v", err)
	}
	defer unix.Unmount(stored, unix.MNT_DETACH)
	for _, flags := range []int{unix.O_RDONLY, unix.O_WRONLY} {
		if f, err := tc.OpenStored(id, flags); !errors.Is(err, ErrStale) {
			if f != nil {
				f.Close()
			}
			t.Errorf("open (flags %#x) of a stored name with a file mounted on it: %v, want ErrStale", flags, err)
		}
	}
	if h, err := tc.Open(id, unix.O_RDONLY, false, nil); !errors.Is(err, ErrStale) {
		if h != nil {
			h.Release()
		}
		t.Errorf("open for reading: %v, want ErrStale", err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "not the store's" {
		t.Errorf("the mounted file holds %q", b)
	}
}

// hangingRoot is the root of a FUSE file system whose GETATTR never
// answers once hang is set, until release is closed: a user's server
// that stops answering.
type hangingRoot struct {
	fs.Inode
	hang    atomic.Bool
	asked   chan struct{} // gets a value each time a GETATTR hangs
	release chan struct{}
}

func (r *hangingRoot) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if r.hang.Load() {
		select {
		case r.asked <- struct{}{}:
		default:
		}
		<-r.release
	}
	out.Mode = fuse.S_IFDIR | 0o755
	return 0
}

// TestLookupOfAHungMountPoint: a lookup of a stored directory another
// FUSE file system is mounted on (a user's server, with allow_other) does
// not ask that server: one that never answers held the lookup, and the
// kernel's lock of the directory, for good (an outside tester's finding).
// Nor do a walk of the store and the audit.
func TestLookupOfAHungMountPoint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a FUSE file system on a stored directory")
	}
	tc := newTestCore(t, Config{Capacity: 4 * mib})
	who := blob.Owner{UID: -1, GID: -1}
	dir, _, err := tc.Mkdir(blob.RootID, "fm", 0o755, who)
	if err != nil {
		t.Fatal(err)
	}
	stored, ok := tc.BackingPath(dir)
	if !ok {
		t.Fatal("no backing path")
	}
	root := &hangingRoot{asked: make(chan struct{}, 1), release: make(chan struct{})}
	zero := time.Duration(0)
	srv, err := fs.Mount(stored, root, &fs.Options{EntryTimeout: &zero, AttrTimeout: &zero,
		MountOptions: fuse.MountOptions{AllowOther: true, FsName: "hanging"}})
	if err != nil {
		t.Skipf("needs a FUSE mount: %v", err)
	}
	defer func() {
		close(root.release)
		srv.Unmount()
	}()
	root.hang.Store(true)
	done := make(chan error, 1)
	go func() {
		_, _, err := tc.Lookup(blob.RootID, "fm")
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("lookup of a directory a FUSE file system is mounted on: %v", err)
		}
	case <-root.asked:
		t.Fatal("the lookup asked the mounted file system's server, which never answers")
	}
	audited := make(chan error, 1)
	go func() {
		_, err := tc.Audit()
		audited <- err
	}()
	select {
	case err := <-audited:
		if err != nil {
			t.Errorf("audit: %v", err)
		}
	case <-root.asked:
		t.Fatal("the audit asked the mounted file system's server, which never answers")
	}
}

// TestMountGoneBringsBackWhatItCovered: objects a file system mounted on
// a stored directory covered at the start (indexed as an empty
// directory) come back, charged, at the first audit after it is
// unmounted; no restart needed.
func TestMountGoneBringsBackWhatItCovered(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a tmpfs on a stored directory")
	}
	dir := t.TempDir()
	store, err := blob.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := Open(store, Config{Capacity: 4 * mib})
	if err != nil {
		t.Fatal(err)
	}
	c.Start(func(Drop) {})
	who := blob.Owner{UID: -1, GID: -1}
	fm, _, err := c.Mkdir(blob.RootID, "fm", 0o755, who)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Create(fm, "covered", 0o644, who, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write(Interrupt{}, []byte("covered by the mount"), 0); err != nil {
		t.Fatal(err)
	}
	h.Release()
	c.Close()
	if err := os.Remove(filepath.Join(dir, blob.CheckpointName)); err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(dir, blob.DataName, "fm")
	if err := unix.Mount("tmpfs", mp, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("needs root that may mount a tmpfs: %v", err)
	}
	mounted := true
	defer func() {
		if mounted {
			unix.Unmount(mp, unix.MNT_DETACH)
		}
	}()
	if store, err = blob.Open(dir); err != nil {
		t.Fatal(err)
	}
	c, rep, err := Open(store, Config{Capacity: 4 * mib})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Start(func(Drop) {})
	if rep.Mounted != 1 {
		t.Fatalf("the start saw %d mounted directories, want 1", rep.Mounted)
	}
	e, _, err := c.Lookup(blob.RootID, "fm")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Lookup(e.ID, "covered"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an object the mount covers: %v, want ErrNotFound", err)
	}
	if err := unix.Unmount(mp, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	r, err := c.Audit()
	if err != nil {
		t.Fatal(err)
	}
	if _, a, err := c.Lookup(e.ID, "covered"); err != nil || a.Size != int64(len("covered by the mount")) {
		t.Fatalf("after the unmount and an audit (%+v): %v, %v", r, a.Size, err)
	}
	if st := c.Stats(); st.Objects != 1 || st.UsedBytes != BlockSize {
		t.Fatalf("after the audit: %d objects, %d bytes used; want 1 and one block", st.Objects, st.UsedBytes)
	}
}
