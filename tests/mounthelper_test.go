package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// helperPath is where the test puts kvfs for mount(8): mount(8) clears
// the environment before it runs /sbin/mount.fuse, whose /bin/sh then
// searches its default PATH, which starts with /usr/local/sbin (ahead
// of /usr/local/bin, where `make install` puts kvfs).
const helperPath = "/usr/local/sbin/kvfs"

// installHelper points helperPath at the binary under test for the
// test's duration and puts back what was there.
func installHelper(t *testing.T) {
	t.Helper()
	requireRoot(t)
	if _, err := os.Stat("/sbin/mount.fuse"); err != nil {
		t.Fatalf("mount -t fuse.kvfs needs fuse3's /sbin/mount.fuse: %v", err)
	}
	old, err := os.Readlink(helperPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		t.Fatalf("%s exists and is not a symlink (an installed kvfs?); the test will not replace it", helperPath)
	}
	tmp := helperPath + ".test"
	if err := os.Symlink(kvfsBin, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, helperPath); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if old != "" {
			os.Symlink(old, tmp)
			os.Rename(tmp, helperPath)
		} else {
			os.Remove(helperPath)
		}
	})
}

// helperDaemon is a kvfs daemon that mount(8) started and detached.
type helperDaemon struct {
	mp, store, log string
	pid            int
}

