package core

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/blob"
	"golang.org/x/sys/unix"
)

// TestStatfs: df shows the capacity and what the charges leave of it,
// in blocks, and the objects and directories held (df -i's IUsed; the
// root is not counted, as ext4 counts its own reserved inodes apart)
// beside a constant stock of inodes.
func TestStatfs(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib})
	tc.put("a", 10000) // 3 blocks
	if _, _, err := tc.Mkdir(blob.RootID, "d", 0o755, nobody); err != nil {
		t.Fatal(err)
	}
	want := Statfs{BlockSize: 4096, Blocks: 1024, Free: 1021, Avail: 1021, Files: 2 + freeInodes, FreeFiles: freeInodes, NameMax: 255}
	if got := tc.Statfs(); got != want {
		t.Fatalf("statfs %+v; want %+v", got, want)
	}
}

// TestDirectPath: the stored file is named while nothing writes it, or
// with passthrough (the core polls the writers); without passthrough,
// not while a writer has it open (EPERM), nor once no name is left
// (ENODATA).
func TestDirectPath(t *testing.T) {
	for _, passthrough := range []bool{false, true} {
		tc := newTestCore(t, Config{Capacity: 4 * mib, Passthrough: passthrough})
		id := tc.put("a", 10)
		stored, _ := tc.BackingPath(id)
		if p, err := tc.DirectPath(id, anyDir); err != nil || p != stored {
			t.Fatalf("passthrough %v, no writer: %q, %v; want %q", passthrough, p, err, stored)
		}
		w, err := tc.Open(id, os.O_RDWR, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := tc.DirectPath(id, anyDir)
		switch {
		case passthrough && (err != nil || p != stored):
			t.Fatalf("passthrough, a writer open: %q, %v; want %q", p, err, stored)
		case !passthrough && !errors.Is(err, syscall.EPERM):
			t.Fatalf("no passthrough, a writer open: %q, %v; want EPERM", p, err)
		}
		w.Release()
		r, err := tc.Open(id, os.O_RDONLY, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.Unlink(RootID, "a"); err != nil {
			t.Fatal(err)
		}
		if p, err := tc.DirectPath(id, anyDir); !errors.Is(err, syscall.ENODATA) {
			t.Fatalf("passthrough %v, no name left: %q, %v; want ENODATA", passthrough, p, err)
		}
		r.Release()
	}
}

// anyDir lets a caller search every directory.
func anyDir(ID) bool { return true }

// TestDirectPathOfALink: an object with several names is named by the
// first whose directories the caller may search: the first name alone
// leaked the path of a name in another user's 0700 directory to a user
// who reads the object by a link in a public one, and failed that user's
// direct load (an outside tester). No such name: EACCES.
func TestDirectPathOfALink(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib, Passthrough: true})
	owner := blob.Owner{UID: -1, GID: -1}
	priv, _, err := tc.Mkdir(RootID, "priv", 0o700, owner)
	if err != nil {
		t.Fatal(err)
	}
	pub, _, err := tc.Mkdir(RootID, "pub", 0o755, owner)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := tc.CreateOrOpen(priv, "secret-name", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644, owner)
	if err != nil {
		t.Fatal(err)
	}
	id := h.ID()
	h.Release()
	first, _ := tc.BackingPath(id)
	if _, err := tc.Link(id, pub, "shared"); err != nil {
		t.Fatal(err)
	}
	data := filepath.Dir(filepath.Dir(first))
	stored := func(rel string) string { return filepath.Join(data, rel) }
	notPriv := func(d ID) bool { return d != priv }
	if p, err := tc.DirectPath(id, notPriv); err != nil || p != stored("pub/shared") {
		t.Errorf("a caller who may not search priv/: %q, %v; want %q", p, err, stored("pub/shared"))
	}
	if p, err := tc.DirectPath(id, anyDir); err != nil || p != stored("priv/secret-name") {
		t.Errorf("a caller who may search both: %q, %v; want the first name, %q", p, err, stored("priv/secret-name"))
	}
	none := func(d ID) bool { return d == RootID }
	if p, err := tc.DirectPath(id, none); !errors.Is(err, syscall.EACCES) {
		t.Errorf("a caller who may search neither directory: %q, %v; want EACCES", p, err)
	}
}
