package mount

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/internal/mountinfo"
	"golang.org/x/sys/unix"
)

// Bounds of `kvfs unmount`.
const (
	// DefaultUnmountTimeout bounds a whole unmount, whether the daemon
	// answers or not.
	DefaultUnmountTimeout = 10 * time.Second
	// unmountProbe is how long the daemon gets to answer statfs before
	// it counts as hung (at most a quarter of the timeout).
	unmountProbe = 2 * time.Second
	// fusectl is where the kernel lists FUSE connections, when mounted.
	fusectl = "/sys/fs/fuse/connections"
)

// UnmountOptions bounds an unmount and says what it did.
type UnmountOptions struct {
	// Timeout bounds the whole unmount; zero is DefaultUnmountTimeout.
	Timeout time.Duration
	// Force aborts the FUSE connection even if the daemon answers.
	Force bool
	// Report is told, one sentence at a time, each step taken beyond a
	// plain unmount. Nil reports nothing.
	Report func(string)
}

// ErrTimedOut is InTime's answer when its call did not return in time.
var ErrTimedOut = errors.New("timed out")

// Unmount unmounts the kvfs mount at mountpoint within
// DefaultUnmountTimeout; its daemon then exits.
func Unmount(mountpoint string) error { return UnmountWithin(mountpoint, UnmountOptions{}) }

// UnmountWithin unmounts the kvfs mount at mountpoint and returns
// within o.Timeout even if its daemon does not answer (stopped, hung).
// It never blocks the calling goroutine in a system call on the mount:
// such a call can wait uninterruptibly for the daemon. A daemon that does
// not answer statfs, or an unmount that does not finish, gets its FUSE
// connection aborted, which fails every request it holds (callers see
// ECONNABORTED or ENOTCONN), and the mount is detached. A daemon that
// answers but whose mount stays busy is left alone (an error, EBUSY),
// unless o.Force.
func UnmountWithin(mountpoint string, o UnmountOptions) error {
	if o.Timeout <= 0 {
		o.Timeout = DefaultUnmountTimeout
	}
	if o.Report == nil {
		o.Report = func(string) {}
	}
	deadline := time.Now().Add(o.Timeout)
	mp, e, err := locate(mountpoint)
	if err != nil {
		return err
	}
	probe := min(unmountProbe, o.Timeout/4)
	statfs := func() error { return unix.Statfs(mp, new(unix.Statfs_t)) }
	if o.Force {
		o.Report("--force: not waiting for the daemon")
		// Asked only where it decides anything: whether a mount this
		// user cannot abort may be detached (see forceUnmount).
		hung := !mayAbort(e) && errors.Is(InTime(probe, statfs), ErrTimedOut)
		return forceUnmount(mp, e, deadline, hung, o.Report)
	}
	switch err := InTime(probe, statfs); {
	case errors.Is(err, ErrTimedOut):
		o.Report(fmt.Sprintf("the daemon of %s did not answer statfs within %v", mp, probe))
		return forceUnmount(mp, e, deadline, true, o.Report)
	case errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ECONNABORTED):
		err := unmountDead(mp, o.Report)
		if other := otherMountOf(e); err == nil && other != "" {
			// Its bind mounts are dead too, and stay (an outside
			// tester's, unsaid).
			o.Report(fmt.Sprintf("the same dead mount is also mounted at %s (bind mounts of it): `kvfs unmount` of each removes it", other))
		}
		return err
	}
	if who := callerInside(mp); who != "" {
		// Busy for as long as the caller's shell stays there: retrying
		// until the timeout only kept it waiting (an outside tester's
		// `kvfs unmount .`).
		return fmt.Errorf("unmounting %s: %w: the working directory of %s, which ran kvfs unmount, is inside it; cd out of it first", mp, unix.EBUSY, who)
	}
	// Keep a quarter of the time for aborting, should the unmount
	// itself hang.
	until := deadline.Add(-o.Timeout / 4)
	err = InTime(time.Until(until)+100*time.Millisecond, func() error { return plainUnmount(mp, until) })
	if other := otherMountOf(e); err == nil && other != "" {
		// A bind mount's unmount leaves the daemon serving the others
		// (it said nothing, exit 0: an outside tester).
		o.Report(fmt.Sprintf("unmounted %s; the same kvfs mount is also mounted at %s (bind mounts share one daemon), and its daemon serves on there", mp, other))
		return nil
	}
	if err == nil {
		// The daemon writes its checkpoint after the kernel unmounted:
		// the store is free once it exits (see holder.go).
		if pid, held := awaitStopped(e.Source, deadline); held {
			o.Report(fmt.Sprintf("unmounted %s; its daemon (pid %d) still holds the store %s until it has written its checkpoint", mp, pid, e.Source))
		}
	}
	if !errors.Is(err, ErrTimedOut) {
		return err
	}
	if !stillMounted(e) {
		// The unmount finished as its time ran out (a mount whose
		// kernel had 400,000 names to forget, under load: an outside
		// tester read "did not finish" and "could not abort", exit 0).
		o.Report(fmt.Sprintf("unmounted %s (the unmount took most of its %v)", mp, o.Timeout))
		return nil
	}
	o.Report(fmt.Sprintf("unmounting %s did not finish in time", mp))
	return forceUnmount(mp, e, deadline, true, o.Report)
}

