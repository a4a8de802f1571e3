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
	if err := forceUnmount(gone.Point, gone, time.Now().Add(time.Second), true, func(s string) { said = append(said, s) }); err != nil {
		t.Fatalf("forceUnmount of a mount gone meanwhile: %v", err)
	}
	if len(said) != 1 || !strings.Contains(said[0], "the unmount finished meanwhile") {
		t.Fatalf("forceUnmount of a mount gone meanwhile said %q; want only that it finished", said)
	}
}

// TestMayAbortAs: a user may abort its mount's connection only through
// fusectl's abort file; without it, only root may (umount2 MNT_FORCE),
// and the hint for a hung mount says so rather than sending the user to
// a --force that would leave the mount detached and its clients hung
// (an outside tester's non-root daemon, stuck exiting after kill -9).
func TestMayAbortAs(t *testing.T) {
	ctl := t.TempDir()
	e := mountinfo.Entry{Dev: "0:53"}
	if mayAbortAs(e, 1000, ctl) {
		t.Error("a user may abort with no fusectl")
	}
	if !mayAbortAs(e, 0, ctl) {
		t.Error("root may not abort with no fusectl")
	}
	if err := os.MkdirAll(filepath.Join(ctl, "53"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(abortFile(ctl, "53"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if !mayAbortAs(e, 1000, ctl) {
		t.Error("a user may not abort through a writable abort file")
	}
	if h := forceHint("/m", false); !strings.Contains(h, "only root") || !strings.Contains(h, "umount -f /m") || strings.HasPrefix(h, "`kvfs unmount --force") {
		t.Errorf("the hint where this user cannot abort: %q", h)
	}
	if h := forceHint("/m", true); h != "`kvfs unmount --force /m` ends it" {
		t.Errorf("the hint where this user can abort: %q", h)
	}
}
