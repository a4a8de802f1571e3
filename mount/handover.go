package mount

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/fusefs"
	"github.com/kvfs/kvfs/internal/failpoint"
	"github.com/kvfs/kvfs/internal/mountinfo"
	"github.com/kvfs/kvfs/internal/procstat"
	"github.com/kvfs/kvfs/internal/usageerr"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// A handover passes a live mount from the daemon serving it to a new
// one: `kvfs mount` of a store at the mount point a live kvfs serves it
// on takes the mount over instead of refusing (a new binary, other
// flags, a restart). Clients see a pause, never an error: the FUSE
// connection, every node ID, open descriptor and mapping, and the store's
// lock go to the new daemon; nothing is unmounted.
//
// The daemon serving a mount listens on HandoverSocket in its store.
// A successor connects and asks; the old daemon
//
//  1. closes its file system's gate (every new request waits there) and
//     waits until each request it let in is answered (fusefs.Quiesce);
//  2. freezes its core: background work stopped, a checkpoint written
//     that keeps every ID (core.Freeze);
//  3. sends what the kernel's view depends on (fusefs.Export: open
//     handles by number, passthrough backing IDs, placeholders; the
//     writers' state) with the descriptors: /dev/fuse, the store's
//     lock, each handle's stored file (SCM_RIGHTS);
//  4. waits for the successor's word. "ready": it exits at once,
//     unmounting nothing and writing nothing more; the requests its gate
//     holds die unanswered with it. Anything else (an error, the
//     successor gone): it thaws and serves on as before.
//
// The successor loads the checkpoint with Config.Held (never evicting
// what a handle holds, whatever its capacity), checks that it is the
// one sent, makes the handles again (fusefs.Import), builds its server
// on the passed descriptor (fuse.AdoptServer), says "ready", waits for
// the old process to be gone, has the kernel send again every request
// the old one read and never answered (fuse.Server.ResendNotify), and
// serves.
//
// A crash of either at any step leaves a serving mount (the old daemon
// serves on if the successor dies before "ready") or what a crash leaves
// today (the successor dies after it: the connection ends with its last
// descriptor, and the next `kvfs mount` recovers the store). The store
// is locked throughout by one daemon: its lock's descriptor is passed,
// never released.

// HandoverSocket is the Unix socket, in the store directory, on which the
// daemon serving the store takes handover requests.
const HandoverSocket = blob.HandoverName

const (
	handoverVersion = 1
	// quiesceLimit bounds how long the old daemon waits for the requests
	// it let in; one still running then (an admission waiting for room,
	// a remote fetch) fails the handover, and the old daemon serves on.
	quiesceLimit = 10 * time.Second
	// readyLimit bounds how long it waits for its successor to load.
	readyLimit = 10 * time.Minute
	// pauseLimit bounds how long the old daemon, its gate closed, waits
	// for the word of a successor that loaded before the pause (two
	// phases): what is left it does in milliseconds. One stopped or
	// stuck (Ctrl-Z of a `kvfs mount` in the foreground, a debugger)
	// held every client of the mount for as long (an outside tester:
	// 20 s of a 20 s SIGSTOP); after this the old daemon kills it and
	// serves on. A successor that loads in the pause (one phase) has
	// readyLimit.
	pauseLimit = 10 * time.Second
	// goneLimit bounds how long the successor waits for the old daemon
	// to exit after "ready" before it kills it.
	goneLimit = 10 * time.Second
	// closedLimit bounds how long the successor, finding the connection
	// closed as it says "ready", waits for the old daemon to be exiting
	// (killed: it serves nothing) before it takes it to serve on.
	closedLimit = time.Second
	// fdsPerMessage: SCM_RIGHTS carries at most 253 descriptors a
	// message.
	fdsPerMessage = 250
	// chunk is the most JSON one message carries.
	chunk = 32 << 10
	// maxRounds bounds the rounds of changes a successor applies before
	// the pause; a round of at most roundEnough changed objects is the
	// last (the pause carries what changes during it).
	maxRounds   = 4
	roundEnough = 500
)

// handoverRequest is the successor's first message.
type handoverRequest struct {
	Version int `json:"version"`
	PID     int `json:"pid"`
	// Prepare: load a checkpoint first, while the old daemon serves
	// (two phases). An old daemon that does not know it offers the
	// mount at once, and the successor loads in the pause.
	Prepare bool `json:"prepare,omitempty"`
	// LetGo (with letGoVersion): not a handover but a new mount asking a
	// daemon whose mount a stop detached to end it (detached.go).
	LetGo bool `json:"let_go,omitempty"`
	// RequestTimeout is the successor's --request-timeout, which the
	// connection fixed at its INIT: one that differs is refused.
	RequestTimeout time.Duration `json:"request_timeout,omitempty"`
	// OpenTruncates: the successor cuts an object whose OPEN carries
	// O_TRUNC. One that does not say so (a kvfs from before
	// 2026-12-05) would open it whole, so it is refused a connection
	// whose INIT gave ATOMIC_O_TRUNC (see keepsOpenTruncation).
	OpenTruncates bool `json:"open_truncates,omitempty"`
	// Store is the store the successor mounts, whose socket it asked: a
	// daemon of another store refuses (its socket moved into this store:
	// handing its mount over served that mount from this store, beside
	// this store's own daemon; an outside tester).
	Store string `json:"store,omitempty"`
	// Mapped: the successor keeps the objects kept for mappings
	// (core.AdoptMapped), whose stored files the offer passes after the
	// handles'. To one that does not say so (a kvfs from before
	// 2026-12-07) they are not passed: their pins go at the freeze.
	Mapped bool `json:"mapped,omitempty"`
}

