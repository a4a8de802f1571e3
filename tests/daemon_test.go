package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kvfs/kvfs/internal/disktmp"
	"github.com/kvfs/kvfs/internal/mountinfo"
	"github.com/kvfs/kvfs/internal/usage"
	"github.com/kvfs/kvfs/mount"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// kvfsBin is the binary under test.
var kvfsBin string

// started records every mount point a test served, so TestMain can fail
// the run if any of them is still mounted at the end.
var started sync.Map // mount point -> struct{}

// TestMain runs the suite with its temporary directories on a real disk
// (internal/disktmp), as kvfs's stores need.
func TestMain(m *testing.M) { os.Exit(disktmp.Run(func() int { return testMain(m) })) }

func testMain(m *testing.M) int {
	if bin := os.Getenv("KVFS_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			fmt.Fprintf(os.Stderr, "KVFS_BIN=%s: %v (run `make build` first)\n", bin, err)
			return 1
		}
		kvfsBin = bin
	} else {
		dir, err := os.MkdirTemp("", "kvfs-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		kvfsBin = filepath.Join(dir, "kvfs")
		build := exec.Command("go", "build", "-o", kvfsBin, "github.com/kvfs/kvfs/cmd/kvfs")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "building kvfs: %v\n", err)
			return 1
		}
	}
	code := m.Run()
	started.Range(func(k, _ any) bool {
		if _, ok := mountAt(k.(string)); ok {
			fmt.Fprintf(os.Stderr, "leftover mount at %s\n", k)
			code = 1
		}
		return true
	})
	return code
}

// requireRoot skips tests that mount: they need /dev/fuse and root (the
// daemon mounts directly, and the tests read the store behind it).
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts kvfs through /dev/fuse and inspects its store directly")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("needs /dev/fuse: %v", err)
	}
}

// lockedBuffer collects a daemon's output from its two pipes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	// grew is closed by the next write, for those waiting on a line.
	grew chan struct{} // GUARDED_BY(mu)
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.grew != nil {
		close(b.grew)
		b.grew = nil
	}
	return b.buf.Write(p)
}

// next is the output so far and a channel closed by the next write.
func (b *lockedBuffer) next() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.grew == nil {
		b.grew = make(chan struct{})
	}
	return b.buf.String(), b.grew
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// daemon is one `kvfs mount` process serving mp in the foreground.
type daemon struct {
	t       testing.TB
	mp      string
	store   string
	cmd     *exec.Cmd
	out     *lockedBuffer
	mountID int
	exited  chan struct{}
	waitErr error // valid once exited is closed
}

// startDaemon runs `kvfs mount FLAGS MP` and returns once a new fuse.kvfs
// mount is at mp (a dead one left there by a killed daemon does not
// count). store is taken from --store, else the default beside mp. The
// test's cleanup leaves neither the mount nor the process behind.
func startDaemon(t testing.TB, mp string, flags ...string) *daemon {
	t.Helper()
	return startDaemonBin(t, kvfsBin, mp, flags...)
}

// startDaemonBin is startDaemon with another kvfs binary (a -race build).
func startDaemonBin(t testing.TB, bin, mp string, flags ...string) *daemon {
	t.Helper()
	return startDaemonEnv(t, bin, nil, mp, flags...)
}

// startDaemonEnv is startDaemonBin with variables added to the daemon's
// environment.
func startDaemonEnv(t testing.TB, bin string, env []string, mp string, flags ...string) *daemon {
	t.Helper()
	requireRoot(t)
	arg := absPath(t, mp)
	mp = arg
	if real, err := filepath.EvalSymlinks(arg); err == nil {
		mp = real // what the kernel mounts on, and the store goes beside
	}
	store := mp + ".kvfs-store"
	for i, f := range flags {
		if f == "--store" && i+1 < len(flags) {
			store = absPath(t, flags[i+1])
		}
	}
	// A mount point left dead by a killed daemon is replaced, and the new
	// mount may reuse its ID: it counts once statfs, done before reading
	// mountinfo, stops failing with ENOTCONN.
	old, hadOld := mountAt(mp)
	d := spawnDaemon(t, bin, env, arg, store, flags...)
	d.mp = mp
	mounted := false
	waitFor(func() bool {
		sfErr := unix.Statfs(mp, new(unix.Statfs_t))
		m, ok := mountAt(mp)
		if ok && m.FSType == "fuse.kvfs" && (!hadOld || m.ID != old.ID || sfErr == nil) {
			d.mountID, mounted = m.ID, true
		}
		return mounted || !d.alive()
	})
	switch {
	case mounted:
		// The mount shows a few ms before the daemon is done starting:
		// its handover socket (in the store) comes after, then the
		// "serving" line. A test that lists the store must not see it
		// appear.
		if !d.printed("kvfs: serving ") && d.alive() {
			t.Fatalf("kvfs mount %s mounted but never said it serves; output:\n%s", mp, d.out)
		}
	case !d.alive():
		t.Fatalf("kvfs mount %s exited before mounting (%v); output:\n%s", mp, d.waitErr, d.out)
	case !mounted:
		t.Fatalf("%s not mounted as fuse.kvfs after %v (hung?); output:\n%s", mp, hangGuard, d.out)
	}
	return d
}

