package core

import (
	"time"

	"github.com/kvfs/kvfs/blob"
	"go.uber.org/zap"
)

// startWriting records that h may change its object, so a crash from now
// until the matching endWriting leaves the object marked incomplete, and
// has a passthrough writer watched. born: the object was created marked.
// A marker that cannot be made fails the call and is tried again by the
// next one. The first writer of an object records the size it was
// admitted at (see baseSize).
func (c *Core) startWriting(h *Handle, born bool) error {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	if c.cfg.Passthrough {
		if _, ok := c.watched[h]; !ok {
			c.watched[h] = struct{}{}
			c.nudge()
		}
	}
	if h.writing {
		return nil
	}
	if c.marked[h.id] == 0 {
		if born {
			c.base[h.id] = -1
		} else {
			if err := c.store.MarkWriting(h.file, h.id); err != nil {
				return err
			}
			size, _, _ := c.ledger.Size(h.id)
			c.base[h.id] = size
		}
	}
	c.marked[h.id]++
	h.writing = true
	return nil
}

// endWriting is the release of a writer: when no writer is left the
// object is complete (last).
func (c *Core) endWriting(h *Handle) (last bool, err error) {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	if !h.writing {
		return false, nil
	}
	h.writing = false
	err = c.unmarkLocked(h.id)
	return c.marked[h.id] == 0, err
}

// unmarkLocked ends one of id's writers (a handle or an install); the
// last one clears the crash marker. writersMu held.
func (c *Core) unmarkLocked(id blob.ID) error {
	if c.marked[id]--; c.marked[id] > 0 {
		return nil
	}
	delete(c.marked, id)
	delete(c.base, id)
	delete(c.settled, id)
	delete(c.early, id)
	return c.store.ClearWriting(id)
}

// baseSize is the size a refused writer's object goes back to: what it
// was admitted at when its first writer opened it, or -1 when it was
// created by a writer or truncated by one since, so nothing of it was
// ever complete. mu held (any writer's refusal serialises there).
func (c *Core) baseSize(id blob.ID) int64 {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	if b, ok := c.base[id]; ok {
		return b
	}
	return -1
}

// truncated records a truncate of an object being written: below the
// size it was admitted at, its old bytes are gone, and a refusal removes
// it instead of restoring them.
func (c *Core) truncated(id blob.ID, size int64) {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	if b, ok := c.base[id]; ok && size < b {
		c.base[id] = -1
	}
}

// beingWritten says whether a writer has id open: it is not complete, so
// it is not published yet (its last writer's release publishes it).
func (c *Core) beingWritten(id blob.ID) bool {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	return c.marked[id] > 0
}

func (h *Handle) isWriting() bool {
	h.c.writersMu.Lock()
	defer h.c.writersMu.Unlock()
	return h.writing
}

// clearMarker clears the marker of an object no writer ever had.
func (c *Core) clearMarker(id blob.ID) {
	if err := c.store.ClearWriting(id); err != nil {
		c.log.Warn("clearing a writing marker", zap.Uint64("id", uint64(id)), zap.Error(err))
	}
}

// unwatch stops watching a writer that is being released.
func (c *Core) unwatch(h *Handle) {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	delete(c.watched, h)
}

// nudge wakes the poller; writersMu held.
func (c *Core) nudge() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// pollLoop watches passthrough writers: their bytes reach the store
// without the daemon seeing a write, so it reads their stored sizes every
// PollInterval while any is open, and has the ledger admit the growth
// (evicting ahead of the writer) or, past what can be admitted, charge it
// unadmitted until the writer closes.
func (c *Core) pollLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case <-c.wake:
		}
		for c.Poll() > 0 {
			select {
			case <-c.done:
				return
			case <-time.After(c.cfg.PollInterval):
			}
		}
	}
}

// Poll reads every watched writer's stored size once and reports the
// ledger's view of them; it returns how many writers are watched. Tests
// call it to drive the poller.
func (c *Core) Poll() int {
	c.writersMu.Lock()
	watched := make([]*Handle, 0, len(c.watched))
	for h := range c.watched {
		watched = append(watched, h)
	}
	c.writersMu.Unlock()
	for _, h := range watched {
		c.observeWatched(h)
	}
	return len(watched)
}

// observeWatched observes a watched writer, if it still is: Release
// unwatches it under writersMu before closing its file, so the file is
// read only while it is open.
func (c *Core) observeWatched(h *Handle) {
	c.writersMu.Lock()
	_, ok := c.watched[h]
	var size int64
	var err error
	if ok {
		size, err = h.size()
	}
	c.writersMu.Unlock()
	if ok && err == nil {
		c.observed(h.id, size)
		c.remarkIfGrown(h, size)
	}
}

// The publish step (a link or rename to an object) is its client saying
// the object is complete. Between a writer's last close(2) and the
// kernel's RELEASE, which reaches kvfs after close returns, the object
// is still marked as being written; a crash there would throw away an
// object its connector had stored and published. So a publish of an
// object whose stored size is what its last close settled clears the
// crash marker at once (publishedWhileOpen), and should a duplicate
// descriptor write more after all, the poller marks it again
// (remarkIfGrown).

// publishedWhileOpen clears the marker of an object being written that
// its last close settled at the size it now has; no lock held.
func (c *Core) publishedWhileOpen(id blob.ID) {
	c.writersMu.Lock()
	settled, ok := c.settled[id]
	c.writersMu.Unlock()
	if !ok {
		return
	}
	c.mu.RLock()
	st, err := c.store.Stat(id)
	c.mu.RUnlock()
	if err != nil || st.Size != settled {
		return
	}
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	if c.marked[id] > 0 && c.settled[id] == settled && !c.early[id] {
		if err := c.store.ClearWriting(id); err == nil {
			c.early[id] = true
		}
	}
}

// remarkIfGrown marks again an object published while open that a
// writer grew since.
func (c *Core) remarkIfGrown(h *Handle, size int64) {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	// Only growth: a size read before the last close settled is older,
	// not new.
	if c.early[h.id] && size > c.settled[h.id] && h.writing {
		if c.store.MarkWriting(h.file, h.id) == nil {
			delete(c.early, h.id)
		}
	}
}

// settledAt records the size a writer's close admitted its object at.
func (c *Core) settledAt(id blob.ID, size int64) {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	if c.marked[id] > 0 {
		c.settled[id] = size
	}
}
