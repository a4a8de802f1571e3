package fusefs

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSameProcess: threads of one process are the same process, either
// way round; a thread of another process, or one that is gone, is not;
// an unknown caller (0) counts as the same.
func TestSameProcess(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	me := uint32(unix.Gettid())
	other, stop := make(chan uint32), make(chan struct{})
	defer close(stop)
	go func() {
		runtime.LockOSThread()
		other <- uint32(unix.Gettid())
		<-stop
	}()
	sibling := <-other
	parent, gone := uint32(os.Getppid()), uint32(1<<22+1) // past pid_max
	for _, c := range []struct {
		a, b uint32
		want bool
	}{
		{me, me, true}, {me, sibling, true}, {sibling, me, true},
		{uint32(os.Getpid()), sibling, true}, {sibling, uint32(os.Getpid()), true},
		{me, parent, false}, {parent, me, false},
		{me, gone, false}, {gone, me, false},
		{0, parent, true}, {parent, 0, true},
	} {
		if got := sameProcess(c.a, c.b); got != c.want {
			t.Errorf("sameProcess(%d, %d) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
