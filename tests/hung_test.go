package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// blockedClient is a process whose system call on the mount waits for
// the daemon.
type blockedClient struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	exited chan struct{}
	err    error
}

// startBlockedClient runs `stat path` and returns once the kernel shows
// it waiting for the daemon's answer (wchan request_wait_answer).
func startBlockedClient(t *testing.T, path string) *blockedClient {
	t.Helper()
	c := &blockedClient{cmd: exec.Command("stat", path), exited: make(chan struct{})}
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() { c.cmd.Process.Kill(); <-c.exited })
	wchan := fmt.Sprintf("/proc/%d/wchan", c.cmd.Process.Pid)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if b, _ := os.ReadFile(wchan); string(b) == "request_wait_answer" {
			return c
		}
		select {
		case <-c.exited:
			t.Fatalf("stat %s finished while the daemon was stopped: %v %q", path, c.err, c.out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("stat %s never waited for the daemon", path)
		}
	}
}

// stopDaemon stops d with SIGSTOP and waits until each of its threads is
// stopped. kill(2) returns once the signal is queued, and the threads
// blocked reading /dev/fuse learn of the stop only when the one that
// took the signal is scheduled and starts the group stop: on a loaded
// CI machine one of them took the next LOOKUP meanwhile and answered it
// (a stat "finished while the daemon was stopped", ENOENT).
func stopDaemon(t *testing.T, d *daemon) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pid := d.cmd.Process.Pid
	stopped := func() bool {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil || len(tasks) == 0 {
			return false
		}
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if j := bytes.LastIndexByte(b, ')'); j < 0 || j+2 >= len(b) || (b[j+2] != 'T' && b[j+2] != 't') {
				return false
			}
		}
		return true
	}
	if !waitFor(stopped) {
		t.Fatalf("the daemon's threads were not all stopped %v after SIGSTOP", hangGuard)
	}
}

// requireAborted: the client's call failed with the error of an aborted
// FUSE connection instead of hanging.
func (c *blockedClient) requireAborted(t *testing.T) {
	t.Helper()
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("client still blocked 30s after the connection was aborted")
	}
	msg := strings.ToLower(c.out.String())
	if c.err == nil || !(strings.Contains(msg, unix.ECONNABORTED.Error()) || strings.Contains(msg, unix.ENOTCONN.Error())) {
		t.Fatalf("client: %v, %q; want ECONNABORTED or ENOTCONN", c.err, msg)
	}
}

// withFusectl mounts the FUSE control file system for the test if it is
// not mounted, and unmounts it again afterwards.
func withFusectl(t *testing.T) bool {
	t.Helper()
	if _, ok := mountAt("/sys/fs/fuse/connections"); ok {
		return false
	}
	if err := unix.Mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, ""); err != nil {
		t.Fatalf("mounting fusectl: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount("/sys/fs/fuse/connections", 0); err != nil {
			t.Errorf("unmounting fusectl: %v", err)
		}
	})
	return false
}

// privateMountNS is set in a test binary run in a mount namespace of its
// own (see withoutFusectl).
const privateMountNS = "KVFS_TEST_PRIVATE_MOUNT_NS"

// withoutFusectl gives the test a machine without the FUSE control file
// system, so that kvfs unmount must take its other way. Where fusectl is
// mounted (for everyone: unmounting it would change the machine), it
// runs the test again in a child test binary in a mount namespace of its
// own (private propagation, set up by Go for CLONE_NEWNS), where fusectl
// is unmounted for that namespace only, and reports true: the test ran
// there and passed.
func withoutFusectl(t *testing.T) bool {
	t.Helper()
	if _, ok := mountAt("/sys/fs/fuse/connections"); !ok {
		return false
	}
	if os.Getenv(privateMountNS) != "" {
		if err := unix.Unmount("/sys/fs/fuse/connections", unix.MNT_DETACH); err != nil {
			t.Fatalf("unmounting fusectl in a private mount namespace: %v", err)
		}
		return false
	}
	name := strings.ReplaceAll(t.Name(), "/", "$/^")
	cmd := exec.Command(os.Args[0], "-test.run", "^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), privateMountNS+"=1", "KVFS_BIN="+kvfsBin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s in a mount namespace without fusectl: %v\n%s", t.Name(), err, out)
	}
	t.Logf("fusectl is mounted here; ran in a mount namespace without it:\n%s", out)
	return true
}