// unmountDead removes the mount at mp whose daemon is gone (its
// connection answers ENOTCONN): unmounted where nothing uses it, else
// detached, as nothing its users hold can be served any more and no
// refusal would save any of it. A shell left in a dead mount had `kvfs
// unmount` retry for 7.6 s and exit 1 with EBUSY, though `kvfs stats`
// had said it would detach it (an outside tester, 3 of 3).
func unmountDead(mp string, report func(string)) error {
	err := unix.Unmount(mp, 0)
	if err == nil {
		report(fmt.Sprintf("unmounted %s, whose daemon was gone", mp))
		return nil
	}
	if !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("unmounting %s, whose daemon is gone: %w", mp, err)
	}
	inner := ""
	if m := mountedInside(mp); m != "" {
		inner = fmt.Sprintf(", with %s mounted inside it", m)
	}
	if err := detach(mp); err != nil {
		return fmt.Errorf("detaching %s, whose daemon is gone: %w", mp, err)
	}
	report(fmt.Sprintf("detached %s%s (lazy unmount): its daemon is gone, and processes still in it (a working directory or an open file there) fail on what they hold; what they open next by path is in the bare directory", mp, inner))
	return nil
}

// callerInside names the process that ran this one ("bash (pid 12)")
// when its working directory is mp or below it; "" otherwise. Reading
// the link makes no request of the mount.
func callerInside(mp string) string {
	ppid := os.Getppid()
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", ppid))
	if err != nil || !within(cwd, mp) {
		return ""
	}
	return fmt.Sprintf("%s (pid %d)", command(ppid), ppid)
}

// plainUnmount asks the kernel to unmount, retrying EBUSY until until:
// FUSE releases files a moment after close(2) returns, so a mount that
// was just in use can answer EBUSY briefly.
func plainUnmount(mp string, until time.Time) error {
	err := unix.Unmount(mp, 0)
	for errors.Is(err, unix.EBUSY) && time.Now().Before(until) {
		time.Sleep(50 * time.Millisecond)
		err = unix.Unmount(mp, 0)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EBUSY):
		return busy(mp)
	case !errors.Is(err, unix.EPERM):
		return fmt.Errorf("unmounting %s: %w", mp, err)
	}
	out, err := exec.Command("fusermount3", "-u", mp).CombinedOutput()
	for err != nil && strings.Contains(string(out), "busy") && time.Now().Before(until) {
		time.Sleep(50 * time.Millisecond)
		out, err = exec.Command("fusermount3", "-u", mp).CombinedOutput()
	}
	if err != nil && strings.Contains(string(out), "busy") {
		// A user's mount: fusermount3's own "Device or resource busy"
		// said neither why nor what to do (an outside tester).
		return busy(mp)
	}
	if err != nil {
		return fmt.Errorf("unmounting %s: %s", mp, strings.TrimSpace(string(out)))
	}
	return nil
}

// busy is the error for a mount that stays busy: why, and what to do.
func busy(mp string) error {
	if inner := mountedInside(mp); inner != "" {
		// No process to look for (an outside tester's nested mount).
		return fmt.Errorf("unmounting %s: %w: %s is mounted inside it; unmount that first", mp, unix.EBUSY, inner)
	}
	force := "`kvfs unmount --force` aborts the mount's connection and detaches it"
	if e, ok := mountinfo.At(mp); ok && !mayAbort(e) {
		// A user who may not abort it (an outside tester was sent to
		// an abort that only root could do).
		force = "`kvfs unmount --force` detaches it, its daemon serving what is open there until it is closed"
	}
	return fmt.Errorf("unmounting %s: %w: a process has a file open in it or its working directory there "+
		"(fuser -vm %s names them); close them, or %s", mp, unix.EBUSY, mp, force)
}

// errUnmountedMeanwhile: the mount to abort was gone, unmounted by the
// plain unmount that ran out of time (its report said "could not abort
// ... invalid argument": an outside tester).
var errUnmountedMeanwhile = errors.New("unmounted meanwhile")