// spawnDaemon runs `kvfs mount FLAGS MP` with bin and env, of store,
// and returns at once, not waiting for it to serve; the test's cleanup
// leaves neither its mount nor its process behind.
func spawnDaemon(t testing.TB, bin string, env []string, mp, store string, flags ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, mp: mp, store: store, out: &lockedBuffer{}, exited: make(chan struct{})}
	d.cmd = exec.Command(bin, append(append([]string{"mount"}, flags...), d.mp)...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.Env = append(os.Environ(), env...)
	// Should the test binary die (a panic, a -timeout), the daemon gets
	// SIGTERM and unmounts itself instead of outliving it.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("starting kvfs: %v", err)
	}
	started.Store(d.mp, struct{}{})
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(d.cleanup)
	return d
}

// waitOutput reports whether the daemon printed what match looks for,
// looking again at each write it makes, until it exits or hangGuard
// passes.
func (d *daemon) waitOutput(match func(out string) bool) bool {
	guard := time.After(hangGuard)
	for {
		out, grew := d.out.next()
		if match(out) {
			return true
		}
		select {
		case <-grew:
		case <-d.exited:
			return match(d.out.String())
		case <-guard:
			return false
		}
	}
}

// printed reports whether the daemon printed s (see waitOutput).
// outSoFar is what the daemon printed so far.
func (d *daemon) outSoFar() string {
	out, _ := d.out.next()
	return out
}

func (d *daemon) printed(s string) bool {
	return d.waitOutput(func(out string) bool { return strings.Contains(out, s) })
}

// waitExited reports whether the daemon exited before hangGuard passed.
func (d *daemon) waitExited() bool {
	select {
	case <-d.exited:
		return true
	case <-time.After(hangGuard):
		return false
	}
}

func absPath(t testing.TB, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func (d *daemon) alive() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// stop unmounts with `kvfs unmount` and requires the daemon to exit 0
// and the mount to be gone.
func (d *daemon) stop() {
	t := d.t
	t.Helper()
	if fds := openFDsUnder(d.mp); len(fds) > 0 {
		t.Errorf("test leaked file descriptors into %s: %v", d.mp, fds)
	}
	res := runKvfs(t, "unmount", d.mp)
	if res.code != 0 {
		t.Fatalf("kvfs unmount %s: exit %d, stderr %q", d.mp, res.code, res.stderr)
	}
	d.waitExit()
}

// waitExit requires the daemon, told to stop, to exit 0 with its mount
// gone.
func (d *daemon) waitExit() {
	t := d.t
	t.Helper()
	if !d.waitExited() {
		t.Fatalf("daemon for %s still running %v after the stop (hung?); output:\n%s", d.mp, hangGuard, d.out)
	}
	if d.waitErr != nil {
		t.Fatalf("daemon for %s exited with %v; output:\n%s", d.mp, d.waitErr, d.out)
	}
	if m, ok := mountAt(d.mp); ok && m.ID == d.mountID {
		t.Fatalf("%s still mounted after the daemon exited", d.mp)
	}
}

// kill9 SIGKILLs the daemon, leaving its mount point dead.
//
// A daemon killed while one of its threads tells the kernel to drop a
// name (an eviction notice) can be left unable to exit: that thread
// waits in the kernel for the directory's lock, held by a client whose
// request only the dead daemon could answer. The daemon's guard (kvfs
// __guard) aborts the FUSE connection then, which frees them both; a
// daemon still there when the wait's hang guard runs out fails the test,
// and a forced unmount cleans up.
func (d *daemon) kill9() {
	d.t.Helper()
	if err := d.cmd.Process.Kill(); err != nil {
		d.t.Fatalf("kill -9: %v", err)
	}
	if d.waitExited() {
		return
	}
	d.t.Errorf("daemon for %s still exiting %v after SIGKILL: its guard did not abort its FUSE connection; %s",
		d.mp, hangGuard, processState(d.cmd.Process.Pid))
	unix.Unmount(d.mp, unix.MNT_FORCE)
	if !d.waitExited() {
		d.t.Fatalf("daemon for %s did not exit after SIGKILL and a forced unmount", d.mp)
	}
}

// processState says what /proc shows of pid's threads (state, flags,
// pending signals, kernel stack) and of the guards that run, for a
// failure that a daemon would not exit.
func processState(pid int) string {
	var b strings.Builder
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		fmt.Fprintf(&b, "pid %d: %v; ", pid, err)
	}
	for _, task := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s/", pid, task.Name())
		stat, _ := os.ReadFile(dir + "stat")
		status, _ := os.ReadFile(dir + "status")
		stack, _ := os.ReadFile(dir + "stack")
		var pend []string
		for line := range strings.Lines(string(status)) {
			if strings.HasPrefix(line, "SigPnd:") || strings.HasPrefix(line, "ShdPnd:") {
				pend = append(pend, strings.TrimSpace(line))
			}
		}
		fmt.Fprintf(&b, "thread %s: %s %s\n%s", task.Name(), strings.TrimSpace(string(stat)), strings.Join(pend, " "), stack)
	}
	guards, _ := exec.Command("pgrep", "-af", "kvfs __guard").Output()
	fmt.Fprintf(&b, "guards running: %q", guards)
	return b.String()
}