// handoverOffer is the old daemon's answer; the descriptors follow it:
// /dev/fuse, the store's lock, then each handle's stored file in the
// order of FS.Handles, then each mapped object's in the order of
// FS.Mapped.
type handoverOffer struct {
	Version int    `json:"version"`
	Error   string `json:"error,omitempty"`
	// Usage: Error refuses the successor's own flags (exit 2), as its
	// own checks before the handover do.
	Usage      bool            `json:"usage,omitempty"`
	PID        int             `json:"pid"`
	Mountpoint string          `json:"mountpoint"`
	Init       fuse.InitState  `json:"init"`
	Frozen     core.Frozen     `json:"frozen"`
	FS         fusefs.State    `json:"fs"`
	Stalled    time.Duration   `json:"stalled"`               // from the gate's closing to the offer
	GateClosed int64           `json:"gate_closed,omitempty"` // when, unix nanoseconds
	Writers    []blob.ID       `json:"writers,omitempty"`
	Settings   json.RawMessage `json:"settings,omitempty"`
	// Capacity is the old daemon's: a successor given no --capacity
	// warns where its default differs.
	Capacity int64 `json:"capacity,omitempty"`
	// Prepared: not the mount yet but phase one, a handover checkpoint
	// for the successor to load while this daemon serves on; one
	// descriptor follows, a memfd of Checkpoint bytes.
	Prepared   bool `json:"prepared,omitempty"`
	Checkpoint int  `json:"checkpoint,omitempty"`
	// Round: not the mount yet but what changed since the checkpoint or
	// the last round, for the successor to apply while this daemon
	// serves on (no descriptor follows).
	Round *blob.Delta `json:"round,omitempty"`
}

// handoverReply is the successor's word.
type handoverReply struct {
	Ready bool `json:"ready"`
	// Loaded: the successor has loaded the prepared checkpoint; the old
	// daemon may stop its requests and send the mount.
	Loaded bool   `json:"loaded,omitempty"`
	Error  string `json:"error,omitempty"`
}

// socketPath is the handover socket of the store dir.
func socketPath(store string) string { return filepath.Join(store, HandoverSocket) }

// listenHandover takes handover requests from now on. A store whose
// path is too long for a socket gets none: the daemon serves, and a
// restart is an unmount.
func (m *Mount) listenHandover() {
	path := socketPath(m.Store)
	os.Remove(path)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		m.log.Warn("no handover socket: a restart will unmount", zap.String("path", path), zap.Error(err))
		return
	}
	l.SetUnlinkOnClose(false)
	// The socket hands out /dev/fuse and the store: for root and the
	// daemon's own user only. The mode keeps others from connecting;
	// the peer's credentials, checked on each connection, close the
	// moment between the bind and the chmod (the daemon's umask is 0).
	if err := os.Chmod(path, 0o600); err != nil {
		m.log.Warn("no handover socket: a restart will unmount", zap.String("path", path), zap.Error(err))
		l.Close()
		os.Remove(path)
		return
	}
	m.handover = l
	go func() {
		for {
			conn, err := l.AcceptUnix()
			if err != nil {
				return
			}
			m.handOver(conn)
			conn.Close()
		}
	}()
}

// trustedPeer reports the user at the other end of a handover
// connection and whether it may hand the mount over or take it: root or
// this process's own user (a daemon run by a user through fusermount3
// and its successor).
func trustedPeer(conn *net.UnixConn) (uint32, bool) {
	cred, ok := peerCred(conn)
	if !ok {
		return 0, false
	}
	return cred.Uid, cred.Uid == 0 || int(cred.Uid) == os.Geteuid()
}

// peerCred is the credentials of the process at the other end of a
// handover connection.
func peerCred(conn *net.UnixConn) (*unix.Ucred, bool) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		return nil, false
	}
	return cred, true
}

