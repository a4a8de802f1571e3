package mount

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/internal/mountinfo"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// A daemon holds its store's lock (blob.LockName) until it exits, which
// is after its mount is gone: an unmount is answered by the kernel at
// once, and the daemon then writes its checkpoint (seconds, at millions
// of objects). A `kvfs mount` of the store in that moment found it
// locked and was refused, so `kvfs unmount M && kvfs mount ... M`
// failed now and then (an outside tester: 2 to 3 of 20, 17 of 31 with a
// larger store), and what the script wrote next landed in the bare
// mount point. Now `kvfs unmount` returns once the daemon let the store
// go, and a start that finds the store held by a daemon with no mount of
// it waits for that daemon to finish stopping.

// stoppingLimit bounds how long a start waits for a store's previous
// daemon, which no longer mounts it, to exit.
const stoppingLimit = 30 * time.Second

// StoreHolder finds the process holding store's lock, from /proc/locks:
// a probe that took the lock itself could make a daemon starting that
// moment fail. A lock a handover passed on names the process that took
// it first, gone since: the lock file names its holder then.
func StoreHolder(store string) (int, bool) {
	path := filepath.Join(store, blob.LockName)
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0, false
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0, false
	}
	pid, ok := lockHolder(string(b), st)
	if ok && !alive(pid) {
		if b, err := os.ReadFile(path); err == nil {
			if named, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && named > 0 && alive(named) {
				return named, true
			}
		}
	}
	return pid, ok
}

// alive says whether process pid exists and has not exited. A process
// all of whose threads exited is a zombie until its parent waits for it
// (never, under a PID 1 that reaps nothing; an old daemon after a
// handover until then): it holds no lock and no file, and is not alive.
// One whose leader alone exited, its other threads running (see zombie),
// is.
func alive(pid int) bool {
	st, ok := procState(pid)
	return ok && (st != 'Z' || threadsLeft(pid))
}

// kvfsProcess says whether pid runs this program, or one named kvfs (an
// older or newer build); a process that cannot be read counts as one.
func kvfsProcess(pid int) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return true
	}
	exe = strings.TrimSuffix(exe, " (deleted)") // replaced since it started
	if self, err := os.Executable(); err == nil && exe == self {
		return true
	}
	return strings.HasPrefix(filepath.Base(exe), "kvfs")
}

// command is pid's command name (/proc/PID/comm); "" if it cannot be
// read.
func command(pid int) string {
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(comm))
}

// describeProcess names pid by its command: "pid 12 (flock)".
func describeProcess(pid int) string {
	if comm := command(pid); comm != "" {
		return fmt.Sprintf("pid %d (%s)", pid, comm)
	}
	return fmt.Sprintf("pid %d", pid)
}

// lockedBy is the holder of store's lock when err says it is locked.
func lockedBy(err error, store string) (int, bool) {
	if !errors.Is(err, blob.ErrLocked) {
		return 0, false
	}
	return StoreHolder(store)
}

// lockHolder reads the holder of a flock of the file st from
// /proc/locks's text: "1: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INO 0 EOF",
// the device's numbers in hex; a waiter's line has "->" after the
// number.
func lockHolder(locks string, st unix.Stat_t) (int, bool) {
	file := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	for _, line := range strings.Split(locks, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "FLOCK" || f[3] != "WRITE" || f[5] != file {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
			return pid, true
		}
	}
	return 0, false
}

// mounting says whether pid, which holds a store's lock, mounts the
// store in its own mount table. One that does not is on its way out (or
// serves a mount detached from every tree, whose files close in time),
// or on its way in: it took the lock and has not mounted yet.
func mounting(pid int, store string) bool {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if errors.Is(err, fs.ErrNotExist) || err != nil && !alive(pid) {
		// Exited: its lock goes with it, soon if not yet; or passed on
		// (a zombie's table is EINVAL, and read as "not ours to read",
		// an unmount after a handover stopped waiting for the successor
		// that holds the store: an outside tester).
		return false
	}
	if err != nil {
		return true // not ours to read: not one to wait for
	}
	defer f.Close()
	return len(mountsOfStore(mountinfo.Parse(f), store)) > 0
}

// awaitReleased waits until no process holds store's lock, or until;
// it reports the holder left, if any.
func awaitReleased(store string, until time.Time) (int, bool) {
	return awaitHolder(store, until, func(int) bool { return false })
}

// awaitStopped is awaitReleased after an unmount of a mount of store:
// it also stops at a holder that mounts the store still, which is not
// the daemon of the mount unmounted but another that took the store
// after that one died (an outside tester: an unmount of a crashed
// daemon's mount waited its whole timeout on the live daemon serving
// the store elsewhere, and named it as the unmounted mount's).
func awaitStopped(store string, until time.Time) (int, bool) {
	var serving bool
	pid, held := awaitHolder(store, until, func(pid int) bool { serving = mounting(pid, store); return serving })
	return pid, held && !serving
}

// awaitReleasedOrMounted is awaitReleased that also stops once the
// holder mounts the store (a daemon that was starting), which mounted
// then says.
func awaitReleasedOrMounted(store string, until time.Time) (pid int, mounted bool) {
	pid, held := awaitHolder(store, until, func(pid int) bool { mounted = mounting(pid, store); return mounted })
	return pid, held && mounted
}

func awaitHolder(store string, until time.Time, enough func(pid int) bool) (int, bool) {
	for {
		pid, held := StoreHolder(store)
		if !held || pid == os.Getpid() || enough(pid) || !time.Now().Before(until) {
			return pid, held && pid != os.Getpid()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// LiveMount finds a kvfs mount of store that a daemon still answers,
// for a start or an fsck that took the store's lock: a live daemon holds
// the lock, so one found there lost it (kvfs.lock removed behind its
// back, and a new one made by the taker), and two daemons, or a repair
// under a live one, would each change the store under the other (an
// outside tester's finding: fsck --repair then deleted a live writer's
// object). A dead mount (a crashed daemon's) answers ENOTCONN and does
// not count; one that does not answer within a second counts as live.
func LiveMount(store string) (string, bool) {
	for _, e := range mountsOfStore(mountinfo.Read(), store) {
		if !daemonGone(e.Point) {
			return e.Point, true
		}
	}
	return "", false
}

// daemonGone says whether the kvfs mount at point has no daemon: its
// connection is gone (a crashed daemon's mount answers ENOTCONN), or the
// mount itself. One that does not answer within a second is not dead.
func daemonGone(point string) bool {
	err := InTime(time.Second, func() error { return unix.Statfs(point, new(unix.Statfs_t)) })
	return errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ECONNABORTED) || errors.Is(err, unix.ENOENT)
}

// warnDeadMounts warns of the dead mounts of store left at mount points
// other than this start's, whose clients get ENOTCONN until someone
// unmounts them (an outside tester: a start at a new mount point after a
// kill -9 said nothing of the old one).
func warnDeadMounts(store, mountpoint string, log *zap.Logger) {
	for _, e := range mountsOfStore(mountinfo.Read(), store) {
		if e.Point != mountpoint && daemonGone(e.Point) {
			log.Warn("a dead mount of this store is left elsewhere, its daemon gone: clients there get ENOTCONN until `kvfs unmount` detaches it",
				zap.String("mountpoint", e.Point))
		}
	}
}
