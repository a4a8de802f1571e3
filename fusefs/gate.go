package fusefs

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// gate lets requests into the file system, or, closed for a handover,
// holds every new one before it starts (FS.Quiesce). Open, it costs a
// request two atomic additions and a load.
type gate struct {
	closed atomic.Bool
	inside atomic.Int64 // requests past the gate, not yet done
	held   atomic.Int64 // requests waiting at the closed gate

	mu   sync.Mutex
	cond *sync.Cond // GUARDED_BY(mu); signalled when the gate opens
}

// enter lets a request in, waiting while the gate is closed.
func (g *gate) enter() {
	g.inside.Add(1)
	if !g.closed.Load() {
		return
	}
	g.inside.Add(-1)
	g.mu.Lock()
	g.held.Add(1)
	for g.closed.Load() {
		g.wait()
	}
	g.held.Add(-1)
	g.inside.Add(1)
	g.mu.Unlock()
}

// wait waits for the gate to open; mu held.
func (g *gate) wait() {
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
	g.cond.Wait()
}

// leave ends a request let in.
func (g *gate) leave() { g.inside.Add(-1) }

// errBusy: requests did not finish in time for a handover.
var errBusy = errors.New("requests still running")

// ErrWaitingForRoom: a request let in waits for room in a full cache,
// which the requests the gate holds (a link that ends a temp file's
// grace, an unlink) may be what makes: the gate is no place to wait for
// it (see FS.Quiesce).
var ErrWaitingForRoom = errors.New("a request waits for room in the full cache")

// close closes the gate and waits, up to limit, until no request is
// past it and every request the server has read (outstanding) is one
// it holds: those it let in are answered, replies written. On errBusy,
// or ErrWaitingForRoom as soon as waiting says a request let in waits
// for room, the gate stays closed for the caller to open.
func (g *gate) close(outstanding func() int, limit time.Duration, waiting func() bool) error {
	g.closed.Store(true)
	deadline := time.Now().Add(limit)
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		if g.inside.Load() == 0 && int64(outstanding()) == g.held.Load() {
			return nil
		}
		if waiting != nil && waiting() {
			return ErrWaitingForRoom
		}
		if time.Now().After(deadline) {
			return errBusy
		}
		time.Sleep(wait)
	}
}

// open lets the held requests and new ones in again.
func (g *gate) open() {
	g.mu.Lock()
	g.closed.Store(false)
	if g.cond != nil {
		g.cond.Broadcast()
	}
	g.mu.Unlock()
}
