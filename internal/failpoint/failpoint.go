// Package failpoint kills the process at a named step, for the tests
// that cut the daemon short exactly there: $KVFS_FAILPOINT names the
// step. Steps are a handover's, a dead mount's replacement's, and a
// writer's RELEASE (a kill between a close(2) that returned and the
// release the kernel sends after it). "STEP:stop" stops the process
// there instead (SIGSTOP), as a Ctrl-Z or a debugger would, for the
// test to signal, continue or kill; "STEP:hang" blocks the goroutine
// that reached it for good, the process running on, as a deadlock
// would.
package failpoint

import (
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

var name, action = parse(os.Getenv("KVFS_FAILPOINT"))

func parse(v string) (step, action string) {
	step, action, _ = strings.Cut(v, ":")
	return step, action
}

// Hit kills this process with SIGKILL if step is $KVFS_FAILPOINT, stops
// it with SIGSTOP if that is step:stop, and blocks if step:hang.
func Hit(step string) {
	if name != step {
		return
	}
	switch action {
	case "hang":
		select {}
	case "stop":
		unix.Kill(os.Getpid(), unix.SIGSTOP)
		// Continued: a moment for the signals sent while it was stopped
		// to reach their handlers (os/signal's goroutine), as they
		// would have in the time the stop stood for, before the step.
		time.Sleep(100 * time.Millisecond)
		return
	}
	unix.Kill(os.Getpid(), unix.SIGKILL)
	select {}
}
