package mount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/internal/mountinfo"
	"github.com/kvfs/kvfs/internal/usageerr"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// deadMount mounts a FUSE connection at mp and closes its only
// descriptor without answering INIT: the mount a crashed daemon leaves,
// which answers ENOTCONN.
func deadMount(t *testing.T, mp string) {
	t.Helper()
	fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	err = syscall.Mount("dead", mp, "fuse.kvfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts)
	syscall.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for range 8 {
			if unix.Unmount(mp, unix.MNT_DETACH) != nil {
				return
			}
		}
	})
	if !isDeadMount(mp) {
		t.Fatalf("the mount at %s is not dead", mp)
	}
}

// TestDeadMountpointIsReplacedLater: checkMountpoint leaves a dead mount
// where it is (the directory under it must not show while the store
// loads) and says it is dead; prepareMountpoint, the way to a new mount
// where none can be made beneath, detaches every dead mount stacked
// there and then requires the directory to be empty.
func TestDeadMountpointIsReplacedLater(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts FUSE without fusermount")
	}
	mp := t.TempDir()
	deadMount(t, mp)
	deadMount(t, mp)
	log := zap.NewNop()
	dead, err := checkMountpoint(mp, "dead", log)
	if err != nil || !dead {
		t.Fatalf("checkMountpoint of a dead mount point: dead %v, %v", dead, err)
	}
	if n := len(mountinfo.Stack(mp)); n != 2 {
		t.Fatalf("checkMountpoint changed the mounts: %d at %s, want the 2 dead ones", n, mp)
	}
	if err := prepareMountpoint(mp, log); err != nil {
		t.Fatal(err)
	}
	if _, ok := mountinfo.At(mp); ok {
		t.Fatalf("prepareMountpoint left a mount at %s: %+v", mp, mountinfo.Stack(mp))
	}
	if err := prepareMountpoint(mp, log); err != nil {
		t.Fatalf("prepareMountpoint of a plain empty directory: %v", err)
	}
}

// TestDeadMountpointCoveringAFile: a dead mount over a directory that
// holds a file is refused at once, before any load, and left as it is;
// without the dead mount the same directory is refused as not empty.
func TestDeadMountpointCoveringAFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts FUSE without fusermount")
	}
	mp := t.TempDir()
	if err := os.WriteFile(filepath.Join(mp, "stray"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadMount(t, mp)
	if n, err := coveredEntries(mp); err != nil || n != 1 {
		t.Fatalf("coveredEntries = %d, %v; want 1", n, err)
	}
	_, err := checkMountpoint(mp, "dead", zap.NewNop())
	if !errors.Is(err, usageerr.ErrUsage) {
		t.Fatalf("checkMountpoint over a covered file: %v, want a usage error", err)
	}
	if !isDeadMount(mp) {
		t.Fatal("the refused check detached the dead mount")
	}
	if err := prepareMountpoint(mp, zap.NewNop()); !errors.Is(err, usageerr.ErrUsage) {
		t.Fatalf("prepareMountpoint over a file: %v, want not empty", err)
	}
	if _, err := os.Stat(filepath.Join(mp, "stray")); err != nil {
		t.Fatalf("the covered file: %v", err)
	}
}