// cleanup leaves no process and no mount of this daemon behind, whatever
// state the test left it in.
func (d *daemon) cleanup() {
	// A start killed while it held the mount point's lock leaves its
	// file; this test's mount point is never used again.
	defer func() {
		for _, p := range mount.PointLockFiles(d.mp) {
			os.Remove(p)
		}
	}()
	if d.alive() {
		runKvfs(nil, "unmount", d.mp)
		select {
		case <-d.exited:
		case <-time.After(5 * time.Second):
			unix.Unmount(d.mp, unix.MNT_DETACH)
			d.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.exited:
			case <-time.After(5 * time.Second):
				d.kill9()
			}
		}
	}
	for i := 0; i < 50; i++ {
		m, ok := mountAt(d.mp)
		if !ok || m.ID != d.mountID {
			break
		}
		// A lazy unmount is gone from the table when it returns; one
		// that failed is tried again, a stacked mount is next.
		if err := unix.Unmount(d.mp, unix.MNT_DETACH); err != nil {
			exec.Command("umount", "-l", d.mp).Run()
		}
	}
	if d.t.Failed() {
		d.t.Logf("kvfs daemon output for %s:\n%s", d.mp, d.out)
	}
}

// result is what one kvfs command did.
type result struct {
	stdout, stderr string
	code           int
}

// runKvfs runs the kvfs binary to completion (30s at most). t may be nil.
func runKvfs(t testing.TB, args ...string) result {
	return runKvfsTimeout(t, 30*time.Second, args...)
}

func runKvfsTimeout(t testing.TB, limit time.Duration, args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, kvfsBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.code = ee.ExitCode()
	case t != nil:
		t.Fatalf("kvfs %s: %v (stderr %q)", strings.Join(args, " "), err, r.stderr)
	default:
		r.code = -1
	}
	return r
}

// mountAt is the topmost mount at mp, if any.
func mountAt(mp string) (mountinfo.Entry, bool) { return mountinfo.At(mp) }

// mountsAt lists the mounts at mp, bottom first.
func mountsAt(mp string) []mountinfo.Entry { return mountinfo.Stack(mp) }

// openFDsUnder lists this process's descriptors open on files under dir.
func openFDsUnder(dir string) []string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && (target == dir || strings.HasPrefix(target, dir+"/")) {
			out = append(out, e.Name()+" -> "+target)
		}
	}
	return out
}

// kvfsStats is `kvfs stats --json`.
type kvfsStats struct {
	CapacityBytes     int64 `json:"capacity_bytes"`
	UsedBytes         int64 `json:"used_bytes"`
	Objects           int64 `json:"objects"`
	PinnedObjects     int64 `json:"pinned_objects"`
	PinnedBytes       int64 `json:"pinned_bytes"`
	ShadowBytes       int64 `json:"shadow_bytes"`
	Evictions         int64 `json:"evictions"`
	EvictedBytes      int64 `json:"evicted_bytes"`
	AdmissionFailures int64 `json:"admission_failures"`
	Reconciliations   int64 `json:"reconciliations"`
	ReservedBytes     int64 `json:"reserved_bytes"`
	UnadmittedBytes   int64 `json:"unadmitted_bytes"`
	OvershootMaxBytes int64 `json:"overshoot_max_bytes"`
	KeptBytes         int64 `json:"kept_bytes"`
	Stores            int64 `json:"stores"`
	Loads             int64 `json:"loads"`
	LookupHits        int64 `json:"lookups_hit"`
	LookupMisses      int64 `json:"lookups_miss"`
	Passthrough       int64 `json:"passthrough"`
	WaitingForRoom    int64 `json:"waiting_for_room"`
	// FuseRequests: the requests the daemon answered, by type.
	FuseRequests map[string]int64 `json:"fuse_requests"`
}

