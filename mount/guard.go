package mount

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/internal/mountinfo"
	"go.uber.org/zap"
)

// A daemon SIGKILLed while one of its threads is inside a kernel
// notification (FUSE_NOTIFY_INVAL_ENTRY waits for the directory's lock)
// cannot finish exiting when a client holds that lock while it waits for
// a request the dead daemon will never answer: the thread sleeps
// uninterruptibly, the process stays a zombie holding /dev/fuse open, and
// the mount hangs every caller. Only an abort of the FUSE connection,
// from outside the process, frees both. The guard is that outside: a
// small process started beside the daemon that aborts the daemon's
// connection when it sees the daemon stuck that way.

// GuardCommand is the hidden kvfs command that runs RunGuard.
const GuardCommand = "__guard"

// guardPoll is how often the guard looks for a daemon stuck exiting.
const guardPoll = 200 * time.Millisecond

// Guard is the daemon's end of its guard.
type Guard struct {
	w   *os.File
	cmd *exec.Cmd
}

// StartGuard starts bin (the kvfs binary) as the guard of m. A daemon
// without a guard still works; a kill -9 at the wrong moment then needs
// `kvfs unmount` (or the next `kvfs mount` of the store) to free it.
func (m *Mount) StartGuard(bin string) (*Guard, error) {
	e, ok := mountinfo.At(m.Mountpoint)
	if !ok {
		return nil, fmt.Errorf("%s is not mounted", m.Mountpoint)
	}
	conn, ok := connectionOf(e)
	if !ok {
		return nil, fmt.Errorf("no FUSE connection for %s (device %q)", m.Mountpoint, e.Dev)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(bin, GuardCommand, strconv.Itoa(os.Getpid()), conn, m.Mountpoint)
	cmd.ExtraFiles = []*os.File{r}
	// Its own process group: a terminal's Ctrl-C is for the daemon.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	return &Guard{w: w, cmd: cmd}, nil
}

// Stop tells the guard the daemon stops, and waits for it.
func (g *Guard) Stop() {
	g.w.Close()
	g.cmd.Wait()
}

// RunGuard is the guard of daemon pid, whose mount at mp is FUSE
// connection conn (its name in fusectl). It returns when quit closes: the
// daemon stopped, cleanly or not (a daemon that exits entirely closes
// /dev/fuse, and the kernel ends the connection itself). If the daemon's
// leader thread exits while another of its threads cannot, it aborts the
// connection first, which lets that thread, and so the daemon, finish.
func RunGuard(pid int, conn, mp string, quit *os.File, log *zap.Logger) {
	said := make(chan struct{})
	go func() {
		b := make([]byte, 1)
		quit.Read(b)
		close(said)
	}()
	tick := time.NewTicker(guardPoll)
	defer tick.Stop()
	for {
		select {
		case <-said:
			return
		case <-tick.C:
			if zombie(pid) {
				log.Warn("the daemon was killed but is stuck exiting; aborting its FUSE connection", zap.Int("pid", pid), zap.String("mountpoint", mp))
				abortGuarded(conn, mp, log)
				<-said
				return
			}
		}
	}
}

// abortGuarded aborts connection conn, through fusectl, or by a forced
// unmount of mp if mp is still that connection's mount.
func abortGuarded(conn, mp string, log *zap.Logger) {
	abort := filepath.Join(fusectl, conn, "abort")
	err := os.WriteFile(abort, []byte("1"), 0)
	if errors.Is(err, os.ErrNotExist) {
		if e, ok := mountinfo.At(mp); ok {
			if c, _ := connectionOf(e); c == conn {
				_, err = abortConnection(mp, e)
			}
		} else {
			err = nil // unmounted: nothing to abort
		}
	}
	if err != nil {
		log.Warn("aborting the dead daemon's FUSE connection", zap.String("mountpoint", mp), zap.Error(err))
	}
}
