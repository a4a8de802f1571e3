package mount

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/internal/mountinfo"
	"golang.org/x/sys/unix"
)

func TestMountsOfStore(t *testing.T) {
	info := `36 25 0:32 / /tmp/a rw - fuse.kvfs /var/store rw,user_id=0
37 25 0:33 / /tmp/with\040space rw - fuse.kvfs /var/store rw
38 25 0:34 / /tmp/other rw - fuse.kvfs /var/other-store rw
39 25 0:35 / /tmp/notkvfs rw - fuse.sshfs /var/store rw
40 25 8:1 / / rw shared:1 - ext4 /dev/vda rw`
	got := mountsOfStore(mountinfo.Parse(strings.NewReader(info)), "/var/store")
	if want := []string{"/tmp/a", "/tmp/with space"}; !slices.Equal(got, want) {
		t.Fatalf("mountsOfStore = %q, want %q", got, want)
	}
}

// TestZombie: an exited process its parent has not reaped reads as a
// zombie (as does one whose leader exited while a thread is stuck); a
// live one and a reaped one do not.
func TestZombie(t *testing.T) {
	if zombie(os.Getpid()) {
		t.Fatal("this test process reads as a zombie")
	}
	cmd := exec.Command("sleep", "0")
	if err := cmd.Run(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	if zombie(cmd.Process.Pid) {
		t.Fatal("a reaped process reads as a zombie")
	}
	// An exited, unreaped child is a zombie too, which is enough to
	// check the /proc parsing.
	cmd = exec.Command("sh", "-c", "exit 0")
	if err := cmd.Start(); err != nil {
		t.Skip("no sh:", err)
	}
	defer cmd.Wait()
	// Wait for its exit without reaping it (WNOWAIT): a zombie now.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatalf("waitid: %v", err)
	}
	if !zombie(cmd.Process.Pid) {
		t.Fatal("an exited, unreaped child does not read as a zombie")
	}
}