// handOver serves one successor's request; it returns only if the
// handover failed, and the mount serves on.
func (m *Mount) handOver(conn *net.UnixConn) {
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	var req handoverRequest
	err := readJSON(conn, &req)
	if errors.Is(err, io.EOF) {
		return // HandoverPossible, or a successor that changed its mind
	}
	letGo := err == nil && req.Version == letGoVersion && req.LetGo
	if err != nil || (req.Version != handoverVersion && !letGo) {
		m.log.Warn("a handover request that is not one", zap.Int("version", req.Version), zap.Error(err))
		return
	}
	log := m.log.With(zap.Int("successor", req.PID))
	uid, trusted := trustedPeer(conn)
	if letGo {
		m.letGo(conn, log.With(zap.Uint32("uid", uid)), trusted)
		return
	}
	if !trusted {
		// Refused after its request is read: a socket closed with a
		// message unread resets, and the refusal would be lost.
		refuseHandover(conn, log.With(zap.Uint32("uid", uid)), "handover refused: asked by another user",
			fmt.Errorf("handover asked by uid %d: %w (only root and the daemon's user, uid %d, may take the mount)", uid, unix.EPERM, os.Geteuid()))
		return
	}
	if err := errors.Join(m.keepsStore(req.Store), m.keepsRequestTimeout(req.RequestTimeout), keepsOpenTruncation(m.server.InitState().Flags, req.OpenTruncates)); err != nil {
		refuseHandover(conn, log, "handover refused; serving on", err)
		return
	}
	log.Info("handing the mount over")
	failpoint.Hit("handover-asked")
	if m.Loading() {
		refuseHandover(conn, log, "handover refused; serving on", errStillLoading)
		return
	}
	if req.Prepare && !m.prepare(conn, log) {
		return
	}
	start, err := m.quiesce()
	if err == nil {
		err = m.loadHeld() // checked with the gate closed: no lookup adds one now
	}
	if err != nil {
		m.fs.Resume()
		refuseHandover(conn, log, "handover refused; serving on", err)
		return
	}
	quiesced := time.Since(start)
	failpoint.Hit("handover-quiesced")
	fr, err := m.core.Freeze(req.Mapped)
	frozen := time.Since(start)
	failpoint.Hit("handover-frozen")
	if err != nil {
		m.core.Thaw()
		m.fs.Resume()
		refuseHandover(conn, log, "handover refused: no checkpoint; serving on", err)
		return
	}
	// The guard stands down before anything is passed: should this
	// process die from here on, a successor may hold the connection and
	// the handed-over writers' files, which a guard that saw its
	// daemon die would empty (capWriters) or abort.
	m.guard.Stop()
	m.guard = nil
	guarded := time.Since(start)
	limit := readyLimit
	if req.Prepare {
		limit = pauseLimit
	}
	ok := m.offer(conn, fr, start, limit, log)
	if ok {
		failpoint.Hit("handover-ready")
		// From here on the successor serves the mount: this process
		// writes nothing more, unmounts nothing, and is gone at once.
		var changed int
		if fr.Delta != nil {
			changed = len(fr.Delta.Objects) + len(fr.Delta.Gone)
		}
		log.Info("mount handed over; exiting", zap.Duration("quiesced", quiesced), zap.Duration("frozen", frozen),
			zap.Duration("guard_stopped", guarded), zap.Int("changed_objects", changed), zap.Duration("stalled", time.Since(start)))
		m.log.Sync()
		os.Exit(0)
	}
	m.core.Thaw()
	m.fs.Resume()
	m.startOwnGuard()
	log.Warn("handover failed; serving on", zap.Duration("stalled", time.Since(start)))
}

