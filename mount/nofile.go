package mount

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// nrOpen is the kernel's ceiling on any process's descriptor limit.
const nrOpen = "/proc/sys/fs/nr_open"

// raiseFileLimit raises the daemon's descriptor limit, soft and hard, to
// the kernel's ceiling where it may (root with CAP_SYS_RESOURCE), and
// returns the limit it has: the daemon holds a descriptor for every open
// handle on the mount, whoever opened it, so the limit it inherited from
// a shell (20,000 for an outside tester) let one user's process holding
// that many files open fail every other open and create on the mount
// with EMFILE, root's and the checkpoint's included. The Go runtime
// raises only the soft limit, to the hard one. It says nothing: a start
// that fails prints one line, its reason (the mount logs the limit).
func raiseFileLimit() uint64 {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	b, err := os.ReadFile(nrOpen)
	if err != nil {
		return lim.Cur
	}
	ceiling, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err == nil && ceiling > lim.Max && unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: ceiling, Max: ceiling}) == nil {
		return ceiling
	}
	if unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: lim.Max, Max: lim.Max}) == nil {
		return lim.Max
	}
	return lim.Cur
}
