package mount

import (
	"os"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// nrOpen is the kernel's ceiling on any process's descriptor limit.
const nrOpen = "/proc/sys/fs/nr_open"

// raiseFileLimit raises the daemon's descriptor limit, soft and hard, to
// the kernel's ceiling where it may (root): the daemon holds a descriptor
// for every open handle on the mount, whoever opened it, so the limit it
// inherited from a shell (20,000 for an outside tester) let one user's
// process holding that many files open fail every other open and create
// on the mount with EMFILE, root's and the checkpoint's included. The Go
// runtime raises only the soft limit, to the hard one. An unprivileged
// daemon keeps what it has, and says how much that is.
func raiseFileLimit(log *zap.Logger) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	b, err := os.ReadFile(nrOpen)
	if err != nil {
		return
	}
	ceiling, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || ceiling <= lim.Max {
		unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: lim.Max, Max: lim.Max})
		return
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: ceiling, Max: ceiling}); err != nil {
		log.Info("the daemon's descriptor limit stays where it was: every open file on the mount holds one, so as many files as this are open at most, by all users together",
			zap.Uint64("limit", lim.Max), zap.Error(err))
	}
}