// forceUnmount aborts the mount's FUSE connection, then detaches it.
// Where this user may not abort it (mayAbort), a mount whose daemon
// answers is detached alone (its daemon serves what is open until it is
// closed), and one whose daemon is hung is left mounted: detached, its
// clients stayed hung, and no one could reach it to abort it after (an
// outside tester's non-root daemon, stuck exiting after kill -9).
func forceUnmount(mp string, e mountinfo.Entry, deadline time.Time, hung bool, report func(string)) error {
	left := func() time.Duration { return max(time.Until(deadline), 200*time.Millisecond) }
	if !mayAbort(e) && hung {
		return fmt.Errorf("cannot abort the FUSE connection of %s, and left it mounted: %s", mp, forceHint(mp, false))
	}
	if !mayAbort(e) {
		if err := InTime(left(), func() error { return detach(mp) }); err != nil {
			return fmt.Errorf("detaching %s: %w", mp, err)
		}
		report(fmt.Sprintf("detached %s (lazy unmount) without aborting its connection, which only root can here: its daemon serves what is open there until it is closed, then exits", mp))
		return nil
	}
	var how string
	err := InTime(left()/2, func() (err error) { how, err = abortConnection(mp, e); return err })
	if errors.Is(err, errUnmountedMeanwhile) {
		report(fmt.Sprintf("unmounted %s: the unmount finished meanwhile", mp))
		return nil
	}
	if err != nil {
		report(fmt.Sprintf("could not abort the FUSE connection of %s: %v", mp, err))
	} else {
		report(fmt.Sprintf("aborted the FUSE connection of %s (%s); requests waiting on it fail", mp, how))
	}
	if stillMounted(e) {
		if err := InTime(left(), func() error { return detach(mp) }); err != nil {
			return fmt.Errorf("detaching %s: %w", mp, err)
		}
		// Said, as what follows is the operator's to prevent (an
		// outside tester's connector wrote 246 files into the bare
		// mount point after a --force, and the next mount refused it).
		report(fmt.Sprintf("detached %s (lazy unmount); a program still using it fails on what it holds open (a passthrough handle reads and writes its stored file on until it closes), and what it opens next by path is in the bare directory, on its file system; kvfs mounts no store there while it is not empty: stop such programs first", mp))
	}
	if stillMounted(e) {
		return fmt.Errorf("%s is still mounted", mp)
	}
	return nil
}

// abortConnection aborts the FUSE connection behind a mount: through
// fusectl's abort file where fusectl is mounted (the mount's owner may
// write it), else by a forced unmount, whose first step in the kernel
// (umount_begin) is the same abort.
func abortConnection(mp string, e mountinfo.Entry) (string, error) {
	if conn, ok := connectionOf(e); ok {
		abort := abortFile(fusectl, conn)
		if _, err := os.Stat(abort); err == nil {
			if err := writeAbort(fusectl, conn); err != nil {
				return "", err
			}
			return "wrote 1 to " + abort, nil
		}
	}
	err := unix.Unmount(mp, unix.MNT_FORCE)
	if errors.Is(err, unix.EINVAL) && !stillMounted(e) {
		return "", errUnmountedMeanwhile
	}
	if err != nil && !errors.Is(err, unix.EBUSY) {
		return "", fmt.Errorf("umount2(MNT_FORCE): %w (and fusectl is not mounted at %s)", err, fusectl)
	}
	return "umount2 with MNT_FORCE; fusectl is not mounted at " + fusectl, nil
}

// ForceHint says how the mount at mp, whose daemon does not answer, is
// ended: by `kvfs unmount --force`, where this process may abort its
// connection (root, or fusectl mounted: its abort file is the mount
// owner's); else only root can, and the hint says how. A user's `kvfs
// unmount --force` without either detached the mount it could not
// abort: its hung clients stayed hung, the store stayed held, and root's
// `umount -f` could no longer reach it (an outside tester).
func ForceHint(mp string) string {
	e, ok := mountinfo.At(mp)
	return forceHint(mp, !ok || mayAbort(e))
}

func forceHint(mp string, may bool) string {
	if may {
		return fmt.Sprintf("`kvfs unmount --force %s` ends it", mp)
	}
	return fmt.Sprintf("only root can end it here (fusectl is not mounted at %s): as root, `umount -f %s`, or `mount -t fusectl fusectl %s`, after which `kvfs unmount --force %s` works as its owner", fusectl, mp, fusectl, mp)
}

// mayAbort says whether this process may abort e's FUSE connection:
// through fusectl's abort file, or by umount2(MNT_FORCE), which needs
// root.
func mayAbort(e mountinfo.Entry) bool { return mayAbortAs(e, os.Geteuid(), fusectl) }

func mayAbortAs(e mountinfo.Entry, euid int, ctl string) bool {
	if conn, ok := connectionOf(e); ok && unix.Access(abortFile(ctl, conn), unix.W_OK) == nil {
		return true
	}
	return euid == 0
}

