package fusefs_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/fusefs"
	"golang.org/x/sys/unix"
)

// getxattr reads an extended attribute of a descriptor, or of a path
// when fd is negative.
func getxattr(fd int, path, attr string) (string, error) {
	buf := make([]byte, 4096)
	var n int
	var err error
	if fd >= 0 {
		n, err = unix.Fgetxattr(fd, attr, buf)
	} else {
		n, err = unix.Getxattr(path, attr, buf)
	}
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// TestDirectWritesNeedPassthrough: on a mount whose writers' bytes all
// pass through the daemon (--strict-capacity), every directory says so and the
// stored file of an object open for writing is not named (EPERM), so no
// client following the direct-path protocol can write around the ledger;
// once the writer has closed, readers are told it again. With
// passthrough, a writer is told its stored file: its bytes are polled.
func TestDirectWritesNeedPassthrough(t *testing.T) {
	for _, strict := range []bool{true, false} {
		t.Run(map[bool]string{true: "strict", false: "passthrough"}[strict], func(t *testing.T) {
			directWrites(t, strict)
		})
	}
}

// directWrites is one half of TestDirectWritesNeedPassthrough.
func directWrites(t *testing.T, strict bool) {
	var k *kvfsMount
	if strict {
		k = mountKVFS(t, withStrict())
	} else {
		if os.Geteuid() != 0 {
			t.Skip("needs root: FUSE passthrough registers backing files (CAP_SYS_ADMIN)")
		}
		k = mountKVFS(t)
	}
	want := map[bool]string{true: fusefs.WritesDaemon, false: fusefs.WritesPassthrough}[strict]
	if err := os.Mkdir(k.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{k.Mnt, k.path("d")} {
		if got, err := getxattr(-1, dir, fusefs.WritesXattr); err != nil || got != want {
			t.Fatalf("strict %v: %s of %s = %q, %v; want %q", strict, fusefs.WritesXattr, dir, got, err, want)
		}
	}
	p := filepath.Join(k.Mnt, "obj")
	w, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	stored := k.storePath("obj")
	got, err := getxattr(int(w.Fd()), "", fusefs.BackingXattr)
	switch {
	case strict && err != syscall.EPERM:
		t.Fatalf("strict: a writer's %s = %q, %v; want EPERM", fusefs.BackingXattr, got, err)
	case !strict && (err != nil || got != stored):
		t.Fatalf("passthrough: a writer's %s = %q, %v; want %s", fusefs.BackingXattr, got, err, stored)
	}
	if _, err := w.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	k.released(0) // writing ends at the RELEASE, a moment after close(2)
	if got, err := getxattr(-1, p, fusefs.BackingXattr); err != nil || got != stored {
		t.Fatalf("strict %v: with no writer open, %s = %q, %v; want %s", strict, fusefs.BackingXattr, got, err, stored)
	}
}
