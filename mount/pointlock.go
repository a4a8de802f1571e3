package mount

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// pointLockDirs may hold the locks of mount points (lockMountpoint),
// the first that exists. Root's are in a directory only root may write
// (/run/kvfs, made as needed): in /run/lock, where every user may make
// files, a local user could make root's lock file first and hold it, and
// every root mount at that point waited its limit and failed (an outside
// tester's report). Other users' are in their own runtime directory
// where it is theirs, else in the shared directories, where a file that
// is not theirs is left alone (openPointLock).
func pointLockDirs() []string {
	if os.Geteuid() == 0 {
		if err := ownDir(rootLockDir, true); err == nil {
			return []string{rootLockDir}
		}
	}
	var dirs []string
	if rt := os.Getenv("XDG_RUNTIME_DIR"); rt != "" && filepath.IsAbs(rt) && ownDir(rt, false) == nil {
		dirs = append(dirs, rt)
	}
	return append(dirs, "/run/lock", os.TempDir())
}

// rootLockDir holds root's mount point locks.
const rootLockDir = "/run/kvfs"

// ownDir checks that dir is a directory of this user that no one else
// may write in, making it first if create is set.
func ownDir(dir string, create bool) error {
	if create {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return fmt.Errorf("%s is not a directory of uid %d that only it may write in", dir, os.Geteuid())
	}
	return nil
}

// pointLockLimit bounds the wait for another start at the same mount
// point to mount (or fail).
const pointLockLimit = stoppingLimit

// lockMountpoint has one start at a time look at mount point mp and
// mount there. Two `kvfs mount` of different stores at one mount point
// run at once both found it free, and both mounted, one over the other
// (an outside tester: 4 of 8 tries stacked, both exited 0, and the lower
// daemon served on, hidden). The lock is a file named by mp's hash in
// pointLockDirs, flock(2)ed: the kernel lets it go with the process, so
// a start killed midway holds nothing. Its holder removes it as it lets
// go, and a start that locked a file no longer under that name locks
// the new one. Where no lock file can be had (no such directory, a
// read-only one), the start goes on unlocked, as before.
func lockMountpoint(mp string, log *zap.Logger) (unlock func(), err error) {
	paths := PointLockFiles(mp)
	deadline := time.Now().Add(pointLockLimit)
	for waited := false; ; {
		fd, name, err := openPointLock(paths)
		if errors.Is(err, errForeignLock) {
			log.Warn("mount point not locked: starts at it are not kept one at a time", zap.String("lock", name), zap.Error(err))
			return func() {}, nil
		}
		if err != nil {
			log.Debug("mount point not locked", zap.String("lock", name), zap.Error(err))
			return func() {}, nil
		}
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil && sameFile(fd, name):
			return func() { unix.Unlink(name); unix.Close(fd) }, nil
		case err == nil:
			unix.Close(fd) // removed by the start before: lock the new one
			continue
		case !errors.Is(err, unix.EWOULDBLOCK):
			unix.Close(fd)
			log.Debug("mount point not locked", zap.String("lock", name), zap.Error(err))
			return func() {}, nil
		}
		unix.Close(fd)
		if !waited {
			log.Info("waiting for another kvfs mount at this mount point, which is starting", zap.String("mountpoint", mp))
			waited = true
		}
		if time.Now().After(deadline) {
			return nil, usagef("another kvfs mount at %s is starting and did not mount (or fail) in %v; try again once it has", mp, pointLockLimit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PointLockFiles are the paths mp's lock file may have, one in each of
// pointLockDirs: a start killed while it held the lock leaves it (the
// next start at mp removes it), and tests, whose mount points are new
// each time, remove theirs.
func PointLockFiles(mp string) []string {
	sum := sha256.Sum256([]byte(mp))
	base := "kvfs-mountpoint-" + hex.EncodeToString(sum[:12]) + ".lock"
	var paths []string
	for _, dir := range pointLockDirs() {
		paths = append(paths, filepath.Join(dir, base))
	}
	return paths
}

// errForeignLock: a mount point's lock file is not this user's plain file.
var errForeignLock = errors.New("the lock file of this mount point is not a plain file of this user (another user's file, a FIFO, a symbolic link or a directory)")

// openPointLock opens (making it) the first of paths whose directory
// exists. An entry there that is not this user's plain file (another
// user's, a FIFO, whose open would have waited for a writer for good, a
// symbolic link, a directory) is not used (errForeignLock): the start
// then goes on unlocked.
func openPointLock(paths []string) (fd int, name string, err error) {
	err = unix.ENOENT
	for _, name = range paths {
		if fd, err = unix.Open(name, unix.O_RDONLY|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o644); !errors.Is(err, unix.ENOENT) {
			break
		}
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EISDIR) {
		// A symbolic link (O_NOFOLLOW) or a directory at the name.
		return -1, name, fmt.Errorf("%w: %s: %w", errForeignLock, name, err)
	}
	if err != nil {
		return -1, name, err
	}
	var st unix.Stat_t
	if err = unix.Fstat(fd, &st); err == nil && (st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid()) {
		err = fmt.Errorf("%w: %s (mode %#o, uid %d)", errForeignLock, name, st.Mode, st.Uid)
	}
	if err != nil {
		unix.Close(fd)
		return -1, name, err
	}
	return fd, name, nil
}

// sameFile says whether fd is the file at name.
func sameFile(fd int, name string) bool {
	var a, b unix.Stat_t
	return unix.Fstat(fd, &a) == nil && unix.Stat(name, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}