// abortFile is connection conn's abort file in fusectl mounted at root.
func abortFile(root, conn string) string { return filepath.Join(root, conn, "abort") }

// writeAbort aborts connection conn through fusectl mounted at root.
func writeAbort(root, conn string) error { return os.WriteFile(abortFile(root, conn), []byte("1"), 0) }

// connectionOf is the name of the mount's directory in fusectl: its
// device number as the kernel encodes it (major<<20 | minor).
func connectionOf(e mountinfo.Entry) (string, bool) {
	maj, mnr, ok := strings.Cut(e.Dev, ":")
	major, err1 := strconv.ParseUint(maj, 10, 32)
	minor, err2 := strconv.ParseUint(mnr, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return "", false
	}
	return strconv.FormatUint(major<<20|minor, 10), true
}

// otherMountOf names the mounts, other than e, of e's FUSE connection
// (the same device: bind mounts of it), or "" (all of them: an outside
// tester's second dead bind mount went unnamed).
func otherMountOf(e mountinfo.Entry) string {
	var others []string
	for _, m := range mountinfo.Read() {
		if m.Dev == e.Dev && m.ID != e.ID {
			others = append(others, m.Point)
		}
	}
	return strings.Join(others, ", ")
}

// stillMounted: the mount e is still in this process's mount table.
func stillMounted(e mountinfo.Entry) bool {
	for _, m := range mountinfo.Read() {
		if m.ID == e.ID {
			return true
		}
	}
	return false
}

// locate finds the kvfs mount at mountpoint without touching it.
func locate(mountpoint string) (string, mountinfo.Entry, error) {
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return "", mountinfo.Entry{}, usagef("%v", err)
	}
	mp := quietResolve(abs)
	e, ok := mountinfo.At(mp)
	if !ok {
		if _, err := os.Lstat(mp); errors.Is(err, os.ErrNotExist) {
			return "", e, usagef("%s does not exist", mp)
		}
		if at, live := LiveMount(mp); live && blob.IsStore(mp) {
			// The store, not its mount point (it said only "is not
			// mounted": an outside tester).
			return "", e, usagef("%s is not mounted: it is the store of the kvfs mount at %s; unmount that", mp, at)
		}
		return "", e, usagef("%s is not mounted", mp)
	}
	if e.FSType != FSType {
		return "", e, usagef("%s is mounted as %s, not kvfs", mp, e.FSType)
	}
	if uid, ok := mountOwner(e); ok && os.Geteuid() != 0 && os.Geteuid() != uid {
		return "", e, fmt.Errorf("%s was mounted by uid %d: only that user or root may unmount it", mp, uid)
	}
	return mp, e, nil
}

// mountOwner is the user a FUSE mount was made by (its user_id option).
func mountOwner(e mountinfo.Entry) (int, bool) {
	for _, o := range strings.Split(e.SuperOptions, ",") {
		if v, ok := strings.CutPrefix(o, "user_id="); ok {
			uid, err := strconv.Atoi(v)
			return uid, err == nil
		}
	}
	return 0, false
}

// Point is p absolute, its symlinks read, never through a mount point
// (quietResolve): how mountinfo names it, where a stat of a stopped
// daemon's mount would wait for good.
func Point(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return quietResolve(abs)
}

// quietResolve resolves the symlinks of an absolute path without
// looking at any mount point: stat, lstat or readlink of a hung FUSE
// mount's root can wait for its daemon, and a mount point is never a
// symlink. Paths are cleaned lexically ("a/b/.." is "a").
func quietResolve(p string) string {
	points := map[string]bool{}
	for _, e := range mountinfo.Read() {
		points[e.Point] = true
	}
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	out := "/"
	for i, hops := 0, 0; i < len(parts); i++ {
		next := filepath.Join(out, parts[i])
		if points[next] || hops > 40 {
			out = next
			continue
		}
		target, err := os.Readlink(next)
		if err != nil {
			out = next
			continue
		}
		hops++
		if filepath.IsAbs(target) {
			out = "/"
		}
		rest := strings.Split(strings.Trim(filepath.Clean(target), "/"), "/")
		parts = append(rest, parts[i+1:]...)
		i = -1
	}
	return filepath.Clean(out)
}

// InTime runs f in a goroutine and waits at most d for it (else
// ErrTimedOut): a system call on a hung FUSE mount can block where no
// signal ends it, and the caller must stay free to abort the connection
// (which then ends f), or to exit.
func InTime(d time.Duration, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return ErrTimedOut
	}
}

// mountedInside names a mount below mp, if there is one.
func mountedInside(mp string) string {
	for _, e := range mountinfo.Read() {
		if e.Point != mp && within(e.Point, mp) {
			return e.Point
		}
	}
	return ""
}
