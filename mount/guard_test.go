package mount

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfs/kvfs/blob"
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
	fmt.Fprintln(w, guardMounted, "999999")
	done := make(chan struct{})
	go func() {
		RunGuard(pid, t.TempDir(), t.TempDir(), r, zap.New(core))
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
	fmt.Fprintln(w, guardStop) // the daemon's last thread ends
	w.Close()
	<-done
}

// TestGuardCapsOnlyAfterMount: a daemon that dies once it mounted leaves
// its guard to truncate the marked files while a process holds a file of
// the mount open, and the guard returns once none does; one that dies
// before it mounted had no client, and its guard touches nothing.
func TestGuardCapsOnlyAfterMount(t *testing.T) {
	for _, told := range []bool{true, false} {
		mp, store := t.TempDir(), t.TempDir()
		marked := filepath.Join(store, blob.WritingName, "3", "1f")
		os.MkdirAll(filepath.Dir(marked), 0o755)
		if err := os.WriteFile(marked, make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
		// A client's descriptor of a file under the mount point.
		held, err := os.Create(filepath.Join(mp, "obj"))
		if err != nil {
			t.Fatal(err)
		}
		r, w, _ := os.Pipe()
		if told {
			fmt.Fprintln(w, guardMounted, "999999")
		}
		done := make(chan struct{})
		go func() {
			RunGuard(os.Getpid(), mp, store, r, zap.NewNop())
			close(done)
		}()
		w.Close() // the daemon dies
		if told {
			if !waitUntil(func() bool { st, err := os.Stat(marked); return err == nil && st.Size() == 0 }) {
				t.Fatal("the guard of a daemon that died after it mounted did not truncate the marked file")
			}
			// The writer goes on: truncated again.
			os.WriteFile(marked, make([]byte, 4096), 0o644)
			if !waitUntil(func() bool { st, err := os.Stat(marked); return err == nil && st.Size() == 0 }) {
				t.Fatal("the guard stopped truncating while a file of the mount was held open")
			}
			select {
			case <-done:
				t.Fatal("the guard returned while a file of the mount was held open")
			default:
			}
		}
		held.Close()
		select {
		case <-done:
		case <-time.After(hangGuard):
			t.Fatalf("the guard (told of the mount: %v) did not return once no file of the mount was open", told)
		}
		if st, err := os.Stat(marked); !told && (err != nil || st.Size() != 4096) {
			t.Errorf("the guard of a daemon that died before it mounted touched the store: %v %v", st, err)
		}
	}
}
