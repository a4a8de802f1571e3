package mount

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// A stop while files are open. A signal (SIGTERM, systemd's stop) asks
// the daemon to unmount; while a client holds a file the kernel answers
// EBUSY, and after a moment of retries the daemon detaches the mount
// (umount -l): the mount point is the plain directory again and the
// held files keep working through the daemon until they close, when it
// saves its checkpoint and exits. It also ends such a mount before
// then: at a second signal, or when a new `kvfs mount` of the store asks
// it to let go (letGo) rather than wait for files that may stay open
// for hours (an inference server's mappings). Ending it aborts the FUSE
// connection: the held files fail (ENOTCONN), as after a daemon's
// crash, and the store is the new mount's at once. Passthrough handles
// read and write their stored files with no daemon, as after a crash
// too: the daemon leaves its guard running, which caps what such
// writers add to objects still marked, and the next start, seeing it,
// reclaims every object a writer held (Mount.distrustIfHeld).

// letGoVersion marks a request to let go of a detached mount: a version
// of its own, which a daemon that knows none refuses as "not a
// handover", never taking it for a handover.
const letGoVersion = 2

// detachLazily detaches the busy mount, or finds it detached already by
// someone else's umount -l, remembering its FUSE connection so that
// EndDetached can end it.
func (m *Mount) detachLazily(busy error) error {
	conn := m.conn
	if e, ours := m.ownEntry(); ours {
		if c, ok := connectionOf(e); ok {
			conn = c
		}
		if err := detach(m.Mountpoint); err != nil {
			return err
		}
		m.log.Warn("unmount busy: detached the mount (umount -l); its open files keep working until they close, "+
			"a second signal or a new `kvfs mount` of the store ends them", zap.String("busy", busy.Error()), zap.Duration("stop_linger", m.StopLinger))
	} else if conn != "" {
		// Someone else's umount -l, with files still open on it: the
		// daemon serves them until they close, as after its own detach.
		m.log.Warn("the mount was detached already (umount -l), and files are still open on it: they keep working until they close, "+
			"a second signal or a new `kvfs mount` of the store ends them", zap.Duration("stop_linger", m.StopLinger))
	} else {
		return busy
	}
	if conn != "" {
		m.detachedConn.Store(&conn)
	}
	if m.StopLinger > 0 {
		time.AfterFunc(m.StopLinger, func() {
			if !m.ended.Load() && !m.served.Load() { // not closed meanwhile
				m.log.Info("--stop-linger passed with files still open on the detached mount")
				if err := m.EndDetached(); err != nil {
					m.log.Warn("could not end the detached mount", zap.Error(err))
				}
			}
		})
	}
	return nil
}

// Detached says whether a stop detached the mount while files were open
// (see detachLazily) and the daemon still serves them.
func (m *Mount) Detached() bool { return m.detachedConn.Load() != nil }

// EndDetached ends a detached mount's service of its open files (see
// above): the daemon's requests stop, and Wait returns.
func (m *Mount) EndDetached() error {
	conn := m.detachedConn.Load()
	if conn == nil {
		return errors.New("the mount is not detached")
	}
	m.ended.Store(true)
	err := abortDetached(*conn)
	if err != nil {
		m.ended.Store(false)
		return fmt.Errorf("ending the detached mount's FUSE connection %s: %w", *conn, err)
	}
	m.log.Info("ended the detached mount: requests on the files still open on it fail from now on (passthrough handles read and write their stored files on until they close)", zap.String("connection", *conn))
	return nil
}

// abortDetached aborts FUSE connection conn through fusectl: where it
// is mounted, there; else in a mount namespace of one thread's own, so
// nothing on the system changes (fusectl is a mount).
func abortDetached(conn string) error {
	if _, err := os.Stat(filepath.Join(fusectl, conn)); err == nil {
		return writeAbort(fusectl, conn)
	}
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, in a namespace of its own, ends
		// with this goroutine instead of going back to the runtime.
		runtime.LockOSThread()
		done <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("unshare: %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("making the namespace private: %w", err)
			}
			dir, err := os.MkdirTemp("", "kvfs-fusectl-")
			if err != nil {
				return err
			}
			if err := unix.Mount("fusectl", dir, "fusectl", 0, ""); err != nil {
				os.Remove(dir)
				return fmt.Errorf("mounting fusectl: %w", err)
			}
			// The abort file is opened, and the mount and its directory
			// go, before the abort: the abort ends this process soon
			// after (the stop's checkpoint, then exit), which could come
			// before a cleanup deferred past it (an empty directory was
			// left now and then). The open file keeps fusectl alive.
			f, err := os.OpenFile(abortFile(dir, conn), os.O_WRONLY, 0)
			unix.Unmount(dir, unix.MNT_DETACH)
			os.Remove(dir)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write([]byte("1"))
			return err
		}()
	}()
	return <-done
}

// letGo answers a request to let go of the mount: granted only to a
// detached mount, which then ends, and only to root or the daemon's own
// user (trusted), as a handover is.
func (m *Mount) letGo(conn *net.UnixConn, log *zap.Logger, trusted bool) {
	if !trusted {
		log.Warn("refused to end the detached mount: asked by another user")
		writeJSON(conn, handoverOffer{Version: letGoVersion, Error: "asked by another user"}, nil)
		return
	}
	if !m.Detached() {
		writeJSON(conn, handoverOffer{Version: letGoVersion, Error: "the daemon serves a mount: unmount it first"}, nil)
		return
	}
	log.Info("a new mount of the store asks this daemon to end its detached mount")
	// Answered first: once the mount ends, this process writes its
	// checkpoint and exits, which could come before an answer written
	// after (the asker then took the closed connection for a no, and
	// failed; CI met it once). The asker waits for the lock either way.
	writeJSON(conn, handoverOffer{Version: letGoVersion, PID: os.Getpid()}, nil)
	if err := m.EndDetached(); err != nil {
		log.Warn("could not end the detached mount; the new mount waits for it to close its files", zap.Error(err))
	}
}

// askToLetGo asks the daemon holding store, which mounts it nowhere, to
// end the mount a stop detached while files were open; it reports
// whether the daemon agreed. A daemon starting (not listening yet), or
// one that knows no such request, says no, and the start waits for it.
func askToLetGo(store string, log *zap.Logger) bool {
	path := socketPath(store)
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return false
	}
	defer conn.Close()
	if _, ok := trustedPeer(conn); !ok {
		return false
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := writeJSON(conn, handoverRequest{Version: letGoVersion, PID: os.Getpid(), LetGo: true}, nil); err != nil {
		return false
	}
	var answer handoverOffer
	if err := readJSON(conn, &answer); err != nil {
		return false
	}
	if answer.Error != "" {
		log.Debug("the store's daemon did not let go", zap.String("why", answer.Error))
		return false
	}
	return true
}