// prepare is a handover's first phase, while this daemon serves on: it
// passes a checkpoint for the successor to load and waits until it has.
// Then only what changed since goes in the pause (core.Freeze).
func (m *Mount) prepare(conn *net.UnixConn, log *zap.Logger) bool {
	start := time.Now()
	data, err := m.core.PrepareHandover()
	if err != nil {
		refuseHandover(conn, log, "handover refused: no checkpoint; serving on", err)
		return false
	}
	f, err := memfdOf(data)
	if err != nil {
		m.core.CancelHandover()
		refuseHandover(conn, log, "handover refused; serving on", err)
		return false
	}
	defer f.Close()
	r, err := exchange(conn, handoverOffer{Version: handoverVersion, PID: os.Getpid(), Prepared: true, Checkpoint: len(data)}, []int{int(f.Fd())}, "handover-prepared")
	if err != nil || !r.Loaded {
		m.core.CancelHandover()
		log.Warn("the successor did not load the checkpoint; serving on", zap.String("its_error", r.Error), zap.Error(err))
		return false
	}
	log.Info("the successor loaded the checkpoint", zap.Int("bytes", len(data)), zap.Duration("took", time.Since(start)))
	// Rounds: what changed during the load, then during the last round,
	// until it is little (the pause carries the rest).
	for round := 1; round <= maxRounds; round++ {
		start := time.Now()
		d, err := m.core.HandoverRound()
		computed := time.Since(start)
		if err == nil {
			r, err = exchange(conn, handoverOffer{Version: handoverVersion, Prepared: true, Round: d}, nil, "handover-round")
		}
		if err != nil || !r.Loaded {
			m.core.CancelHandover()
			log.Warn("the successor did not apply a round; serving on", zap.String("its_error", r.Error), zap.Error(err))
			return false
		}
		changed := len(d.Objects) + len(d.Gone)
		log.Info("the successor applied a round", zap.Int("round", round), zap.Int("changed_objects", changed),
			zap.Duration("computed", computed), zap.Duration("took", time.Since(start)))
		if changed <= roundEnough {
			break
		}
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	return true
}

// exchange sends o with fds to the successor and reads its reply; step
// is the failpoint between the two.
func exchange(conn *net.UnixConn, o handoverOffer, fds []int, step string) (handoverReply, error) {
	var r handoverReply
	conn.SetDeadline(time.Now().Add(readyLimit))
	if err := writeJSON(conn, o, fds); err != nil {
		return r, err
	}
	failpoint.Hit(step)
	return r, readJSON(conn, &r)
}

// memfdOf is a memfd holding data.
func memfdOf(data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("kvfs-handover", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "kvfs-handover")
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// startOwnGuard gives the serving daemon a guard of its own: a successor
// once it serves, an old daemon whose handover failed.
func (m *Mount) startOwnGuard() {
	if m.Guard == "" {
		return
	}
	g, err := startGuard(m.Guard, m.Options)
	if err != nil {
		m.log.Warn("no guard for the daemon", zap.Error(err))
		return
	}
	if err := g.mounted(m.Mountpoint); err != nil {
		m.log.Warn("the guard cannot watch the mount", zap.Error(err))
	}
	m.guard = g
}

// offer sends the frozen mount and waits up to limit for the
// successor's word. A successor that gave none (it may hold the passed
// connection and lock, and say "ready" later) is killed, and gone,
// before offer returns false: two daemons never serve one mount.
func (m *Mount) offer(conn *net.UnixConn, fr core.Frozen, start time.Time, limit time.Duration, log *zap.Logger) bool {
	st, files := m.fs.Export()
	dev, err := m.server.DupFD()
	if err != nil {
		log.Warn("no descriptor of the connection to pass", zap.Error(err))
		return false
	}
	defer unix.Close(dev)
	fds := []int{dev, int(m.core.StoreLock().Fd())}
	var writers []blob.ID
	for _, h := range st.Handles {
		if h.Writing {
			writers = append(writers, h.ID)
		}
	}
	for _, f := range files {
		fds = append(fds, int(f.Fd()))
	}
	o := handoverOffer{Version: handoverVersion, PID: os.Getpid(), Mountpoint: m.Mountpoint,
		Init: m.server.InitState(), Frozen: fr, FS: st, Writers: writers, Stalled: time.Since(start), GateClosed: start.UnixNano(), Capacity: m.core.Capacity()}
	pid := peerPID(conn)
	conn.SetDeadline(time.Now().Add(limit))
	if err := writeJSON(conn, o, fds); err != nil {
		log.Warn("sending the mount", zap.Error(err))
		m.endSuccessor(pid, log)
		return false
	}
	failpoint.Hit("handover-offered")
	var r handoverReply
	stopWatching := watchStalled(conn, pid, pauseLimit)
	err = readJSON(conn, &r)
	stopWatching()
	if err != nil {
		log.Warn("the successor gave no word of the mount; ending it", zap.Duration("limit", limit), zap.Error(err))
		m.endSuccessor(pid, log)
		return false
	}
	if !r.Ready {
		// It said so, and closed what was passed.
		log.Warn("the successor did not take the mount", zap.String("its_error", r.Error))
		return false
	}
	return true
}

// endSuccessor kills the successor (pid, 0: unknown) that was offered
// the mount and did not answer, and waits until it is gone, with the
// descriptors it was passed; a service manager that it told it was the
// main process is told this one is again.
func (m *Mount) endSuccessor(pid int, log *zap.Logger) {
	if pid > 0 {
		// At once: the wait for its word was the limit (it waited a
		// second more, an outside tester's clients 11 s of a 10 s pause).
		exited(pid, 0, func(pfd int) {
			log.Warn("killing the successor that did not answer", zap.Int("pid", pid))
			unix.PidfdSendSignal(pfd, unix.SIGKILL, nil, 0)
		})
	}
	if m.ServingOn != nil {
		m.ServingOn()
	}
}

// watchStalled ends conn's wait (its read deadline, now) once process
// pid has made no progress for limit: stopped (SIGSTOP, Ctrl-Z, a
// debugger's trap) or stuck (a deadlock, a hung disk), it used less
// than a hundredth of a core and moved less than stallIO bytes through
// its reads and writes meanwhile. A successor that loads in the pause
// has minutes, but none for not loading: a stuck one held every client
// for the 10 minutes of readyLimit. The returned func ends the watch.
func watchStalled(conn *net.UnixConn, pid int, limit time.Duration) (stop func()) {
	done := make(chan struct{})
	if pid <= 0 {
		return func() {}
	}
	go func() {
		tick := time.NewTicker(limit / 50)
		defer tick.Stop()
		base, ok := progressOf(pid)
		since := time.Now()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			now, ok2 := progressOf(pid)
			if !ok || !ok2 || now.cpu-base.cpu >= limit/100 || now.io-base.io >= stallIO {
				base, ok, since = now, ok2, time.Now()
				continue
			}
			if time.Since(since) >= limit {
				conn.SetReadDeadline(time.Now())
				return
			}
		}
	}()
	return func() { close(done) }
}

// stallIO is the I/O (bytes read and written, by any syscall) that
// counts as progress in watchStalled's window.
const stallIO = 1 << 20

// progress is what a process has done: CPU time, and bytes through its
// reads and writes.
type progress struct {
	cpu time.Duration
	io  int64
}

// progressOf reads process pid's progress from /proc (ok false: it
// cannot be read).
func progressOf(pid int) (p progress, ok bool) {
	line, err := procstat.Read(pid)
	if err != nil {
		return p, false
	}
	if p.cpu, ok = procstat.CPU(line); !ok {
		return p, false
	}
	io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return p, false
	}
	for _, line := range strings.Split(string(io), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "rchar" || k == "wchar" {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			p.io += n
		}
	}
	return p, true
}

// peerPID is the process at the other end of a handover connection (0:
// unknown).
func peerPID(conn *net.UnixConn) int {
	if cred, ok := peerCred(conn); ok {
		return int(cred.Pid)
	}
	return 0
}

// quiesce closes the gate (fusefs.FS.Quiesce) at a moment when no
// request waits for room in a full cache: with one waiting it opens the
// gate again at once and tries again a moment later, within
// quiesceLimit. A pause that waited for such a request lasted until its
// room came, up to --wait-limit, while the links held at the gate could
// not end their temp files' grace, which ran out, so the waiting
// admission evicted the temp files (an outside tester: 5 of 8 handovers
// into a full cache paused 2 s, and 11 fs_native stores failed).
// It returns when the gate closed for good: when the pause began.
func (m *Mount) quiesce() (time.Time, error) {
	deadline := time.Now().Add(quiesceLimit)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		closed := time.Now()
		err := m.fs.Quiesce(m.server.Outstanding, time.Until(deadline), m.core.WaitingForRoom)
		if !errors.Is(err, fusefs.ErrWaitingForRoom) {
			return closed, err
		}
		m.fs.Resume()
		if time.Now().Add(wait).After(deadline) {
			return closed, fmt.Errorf("%w, again and again for %v", err, quiesceLimit)
		}
		time.Sleep(wait)
	}
}

