// Package disktmp points a test binary's temporary directories at a real
// disk. Tests of passthrough, O_DIRECT and the direct path need a file
// system that takes O_DIRECT and registers backing files (STYLE rule 8);
// where TMPDIR is a tmpfs or ramfs they would skip, so a test binary's
// TestMain runs under Run, which moves TMPDIR (and so t.TempDir) to a
// directory on disk: under $KVFS_DISK_TMPDIR if set, else beside the
// module's go.mod. Elsewhere it changes nothing.
package disktmp

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Run runs tests (a TestMain's m.Run) with TMPDIR on a real disk, and
// returns its exit code.
func Run(tests func() int) int {
	dir, err := Dir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "disktmp:", err)
		return 1
	}
	if dir == "" {
		return tests()
	}
	defer os.RemoveAll(dir)
	os.Setenv("TMPDIR", dir)
	return tests()
}

// Dir makes a temporary directory on a real disk when os.TempDir is
// not on one, and returns "" when it is.
func Dir() (string, error) {
	if !memoryFS(os.TempDir()) {
		return "", nil
	}
	base := os.Getenv("KVFS_DISK_TMPDIR")
	if base == "" {
		var err error
		if base, err = moduleRoot(); err != nil {
			return "", err
		}
	}
	if memoryFS(base) {
		return "", fmt.Errorf("%s is in memory too: set KVFS_DISK_TMPDIR to a directory on a disk", base)
	}
	return os.MkdirTemp(base, ".test-tmp-")
}

// memoryFS says whether dir is on a tmpfs or a ramfs.
func memoryFS(dir string) bool {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return false
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
}

// moduleRoot is the nearest directory above the working directory (a
// test's package directory) that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
