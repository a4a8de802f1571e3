package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/internal/procstat"
	"github.com/kvfs/kvfs/internal/stats"
	"golang.org/x/sys/unix"
)

// daemon is one `kvfs mount` process the bench started.
type daemon struct {
	bin, mp, store string
	cmd            *exec.Cmd
	exited         chan struct{}
	waitErr        error
	// audited is closed when the daemon logs its start-up audit done
	// (a start from the checkpoint checks every stored file behind it),
	// or that it loaded the store by walking it, which needs none.
	audited     chan struct{}
	auditedOnce sync.Once

	mu     sync.Mutex
	log    bytes.Buffer // stderr, then stdout, as they came
	loaded string       // the "store loaded" log line
	// ready is closed when the daemon says it serves every request,
	// its index built (a big store's start serves loads before that).
	ready     chan struct{}
	readyOnce sync.Once
}

// startDaemon execs `kvfs mount` in its own process group, so a Ctrl-C
// at the terminal reaches only the bench, which then unmounts in order.
// Pdeathsig stops the daemon (cleanly, by SIGTERM) if the bench is
// killed outright; workers never end on a locked OS thread, so the
// thread that forked it lives as long as the bench does.
func startDaemon(bin, store, mp string, capacity int64, extra ...string) (*daemon, error) {
	return startDaemonEnv(nil, bin, store, mp, capacity, extra...)
}

// startDaemonEnv is startDaemon with variables added to the daemon's
// environment.
func startDaemonEnv(env []string, bin, store, mp string, capacity int64, extra ...string) (*daemon, error) {
	args := []string{"mount", "--store", store, "--capacity", fmt.Sprint(capacity)}
	args = append(append(args, extra...), mp)
	d := &daemon{bin: bin, mp: mp, store: store, exited: make(chan struct{}), audited: make(chan struct{}), ready: make(chan struct{})}
	d.cmd = exec.Command(bin, args...)
	if env != nil {
		d.cmd.Env = append(os.Environ(), env...)
	}
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	var pipes sync.WaitGroup
	pipes.Add(2)
	go d.capture(stderr, &pipes)
	go d.capture(stdout, &pipes)
	go func() {
		pipes.Wait()
		d.waitErr = d.cmd.Wait()
		close(d.exited)
	}()
	return d, nil
}

func (d *daemon) capture(r io.Reader, wg *sync.WaitGroup) {
	defer wg.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		d.mu.Lock()
		d.log.WriteString(line + "\n")
		if strings.Contains(line, "store loaded") {
			d.loaded = line
			if strings.Contains(line, `"from_snapshot": false`) {
				// A start that walked the store has audited it
				// already: no start-up audit follows.
				d.auditedOnce.Do(func() { close(d.audited) })
			}
		}
		if strings.HasPrefix(line, "kvfs: serving ") && strings.Contains(line, "objects restored") {
			d.readyOnce.Do(func() { close(d.ready) })
		}
		if strings.Contains(line, "start-up audit done") {
			d.auditedOnce.Do(func() { close(d.audited) })
		}
		d.mu.Unlock()
	}
}

// Log is what the daemon printed so far.
func (d *daemon) Log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// passthrough is the daemon's own word on passthrough, from its stats:
// "true", "false", or "unknown" from a daemon that does not report it.
func (d *daemon) passthrough() (string, error) {
	st, err := d.stats()
	if err != nil {
		return "", err
	}
	v, ok := stats.Passthrough.Int(&st)
	if !ok {
		return "unknown", nil
	}
	return fmt.Sprint(v == 1), nil
}

// waitMounted polls /proc/self/mountinfo until the mount shows as
// fuse.kvfs, the daemon exits, or the timeout passes.
func (d *daemon) waitMounted(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if mountedType(d.mp) == "fuse.kvfs" {
			return nil
		}
		select {
		case <-d.exited:
			return fmt.Errorf("kvfs mount exited before mounting (%v):\n%s", d.waitErr, tail(d.Log(), 2000))
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kvfs mount of %s not in mountinfo after %v:\n%s", d.mp, timeout, tail(d.Log(), 2000))
		}
	}
}

// stopWait is how long stop waits for a daemon to exit after its
// unmount: a clean stop writes the checkpoint, about 2 s a million
// objects here (21 s at ten million), and one cut short leaves none for
// the next start, which then walks the store.
const stopWait = 2 * time.Minute

// stop unmounts with `kvfs unmount`, waits for the daemon to exit, and
// escalates (SIGTERM, lazy detach, SIGKILL) if it does not. It never
// returns with the mount still in place unless the kernel refuses.
func (d *daemon) stop() error {
	var errs []error
	if mountedType(d.mp) == "fuse.kvfs" {
		out, err := exec.Command(d.bin, "unmount", d.mp).CombinedOutput()
		if err != nil {
			errs = append(errs, fmt.Errorf("kvfs unmount %s: %v: %s (processes using it: %s)",
				d.mp, err, strings.TrimSpace(string(out)), holders(d.mp)))
		}
	}
	if !d.waitExit(stopWait) {
		errs = append(errs, fmt.Errorf("daemon for %s still running %v after unmount; SIGTERM", d.mp, stopWait))
		d.cmd.Process.Signal(syscall.SIGTERM)
		if !d.waitExit(5 * time.Second) {
			d.cmd.Process.Kill()
			d.waitExit(5 * time.Second)
		}
	}
	if mountedType(d.mp) != "" {
		errs = append(errs, fmt.Errorf("%s still mounted after the daemon exited; detaching", d.mp))
		if err := unix.Unmount(d.mp, unix.MNT_DETACH); err != nil {
			exec.Command("fusermount3", "-u", "-z", d.mp).Run()
		}
	}
	if d.waitErr != nil {
		errs = append(errs, fmt.Errorf("daemon for %s exited with %v:\n%s", d.mp, d.waitErr, tail(d.Log(), 2000)))
	}
	return errors.Join(errs...)
}

func (d *daemon) waitExit(timeout time.Duration) bool {
	select {
	case <-d.exited:
		return true
	case <-time.After(timeout):
		return false
	}
}

// rssBytes is the daemon's resident memory, from /proc.
func (d *daemon) rssBytes() int64 {
	b, err := procstat.Status(d.cmd.Process.Pid)
	if err != nil {
		return 0
	}
	kb, _ := strconv.ParseInt(strings.TrimSuffix(procstat.StatusLine(b, "VmRSS"), " kB"), 10, 64)
	return kb << 10
}

// stats runs `kvfs stats --json` against the mount.
func (d *daemon) stats() (stats.Snapshot, error) {
	var st stats.Snapshot
	out, err := exec.Command(d.bin, "stats", "--json", d.mp).Output()
	if err != nil {
		return st, fmt.Errorf("kvfs stats %s: %w", d.mp, err)
	}
	return st, json.Unmarshal(out, &st)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
