// Package usage measures a directory tree the three ways kvfs promises
// agree: what du reports, what the store's files are charged, and what
// statfs reports as used. Tests and the benchmark share it.
package usage

import (
	"io/fs"

	"github.com/kvfs/kvfs/internal/fdwalk"
	"github.com/kvfs/kvfs/ledger"
	"golang.org/x/sys/unix"
)

// Du is `du -s --block-size=1` of root: st_blocks*512 of every inode
// under it, counted once however many names it has.
func Du(root string) (int64, error) {
	return sum(root, false, func(st *unix.Stat_t) int64 { return st.Blocks * 512 })
}

// FileBlocks is Du over regular files only, leaving out directories'
// own blocks (which a plain file system charges and kvfs does not).
func FileBlocks(root string) (int64, error) {
	return sum(root, true, func(st *unix.Stat_t) int64 { return st.Blocks * 512 })
}

// Charged is what kvfs charges for the regular files under root: each
// inode's size rounded up to a block, once.
func Charged(root string) (int64, error) {
	return sum(root, true, func(st *unix.Stat_t) int64 { return ledger.Charge(st.Size) })
}

// DfUsed is the used bytes statfs reports for the file system at path.
func DfUsed(path string) (int64, error) {
	var sf unix.Statfs_t
	if err := unix.Statfs(path, &sf); err != nil {
		return 0, err
	}
	return int64(sf.Blocks-sf.Bfree) * sf.Frsize, nil
}

// sum walks root by directory descriptors (fdwalk): a tree deeper than
// PATH_MAX is measured too.
func sum(root string, regularOnly bool, size func(*unix.Stat_t) int64) (int64, error) {
	seen := map[uint64]bool{}
	var total int64
	err := fdwalk.Walk(root, func(_ string, _ fs.FileMode, st *unix.Stat_t) error {
		if (!regularOnly || st.Mode&unix.S_IFMT == unix.S_IFREG) && !seen[st.Ino] {
			seen[st.Ino] = true
			total += size(st)
		}
		return nil
	})
	return total, err
}
