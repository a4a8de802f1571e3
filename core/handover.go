package core

import (
	"errors"
	"os"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/ledger"
	"go.uber.org/zap"
)

// A handover (package mount) passes a live mount to a new daemon. The
// old Core freezes: with every request stopped by its caller, it stops
// its background work and writes a checkpoint, which keeps the
// namespace's IDs (the kernel's node IDs), the ledger's objects and LRU
// order. It then describes its open handles and writers. The new Core
// loads that checkpoint (Open, with Config.Held), takes the handles over
// with their stored files (AdoptHandle), and ends the hand-over's pins
// (EndHandover) before it serves.

// HandleState is an open handle as a successor makes it again.
type HandleState struct {
	ID      blob.ID `json:"id"`
	Write   bool    `json:"write,omitempty"`
	Writing bool    `json:"writing,omitempty"` // holds one of the crash marker's counts
	Refused bool    `json:"refused,omitempty"` // a write was refused for space
}

// WriterState is what the Core keeps of an object being written (see
// baseSize and publishedWhileOpen).
type WriterState struct {
	ID         blob.ID `json:"id"`
	Base       int64   `json:"base"`
	Settled    int64   `json:"settled,omitempty"`
	HasSettled bool    `json:"has_settled,omitempty"`
	Early      bool    `json:"early,omitempty"`
}

// Frozen is what a frozen Core hands on besides its handles.
type Frozen struct {
	// Taken is when its checkpoint was taken (unix nanoseconds): the
	// successor checks that it loaded that one.
	Taken   int64         `json:"taken"`
	Writers []WriterState `json:"writers,omitempty"`
	// Sizes are the recently published sizes, which size reservations.
	Sizes []int64 `json:"sizes,omitempty"`
	// Graced are the objects closed so lately that their publish step
	// may still come: the successor keeps them from eviction as long.
	Graced []ledger.Closed[blob.ID] `json:"graced,omitempty"`
}

// State is what a successor needs to make h again.
func (h *Handle) State() HandleState {
	h.c.writersMu.Lock()
	defer h.c.writersMu.Unlock()
	return HandleState{ID: h.id, Write: h.write, Writing: h.writing, Refused: h.refused.Load()}
}

// Freeze stops the background work and writes the checkpoint a
// successor loads. The caller has stopped every request and keeps them
// stopped until Thaw or its exit.
func (c *Core) Freeze() (Frozen, error) {
	close(c.done)
	c.wg.Wait()
	taken, err := c.checkpointTaken(true)
	if err != nil {
		return Frozen{}, err
	}
	fr := Frozen{Taken: taken, Graced: c.ledger.InGrace()}
	c.writersMu.Lock()
	for id := range c.marked {
		s, has := c.settled[id]
		fr.Writers = append(fr.Writers, WriterState{ID: id, Base: c.base[id], Settled: s, HasSettled: has, Early: c.early[id]})
	}
	c.writersMu.Unlock()
	c.sizesMu.Lock()
	for _, s := range c.sizes {
		if s > 0 {
			fr.Sizes = append(fr.Sizes, s)
		}
	}
	c.sizesMu.Unlock()
	return fr, nil
}

// Thaw starts the background work again after a Freeze whose handover
// failed.
func (c *Core) Thaw() {
	c.done = make(chan struct{})
	c.Start(c.dropped)
}

// holdForHandover pins an object a predecessor's handle holds as soon as
// the start restores it, so that fitting a smaller capacity never evicts
// it (EndHandover drops these pins once the handles hold their own), and
// gives one the predecessor had just closed the rest of its grace.
func (c *Core) holdForHandover(id blob.ID) {
	if c.cfg.Held[id] && c.ledger.Open(id, false) == nil {
		c.heldPins = append(c.heldPins, id)
	}
	if t, ok := c.cfg.Graced[id]; ok {
		c.ledger.Regrace(id, t)
	}
}

// AdoptHandle makes a predecessor's handle again over its stored file
// f, which the predecessor passed. An object the checkpoint did not list
// has no name left: it lives for its handles alone.
func (c *Core) AdoptHandle(st HandleState, f *os.File) (*Handle, error) {
	if err := c.ledger.Open(st.ID, st.Write); err != nil {
		if !errors.Is(err, ledger.ErrGone) {
			return nil, ledgerErr(err)
		}
		if err := c.adoptUnnamed(st.ID, f); err != nil {
			return nil, err
		}
		if err := c.ledger.Open(st.ID, st.Write); err != nil {
			return nil, ledgerErr(err)
		}
		c.ledger.Unlink(st.ID)
	}
	h := &Handle{c: c, id: st.ID, file: f, write: st.Write}
	h.refused.Store(st.Refused)
	if !st.Write {
		return h, nil
	}
	if err := c.reserve(st.ID); err != nil {
		c.log.Debug("no reservation for a handed-over writer", zap.Uint64("id", uint64(st.ID)), zap.Error(err))
	}
	if st.Writing {
		c.adoptWriting(h)
	}
	return h, nil
}

// ExpectWriters gives the Core what its predecessor kept of the objects
// being written, before their handles are adopted.
func (c *Core) ExpectWriters(ws []WriterState) {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	c.handedWriters = map[blob.ID]WriterState{}
	for _, w := range ws {
		c.handedWriters[w.ID] = w
	}
}

// adoptWriting counts h as writing, as startWriting does, with the
// predecessor's state of its object: the crash marker is on disk as the
// predecessor left it (there, or cleared early by a publish, and then
// not to be made again), so no syscall.
func (c *Core) adoptWriting(h *Handle) {
	m := c.marker(h.id)
	m.Lock()
	defer m.Unlock()
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	c.watchLocked(h)
	if c.marked[h.id] == 0 {
		w, ok := c.handedWriters[h.id]
		if !ok {
			w.Base, _, _ = c.ledger.Size(h.id)
		}
		c.base[h.id] = w.Base
		if w.HasSettled {
			c.settled[h.id] = w.Settled
		}
		if w.Early {
			c.early[h.id] = true
		}
	}
	c.marked[h.id]++
	h.writing = true
}

// adoptUnnamed charges an object that has no name, at its stored size.
func (c *Core) adoptUnnamed(id blob.ID, f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	victims, err := c.ledger.Restore(id, fi.Size(), 1)
	if err != nil && !errors.Is(err, ledger.ErrExists) {
		return ledgerErr(err)
	}
	c.mu.Lock()
	drops := c.dropLocked(victims, Evicted)
	c.mu.Unlock()
	c.reap(drops)
	c.deliver(drops)
	return nil
}

// EndHandover drops the pins Config.Held made (every adopted handle
// holds its own by now) and takes the predecessor's recent sizes.
func (c *Core) EndHandover(fr Frozen) {
	c.writersMu.Lock()
	c.handedWriters = nil
	c.writersMu.Unlock()
	for _, s := range fr.Sizes {
		c.published(s)
	}
	for _, id := range c.heldPins {
		c.unpin(id, false)
	}
	c.heldPins = nil
}

// ClaimStore marks the store this process's (see blob.Store.ClaimLock).
func (c *Core) ClaimStore() { c.store.ClaimLock() }

// StoreLock is the store's lock file, which a handover passes on (see
// blob.OpenLocked).
func (c *Core) StoreLock() *os.File { return c.store.Lock() }
