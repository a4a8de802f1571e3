package fusefs

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// makingDir says whether the thread that sent a FUSE request is inside
// mkdir(2) or mkdirat(2). The kernel looks a name up before it makes a
// directory, and FUSE does not say why it looks: without this, a file
// that only the bucket holds (another node's) would answer that lookup,
// and mkdir x (or mkdir -p x/sub) would fail with EEXIST or ENOTDIR on
// every node. The local directory wins instead (docs/remote.md, "Names
// and directories"). The caller's thread is blocked in the request, so
// /proc/TID/syscall names the call it is in; where it cannot be read
// (no permission, another PID namespace), the name answers as usual.
func makingDir(pid uint32) bool {
	if pid == 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
	if err != nil {
		return false
	}
	nr, _, _ := strings.Cut(string(b), " ")
	n, err := strconv.Atoi(nr)
	return err == nil && (n == unix.SYS_MKDIRAT || n == legacyMkdir)
}