// mountCmd runs mount(8) or umount(8) with args.
func mountCmd(name string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// requireServing: right when mount(8) returns, the mount answers as
// kvfs and the daemon is detached in a session of its own.
func requireServing(t *testing.T, mp, store, log string) *helperDaemon {
	t.Helper()
	started.Store(mp, struct{}{})
	var sf unix.Statfs_t
	if err := unix.Statfs(mp, &sf); err != nil || sf.Type != fuseSuperMagic {
		t.Fatalf("mount returned but %s does not answer as FUSE: %v (type %#x)", mp, err, sf.Type)
	}
	if m, ok := mountAt(mp); !ok || m.FSType != "fuse.kvfs" || m.Source != store {
		t.Fatalf("mountinfo at %s: %+v", mp, m)
	}
	b, err := os.ReadFile(filepath.Join(store, "kvfs.lock"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		t.Fatalf("no daemon pid in the store's lock: %v %q", err, b)
	}
	h := &helperDaemon{mp: mp, store: store, log: log, pid: pid}
	t.Cleanup(h.cleanup)
	if sid, _ := unix.Getsid(pid); sid != pid {
		t.Errorf("daemon %d is in session %d, not a session of its own", pid, sid)
	}
	return h
}

// gone waits until the daemon's process has exited.
func (h *helperDaemon) gone() bool {
	return waitFor(func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", h.pid))
		if err != nil {
			return true
		}
		i := bytes.LastIndexByte(b, ')')
		return i > 0 && i+2 < len(b) && b[i+2] == 'Z'
	})
}

// umount unmounts with umount(8) and requires the daemon to exit by its
// clean path and the mount to be gone.
func (h *helperDaemon) umount(t *testing.T) {
	t.Helper()
	if out, err := mountCmd("umount", h.mp); err != nil {
		t.Fatalf("umount %s: %v: %s", h.mp, err, out)
	}
	if !h.gone() {
		t.Fatalf("kvfs daemon %d still running 15s after umount", h.pid)
	}
	if _, ok := mountAt(h.mp); ok {
		t.Fatalf("%s still mounted after umount", h.mp)
	}
	if log, _ := os.ReadFile(h.log); !bytes.Contains(log, []byte("kvfs: unmounted "+h.mp)) {
		t.Fatalf("the daemon did not exit through its clean unmount; log:\n%s", log)
	}
}

func (h *helperDaemon) cleanup() {
	if _, ok := mountAt(h.mp); ok {
		runKvfs(nil, "unmount", "--timeout", "5s", h.mp)
	}
	if !h.gone() {
		unix.Kill(h.pid, unix.SIGKILL)
	}
}

// TestMountHelper: `mount -t fuse.kvfs STORE MNT -o ...` through fuse3's
// mount.fuse3 serves by the time mount returns, with the options asked
// for; the mount works (stores, loads, eviction, exact accounting);
// `umount` stops the daemon cleanly; an /etc/fstab-style line (mount -T
// FILE) mounts the same store again with its objects restored.
func TestMountHelper(t *testing.T) {
	installHelper(t)
	dir := t.TempDir()
	mp, store, log := filepath.Join(dir, "mnt"), filepath.Join(dir, "store"), filepath.Join(dir, "kvfs.log")
	os.Mkdir(mp, 0o755)
	opts := "capacity=16M,grace=0s,log=" + log + ",noexec,_netdev,nofail,x-systemd.automount,comment=kv"
	if out, err := mountCmd("mount", "-t", "fuse.kvfs", store, mp, "-o", opts); err != nil {
		t.Fatalf("mount -t fuse.kvfs: %v: %s", err, out)
	}
	h := requireServing(t, mp, store, log)
	if st := stats(t, mp); st.CapacityBytes != 16*MiB {
		t.Errorf("capacity=16M gave capacity_bytes %d", st.CapacityBytes)
	}
	script := filepath.Join(mp, "script")
	putFile(t, script, []byte("#!/bin/sh\nexit 0\n"))
	os.Chmod(script, 0o755)
	if err := exec.Command(script).Run(); err == nil || !errors.Is(err, os.ErrPermission) {
		t.Errorf("running a file on a noexec mount: %v, want permission denied", err)
	}
	// A handover through the helper sets the per-mount flags it asks
	// for, clearing noexec: it kept the first mount's before (an
	// outside tester found ro kept so).
	// capacity= twice: the last is taken, and mount(8) shows the
	// warning (the daemon's log alone had it: an outside tester).
	if out, err := mountCmd("mount", "-t", "fuse.kvfs", store, mp, "-o", "capacity=8M,capacity=16M,grace=0s,log="+log); err != nil {
		t.Fatalf("mount -t fuse.kvfs over the live mount (a handover): %v: %s", err, out)
	} else if !strings.Contains(out, "kvfs: warning: a flag given twice, the last is taken: --capacity") {
		t.Errorf("mount(8) with capacity= twice said: %q", out)
	}
	if !h.gone() {
		t.Fatalf("the daemon %d did not hand its mount over", h.pid)
	}
	h = requireServing(t, mp, store, log)
	var sf unix.Statfs_t
	if err := unix.Statfs(mp, &sf); err != nil || sf.Flags&unix.ST_NOEXEC != 0 {
		t.Errorf("after a handover without noexec the mount is still noexec (flags %#x, %v)", sf.Flags, err)
	}
	keys := make([]string, 6)
	for i := range keys {
		keys[i] = fmt.Sprintf("obj-%d", i)
		putFile(t, filepath.Join(mp, keys[i]), objectBytes(keys[i], 4*MiB))
	}
	st := assertQuietEqual(t, &daemon{t: t, mp: mp, store: store})
	if st.Evictions == 0 {
		t.Errorf("24 MiB stored into 16 MiB evicted nothing: %+v", st)
	}
	last := filepath.Join(mp, keys[len(keys)-1])
	if got, err := os.ReadFile(last); err != nil || checkObject(got, keys[len(keys)-1], 4*MiB) != nil {
		t.Fatalf("reading back %s: %v", last, err)
	}
	h.umount(t)

	fstab := filepath.Join(dir, "fstab")
	line := fmt.Sprintf("%s %s fuse.kvfs capacity=16M,log=%s,noauto,x-systemd.automount 0 0\n", store, mp, log)
	if err := os.WriteFile(fstab, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := mountCmd("mount", "-T", fstab, mp); err != nil {
		t.Fatalf("mount -T %s %s (line %q): %v: %s", fstab, mp, line, err, out)
	}
	h = requireServing(t, mp, store, log)
	if got, err := os.ReadFile(last); err != nil || checkObject(got, keys[len(keys)-1], 4*MiB) != nil {
		t.Fatalf("after remounting from the fstab line, %s: %v", last, err)
	}
	if st := assertQuietEqual(t, &daemon{t: t, mp: mp, store: store}); st.Objects == 0 {
		t.Errorf("remount restored no objects")
	}
	h.umount(t)
}

// TestMountHelperRelativePaths: relative STORE and MOUNTPOINT are read
// from mount(8)'s working directory (docs/operations.md). The detached
// daemon started in / and read them again from there: the store went to
// /store and the mount point was looked up as /mnt (an outside
// tester's finding).
func TestMountHelperRelativePaths(t *testing.T) {
	installHelper(t)
	dir := t.TempDir()
	mp, store, log := filepath.Join(dir, "mnt"), filepath.Join(dir, "store"), filepath.Join(dir, "kvfs.log")
	os.Mkdir(mp, 0o755)
	t.Cleanup(func() { // a failed run leaves no mount behind
		if _, ok := mountAt(mp); ok {
			runKvfs(t, "unmount", mp)
		}
	})
	cmd := exec.Command("mount", "-t", "fuse.kvfs", "store", "mnt", "-o", "capacity=16M,log="+log)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mount -t fuse.kvfs store mnt in %s: %v: %s", dir, err, out)
	}
	h := requireServing(t, mp, store, log)
	if m, ok := mountAt(mp); !ok || m.Source != store {
		t.Errorf("the mount at %s: %+v, want its store %s", mp, m, store)
	}
	putFile(t, filepath.Join(mp, "o"), objectBytes("o", 4096))
	if _, err := os.Stat(filepath.Join(store, "data", "o")); err != nil {
		t.Errorf("the object is not in %s: %v", store, err)
	}
	h.umount(t)
}

// TestMountHelperBadOption: a bad option, a bad value or a mount point
// kvfs refuses fails mount(8) with kvfs's one-line message; nothing is
// mounted, no daemon is left, no store is created.
func TestMountHelperBadOption(t *testing.T) {
	installHelper(t)
	dir := t.TempDir()
	mp, store := filepath.Join(dir, "mnt"), filepath.Join(dir, "store")
	os.Mkdir(mp, 0o755)
	full := filepath.Join(dir, "full")
	os.Mkdir(full, 0o755)
	os.WriteFile(filepath.Join(full, "x"), nil, 0o644)
	for _, c := range []struct {
		mp, opts, want string
	}{
		{mp, "capacity=12X", `bad size "12X"`},
		{mp, "bogus", `unknown mount option "bogus"`},
		{mp, "sync", `unknown mount option "sync"`},
		{mp, "capacity", `mount option "capacity": want capacity=VALUE`},
		{mp, "allow_other=yes", `want allow_other without a value`}, // as fstab spells it (was: allow-other)
		{mp, "strict_capacity=1", `want strict_capacity without a value`},
		{mp, "grace=-1s", "--grace -1s"},
		{full, "capacity=16M", "not empty"},
	} {
		started.Store(c.mp, struct{}{})
		out, err := mountCmd("mount", "-t", "fuse.kvfs", store, c.mp, "-o", c.opts)
		if err == nil {
			t.Fatalf("mount -o %s succeeded", c.opts)
		}
		if lines := strings.Split(out, "\n"); len(lines) != 1 || !strings.Contains(out, c.want) || !strings.HasPrefix(out, "kvfs") {
			t.Errorf("mount -o %s said %q; want one kvfs line containing %q", c.opts, out, c.want)
		}
		if _, ok := mountAt(c.mp); ok {
			t.Fatalf("mount -o %s left a mount", c.opts)
		}
		if _, err := os.Stat(store); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("mount -o %s created the store (%v)", c.opts, err)
		}
	}
	if out, _ := exec.Command("pgrep", "-f", "kvfs "+store).Output(); len(out) > 0 {
		t.Fatalf("kvfs processes left: %s", out)
	}
}