// errHandoverCancelled: a signal to the successor (Options.Cancel) ended
// the takeover before it told the old daemon it was ready. Before, the
// takeover went on and the signal then stopped the new daemon: the
// mount was gone, with no daemon left (an outside tester: Ctrl-C of the
// handover's `kvfs mount`, 6 of 6).
var errHandoverCancelled = errors.New("the handover was cancelled by a signal; the old daemon serves on")

// cancelled says whether o's Cancel was closed.
func cancelled(o Options) bool {
	select {
	case <-o.Cancel:
		return true
	default:
		return false
	}
}

// errPredecessorGone: the daemon asked for its mount went away before it
// passed anything; the mount is then as its crash left it.
var errPredecessorGone = errors.New("the old daemon went away")

// takeOver is Start for a mount a live daemon serves: it asks that
// daemon for it on conn. ok is false when the daemon refused before
// anything changed hands (it serves on, and so must the caller's
// error).
func takeOver(o Options, conn *net.UnixConn) (*Mount, error) {
	log := o.Logger
	start := time.Now()
	conn.SetDeadline(time.Now().Add(quiesceLimit + time.Minute))
	// Two phases, unless a remote tier is configured: its journal of
	// pending uploads is the old daemon's until the pause.
	prepare := o.Remote == nil
	store, _ := filepath.Abs(o.Store) // the old daemon's working directory is its own
	if err := writeJSON(conn, handoverRequest{Version: handoverVersion, PID: os.Getpid(), Prepare: prepare, RequestTimeout: o.RequestTimeout, OpenTruncates: true, Store: store, Mapped: true}, nil); err != nil {
		return nil, fmt.Errorf("asking for the mount: %w (%w)", err, errPredecessorGone)
	}
	var offer handoverOffer
	fds, err := readOffer(conn, &offer)
	if err != nil {
		return nil, err
	}
	var pre *Mount
	if offer.Prepared {
		pre, err = preload(o, conn, &offer, fds[0])
		if err != nil {
			return nil, err
		}
		conn.SetDeadline(time.Now().Add(quiesceLimit + time.Minute)) // the load took what it took
		for {
			offer = handoverOffer{}
			if fds, err = readOffer(conn, &offer); err != nil {
				pre.closeParts()
				return nil, err
			}
			if offer.Round == nil {
				break
			}
			if cancelled(o) {
				writeJSON(conn, handoverReply{Error: errHandoverCancelled.Error()}, nil)
				pre.closeParts()
				return nil, errHandoverCancelled
			}
			pre.core.Apply(offer.Round)
			failpoint.Hit("takeover-round")
			if err := writeJSON(conn, handoverReply{Loaded: true}, nil); err != nil {
				pre.closeParts()
				return nil, fmt.Errorf("telling the old daemon: %w (%w)", err, errPredecessorGone)
			}
		}
	}
	offered := time.Now()
	failpoint.Hit("takeover-offered")
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "handed over")
	}
	if cancelled(o) {
		writeJSON(conn, handoverReply{Error: errHandoverCancelled.Error()}, nil)
		closeFiles(files)
		if pre != nil {
			pre.closeParts()
		}
		return nil, errHandoverCancelled
	}
	m, err := adopt(o, &offer, files, pre)
	if err != nil {
		// Not ours: the old daemon serves on.
		writeJSON(conn, handoverReply{Error: err.Error()}, nil)
		closeFiles(files)
		return nil, fmt.Errorf("taking the mount over (the old daemon serves on): %w", err)
	}
	adopted := time.Since(offered)
	failpoint.Hit("takeover-adopted")
	if cancelled(o) {
		// The last moment a signal can still leave the mount with the
		// old daemon: once told "ready", it exits.
		writeJSON(conn, handoverReply{Error: errHandoverCancelled.Error()}, nil)
		m.abandon(files)
		return nil, errHandoverCancelled
	}
	undo := func() {}
	if o.TakingOver != nil {
		undo = o.TakingOver(offer.PID)
	}
	if err := writeJSON(conn, handoverReply{Ready: true}, nil); err != nil && !exited(offer.PID, closedLimit, nil) {
		// It cannot have heard, and serves on: so must we not. (Gone,
		// it left us everything: we serve. A process killed closes its
		// descriptors before it counts as exited: it gets a moment.)
		undo()
		m.abandon(files)
		return nil, fmt.Errorf("telling the old daemon: %w", err)
	}
	failpoint.Hit("takeover-ready")
	m.awaitGone(offer.PID)
	gone := time.Since(offered)
	m.core.ClaimStore()
	if errno := m.server.ResendNotify(); errno != fuse.OK {
		log.Warn("the kernel cannot send again the requests the old daemon held; they wait for the connection's end",
			zap.String("status", errno.String()))
	}
	failpoint.Hit("takeover-resent")
	go m.server.Serve()
	m.fs.Serving()
	// paused: from the old daemon's gate closing to this one serving
	// (both read the same clock), the most any request waited. Not the
	// start's fitting of a smaller capacity after, which requests do
	// not wait for: counted in, a handover from 1 GiB to 4 MiB that
	// evicted 19,000 objects said 0.69 s where no client call took
	// over 44 ms (an outside tester).
	paused := time.Since(time.Unix(0, offer.GateClosed))
	m.start()
	// The start's message counts them (an outside tester: a handover to
	// a smaller capacity said "16 objects restored", then held 8).
	m.Loaded.Evicted += m.core.Fitted()
	m.startOwnGuard()
	m.widenReadahead(maxRead)
	m.TookOver = time.Since(start)
	log.Info("took the mount over", zap.Int("from", offer.PID), zap.Int("handles", len(offer.FS.Handles)),
		zap.Bool("two_phases", pre != nil), zap.Duration("old_stall_before_offer", offer.Stalled),
		zap.Duration("offer_received", offered.Sub(time.Unix(0, offer.GateClosed))),
		zap.Duration("adopted", adopted), zap.Duration("old_gone", gone),
		zap.Duration("paused", paused), zap.Duration("took", m.TookOver))
	if c := m.core.Capacity(); o.Capacity == 0 && offer.Capacity != 0 && c != offer.Capacity {
		// The default is worked out again from the disk's free space:
		// an operator restarting in place with fewer flags saw a 64
		// MiB cache become 71 GB with one info line (an outside tester).
		log.Warn("the capacity changed at this handover: no --capacity was given, and the default is worked out again from the disk's free space; give --capacity to keep the old one",
			zap.Int64("old_capacity", offer.Capacity), zap.Int64("capacity", c))
	}
	m.serving("serving the mount taken over")
	return m, nil
}

