package mount

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/internal/mountinfo"
)

func TestConnectionOf(t *testing.T) {
	for dev, want := range map[string]string{"0:53": "53", "0:1234": "1234", "8:1": "8388609"} {
		if got, ok := connectionOf(mountinfo.Entry{Dev: dev}); !ok || got != want {
			t.Errorf("connectionOf(%s) = %q, %v; want %q", dev, got, ok, want)
		}
	}
	if _, ok := connectionOf(mountinfo.Entry{Dev: "bogus"}); ok {
		t.Error("connectionOf(bogus) succeeded")
	}
}

// TestQuietResolve: symlinks are followed (relative, absolute, chained,
// with ..) like filepath.EvalSymlinks does.
func TestQuietResolve(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "real", "mnt"), 0o755))
	must(os.Symlink("real", filepath.Join(dir, "rel")))
	must(os.Symlink(filepath.Join(dir, "real", "mnt"), filepath.Join(dir, "abs")))
	must(os.Symlink("abs", filepath.Join(dir, "chain")))
	must(os.Symlink("../real/mnt", filepath.Join(dir, "real", "up")))
	for _, p := range []string{"rel/mnt", "abs", "chain", "real/up", "real/mnt", "real/./mnt/", "rel/../real/mnt"} {
		in := filepath.Join(dir, p)
		want, err := filepath.EvalSymlinks(in)
		must(err)
		if got := quietResolve(in); got != want {
			t.Errorf("quietResolve(%s) = %s, want %s", p, got, want)
		}
	}
}
