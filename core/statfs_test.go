package core

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/blob"
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
		if p, err := tc.DirectPath(id); err != nil || p != stored {
			t.Fatalf("passthrough %v, no writer: %q, %v; want %q", passthrough, p, err, stored)
		}
		w, err := tc.Open(id, os.O_RDWR, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := tc.DirectPath(id)
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
		if p, err := tc.DirectPath(id); !errors.Is(err, syscall.ENODATA) {
			t.Fatalf("passthrough %v, no name left: %q, %v; want ENODATA", passthrough, p, err)
		}
		r.Release()
	}
}
