package tests

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/loopfs"
	"github.com/kvfs/kvfs/internal/quota"
	"github.com/kvfs/kvfs/mount"
	"golang.org/x/sys/unix"
)

// quotaFS makes a file system of kind ("ext4" or "xfs") with project
// quotas enforced, on a loop device, mounted in a temporary directory;
// the test's cleanup, which runs after the daemon's, unmounts it. It
// skips where this machine cannot, saying why.
func quotaFS(t *testing.T, kind string) string {
	t.Helper()
	requireRoot(t)
	return loopfs.Mount(t, loopfs.ProjectQuotas[kind])
}

// TestQuotaStopsWriterAfterKill: a writer that has an object open keeps
// writing through FUSE passthrough after kill -9 of the daemon; the
// store's project quota stops it at the capacity plus the slack.
func TestQuotaStopsWriterAfterKill(t *testing.T) {
	for _, kind := range []string{"ext4", "xfs"} {
		t.Run(kind, func(t *testing.T) { testQuotaStopsWriter(t, kind) })
	}
}

func testQuotaStopsWriter(t *testing.T, kind string) {
	fs := quotaFS(t, kind)
	const capacity = 32 << 20
	limit := mount.QuotaLimit(capacity)
	store, mp := filepath.Join(fs, "store"), filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, mp, "--store", store, "--capacity", "32MiB")
	if !d.printed("store capped by a project quota") {
		t.Fatalf("the mount log does not say the store is capped; output:\n%s", d.out)
	}
	if st, err := quota.Read(store); err != nil || st.Project == 0 || st.LimitBytes != limit {
		t.Fatalf("the store's project quota: %+v, %v; want a project limited to %d", st, err, limit)
	}

	w := startDDWriter(t, filepath.Join(mp, "obj"))
	feed, ddErr, exited := w.feed, &w.stderr, w.exited
	zeros := make([]byte, 1<<20)
	for i := 0; i < 4; i++ {
		if _, err := feed.Write(zeros); err != nil {
			t.Fatalf("feeding the writer: %v; dd said %q", err, ddErr.String())
		}
	}
	if !waitFor(func() bool { n, _ := duCommand(store); return n >= 4<<20 }) {
		t.Fatalf("4 MiB fed to the writer never reached the store")
	}
	before, _ := duCommand(store)
	d.kill9()

	// Feed up to 16 times the capacity: without a cap it all lands.
	fed := int64(4 << 20)
	for fed < 16*capacity {
		if _, err := feed.Write(zeros); err != nil {
			break // dd exited: its write failed
		}
		fed += 1 << 20
	}
	feed.Close()
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("the writer is still running 60 s after it was fed %d bytes", fed)
	}
	after, err := duCommand(store)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: store held %d bytes at the kill, %d after the writer stopped (capacity %d, quota limit %d); %d bytes fed",
		kind, before, after, capacity, limit, fed)
	msg := ddErr.String()
	if w.err == nil || !strings.Contains(msg, "quota") && !strings.Contains(msg, "No space left") {
		t.Errorf("the writer was not stopped by the quota: exit %v, stderr %q", w.err, msg)
	}
	if after > limit {
		t.Errorf("the store holds %d bytes after the kill, more than the quota's %d", after, limit)
	}
	if after <= capacity {
		t.Errorf("the store holds only %d bytes: the writer never wrote past the capacity, so the test proved nothing", after)
	}
}

// TestQuotaUncapped: a store on a file system without project quotas
// (tmpfs) mounts and serves, and the mount log says it is not capped.
func TestQuotaUncapped(t *testing.T) {
	requireRoot(t)
	fs := mountTmpfs(t, t.TempDir(), "64m")
	store, mp := filepath.Join(fs, "store"), filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, mp, "--store", store, "--capacity", "16MiB")
	if err := os.WriteFile(filepath.Join(mp, "obj"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatalf("storing into an uncapped store: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(mp, "obj"))
	if err != nil || len(got) != 1<<20 {
		t.Fatalf("reading it back: %d bytes, %v", len(got), err)
	}
	if !d.printed("enforces no project quota") {
		t.Errorf("the mount log does not say the store is uncapped; output:\n%s", d.out)
	}
	if strings.Contains(d.out.String(), "store capped by a project quota") {
		t.Errorf("the mount log says a tmpfs store is capped; output:\n%s", d.out)
	}
	if _, err := unix.Getxattr(store, quota.RecordXattr, make([]byte, 64)); !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("an uncapped store got a project recorded (%v)", err)
	}
	d.stop()
}
