package tests

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// watchLines runs `kvfs stats --watch` with a pipe for stdout and
// hands over each line as its fields.
func watchLines(t *testing.T, mp string) <-chan map[string]string {
	return watchLinesEvery(t, mp, 50*time.Millisecond)
}

func watchLinesEvery(t *testing.T, mp string, interval time.Duration) <-chan map[string]string {
	t.Helper()
	cmd := exec.Command(kvfsBin, "stats", "--watch", "--interval", interval.String(), mp)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan map[string]string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.ContainsRune(sc.Text(), '\x1b') {
				t.Errorf("terminal escape in piped output: %q", sc.Text())
			}
			f := map[string]string{}
			for _, kv := range strings.Fields(sc.Text()) {
				k, v, _ := strings.Cut(kv, "=")
				f[k] = v
			}
			lines <- f
		}
	}()
	return lines
}

// awaitLine reads lines until one satisfies ok.
func awaitLine(t *testing.T, lines <-chan map[string]string, what string, ok func(map[string]string) bool) map[string]string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case f, open := <-lines:
			if !open {
				t.Fatalf("kvfs stats --watch ended before a line with %s", what)
			}
			if ok(f) {
				return f
			}
		case <-timeout:
			t.Fatalf("no line with %s within 20s", what)
		}
	}
}

func num(f map[string]string, k string) float64 {
	v, err := strconv.ParseFloat(f[k], 64)
	if err != nil {
		return -1
	}
	return v
}

// TestStatsWatch: `kvfs stats --watch` on a pipe prints a plain line per
// refresh whose figures follow a workload: objects and used bytes as it
// stores, an eviction rate when it overflows the capacity, an ENOSPC
// rate when a size is refused; and its last figures equal `kvfs stats`.
func TestStatsWatch(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB", "--grace", "0s")
	lines := watchLines(t, d.mp)
	first := awaitLine(t, lines, "objects=0", func(f map[string]string) bool { return f["objects"] == "0" })
	if _, ok := first["evictions/s"]; ok {
		t.Errorf("first line has a rate: %v", first)
	}
	for i := range 2 {
		putFile(t, filepath.Join(d.mp, fmt.Sprint("a", i)), objectBytes("a", 4*MiB))
	}
	awaitLine(t, lines, "objects=2 and 8 MiB used", func(f map[string]string) bool {
		return f["objects"] == "2" && num(f, "used") == 8*MiB && num(f, "used%") == 50
	})
	for i := range 4 {
		putFile(t, filepath.Join(d.mp, fmt.Sprint("b", i)), objectBytes("b", 4*MiB))
	}
	awaitLine(t, lines, "an eviction rate", func(f map[string]string) bool { return num(f, "evictions/s") > 0 })
	fd, err := unix.Open(filepath.Join(d.mp, "huge"), unix.O_CREAT|unix.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// Past the whole capacity under passthrough: the close says ENOSPC.
	unix.Pwrite(fd, []byte("x"), 1<<40)
	if err := unix.Close(fd); err != unix.ENOSPC {
		t.Errorf("close after a write at 1 TiB: %v, want ENOSPC", err)
	}
	os.Remove(filepath.Join(d.mp, "huge"))
	awaitLine(t, lines, "an ENOSPC rate", func(f map[string]string) bool { return num(f, "enospc/s") > 0 })
	st := assertQuietEqual(t, d)
	awaitLine(t, lines, "the figures of kvfs stats", func(f map[string]string) bool {
		return num(f, "used") == float64(st.UsedBytes) && num(f, "objects") == float64(st.Objects) &&
			num(f, "evictions") == float64(st.Evictions) && num(f, "enospc") == float64(st.AdmissionFailures)
	})
}

// TestStatsWatchOfAMountThatGoes: a mount unmounted under `kvfs stats
// --watch` ends the watch with exit 1 and says the mount went away, not
// exit 2 as for a path that was never a mount (an outside tester).
func TestStatsWatchOfAMountThatGoes(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	cmd := exec.Command(kvfsBin, "stats", "--watch", "--interval", "50ms", d.mp)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatalf("no first line: %s", stderr.String())
	}
	d.stop()
	for sc.Scan() {
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "went away while watched") {
		t.Errorf("the watch of a mount unmounted under it: %v, %q; want exit 1 saying it went away", err, stderr.String())
	}
}

// TestStatsWatchAcrossAHandover: the successor's counters start from 0,
// and the watch takes the handover as a restart: no negative rate, and
// the first line after it says counters_restarted=1, whether the
// counters fell by then (an outside tester read stores/s=-28195.6 and a
// lookups share worked out from two negative deltas) or had passed the
// old daemon's already (another's: a rate too low, unflagged); the watch
// knows the daemon by the pid that holds the store.
func TestStatsWatchAcrossAHandover(t *testing.T) {
	for _, interval := range []time.Duration{50 * time.Millisecond, 2 * time.Second} {
		t.Run(interval.String(), func(t *testing.T) {
			d := mountCache(t, "--capacity", "16MiB")
			for i := range 5 {
				putFile(t, filepath.Join(d.mp, fmt.Sprintf("o%d", i)), objectBytes(fmt.Sprint(i), 4096))
			}
			// Named relative to the working directory, as a user
			// types it (a relative mount point found no daemon to
			// know: an outside tester's `kvfs stats --watch m`).
			cwd, _ := os.Getwd()
			rel, err := filepath.Rel(cwd, d.mp)
			if err != nil {
				t.Fatal(err)
			}
			lines := watchLinesEvery(t, rel, interval)
			awaitLine(t, lines, "5 stores", func(f map[string]string) bool { return num(f, "stores") == 5 })
			d = handOver(t, kvfsBin, d, "--store", d.store, "--capacity", "16MiB")
			for i := range 20 {
				putFile(t, filepath.Join(d.mp, fmt.Sprintf("n%d", i)), objectBytes(fmt.Sprint(i), 4096))
			}
			f := awaitLine(t, lines, "a reading of the successor", func(f map[string]string) bool {
				return f["counters_restarted"] != "" || num(f, "stores") != 5
			})
			if f["counters_restarted"] != "1" {
				t.Errorf("the first line after the handover: %v; want counters_restarted=1", f)
			}
			for k, v := range f {
				if strings.HasSuffix(k, "/s") && strings.HasPrefix(v, "-") || k == "lookups_found%" {
					t.Errorf("the first line after the handover has %s=%s: a rate across the restart", k, v)
				}
			}
			d.stop()
		})
	}
}
