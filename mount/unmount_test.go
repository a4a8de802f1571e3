package mount

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestForceUnmountOfAMountGoneMeanwhile: a plain unmount that ran out of
// time can finish before the abort that follows it; the abort's
// umount2(MNT_FORCE) then answers EINVAL. That is said as an unmount
// done, not as a failure to abort (an outside tester read "could not
// abort the FUSE connection ... invalid argument" and exit 0). Needs root
// for umount2; as another user it answers EPERM, not EINVAL.
func TestForceUnmountOfAMountGoneMeanwhile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: umount2 answers EPERM to other users")
	}
	var said []string
	gone := mountinfo.Entry{ID: -1, Dev: "bogus", Point: t.TempDir()}
	if err := forceUnmount(gone.Point, gone, time.Now().Add(time.Second), func(s string) { said = append(said, s) }); err != nil {
		t.Fatalf("forceUnmount of a mount gone meanwhile: %v", err)
	}
	if len(said) != 1 || !strings.Contains(said[0], "the unmount finished meanwhile") {
		t.Fatalf("forceUnmount of a mount gone meanwhile said %q; want only that it finished", said)
	}
}