// preload is a handover's first phase on the successor's side: it
// builds the mount's parts from the old daemon's checkpoint (in the
// memfd fd) while the old daemon serves on, touching nothing in the
// store, and says so. An error is sent to the old daemon, which serves
// on.
func preload(o Options, conn *net.UnixConn, offer *handoverOffer, fd int) (*Mount, error) {
	data, err := readMemfd(fd, offer.Checkpoint)
	m := &Mount{Options: o, log: o.Logger}
	if err == nil {
		var store *blob.Store
		if store, err = blob.OpenBorrowed(o.Store); err == nil {
			err = m.build(store, func(cfg core.Config) (*core.Core, core.LoadReport, error) { return core.Preload(store, data, cfg) })
		}
	}
	if err != nil {
		writeJSON(conn, handoverReply{Error: err.Error()}, nil)
		return nil, fmt.Errorf("loading the old daemon's checkpoint (it serves on): %w", err)
	}
	failpoint.Hit("takeover-preloaded")
	if err := writeJSON(conn, handoverReply{Loaded: true}, nil); err != nil {
		m.closeParts()
		return nil, fmt.Errorf("telling the old daemon: %w (%w)", err, errPredecessorGone)
	}
	return m, nil
}

// readMemfd reads n bytes from the start of fd (its offset, shared
// with the writer's, is at the end), and closes it.
func readMemfd(fd, n int) ([]byte, error) {
	f := os.NewFile(uintptr(fd), "kvfs-handover")
	defer f.Close()
	data := make([]byte, n)
	if _, err := f.ReadAt(data, 0); err != nil {
		return nil, err
	}
	return data, nil
}

// adopt builds the mount from the old daemon's offer: the store under
// its passed lock, the index (the checkpoint it wrote, or pre, the
// mount preloaded in a first phase, brought up to date), its handles, a
// server on its connection; nothing is served yet.
func adopt(o Options, offer *handoverOffer, files []*os.File, pre *Mount) (*Mount, error) {
	if len(files) < 2 || len(files)-2 != len(offer.FS.Handles)+len(offer.FS.Mapped) {
		if pre != nil {
			pre.closeParts()
		}
		return nil, fmt.Errorf("%d descriptors passed for %d handles and %d mapped objects", len(files), len(offer.FS.Handles), len(offer.FS.Mapped))
	}
	dev, lock, stored := files[0], files[1], files[2:]
	m := pre
	if m == nil {
		var err error
		if m, err = loadHandedOver(o, offer, lock); err != nil {
			return nil, err
		}
	}
	fail := func(err error) (*Mount, error) {
		m.closeParts()
		return nil, err
	}
	if m.Loaded.SnapshotTaken != offer.Frozen.Taken {
		return fail(fmt.Errorf("loaded the checkpoint of %d, the old daemon wrote %d (%s)",
			m.Loaded.SnapshotTaken, offer.Frozen.Taken, m.Loaded.SnapshotUnused))
	}
	if pre != nil {
		if err := m.core.TakeStore(lock); err != nil {
			return fail(err)
		}
		if err := m.core.Join(offer.Frozen); err != nil {
			return fail(err)
		}
	}
	m.core.ExpectWriters(offer.Frozen.Writers)
	if err := m.fs.Import(offer.FS, stored); err != nil {
		return fail(err)
	}
	m.core.EndHandover(offer.Frozen)
	fd, err := unix.Dup(int(dev.Fd()))
	if err != nil {
		return fail(err)
	}
	dev.Close()
	server, err := fuse.AdoptServer(m.fs.Instrument(m.requestTimer()), fd, offer.Mountpoint, offer.Init, m.mountOptions())
	if err != nil {
		unix.Close(fd)
		return fail(err)
	}
	m.server = server
	return m, nil
}

// loadHandedOver loads the checkpoint the old daemon wrote in the pause
// (one phase: an old daemon that knows no other), with the store under
// its passed lock.
func loadHandedOver(o Options, offer *handoverOffer, lock *os.File) (*Mount, error) {
	store, err := blob.OpenLocked(o.Store, lock)
	if err != nil {
		return nil, err
	}
	store.KeepMarkers(offer.Writers)
	watchDirs(store, o.Store, o.Logger)
	m := &Mount{Options: o, log: o.Logger}
	m.held, m.graced = map[blob.ID]bool{}, map[blob.ID]int64{}
	for _, h := range offer.FS.Handles {
		m.held[h.ID] = true
	}
	for _, id := range offer.FS.Mapped {
		m.held[id] = true
	}
	for _, g := range offer.Frozen.Graced {
		m.graced[g.ID] = g.LastClose
	}
	if err := m.load(store); err != nil {
		return nil, err
	}
	return m, nil
}

