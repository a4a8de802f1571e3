// Package failpoint kills the process at a named step, for the tests
// that cut the daemon short exactly there: $KVFS_FAILPOINT names the
// step. Steps are a handover's, a dead mount's replacement's, and a
// writer's RELEASE (a kill between a close(2) that returned and the
// release the kernel sends after it).
package failpoint

import (
	"os"

	"golang.org/x/sys/unix"
)

var name = os.Getenv("KVFS_FAILPOINT")

// Hit kills this process with SIGKILL if step is $KVFS_FAILPOINT.
func Hit(step string) {
	if name == step {
		unix.Kill(os.Getpid(), unix.SIGKILL)
		select {}
	}
}
