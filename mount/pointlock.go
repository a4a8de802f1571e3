package mount

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// pointLockDirs may hold the locks of mount points (lockMountpoint),
// the first that exists: directories every user may make files in, one
// per machine.
var pointLockDirs = []string{"/run/lock", os.TempDir()}

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
	for _, dir := range pointLockDirs {
		paths = append(paths, filepath.Join(dir, base))
	}
	return paths
}

// openPointLock opens (making it) the first of paths whose directory
// exists.
func openPointLock(paths []string) (fd int, name string, err error) {
	err = unix.ENOENT
	for _, name = range paths {
		if fd, err = unix.Open(name, unix.O_RDONLY|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644); !errors.Is(err, unix.ENOENT) {
			break
		}
	}
	return fd, name, err
}

// sameFile says whether fd is the file at name.
func sameFile(fd int, name string) bool {
	var a, b unix.Stat_t
	return unix.Fstat(fd, &a) == nil && unix.Stat(name, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}
