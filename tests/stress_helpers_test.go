package tests

// Helpers shared by the soak, crash, fault, bad-input and security tests.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// errnoOf is the errno inside err, or 0.
func errnoOf(err error) unix.Errno {
	var en unix.Errno
	if errors.As(err, &en) {
		return en
	}
	return 0
}

// wantErrno fails unless err carries want ("" names the call).
func wantErrno(t testing.TB, what string, err error, want unix.Errno) {
	t.Helper()
	if want == 0 && err != nil {
		t.Errorf("%s: %v, want success", what, err)
	} else if want != 0 && errnoOf(err) != want {
		t.Errorf("%s: %v, want %v (%s)", what, err, want, unix.ErrnoName(want))
	}
}

// keyIndex maps an object's file name (its final path's last element) to
// its key, so any file found anywhere can be checked against its name.
func keyIndex(keys []kvKey) map[string]kvKey {
	m := make(map[string]kvKey, len(keys))
	for _, k := range keys {
		m[filepath.Base(finalPath("", k.key))] = k
	}
	return m
}

// readObject reads the object at p and checks it is exactly the object its
// name stands for. A missing file is (nil, nil): absent is a valid answer
// of a cache, wrong bytes never are.
func readObject(p string, names map[string]kvKey) ([]byte, error) {
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	k, ok := names[filepath.Base(p)]
	if !ok {
		return nil, fmt.Errorf("%s: no key has this name", p)
	}
	if err := checkObject(data, k.key, k.size); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return data, nil
}

// requireCleanLog fails on what a healthy daemon never logs: a panic in a
// handler, an error mapped to EIO, or a data race (in a -race build).
func requireCleanLog(t testing.TB, d *daemon) {
	t.Helper()
	out := d.out.String()
	for _, bad := range []string{"WARNING: DATA RACE", "panic in handler", "unexpected error", "fatal error:",
		// go-fuse failing to splice a read reply: kvfs sized the read
		// path wrong (see fusefs.spliceMax).
		"trySplice"} {
		if strings.Contains(out, bad) {
			t.Errorf("daemon output contains %q:\n%s", bad, tail(out, 8000))
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// hangGuard bounds every wait in these tests. It is no verdict on speed:
// a wait that runs into it is waiting for an event that is not coming (a
// hang), which a slow machine is not.
const hangGuard = time.Minute

// pollEvery is how often waitFor looks again.
const pollEvery = 10 * time.Millisecond

// waitFor reports whether cond came to hold before hangGuard passed. It
// is for states nothing announces (the ledger through kvfs stats, the
// kernel's cached names, a file's size); a wait for a process, a line of
// the daemon's output or a channel waits on that instead.
func waitFor(cond func() bool) bool { return waitWithin(hangGuard, cond) }

// waitWithin is waitFor with a bound of its own, for a state that must
// come well before the hang guard would give up (a cache's timeout).
func waitWithin(d time.Duration, cond func() bool) bool {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	guard := time.After(d)
	for !cond() {
		select {
		case <-tick.C:
		case <-guard:
			return cond()
		}
	}
	return true
}

// progress counts a workload's steps (stores tried), so that the other
// workers can act every so many of them: the mix of operations is then
// the same on a slow machine as on a fast one, where pausing for a fixed
// time between operations would change it.
type progress struct {
	mu    sync.Mutex
	moved *sync.Cond // broadcast on each step and at the end
	n     int64      // GUARDED_BY(mu)
	ended bool       // GUARDED_BY(mu)
}

func (p *progress) cond() *sync.Cond {
	if p.moved == nil {
		p.moved = sync.NewCond(&p.mu)
	}
	return p.moved
}

// Add counts n more steps and returns the total.
func (p *progress) Add(n int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += n
	p.cond().Broadcast()
	return p.n
}

// Load is the number of steps so far.
func (p *progress) Load() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// end wakes every await for good: the workload is over.
func (p *progress) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	p.cond().Broadcast()
}

// await waits until n steps are done and returns the count then, or
// false once the workload has ended.
func (p *progress) await(n int64) (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.n < n && !p.ended {
		p.cond().Wait()
	}
	return p.n, !p.ended
}

// every runs step after each `steps` steps of p until the workload ends.
func (p *progress) every(steps int64, step func()) {
	for n, ok := p.await(steps); ok; n, ok = p.await(n + steps) {
		step()
	}
}

// mountTmpfs mounts a tmpfs of the given size (like "48m") at a new
// directory under parent; the test's cleanup unmounts it.
func mountTmpfs(t *testing.T, parent, size string) string {
	t.Helper()
	requireRoot(t)
	dir := filepath.Join(parent, "tmpfs-"+size)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0755"); err != nil {
		t.Skipf("cannot mount a tmpfs (needs CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

// worldDir is a fresh directory every user can traverse (t.TempDir is
// 0700), for mounts other users must reach.
func worldDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// asNobody runs argv as uid/gid 65534 and returns its exit status and
// combined output.
func asNobody(t *testing.T, argv ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("running %v as nobody: %v", argv, err)
	return -1, ""
}

// storeFiles lists the regular files under a store's data/ by path
// relative to it, with their inode numbers.
func storeFiles(t testing.TB, store string) map[string]unix.Stat_t {
	t.Helper()
	root := filepath.Join(store, "data")
	out := map[string]unix.Stat_t{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = st
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	return out
}

// writingMarks is the set of inode numbers marked under a store's
// writing/ (objects whose writer had not closed).
func writingMarks(t testing.TB, store string) map[uint64]bool {
	t.Helper()
	dir := filepath.Join(store, "writing")
	names, err := markerNames(dir)
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	out := map[uint64]bool{}
	for _, name := range names {
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(dir, name), &st) == nil {
			out[st.Ino] = true
		}
	}
	return out
}

// markerNames lists the crash markers under a store's writing/, in its
// subdirectories (by object ID) or directly under it (an earlier
// version's), relative to it.
func markerNames(writing string) ([]string, error) {
	ents, err := os.ReadDir(writing)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() {
			names = append(names, e.Name())
			continue
		}
		sub, err := os.ReadDir(filepath.Join(writing, e.Name()))
		if err != nil {
			return nil, err
		}
		for _, m := range sub {
			names = append(names, filepath.Join(e.Name(), m.Name()))
		}
	}
	return names, nil
}

// detachAll lazily unmounts whatever is still mounted at mp.
func detachAll(mp string) {
	for i := 0; i < 10; i++ {
		if _, ok := mountAt(mp); !ok {
			return
		}
		unix.Unmount(mp, unix.MNT_DETACH)
	}
}

// inPool runs job(0) to job(jobs-1) on threads goroutines, each taking
// the next job as it finishes one (a connector's thread pool), and
// returns when all are done.
func inPool(threads, jobs int, job func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range threads {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < jobs; i = int(next.Add(1)) - 1 {
				job(i)
			}
		})
	}
	wg.Wait()
}