// TestUnmountHungDaemon (issue 8, part 3): with the daemon stopped by
// SIGSTOP and a client blocked in the mount, `kvfs unmount` returns
// (exit 0, saying what it did), the client gets an error instead of
// hanging, no mount is left, and the daemon exits once continued or
// killed. Through fusectl's abort file, and through MNT_FORCE where
// fusectl is not mounted.
func TestUnmountHungDaemon(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(*testing.T) bool // true: the case ran elsewhere
		how     string
		release syscall.Signal
	}{
		{"fusectl_abort_then_SIGCONT", withFusectl, "wrote 1 to /sys/fs/fuse/connections/", syscall.SIGCONT},
		{"mnt_force_then_SIGKILL", withoutFusectl, "MNT_FORCE", syscall.SIGKILL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.setup(t) {
				return
			}
			d := mountCache(t, "--capacity", "16MiB")
			t.Cleanup(func() { d.cmd.Process.Signal(syscall.SIGCONT) })
			putFile(t, filepath.Join(d.mp, "obj"), objectBytes("obj", 100))
			stopDaemon(t, d)
			client := startBlockedClient(t, filepath.Join(d.mp, "never-stored"))
			res := runKvfsTimeout(t, 60*time.Second, "unmount", "--timeout", "5s", d.mp)
			if res.code != 0 {
				t.Fatalf("kvfs unmount of a stopped daemon: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
			}
			for _, want := range []string{"did not answer", "aborted the FUSE connection", c.how, "detached"} {
				if !strings.Contains(res.stdout, want) {
					t.Errorf("kvfs unmount said %q; want it to say %q", res.stdout, want)
				}
			}
			client.requireAborted(t)
			if m, ok := mountAt(d.mp); ok && m.ID == d.mountID {
				t.Fatalf("%s still mounted after kvfs unmount", d.mp)
			}
			d.cmd.Process.Signal(c.release)
			select {
			case <-d.exited:
			case <-time.After(15 * time.Second):
				t.Fatalf("daemon still running 15s after %v", c.release)
			}
			if c.release == syscall.SIGCONT && d.waitErr != nil {
				t.Errorf("continued daemon exited with %v; output:\n%s", d.waitErr, d.out)
			}
		})
	}
}

