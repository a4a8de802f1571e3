package fusefs

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// TestAccessBySupplementaryGroup: access(2) for a caller who is neither
// the file's owner nor of its primary group, but has the file's group
// among its supplementary groups, is decided by the group's bits (read
// from the caller's /proc status), not by the others' bits.
func TestAccessBySupplementaryGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a child process with supplementary groups of the test's choosing")
	}
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{4242, 4343}}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := uint32(cmd.Process.Pid)
	if !inGroup(pid, 4343) || inGroup(pid, 4444) {
		t.Fatalf("inGroup of a process of groups 4242 and 4343: 4343 %v, 4444 %v", inGroup(pid, 4343), inGroup(pid, 4444))
	}
	caller := &fuse.Caller{Owner: fuse.Owner{Uid: 65534, Gid: 65534}, Pid: pid}
	const read, write = 4, 2
	for _, c := range []struct {
		gid, mode, mask uint32
		want            bool
	}{
		{4343, 0o640, read, true},   // the group may read
		{4343, 0o604, read, false},  // the group may not, though others may
		{4343, 0o640, write, false}, // the group may read only
		{4444, 0o604, read, true},   // not of the group: others' bits
		{4444, 0o640, read, false},
	} {
		if got := hasAccess(caller, 0, c.gid, c.mode, c.mask); got != c.want {
			t.Errorf("group %d, mode %o, mask %d: access %v, want %v", c.gid, c.mode, c.mask, got, c.want)
		}
	}
}
