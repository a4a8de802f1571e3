package mount

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// hangGuard bounds the waits of these tests: a wait that runs into it is
// waiting for something that is not coming, however slow the machine.
const hangGuard = time.Minute

// waitUntil reports whether cond came to hold before hangGuard passed,
// polling it: for another process's state in /proc, which nothing
// announces to a process that is not its parent.
func waitUntil(cond func() bool) bool {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	guard := time.After(hangGuard)
	for !cond() {
		select {
		case <-tick.C:
		case <-guard:
			return cond()
		}
	}
	return true
}

// stuckExiting starts a process whose leader thread has exited while
// another thread goes on, as a SIGKILLed daemon with a thread asleep in
// the kernel looks from outside: its /proc state is Z.
func stuckExiting(t *testing.T) int {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("needs gcc to build a process whose leader exits before its thread (.ci/run installs it)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "stuck.c")
	os.WriteFile(src, []byte(`#include <pthread.h>
#include <unistd.h>
static void *sleeper(void *a) { sleep(60); return a; }
int main(void) { pthread_t t; pthread_create(&t, 0, sleeper, 0); pthread_exit(0); }
`), 0o644)
	bin := filepath.Join(dir, "stuck")
	if out, err := exec.Command("gcc", "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	// Its leader is gone while its thread lives: no wait(2) reports
	// that, only its /proc state.
	if !waitUntil(func() bool { return zombie(pid) }) {
		t.Fatalf("pid %d never showed its leader exited", pid)
	}
	return pid
}

// TestGuardAbortsStuckDaemon: the guard of a daemon stuck exiting tries
// to abort its connection, and returns once the daemon is gone.
func TestGuardAbortsStuckDaemon(t *testing.T) {
	pid := stuckExiting(t)
	core, logs := observer.New(zap.WarnLevel)
	logged := make(chan struct{}, 1)
	core = zapcore.RegisterHooks(core, func(zapcore.Entry) error {
		select {
		case logged <- struct{}{}:
		default:
		}
		return nil
	})
	r, w, _ := os.Pipe()
	done := make(chan struct{})
	go func() {
		RunGuard(pid, "999999", t.TempDir(), t.TempDir(), r, zap.New(core))
		close(done)
	}()
	guard := time.After(hangGuard)
	for logs.FilterMessageSnippet("stuck exiting").Len() == 0 {
		select {
		case <-logged: // the guard logged something: look again
		case <-done:
			t.Fatalf("the guard returned while the daemon still holds its pipe: %v", logs.All())
		case <-guard:
			t.Fatalf("the guard did not act on a daemon stuck exiting: %v", logs.All())
		}
	}
	if logs.FilterMessageSnippet("stuck exiting").Len() != 1 {
		t.Fatalf("the guard did not act on a daemon stuck exiting: %v", logs.All())
	}
	select {
	case <-done:
		t.Fatal("the guard returned while the daemon still holds its pipe")
	default:
	}
	w.Write([]byte{'q'}) // the daemon's last thread ends
	w.Close()
	<-done
}