// TestUnmountBusyHealthy: a daemon that answers but whose mount is busy
// is not aborted: kvfs unmount fails with EBUSY, saying why and naming
// --force, and the open file keeps working; --force aborts it.
func TestUnmountBusyHealthy(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	path := filepath.Join(d.mp, "obj")
	putFile(t, path, objectBytes("obj", 100))
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res := runKvfsTimeout(t, 60*time.Second, "unmount", "--timeout", "2s", d.mp)
	if res.code != 1 || !strings.Contains(res.stderr, "busy") || strings.Contains(res.stdout, "aborted") {
		t.Fatalf("kvfs unmount of a busy, healthy mount: exit %d, stdout %q, stderr %q; want exit 1, busy, no abort", res.code, res.stdout, res.stderr)
	}
	// It says why and what to do (an outside tester: "device or
	// resource busy" alone).
	if !strings.Contains(res.stderr, "a file open in it") || !strings.Contains(res.stderr, "--force") {
		t.Errorf("kvfs unmount of a busy mount says %q; want the cause and --force named", res.stderr)
	}
	if _, err := f.ReadAt(make([]byte, 10), 0); err != nil {
		t.Fatalf("open file after a refused unmount: %v", err)
	}
	res = runKvfsTimeout(t, 60*time.Second, "unmount", "--force", d.mp)
	if res.code != 0 || !strings.Contains(res.stdout, "aborted the FUSE connection") {
		t.Fatalf("kvfs unmount --force: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	f.Close()
	d.waitExit()
}

// TestUnmountFromInside: `kvfs unmount .` from a shell whose working
// directory is the mount says so at once, and the mount serves on (an
// outside tester: the generic "a process has a file open" after the
// whole timeout's retries); run by exec from there, where kvfs itself
// was all that was inside, it unmounts.
func TestUnmountFromInside(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	path := filepath.Join(d.mp, "obj")
	putFile(t, path, objectBytes("obj", 100))
	out, err := exec.Command("bash", "-c", `cd "$1" && "$2" unmount --timeout 60s . ; echo "exit $?"`, "bash", d.mp, kvfsBin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "working directory of bash") || !strings.Contains(string(out), "cd out of it first") || !strings.HasSuffix(string(out), "exit 1\n") {
		t.Fatalf("kvfs unmount . from a shell in the mount: %v: %q; want exit 1 naming the shell's working directory", err, out)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, objectBytes("obj", 100)) {
		t.Fatalf("the object after a refused unmount: %v", err)
	}
	if out, err := exec.Command("bash", "-c", `cd "$1" && exec "$2" unmount .`, "bash", d.mp, kvfsBin).CombinedOutput(); err != nil {
		t.Fatalf("exec kvfs unmount . from the mount: %v: %s", err, out)
	}
	d.waitExit()
}

// TestUnmountWithAMountInside: kvfs unmount of a mount with another
// mounted inside it names that mount, not a process to look for (an
// outside tester was sent to fuser, which named none). The inner one
// is a tmpfs: kvfs refuses to mount inside a kvfs mount.
func TestUnmountWithAMountInside(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	inner := filepath.Join(d.mp, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", inner, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m"); err != nil {
		t.Fatalf("a tmpfs inside the mount: %v", err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			unix.Unmount(inner, unix.MNT_DETACH)
		}
	})
	res := runKvfsTimeout(t, 60*time.Second, "unmount", "--timeout", "2s", d.mp)
	if res.code != 1 || !strings.Contains(res.stderr, inner+" is mounted inside it") {
		t.Fatalf("kvfs unmount of a mount with one inside: exit %d, stderr %q; want exit 1 naming %s", res.code, res.stderr, inner)
	}
	if err := unix.Unmount(inner, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	d.stop()
}

// TestRequestTimeout: with --request-timeout the kernel itself aborts
// the connection of a stopped daemon: a blocked client gets an error
// without anyone unmounting. The timeout is this connection's, set in
// kvfs's INIT reply: the system-wide default_request_timeout is 0 and
// stays 0 before, during and after the mount, so the abort can only come
// from it (and the mount itself shows that this kernel offers
// CAP_REQUEST_TIMEOUT: kvfs refuses the flag otherwise). It waits out
// the kernel's timer (it checks about every 15 s), the one wait in the
// suite no clock can replace.
func TestRequestTimeout(t *testing.T) {
	waitsOnTimers(t)
	requireRoot(t)
	const sysctl = "/proc/sys/fs/fuse/default_request_timeout"
	readSysctl := func() string {
		t.Helper()
		b, err := os.ReadFile(sysctl)
		if err != nil {
			t.Skipf("needs a kernel with FUSE request timeouts (6.14+): %v", err)
		}
		return strings.TrimSpace(string(b))
	}
	if v := readSysctl(); v != "0" {
		t.Skipf("%s is %s: an abort would not show that the mount's own timeout applies", sysctl, v)
	}
	d := mountCache(t, "--capacity", "16MiB", "--request-timeout", "1s")
	t.Cleanup(func() { d.cmd.Process.Signal(syscall.SIGCONT) })
	if v := readSysctl(); v != "0" {
		t.Fatalf("%s is %s while kvfs is mounted with --request-timeout 1s; want 0, untouched", sysctl, v)
	}
	putFile(t, filepath.Join(d.mp, "obj"), objectBytes("obj", 100))
	stopDaemon(t, d)
	start := time.Now()
	client := startBlockedClient(t, filepath.Join(d.mp, "never-stored"))
	select {
	case <-client.exited:
	case <-time.After(90 * time.Second):
		t.Fatalf("client still blocked 90s after the daemon stopped, with --request-timeout 1s")
	}
	client.requireAborted(t)
	t.Logf("the kernel aborted the stopped daemon's connection after %v", time.Since(start).Round(time.Second))
	d.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-d.exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("daemon still running 15s after SIGCONT on an aborted connection")
	}
	if res := runKvfs(t, "unmount", d.mp); res.code != 0 {
		t.Fatalf("kvfs unmount of the aborted mount: exit %d, %q", res.code, res.stderr)
	}
	if m, ok := mountAt(d.mp); ok && m.ID == d.mountID {
		t.Fatalf("%s still mounted", d.mp)
	}
	if v := readSysctl(); v != "0" {
		t.Fatalf("%s is %s after the mount; want 0, untouched", sysctl, v)
	}
}

// TestUnmountAndTimeoutFlags: bad values are usage errors.
func TestUnmountAndTimeoutFlags(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	mp := filepath.Join(dir, "mnt")
	os.Mkdir(mp, 0o755)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"unmount", "--timeout", "0s", mp}, "--timeout 0s"},
		{[]string{"unmount", "--timeout", "-1s", mp}, "--timeout -1s"},
		{[]string{"unmount", "--timeout", "soon", mp}, "soon"},
		{[]string{"mount", "--request-timeout", "-1s", mp}, "--request-timeout -1s"},
		{[]string{"mount", "--request-timeout", "70000s", mp}, "at most"},
		{[]string{"mount", "--request-timeout", "5", mp}, "5"},
	} {
		res := runKvfs(t, c.args...)
		requireUsageError(t, res, c.want)
		if _, ok := mountAt(mp); ok {
			t.Fatalf("kvfs %v mounted something", c.args)
		}
	}
}

