package tests

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fuseSuperMagic is statfs's f_type of a FUSE mount.
const fuseSuperMagic = 0x65735546

// notice is one datagram the daemon sent to $NOTIFY_SOCKET, and what was
// true the moment it arrived.
type notice struct {
	msg      string
	answered bool // statfs of the mount point reached kvfs
	stopping bool // the test had asked the daemon to stop
}

// notifyListener is a service manager's end of $NOTIFY_SOCKET.
type notifyListener struct {
	conn     *net.UnixConn
	env      string
	mp       string
	stopAsk  chan struct{} // closed when the test asks for the stop
	received chan notice
}

func listenNotify(t *testing.T, name, mp string) *notifyListener {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listening on %s: %v", name, err)
	}
	l := &notifyListener{conn: conn, env: "NOTIFY_SOCKET=" + name, mp: mp,
		stopAsk: make(chan struct{}), received: make(chan notice, 16)}
	t.Cleanup(func() { conn.Close() })
	go l.serve()
	return l
}

// serve records each datagram with whether the mount answered statfs
// as kvfs at that moment: READY=1 must not come before it does.
func (l *notifyListener) serve() {
	buf := make([]byte, 4096)
	for {
		n, err := l.conn.Read(buf)
		if err != nil {
			close(l.received)
			return
		}
		var sf unix.Statfs_t
		answered := unix.Statfs(l.mp, &sf) == nil && sf.Type == fuseSuperMagic
		if m, ok := mountAt(l.mp); !ok || m.FSType != "fuse.kvfs" {
			answered = false
		}
		stopping := false
		select {
		case <-l.stopAsk:
			stopping = true
		default:
		}
		l.received <- notice{msg: string(buf[:n]), answered: answered, stopping: stopping}
	}
}

func (l *notifyListener) next(t *testing.T, what string) notice {
	t.Helper()
	select {
	case n, ok := <-l.received:
		if !ok {
			t.Fatalf("notify socket closed while waiting for %s", what)
		}
		return n
	case <-time.After(20 * time.Second):
		t.Fatalf("no %s datagram within 20s", what)
	}
	return notice{}
}

// TestSdNotify: with $NOTIFY_SOCKET set, `kvfs mount` sends READY=1 and
// a STATUS= line once the mount answers, and STOPPING=1 when it is told
// to stop, by SIGTERM (systemd's stop) and by `kvfs unmount`; to a
// socket in the file system and to an abstract one ('@' name).
func TestSdNotify(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, socket string
		stop         func(d *daemon)
	}{
		{"path_socket_sigterm", filepath.Join(dir, "notify.sock"), func(d *daemon) { d.cmd.Process.Signal(syscall.SIGTERM) }},
		{"abstract_socket_unmount", fmt.Sprintf("@kvfs-test-notify-%d", os.Getpid()), func(d *daemon) {
			if res := runKvfs(t, "unmount", d.mp); res.code != 0 {
				t.Errorf("kvfs unmount: exit %d, %q", res.code, res.stderr)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mp := filepath.Join(dir, c.name)
			os.Mkdir(mp, 0o755)
			l := listenNotify(t, c.socket, mp)
			d := startDaemonEnv(t, kvfsBin, []string{l.env}, mp, "--capacity", "16MiB")
			ready := l.next(t, "READY=1")
			if !strings.Contains(ready.msg, "READY=1") || !strings.Contains(ready.msg, "STATUS=serving ") {
				t.Fatalf("first datagram %q, want READY=1 and a STATUS= line", ready.msg)
			}
			if !ready.answered {
				t.Fatalf("READY=1 arrived before %s answered statfs as a kvfs mount", mp)
			}
			putFile(t, filepath.Join(mp, "obj"), objectBytes("obj", 100))
			close(l.stopAsk)
			c.stop(d)
			stop := l.next(t, "STOPPING=1")
			if !strings.Contains(stop.msg, "STOPPING=1") || !stop.stopping {
				t.Fatalf("after READY: %q (stop asked: %v), want STOPPING=1 after the stop", stop.msg, stop.stopping)
			}
			d.waitExit()
		})
	}
	t.Run("unreachable_socket", func(t *testing.T) {
		mp := filepath.Join(dir, "unreachable")
		os.Mkdir(mp, 0o755)
		env := []string{"NOTIFY_SOCKET=" + filepath.Join(dir, "nobody-listens.sock")}
		d := startDaemonEnv(t, kvfsBin, env, mp, "--capacity", "16MiB")
		putFile(t, filepath.Join(mp, "obj"), objectBytes("obj", 100))
		d.stop()
		if !strings.Contains(d.out.String(), "sd_notify READY") {
			t.Errorf("no warning about the unreachable NOTIFY_SOCKET in the daemon's log:\n%s", d.out)
		}
	})
}