var statsFields = []string{"capacity_bytes", "used_bytes", "objects", "pinned_objects",
	"pinned_bytes", "shadow_bytes", "evictions", "evicted_bytes", "admission_failures",
	"reserved_bytes", "unadmitted_bytes", "overshoot_max_bytes"}

// stats runs `kvfs stats --json MP` and requires every field the spec
// names.
func stats(t testing.TB, mp string) kvfsStats {
	t.Helper()
	var raw map[string]json.RawMessage
	out := statsJSON(t, mp, &raw)
	for _, f := range statsFields {
		if _, ok := raw[f]; !ok {
			t.Fatalf("kvfs stats --json lacks %q: %s", f, out)
		}
	}
	var st kvfsStats
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("kvfs stats --json: %v in %q", err, out)
	}
	return st
}

// statsHere reads the ledger as kvfs stats does (the root's
// user.kvfs.stats) from this process: a `kvfs stats` forked from a
// process holding a writer closes its copy of the descriptor at exec,
// and that close is a FLUSH, which settles the writer.
func statsHere(t testing.TB, mp string) kvfsStats {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(mp, "user.kvfs.stats", buf)
	if err != nil {
		t.Fatalf("reading %s's stats: %v", mp, err)
	}
	var st kvfsStats
	if err := json.Unmarshal(buf[:n], &st); err != nil {
		t.Fatalf("%s's stats: %v in %q", mp, err, buf[:n])
	}
	return st
}

// statsJSON runs `kvfs stats --json MP`, requires exit 0, decodes what
// it printed into v and returns it.
func statsJSON(t testing.TB, mp string, v any) string {
	t.Helper()
	res := runKvfs(t, "stats", "--json", mp)
	if res.code != 0 {
		t.Fatalf("kvfs stats --json %s: exit %d, stderr %q", mp, res.code, res.stderr)
	}
	if err := json.Unmarshal([]byte(res.stdout), v); err != nil {
		t.Fatalf("kvfs stats --json: %v in %q", err, res.stdout)
	}
	return res.stdout
}

// dfUsed is what df reports used on the mount.
func dfUsed(mp string) (int64, error) { return usage.DfUsed(mp) }

// duCommand runs du -sB1 itself.
func duCommand(dir string) (int64, error) {
	out, err := exec.Command("du", "-sB1", dir).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && strings.Contains(string(ee.Stderr), "No such file or directory") {
		return 0, fmt.Errorf("du -sB1 %s: %s: %w", dir, bytes.TrimSpace(ee.Stderr), fs.ErrNotExist) // a name gone mid-walk
	}
	if err != nil {
		return 0, fmt.Errorf("du -sB1 %s: %v", dir, err)
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return 0, fmt.Errorf("du -sB1 %s printed %q", dir, out)
	}
	return strconv.ParseInt(f[0], 10, 64)
}

func ceil4096(n int64) int64 { return (n + 4095) / 4096 * 4096 }

// storeBytes is what the store holds for objects: each regular file
// under data/ once, its size rounded up to a block.
func storeBytes(store string) (int64, error) {
	return usage.Charged(filepath.Join(store, "data"))
}

// assertQuietEqual checks the drift equation of a mount with nothing
// open: df used == du -s == used_bytes == bytes the store holds, and no
// pins or shadow bytes. Handles are released asynchronously after close,
// so it waits for the ledger to settle before failing.
func assertQuietEqual(t testing.TB, d *daemon) kvfsStats {
	t.Helper()
	var msg string
	var quiet kvfsStats
	settled := waitFor(func() bool {
		st := stats(t, d.mp)
		df, errDf := dfUsed(d.mp)
		du, errDu := usage.Du(d.mp)
		sb, errSb := storeBytes(d.store)
		duCmd, errCmd := duCommand(d.mp)
		if err := errors.Join(errDf, errDu, errSb, errCmd); errors.Is(err, fs.ErrNotExist) {
			// A name evicted while a walk passed it: the mount is not
			// quiet yet (an eviction as a grace ends).
			msg = fmt.Sprintf("measuring %s: %v", d.mp, err)
			return false
		} else if err != nil {
			t.Fatalf("measuring %s: %v", d.mp, err)
		}
		quiet = st
		msg = fmt.Sprintf("df used %d, du walk %d, du -sB1 %d, used_bytes %d, store %d; pinned %d/%d bytes, shadow %d, capacity %d",
			df, du, duCmd, st.UsedBytes, sb, st.PinnedObjects, st.PinnedBytes, st.ShadowBytes, st.CapacityBytes)
		return df == du && du == duCmd && du == st.UsedBytes && du == sb &&
			st.PinnedObjects == 0 && st.PinnedBytes == 0 && st.ShadowBytes == 0 && st.UsedBytes <= st.CapacityBytes
	})
	if !settled {
		t.Fatalf("drift on a quiet mount: %s", msg)
	}
	return quiet
}
