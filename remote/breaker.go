package remote

import (
	"sync"
	"time"
)

// Breaker states, as Stats reports them.
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half-open"
)

// breaker is a circuit breaker: after `limit` consecutive failures it
// opens, and nothing is sent for `coolDown`; then one request (the
// probe) is let through, half-open: its success closes the breaker, its
// failure opens it again. Every allow() that returns true must be
// followed by exactly one of success, failure or neutral.
type breaker struct {
	clock    Clock
	limit    int
	coolDown time.Duration
	onClose  func() // called (outside mu) when an open breaker closes
	// onOpen is called (outside mu) when a closed breaker opens, with
	// the consecutive failures and whether the last got no answer for
	// the whole timeout (which opens it at once).
	onOpen func(fails int, timedOut bool)

	mu       sync.Mutex
	state    string    // GUARDED_BY(mu)
	fails    int       // consecutive failures; GUARDED_BY(mu)
	openedAt time.Time // GUARDED_BY(mu)
	probing  bool      // a half-open probe is out; GUARDED_BY(mu)
}

func newBreaker(clock Clock, limit int, coolDown time.Duration, onOpen func(fails int, timedOut bool), onClose func()) *breaker {
	return &breaker{clock: clock, limit: limit, coolDown: coolDown, onOpen: onOpen, onClose: onClose, state: BreakerClosed}
}

// allow reports whether a request may be sent now.
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return true
	case BreakerOpen:
		if b.clock.Now().Sub(b.openedAt) < b.coolDown {
			return false
		}
		b.state = BreakerHalfOpen
	}
	if b.probing {
		return false
	}
	b.probing = true
	return true
}

// success records a request the server answered (any status that shows
// it is alive).
func (b *breaker) success() {
	b.mu.Lock()
	reopened := b.state != BreakerClosed
	b.state, b.fails, b.probing = BreakerClosed, 0, false
	b.mu.Unlock()
	if reopened && b.onClose != nil {
		b.onClose()
	}
}

// failure records a request that failed without costing its caller the
// timeout: a refused connection, a 5xx.
func (b *breaker) failure() { b.fail(false) }

// fail records a failed request; timedOut: it got no answer (or no
// progress) for the whole timeout, and the breaker opens at once. Each
// such request cost its caller the timeout, and callers queue behind it
// (the kernel holds a directory's lock across a LOOKUP for a create or
// link there), so waiting for `limit` of them cost a store several
// timeouts (an outside tester: 5 stores into one directory took 2, 4,
// 6, 6 and 6 s with a timeout of 2 s).
func (b *breaker) fail(timedOut bool) {
	b.mu.Lock()
	b.fails++
	opened := false
	if b.state == BreakerHalfOpen || b.fails >= b.limit || timedOut {
		opened = b.state == BreakerClosed
		b.state, b.openedAt = BreakerOpen, b.clock.Now()
	}
	b.probing = false
	fails := b.fails
	b.mu.Unlock()
	if opened && b.onOpen != nil {
		b.onOpen(fails, timedOut)
	}
}

// neutral records a request that says nothing about the server (the
// caller gave up, or a local error came first).
func (b *breaker) neutral() {
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// State is one of BreakerClosed, BreakerOpen, BreakerHalfOpen. An open
// breaker whose cool-down has passed reads as half-open.
func (b *breaker) State() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerOpen && b.clock.Now().Sub(b.openedAt) >= b.coolDown {
		return BreakerHalfOpen
	}
	return b.state
}