// TestStatsAndMountOfStoppedDaemon: with the daemon stopped (SIGSTOP),
// `kvfs stats` and `kvfs mount` of its store and mount point answer
// within their bounds, saying what is wrong, instead of waiting in the
// kernel for the daemon where SIGTERM does not end them (before: both
// hung until kill -9). Continued, the daemon serves on.
func TestStatsAndMountOfStoppedDaemon(t *testing.T) {
	waitsOnTimers(t)
	d := mountCache(t, "--capacity", "16MiB")
	putFile(t, filepath.Join(d.mp, "obj"), objectBytes("obj", 100))
	stopDaemon(t, d)
	t.Cleanup(func() { d.cmd.Process.Signal(syscall.SIGCONT) })
	res := runKvfsTimeout(t, 30*time.Second, "stats", "--timeout", "1s", d.mp)
	if res.code != 1 || !strings.Contains(res.stderr, "the daemon did not answer within 1s") {
		t.Errorf("kvfs stats of a stopped daemon: exit %d, %q", res.code, res.stderr)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(d.mp, link); err != nil {
		t.Fatal(err)
	}
	for _, mp := range []string{d.mp, link} {
		res = runKvfsTimeout(t, 30*time.Second, "mount", "--store", d.store, "--capacity", "16MiB", mp)
		if res.code != 2 || !strings.Contains(res.stderr, "is on the FUSE mount "+d.mp+", whose daemon did not answer") {
			t.Errorf("kvfs mount over a stopped daemon at %s: exit %d, %q", mp, res.code, res.stderr)
		}
	}
	d.cmd.Process.Signal(syscall.SIGCONT)
	if got, err := os.ReadFile(filepath.Join(d.mp, "obj")); err != nil || checkObject(got, "obj", 100) != nil {
		t.Fatalf("obj after SIGCONT: %v", err)
	}
	if res := runKvfs(t, "stats", "--count", "2", d.mp); res.code != 2 || !strings.Contains(res.stderr, "--count is for --watch") {
		t.Errorf("kvfs stats --count without --watch: exit %d, %q", res.code, res.stderr)
	}
	d.stop()
}

// TestStoreInsideKvfsMountRefused: a store inside a live kvfs mount is
// refused (before: it mounted, and the outer cache evicted the inner
// store's kvfs.format and objects as its own, 5 of 12 objects lost).
func TestStoreInsideKvfsMountRefused(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	inner := filepath.Join(d.mp, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	// Where the store is taken (the defect), the mount the killed
	// command leaves goes with the test.
	t.Cleanup(func() {
		if _, ok := mountAt(mp); ok {
			unix.Unmount(mp, unix.MNT_DETACH)
		}
	})
	res := runKvfsTimeout(t, 30*time.Second, "mount", "--store", inner, "--capacity", "64MiB", mp)
	requireUsageError(t, res, "store "+inner+" is inside the kvfs mount "+d.mp)
	if ents, err := os.ReadDir(inner); err != nil || len(ents) != 0 {
		t.Errorf("the refused store %s holds %d entries (%v)", inner, len(ents), err)
	}
	if _, ok := mountAt(mp); ok {
		t.Errorf("%s is mounted", mp)
	}
	d.stop()
}

// waitsOnTimers marks a test that spends most of its time waiting on
// timers it cannot replace (the kernel's request timer, a stop's
// unmount retries, a daemon held stopped, the overshoot's window, a
// remote server's timeouts): such tests run together,
// after the others (t.Parallel; make integration's -parallel), each on
// its own mount and store.
func waitsOnTimers(t *testing.T) { t.Parallel() }

// TestUnmountDeadMountInUse: `kvfs unmount` of a mount whose daemon was
// killed detaches it though a process still has its working directory
// or a file open there: nothing it holds can be served any more, and
// `kvfs stats` says unmount detaches it (an outside tester: EBUSY and
// exit 1 after 7.6 s of retries, 3 of 3). The store serves again after.
func TestUnmountDeadMountInUse(t *testing.T) {
	for _, held := range []string{"cwd", "open file"} {
		t.Run(held, func(t *testing.T) {
			d := mountCache(t, "--capacity", "16MiB")
			path := filepath.Join(d.mp, "obj")
			putFile(t, path, objectBytes("obj", 5000))
			waitReleased(t, d.mp)
			user := exec.Command("sleep", "600")
			if held == "cwd" {
				user.Dir = d.mp
			} else {
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
			}
			if err := user.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { user.Process.Kill(); user.Wait() }()
			d.kill9()
			if err := unix.Statfs(d.mp, new(unix.Statfs_t)); !errors.Is(err, unix.ENOTCONN) {
				t.Fatalf("statfs of the killed daemon's mount: %v, want ENOTCONN", err)
			}
			res := runKvfsTimeout(t, 60*time.Second, "unmount", "--timeout", "20s", d.mp)
			if res.code != 0 || !strings.Contains(res.stdout, "detached") {
				t.Fatalf("kvfs unmount of a dead mount in use (%s): exit %d, stdout %q, stderr %q; want exit 0, detached", held, res.code, res.stdout, res.stderr)
			}
			if _, ok := mountAt(d.mp); ok {
				t.Fatalf("a mount is left at %s after kvfs unmount", d.mp)
			}
			d2 := startDaemon(t, d.mp, "--store", d.store, "--capacity", "16MiB")
			readBackPlain(t, path, objectBytes("obj", 5000))
			d2.stop()
		})
	}
}

// TestUnmountOfABindMount: `kvfs unmount` of a bind mount of a kvfs
// mount removes that one and says the daemon serves on at the other (it
// said nothing, exit 0: an outside tester); the other serves on.
func TestUnmountOfABindMount(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	putFile(t, filepath.Join(d.mp, "o"), objectBytes("o", 5000))
	bind := filepath.Join(t.TempDir(), "bind")
	if err := os.Mkdir(bind, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(d.mp, bind, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount (needs root): %v", err)
	}
	defer unix.Unmount(bind, unix.MNT_DETACH)
	res := runKvfsTimeout(t, 60*time.Second, "unmount", bind)
	if res.code != 0 || !strings.Contains(res.stdout, "also mounted at "+d.mp) {
		t.Fatalf("kvfs unmount of a bind mount: exit %d, stdout %q, stderr %q; want exit 0 naming %s", res.code, res.stdout, res.stderr, d.mp)
	}
	if _, ok := mountAt(bind); ok {
		t.Errorf("the bind mount is left at %s", bind)
	}
	if !d.alive() {
		t.Fatalf("the daemon exited at the bind mount's unmount:\n%s", d.out)
	}
	readBackPlain(t, filepath.Join(d.mp, "o"), objectBytes("o", 5000))
	// A dead mount's unmount names its dead bind mount, which stays
	// (it was left unsaid: an outside tester).
	if err := unix.Mount(d.mp, bind, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	d.kill9()
	res = runKvfsTimeout(t, 60*time.Second, "unmount", d.mp)
	if res.code != 0 || !strings.Contains(res.stdout, "also mounted at "+bind) {
		t.Fatalf("kvfs unmount of a dead mount with a bind mount: exit %d, stdout %q, stderr %q; want exit 0 naming %s", res.code, res.stdout, res.stderr, bind)
	}
	if res := runKvfsTimeout(t, 60*time.Second, "unmount", bind); res.code != 0 {
		t.Fatalf("kvfs unmount of the dead bind mount: exit %d, %q", res.code, res.stderr)
	}
	if _, ok := mountAt(bind); ok {
		t.Errorf("the dead bind mount is left at %s", bind)
	}
}
