package main

import (
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/kvfs/kvfs/mount"
	"go.uber.org/zap"
)

// sdNotify sends state to the service manager the way sd_notify(3) does:
// one datagram to the unix socket named by $NOTIFY_SOCKET, which starts
// with '@' for an abstract socket (Go's net package maps that to the
// leading NUL itself). Without $NOTIFY_SOCKET it does nothing. Written
// by hand rather than with go-systemd: it is a dozen lines, and that
// module is not among those this build may use.
func sdNotify(state string) error {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("NOTIFY_SOCKET %s: %w", name, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("NOTIFY_SOCKET %s: %w", name, err)
	}
	return nil
}

// lifecycle tells whoever started the daemon when it serves and when it
// stops: systemd through sd_notify, and a `mount -t fuse.kvfs` parent
// waiting for the detached daemon (see helper.go).
type lifecycle struct {
	log      *zap.Logger
	stopOnce sync.Once
}

// ready is called once the mount answers: a daemon detached by the
// mount helper applies its per-mount flags and tells its parent; then it
// sends READY=1 with a STATUS= line. A service manager that cannot be
// told is logged, not fatal: the mount serves either way.
func (l *lifecycle) ready(m *mount.Mount) error {
	if helperReady != nil {
		if err := helperReady(m.Mountpoint); err != nil {
			return err
		}
	}
	status := fmt.Sprintf("serving %s on %s, capacity %d bytes, %d objects", m.Store, m.Mountpoint, m.Capacity, m.Loaded.Objects)
	if err := sdNotify("READY=1\nSTATUS=" + status); err != nil {
		l.log.Warn("sd_notify READY", zap.Error(err))
	}
	return nil
}

// stopping sends STOPPING=1 once, when the daemon starts unmounting
// (on a signal) or finds itself unmounted.
func (l *lifecycle) stopping() {
	l.stopOnce.Do(func() {
		if err := sdNotify("STOPPING=1\nSTATUS=unmounting"); err != nil {
			l.log.Warn("sd_notify STOPPING", zap.Error(err))
		}
	})
}
