// Package loopfs makes small file systems on loop devices for tests that
// need a particular one (project quotas, an ext4 without large_dir): an
// image file made by a mkfs and mounted with -o loop. It needs root and
// the tools; Missing says which are not there, so a test can skip saying
// why.
package loopfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Errors of Make, for a test to tell "this machine cannot" from a bug.
var (
	ErrMkfs  = errors.New("mkfs failed")
	ErrMount = errors.New("mount failed")
)

// Missing says what Make with mkfs lacks here (root, a tool, and which
// package has it), or "" if nothing.
func Missing(mkfs string) string {
	if os.Geteuid() != 0 {
		return "needs root: mounts a loop file system"
	}
	for _, tool := range []string{mkfs, "losetup", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("needs %s (e2fsprogs, xfsprogs, util-linux): %v", tool, err)
		}
	}
	return ""
}

// Make makes a sparse image of size bytes in dir, runs mkfs (a command
// and its arguments, the image appended) on it, and mounts it with
// options ("loop" and opts) at dir/fs, which it returns. Unmount frees
// it.
func Make(dir string, size int64, opts string, mkfs ...string) (string, error) {
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "fs")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		return "", err
	}
	if err := os.Truncate(img, size); err != nil {
		return "", err
	}
	if out, err := exec.Command(mkfs[0], append(mkfs[1:], img)...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: %s: %v: %s", ErrMkfs, strings.Join(mkfs, " "), err, strings.TrimSpace(string(out)))
	}
	o := "loop"
	if opts != "" {
		o += "," + opts
	}
	if out, err := exec.Command("mount", "-o", o, img, mnt).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: -o %s: %v: %s", ErrMount, o, err, strings.TrimSpace(string(out)))
	}
	return mnt, nil
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
