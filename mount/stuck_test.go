package mount

import (
	"fmt"
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
	var got []string
	for _, e := range mountsOfStore(mountinfo.Parse(strings.NewReader(info)), "/var/store") {
		got = append(got, e.Point)
	}
	if want := []string{"/tmp/a", "/tmp/with space"}; !slices.Equal(got, want) {
		t.Fatalf("mountsOfStore = %q, want %q", got, want)
	}
}

// TestZombie: a live process, a reaped one and an exited one its parent
// has not reaped do not read as stuck exiting (the last holds nothing:
// under a PID 1 that reaps nothing, every killed daemon stays one, and
// reading it as stuck unmounted the dead mount a start was to replace);
// one whose leader exited while a thread goes on does (stuckExiting, in
// TestGuardAbortsStuckDaemon).
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
	// An exited, unreaped child: state Z, and no thread left.
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
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid)); err != nil || !strings.Contains(string(b), ") Z ") {
		t.Fatalf("the exited, unreaped child's state: %q, %v; want Z", b, err)
	}
	if zombie(cmd.Process.Pid) {
		t.Fatal("an exited, unreaped child reads as stuck exiting")
	}
}

// TestStatExiting: no process reads as stuck in its exit but one that
// is (the stat lines are procstat's TestExiting).
func TestStatExiting(t *testing.T) {
	if exiting(os.Getpid()) {
		t.Error("this test's own process reads as exiting")
	}
}
