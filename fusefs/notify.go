package fusefs

import (
	"errors"
	"sync"
	"time"

	"github.com/kvfs/kvfs/core"
)

// The notifier sends the kernel's cache invalidations (notices) from a
// goroutine of its own, one at a time, in order. An entry notice waits
// in the kernel for the directory's lock, uninterruptibly, and a client
// holds that lock across its CREATE, LINK, UNLINK or RENAME: the notice
// goes through once that request is answered. So no notice may be in
// the kernel while requests are held at a closed gate (a handover): a
// held LINK would keep its directory locked, the notice would wait for
// it forever, and so would the daemon's exit (an outside tester's
// handover under 750 stores/s hung the mount for good, 2 times in 4).
// A handover pauses the notifier before it closes the gate, and passes
// the notices still pending to its successor, which sends them once it
// serves.

// notifier is the queue of notices and the state of their sending.
type notifier struct {
	mu      sync.Mutex
	cond    *sync.Cond // signalled when sending stops or pauses
	pending []notice
	paused  bool
	sending bool // a notice is in the kernel
	wake    chan struct{}
}

func (q *notifier) init() {
	q.cond = sync.NewCond(&q.mu)
	q.wake = make(chan struct{}, 1)
}

// add queues n; it never blocks.
func (q *notifier) add(n ...notice) {
	q.mu.Lock()
	q.pending = append(q.pending, n...)
	q.mu.Unlock()
	q.nudge()
}

// next takes the next notice to send, marking it in the kernel until
// sent is called; ok is false while paused or empty.
func (q *notifier) next() (n notice, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.paused || len(q.pending) == 0 {
		return n, false
	}
	n = q.pending[0]
	q.pending[0] = notice{}
	q.pending = q.pending[1:]
	if len(q.pending) == 0 {
		q.pending = nil // let a burst's array go
	}
	q.sending = true
	return n, true
}

// sent says the notice next gave is out of the kernel.
func (q *notifier) sent() {
	q.mu.Lock()
	q.sending = false
	q.cond.Broadcast()
	q.mu.Unlock()
}

// errNotifying: a notice stayed in the kernel past a pause's limit.
var errNotifying = errors.New("a kernel notice is still being sent")

// pause stops the sending of notices, and waits, up to limit, until
// none is in the kernel; or ErrWaitingForRoom as soon as waiting says a
// request waits for room in a full cache, so the pause is tried again a
// moment later, as the gate's close is: a notice in the kernel then
// waited for its directory for the whole limit, and the handover was
// refused with no word of the room (an outside tester: 5 of 12
// handovers under load; a dump had 21 writes waiting for room, and
// creates and links holding their directories waiting on answers). On
// an error it has resumed.
func (q *notifier) pause(limit time.Duration, waiting func() bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.paused = true
	deadline := time.Now().Add(limit)
	for wait := 50 * time.Microsecond; q.sending; wait = min(2*wait, 5*time.Millisecond) {
		if waiting != nil && waiting() {
			q.paused = false
			return ErrWaitingForRoom
		}
		if !time.Now().Before(deadline) {
			q.paused = false
			return errNotifying
		}
		t := time.AfterFunc(min(wait, time.Until(deadline)), func() {
			q.mu.Lock()
			q.cond.Broadcast()
			q.mu.Unlock()
		})
		q.cond.Wait()
		t.Stop()
	}
	return nil
}

// resume lets notices be sent again.
func (q *notifier) resume() {
	q.mu.Lock()
	q.paused = false
	q.mu.Unlock()
	q.nudge()
}

// nudge wakes the sending goroutine.
func (q *notifier) nudge() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take empties the queue, for a successor.
func (q *notifier) take() []notice {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.pending
	q.pending = nil
	return p
}

func (f *FS) notifyLoop() {
	defer f.wg.Done()
	for {
		select {
		case <-f.done:
			return
		case <-f.notices.wake:
		}
		for {
			n, ok := f.notices.next()
			if !ok {
				break
			}
			f.deliver(n)
			f.notices.sent()
		}
	}
}

// deliver sends a notice. The kernel answers ENOENT for a node it no
// longer knows, which then has nothing to invalidate.
func (f *FS) deliver(n notice) {
	if f.server == nil {
		return
	}
	if n.content {
		f.server.InodeNotify(uint64(n.node), 0, 0)
		return
	}
	f.server.EntryNotify(uint64(n.node), n.name)
}

func (f *FS) queue(n notice) { f.notices.add(n) }

// NoticeRecord is a kernel notice not yet sent, as a successor takes it.
type NoticeRecord struct {
	Node    core.ID `json:"node"`
	Name    string  `json:"name,omitempty"`
	Content bool    `json:"content,omitempty"`
}
