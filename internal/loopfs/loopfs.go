// Package loopfs makes small file systems on loop devices for tests that
// need a particular one (project quotas, an ext4 without large_dir): an
// image file made by a mkfs and mounted with -o loop. It needs root, the
// tools, and a kernel that mounts the result; Make says which this
// machine lacks, for a test to skip saying why.
package loopfs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Spec is a file system to make: its mkfs command (the image appended),
// its mount options besides loop, its image size, and what this machine
// lacks if mkfs or the mount refuses.
type Spec struct {
	Mkfs            []string
	Opts            string
	Size            int64
	NoMkfs, NoMount string
}

// ProjectQuotas are ext4 and XFS with project quotas enforced. XFS wants
// 300 MiB at least.
var ProjectQuotas = map[string]Spec{
	"ext4": {Mkfs: []string{"mkfs.ext4", "-q", "-F", "-O", "quota,project"}, Opts: "prjquota", Size: 320 << 20,
		NoMkfs: "this mkfs.ext4 cannot make project quotas", NoMount: "a kernel without quota support (CONFIG_QUOTA)"},
	"xfs": {Mkfs: []string{"mkfs.xfs", "-q", "-f"}, Opts: "pquota", Size: 320 << 20,
		NoMkfs: "this mkfs.xfs cannot make the file system", NoMount: "a kernel without XFS quota support (CONFIG_XFS_QUOTA)"},
}

// Make makes a sparse image of spec.Size bytes in dir, runs spec's mkfs
// on it and mounts it at dir/fs, which it returns; Unmount frees it.
// skip says what this machine lacks where it cannot (root, a tool, what
// mkfs or the kernel refused); err is any other failure.
func Make(dir string, spec Spec) (mnt, skip string, err error) {
	if os.Geteuid() != 0 {
		return "", "needs root: mounts a loop file system", nil
	}
	for _, tool := range []string{spec.Mkfs[0], "losetup", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Sprintf("needs %s (e2fsprogs, xfsprogs, util-linux): %v", tool, err), nil
		}
	}
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "fs")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		return "", "", err
	}
	if err := os.Truncate(img, spec.Size); err != nil {
		return "", "", err
	}
	if out, err := exec.Command(spec.Mkfs[0], append(spec.Mkfs[1:], img)...).CombinedOutput(); err != nil {
		return "", fmt.Sprintf("%s: %s: %v: %s", spec.NoMkfs, strings.Join(spec.Mkfs, " "), err, strings.TrimSpace(string(out))), nil
	}
	o := "loop"
	if spec.Opts != "" {
		o += "," + spec.Opts
	}
	if out, err := exec.Command("mount", "-o", o, img, mnt).CombinedOutput(); err != nil {
		return "", fmt.Sprintf("%s: mount -o %s: %v: %s", spec.NoMount, o, err, strings.TrimSpace(string(out))), nil
	}
	return mnt, "", nil
}

// Unmount unmounts a file system Make mounted, which frees its loop
// device; if it is busy, it detaches it and says so.
func Unmount(mnt string) error {
	if err := unix.Unmount(mnt, 0); err != nil {
		unix.Unmount(mnt, unix.MNT_DETACH)
		return fmt.Errorf("unmounting the loop file system %s: %w", mnt, err)
	}
	return nil
}

// T is what Mount needs of a *testing.T, named here so that this package
// does not import testing.
type T interface {
	Helper()
	TempDir() string
	Skip(args ...any)
	Fatal(args ...any)
	Error(args ...any)
	Cleanup(func())
}

// Mount is Make for a test, in a temporary directory of t's: it skips
// where this machine cannot (saying why), fails t on any other error, and
// unmounts the file system when t's cleanup runs (after the cleanups
// registered after it: a daemon using it is stopped first).
func Mount(t T, spec Spec) string {
	t.Helper()
	mnt, skip, err := Make(t.TempDir(), spec)
	if skip != "" {
		t.Skip(skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Unmount(mnt); err != nil {
			t.Error(err)
		}
	})
	return mnt
}