// awaitGone waits for the old daemon to exit, and kills it if it does
// not: it said it would, and two daemons must never serve one mount.
func (m *Mount) awaitGone(pid int) {
	exited(pid, goneLimit, func(pfd int) {
		m.log.Warn("the old daemon did not exit after the handover; killing it", zap.Int("pid", pid))
		unix.PidfdSendSignal(pfd, unix.SIGKILL, nil, 0)
	})
}

// exited waits up to limit for process pid to exit and says whether it
// did; one still running then is given to late (nil: none), which may
// signal it through its pidfd, and is waited for after.
func exited(pid int, limit time.Duration, late func(pfd int)) bool {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return true // gone already
	}
	defer unix.Close(pfd)
	fds := []unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}
	if n, _ := unix.Poll(fds, int(limit/time.Millisecond)); n > 0 {
		return true
	}
	if late == nil {
		return false
	}
	late(pfd)
	unix.Poll(fds, -1)
	return true
}

// dialHandover connects to the daemon that serves o's store at o's
// mount point, if one does and takes handovers. A live daemon whose
// socket did not come or takes no connection cannot hand the mount
// over: that is the error (see unreachable).
func dialHandover(o Options) (*net.UnixConn, error) {
	e, ok := mountinfo.At(o.Mountpoint)
	store, err := filepath.Abs(o.Store)
	if !ok || err != nil || !ofStore(e, store) {
		return nil, nil
	}
	// A daemon makes its socket just after its mount appears
	// (listenHandover): a successor that comes in between waits for the
	// socket rather than take a live kvfs mount for a foreign one. A
	// socket that is there with no one listening is a dead daemon's.
	path := socketPath(store)
	deadline := time.Now().Add(socketWait)
	for {
		conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
		if err == nil {
			if uid, ok := trustedPeer(conn); !ok {
				// Not a kvfs daemon of root's or this user's: hand it
				// nothing; the start goes on as if none listened.
				if o.Logger != nil {
					o.Logger.Warn("the handover socket is served by another user; not asking it for the mount", zap.String("path", path), zap.Uint32("uid", uid))
				}
				conn.Close()
				return nil, nil
			}
			return conn, nil
		}
		// Refused: a dead daemon's socket, or a live one's between its
		// bind and its listen (the socket is there a moment before it
		// takes connections), which holds the store's lock. Any other
		// error (another user's 0600 socket) is said by the refusal
		// that follows.
		if errors.Is(err, unix.ECONNREFUSED) {
			if _, live := StoreHolder(store); !live {
				return nil, nil
			}
		} else if !errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		if time.Now().After(deadline) {
			return nil, unreachable(o.Mountpoint, store, path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// unreachable refuses a start at a mount point whose live daemon's
// handover socket never came, or takes no connection: no handover can
// be had, and the refusal that followed said only that the mount is
// served, and that a mount of its store (the very command run) takes it
// over (an outside tester).
func unreachable(mp, store, path string) error {
	pid, live := StoreHolder(store)
	if !live || !alive(pid) {
		return nil // a dead daemon's mount: a start as after a crash
	}
	var st unix.Stat_t
	what := "takes no connection (another one made in its place?)"
	switch err := unix.Lstat(path, &st); {
	case errors.Is(err, unix.ENOENT):
		what = "is missing"
	case err != nil:
		what = fmt.Sprintf("cannot be reached (%v)", err)
	case st.Mode&unix.S_IFMT != unix.S_IFSOCK:
		what = "is not a socket"
	}
	return usagef("%s is served by the kvfs daemon (pid %d) of the store %s, whose handover socket %s %s: the daemon makes it only as it starts, so it cannot hand the mount over; unmount it (`kvfs unmount %s`), then mount again",
		mp, pid, store, path, what, mp)
}

// socketWait bounds a successor's wait for the socket of a daemon whose
// mount is there: the time from its mount to its listen, on a loaded
// machine.
const socketWait = 2 * time.Second

// The messages: JSON, in chunks of at most chunk bytes, the first
// prefixed by the whole length; descriptors after it, fdsPerMessage a
// message, each message's payload one byte.

func writeJSON(conn *net.UnixConn, v any, fds []int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
	for len(b) > 0 {
		n := min(len(b), chunk)
		if _, _, err := conn.WriteMsgUnix(b[:n], nil, nil); err != nil {
			return err
		}
		b = b[n:]
	}
	for len(fds) > 0 {
		n := min(len(fds), fdsPerMessage)
		if _, _, err := conn.WriteMsgUnix([]byte{'F'}, unix.UnixRights(fds[:n]...), nil); err != nil {
			return err
		}
		fds = fds[n:]
	}
	return nil
}

func readJSON(conn *net.UnixConn, v any) error {
	buf := make([]byte, chunk)
	n, _, _, _, err := conn.ReadMsgUnix(buf, nil)
	if err != nil {
		return err
	}
	if n < 4 {
		return errors.New("short message")
	}
	want := int(binary.BigEndian.Uint32(buf))
	b := append([]byte(nil), buf[4:n]...)
	for len(b) < want {
		n, _, _, _, err := conn.ReadMsgUnix(buf, nil)
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("message cut short")
		}
		b = append(b, buf[:n]...)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", errUndecodable, err)
	}
	return nil
}

// errUndecodable: a message arrived whole and made no sense; its sender
// is alive (and, when it is the old daemon, serves on).
var errUndecodable = errors.New("a handover message this build cannot read")

// readOffer reads the old daemon's offer and the descriptors it passes.
func readOffer(conn *net.UnixConn, offer *handoverOffer) ([]int, error) {
	if err := readJSON(conn, offer); errors.Is(err, errUndecodable) {
		writeJSON(conn, handoverReply{Error: err.Error()}, nil)
		return nil, fmt.Errorf("reading the old daemon's offer (it serves on): %w", err)
	} else if err != nil {
		return nil, fmt.Errorf("reading the old daemon's offer: %w (%w)", err, errPredecessorGone)
	}
	if offer.Error != "" && offer.Usage {
		return nil, usagef("the old daemon keeps the mount: %s", offer.Error)
	}
	if offer.Error != "" {
		return nil, fmt.Errorf("the old daemon keeps the mount: %s", offer.Error)
	}
	if offer.Version != handoverVersion {
		return nil, fmt.Errorf("the old daemon speaks handover version %d, this one %d", offer.Version, handoverVersion)
	}
	want := 2 + len(offer.FS.Handles)
	switch {
	case offer.Round != nil:
		want = 0
	case offer.Prepared:
		want = 1
	}
	var fds []int
	oob := make([]byte, unix.CmsgSpace(fdsPerMessage*4))
	for len(fds) < want {
		_, oobn, _, _, err := conn.ReadMsgUnix(make([]byte, 1), oob)
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("reading the passed descriptors: %w", err)
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) == 0 {
			closeAll(fds)
			return nil, fmt.Errorf("reading the passed descriptors: %v", err)
		}
		for _, msg := range msgs {
			got, err := unix.ParseUnixRights(&msg)
			if err != nil {
				closeAll(fds)
				return nil, err
			}
			fds = append(fds, got...)
		}
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// HandoverPossible says whether Start with o would take a live mount
// over (a kvfs daemon serves o's store at o's mount point and takes
// handovers), without asking it. o may be as given (Check not run): its
// paths are resolved here as Check resolves them, without a look at any
// mount point. The default store went unresolved, so a successor with no
// --store, whose --metrics-addr the daemon it takes over holds, took
// the address in use for a failure and exited, and the reload never
// happened (an outside tester).
func HandoverPossible(o Options) bool {
	mp, err := filepath.Abs(o.Mountpoint)
	if err != nil {
		return false
	}
	o.Mountpoint = quietResolve(mp)
	if o.Store == "" {
		o.Store = DefaultStore(o.Mountpoint)
	} else if store, err := filepath.Abs(o.Store); err == nil {
		o.Store = quietResolve(store)
	}
	conn, _ := dialHandover(o)
	if conn == nil {
		return false
	}
	conn.Close()
	return true
}

// abandon lets go of what a handover that did not complete passed.
func (m *Mount) abandon(files []*os.File) {
	m.server.Detach()
	m.closeParts()
	closeFiles(files)
}

// closeFiles closes the descriptors a takeover was passed.
func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// closeParts stops what a successor started besides its core: the core
// is left as it is, since closing it would write a checkpoint over the
// store its predecessor still serves.
func (m *Mount) closeParts() {
	m.fs.Close()
	m.closeRemote()
	m.ram.Close()
}

// keepsStore refuses a successor of another store than this daemon's
// (an older one says none): it reached this daemon's socket in its own
// store, where someone moved it.
func (m *Mount) keepsStore(store string) error {
	if store == "" {
		return nil
	}
	mine, err1 := os.Stat(m.Store)
	theirs, err2 := os.Stat(store)
	if err1 == nil && err2 == nil && os.SameFile(mine, theirs) {
		return nil
	}
	return usagef("the handover socket in %s is the one of the kvfs daemon of the store %s (moved there?): it hands over only its own mount; unmount the mount of %s, then mount it", store, m.Store, store)
}

// keepsRequestTimeout refuses a successor whose --request-timeout is
// not this mount's: the kernel took it from the INIT reply, once per
// connection, so a handover cannot change it (an outside tester's
// successor asked for one, was taken, and the mount hung on as before).
func (m *Mount) keepsRequestTimeout(want time.Duration) error {
	switch have := m.RequestTimeout; {
	case want == have:
		return nil
	case have == 0:
		return usagef("the mount at %s has no request timeout, and a handover cannot give it one (the kernel fixed it when the mount was made): "+
			"leave out --request-timeout, or unmount and mount again with it", m.Mountpoint)
	default:
		return usagef("the mount at %s aborts a request unanswered for %v (its --request-timeout), and a handover cannot change that (the kernel fixed it when the mount was made): "+
			"give --request-timeout %v, or unmount and mount again", m.Mountpoint, have, have)
	}
}

// keepsOpenTruncation refuses a successor that would not cut an object
// whose OPEN carries O_TRUNC, on a connection whose INIT reply (flags)
// had the kernel send it there: it would open the object whole, and the
// rewrite would leave the old bytes past its end.
func keepsOpenTruncation(flags uint64, truncates bool) error {
	if flags&fuse.CAP_ATOMIC_O_TRUNC == 0 || truncates {
		return nil
	}
	return errors.New("the successor is a kvfs that would not truncate at open(O_TRUNC), which this mount's kernel connection asks of it: " +
		"upgrade it, or unmount and mount again")
}

// refuseHandover tells the successor why the mount stays with this
// daemon, and logs it.
func refuseHandover(conn *net.UnixConn, log *zap.Logger, msg string, err error) {
	log.Warn(msg, zap.Error(err))
	// The request's deadline may have passed: a quiesce retries for up
	// to quiesceLimit. A refusal that could not be written read as the
	// old daemon's death, and the successor mounted afresh, failed 10 s
	// later and said the old daemon died (an outside tester).
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	writeJSON(conn, handoverOffer{Version: handoverVersion, Error: err.Error(), Usage: errors.Is(err, usageerr.ErrUsage)}, nil)
}
