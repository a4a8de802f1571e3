package tests

// Regression tests for bugs the soak, crash, fault and bad-input tests
// found, each reduced to the few steps that showed it.

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestEvictionInvalidatesListedDirs: an object evicted from a directory
// that was listed (READDIRPLUS looks every entry up again) stops being
// visible at once, not after the kernel's entry timeout. Found by
// TestCrashLoop: after a remount's walk, evictions in nested directories
// left stat answering from a stale kernel entry for a minute, so
// fs_native took an evicted key for stored and skipped it.
func TestEvictionInvalidatesListedDirs(t *testing.T) {
	// The kernel keeps names for an hour: only kvfs's notice can drop it.
	d := mountCache(t, "--capacity", "8MiB", "--grace", "0s", "--cache-timeout", "1h")
	sub := filepath.Join(d.mp, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(sub, "victim")
	putFile(t, victim, objectBytes("victim", 2*MiB))
	// Listing the parents looks a and b up again, as a walk does.
	for _, dir := range []string{d.mp, filepath.Join(d.mp, "a")} {
		if _, err := os.ReadDir(dir); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Stat(victim, new(unix.Stat_t)); err != nil {
		t.Fatalf("stat before the eviction: %v", err)
	}
	flood(t, d.mp, "flood", 4, 2*MiB)
	if _, err := os.Stat(filepath.Join(d.store, "data", "a", "b", "victim")); !os.IsNotExist(err) {
		t.Fatalf("victim not evicted from the store (%v); the test needs it evicted", err)
	}
	if !waitFor(func() bool { return unix.Stat(victim, new(unix.Stat_t)) == unix.ENOENT }) {
		err := unix.Stat(victim, new(unix.Stat_t))
		t.Errorf("stat of an evicted object still answers %v %v after its eviction", err, hangGuard)
	}
	assertQuietEqual(t, d)
	d.stop()
}
