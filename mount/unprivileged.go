package mount

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// fuseConf is where fusermount3 reads whether users may mount with
// allow_other.
var fuseConf = "/etc/fuse.conf"

// checkUnprivileged: a mount by a user other than root goes through
// fusermount3, which needs /dev/fuse readable and writable by that user
// and, for --allow-other, user_allow_other in /etc/fuse.conf. Checked
// before the store is opened, so the error says why: fusermount3's own
// reason came on a line of its own, and the mount's last line was
// go-fuse's "fusermount exited with code 256".
func checkUnprivileged(o Options) error {
	if os.Geteuid() == 0 {
		return nil
	}
	if err := unix.Faccessat(unix.AT_FDCWD, "/dev/fuse", unix.R_OK|unix.W_OK, unix.AT_EACCESS); err != nil {
		return fmt.Errorf("/dev/fuse: %w: a mount by a user other than root needs to read and write it (most systems make it 0666: as root, chmod 0666 /dev/fuse), or mount as root", err)
	}
	if o.AllowOther && !userAllowOther() {
		return errors.New("--allow-other by a user other than root needs the line user_allow_other in " + fuseConf + ", or a mount by root")
	}
	return nil
}

// userAllowOther says whether fuse.conf lets users mount with
// allow_other.
func userAllowOther() bool {
	f, err := os.Open(fuseConf)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "user_allow_other" {
			return true
		}
	}
	return false
}
