package core

import (
	"errors"
	"fmt"
	"math"
	"os"
	"time"

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
// baseSize and awaitRelease).
type WriterState struct {
	ID         blob.ID `json:"id"`
	Base       int64   `json:"base"`
	Settled    int64   `json:"settled,omitempty"`
	HasSettled bool    `json:"has_settled,omitempty"`
	// Early: a daemon before 2026-12 cleared the object's crash marker
	// at a publish while a writer had it open; the successor marks it
	// again (see awaitRelease).
	Early bool `json:"early,omitempty"`
	// Intact: the object's marker is intact, with this mtime, recorded
	// at a close if Closed (see startWriting and remark); the successor
	// clears that marker. (A successor before 2026-12 clears no marker
	// Closed: a start after it deletes the object as incomplete.)
	Intact int64 `json:"intact,omitempty"`
	Closed bool  `json:"closed,omitempty"`
	// Rewrite: the object was complete when its first writer opened it
	// (see Config.Rewritten), with mtime Opened then (Intact may be a
	// later close's, see remark).
	Rewrite bool   `json:"rewrite,omitempty"`
	Opened  *int64 `json:"opened,omitempty"`
	// Unseen: a writer may have written into it where the daemon does
	// not see (see Core.unseen).
	Unseen bool `json:"unseen,omitempty"`
	// Killed: a process a signal ended held it for writing (see
	// Core.killed).
	Killed int `json:"killed,omitempty"`
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
	// Delta is what changed since the checkpoint PrepareHandover
	// captured (nil: Freeze wrote a whole checkpoint instead).
	Delta *blob.Delta `json:"delta,omitempty"`
}

// State is what a successor needs to make h again.
func (h *Handle) State() HandleState {
	h.c.writersMu.Lock()
	defer h.c.writersMu.Unlock()
	return HandleState{ID: h.id, Write: h.write, Writing: h.writing, Refused: h.doomed()}
}

// Freeze stops the background work and writes the checkpoint a
// successor loads, or, after PrepareHandover, says what changed since
// the one it captured. The caller has stopped every request and keeps them
// stopped until Thaw or its exit.
//
// A successor that keeps the objects kept for mappings (handOnMapped:
// it adopts them, AdoptMapped) is passed them (Mapped); for one that
// does not, their pins go now, as at a stop (see mappings), so the
// ledger handed on is the handles' alone: kept past the freeze, an
// unlinked one stayed charged in such a successor for good, with no pin
// and no name (the ledger no longer the store).
func (c *Core) Freeze(handOnMapped bool) (Frozen, error) {
	close(c.done)
	c.wg.Wait()
	c.still()
	if !handOnMapped {
		c.dropMapped()
	}
	var fr Frozen
	c.mu.Lock()
	if b := c.basis; b != nil {
		// Prepared: only what changed since the successor's checkpoint.
		c.basis = nil
		fr.Taken = b.Taken
		fr.Delta, fr.Graced = c.handoverDelta(b, true)
		c.mu.Unlock()
	} else {
		c.mu.Unlock()
		taken, err := c.checkpointTaken(true)
		if err != nil {
			return Frozen{}, err
		}
		fr.Taken, fr.Graced = taken, c.ledger.InGrace()
	}
	c.writersMu.Lock()
	for id := range c.marked {
		s, has := c.settled[id]
		opened, rewrite := c.rewriting[id]
		fr.Writers = append(fr.Writers, WriterState{ID: id, Base: c.base[id], Settled: s, HasSettled: has, Intact: c.intact[id].Mtime, Closed: c.intact[id].Closed, Rewrite: rewrite, Opened: &opened, Unseen: c.unseen[id], Killed: c.killed[id]})
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
	c.stilled.Store(false)
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
	if err := c.ledger.ReserveFree(st.ID, c.adoptedReservation(st.ID)); err != nil {
		c.log.Debug("no reservation for a handed-over writer", zap.Uint64("id", uint64(st.ID)), zap.Error(err))
	}
	if st.Writing {
		c.adoptWriting(h)
	}
	return h, nil
}

// adoptedReservation is what a handed-over writer of id is reserved: a
// fresh reservation, within the room the capacity leaves now, so that
// adopting it evicts nothing. The old daemon may have taken back part of
// what it reserved for later stores, and a fresh one each evicted what
// it kept (an outside tester: a handover at the same capacity evicted
// the only complete object, nothing else having happened).
func (c *Core) adoptedReservation(id blob.ID) int64 {
	st := c.ledger.Stats()
	_, charge, _ := c.ledger.Size(id)
	admitted := st.UsedBytes + st.KeptBytes - st.UnadmittedBytes
	return min(c.Reservation(), charge+max(c.targetCapacity()-admitted, 0))
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
// predecessor left it, so no syscall, but where an older predecessor
// cleared it early (WriterState.Early).
func (c *Core) adoptWriting(h *Handle) {
	m := c.marker(h.id)
	m.Lock()
	defer m.Unlock()
	c.writersMu.Lock()
	c.watchLocked(h)
	remark := false
	if c.marked[h.id] == 0 {
		w, ok := c.handedWriters[h.id]
		if !ok {
			w.Base, _, _ = c.ledger.Size(h.id)
		}
		c.base[h.id] = w.Base
		if w.HasSettled {
			c.settled[h.id] = w.Settled
		}
		if w.Intact != 0 && !w.Early {
			c.intact[h.id] = blob.Mark{Mtime: w.Intact, Closed: w.Closed}
		}
		if w.Rewrite {
			// A predecessor before 2026-12 sent no Opened: its marker
			// kept the mtime of the open.
			c.rewriting[h.id] = w.Intact
			if w.Opened != nil {
				c.rewriting[h.id] = *w.Opened
			}
		}
		if w.Unseen {
			c.unseen[h.id] = true
		}
		if w.Killed != 0 {
			c.killed[h.id] = w.Killed
		}
		remark = w.Early
	}
	c.marked[h.id]++
	h.writing = true
	h.base.Store(c.base[h.id])
	c.writersMu.Unlock()
	if remark {
		if err := c.store.MarkWriting(h.file, h.id); err != nil {
			c.log.Warn("marking a handed-over writer's object again", zap.Uint64("id", uint64(h.id)), zap.Error(err))
		}
	}
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

// A handover in two phases (see blob.Basis): the successor loads the
// index while the old daemon serves on, and the pause carries only what
// changed since.

// PrepareHandover captures the index for a successor to load while this
// Core serves on (Preload), and from then on notes what changes: the
// rounds (HandoverRound) and the Freeze that follow send only that.
func (c *Core) PrepareHandover() ([]byte, error) {
	// Every change from here on is noted, the capture's steps included;
	// and no running checkpoint starts (see checkpointTaken).
	c.mu.Lock()
	c.store.Track()
	c.ledger.Track()
	c.mu.Unlock()
	c.ckpt.mu.Lock()
	defer c.ckpt.mu.Unlock()
	writing := c.writingNow()
	shared := func(step func()) {
		c.mu.RLock()
		defer c.mu.RUnlock()
		step()
	}
	walk := c.ledger.Walk()
	cp, data, err := c.store.HandoverCheckpoint(shared, walk.Next, func(id blob.ID) bool { return writing[id] })
	walk.Close()
	if err != nil {
		c.CancelHandover()
		return nil, err
	}
	b, err := blob.ParseBasis(data)
	if err != nil {
		c.CancelHandover()
		return nil, err
	}
	// Sent in the first round besides what changes: the objects the
	// capture left out (no name in it) or left unsure (being written),
	// and those whose grace period runs now.
	extra := cp.LeftOut
	for _, g := range c.ledger.InGrace() {
		extra = append(extra, g.ID)
	}
	c.ledger.Note(extra...)
	c.mu.Lock()
	c.basis = b
	c.mu.Unlock()
	return data, nil
}

// handingOver says whether a handover is being prepared: from
// PrepareHandover until the freeze or CancelHandover.
func (c *Core) handingOver() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.store.Tracking()
}

// CancelHandover lets go of what PrepareHandover kept: the successor
// went away before the freeze.
func (c *Core) CancelHandover() {
	c.mu.Lock()
	c.basis, c.graceSeen = nil, nil
	c.store.Untrack()
	c.ledger.Untrack()
	c.mu.Unlock()
}

// handoverDelta says what changed since the last round (or b): the
// directories that differ from b and every object the index or the
// ledger noted since, as it is now; and which of those are in their
// grace period. mu held (shared will do). final: every change has stopped,
// and noting stops; otherwise it goes on for the next round, and the
// objects seen in their grace period are asked again in the last.
func (c *Core) handoverDelta(b *blob.Basis, final bool) (*blob.Delta, []ledger.Closed[blob.ID]) {
	d := c.store.DirDelta(b)
	extra := c.store.Noted()
	if final {
		extra = append(extra, c.graceSeen...)
		c.graceSeen = nil
	}
	var graced []ledger.Closed[blob.ID]
	for _, ch := range c.ledger.Changes(extra) {
		if ch.Gone {
			d.Gone = append(d.Gone, ch.ID)
			continue
		}
		ino, links := c.store.FileRecord(ch.ID)
		d.Objects = append(d.Objects, blob.ObjectRecord{ID: ch.ID, Ino: ino, Size: ch.Size, Links: links, After: ch.After, First: ch.First})
		if ch.LastClose != 0 {
			graced = append(graced, ledger.Closed[blob.ID]{ID: ch.ID, LastClose: ch.LastClose})
		}
	}
	if !final {
		for _, g := range graced {
			c.graceSeen = append(c.graceSeen, g.ID)
		}
		return d, nil
	}
	c.store.Untrack()
	c.ledger.Untrack()
	return d, graced
}

// HandoverRound says what changed since PrepareHandover or the last
// round, while this Core serves on: its successor applies it (Apply) as
// it waits, and the pause then carries only what changed since.
func (c *Core) HandoverRound() (*blob.Delta, error) {
	// Shared: it reads the index, and only the handover's own records
	// change (the noted set, which only exclusive holders add to, and
	// the basis).
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.basis == nil {
		return nil, errors.New("no handover is being prepared")
	}
	d, _ := c.handoverDelta(c.basis, false)
	return d, nil
}

// Preload builds a Core from a predecessor's handover checkpoint
// (PrepareHandover) while the predecessor serves on: nothing in the
// store is read or changed, and nothing is evicted. Join brings it up to
// the predecessor's frozen state; it fits cfg's capacity when it starts.
func Preload(store *blob.Store, data []byte, cfg Config) (*Core, LoadReport, error) {
	start := time.Now()
	objects, taken, err := store.LoadHandover(data)
	if err != nil {
		return nil, LoadReport{}, fmt.Errorf("loading the handover checkpoint: %w", err)
	}
	rep := LoadReport{}
	rep.FromSnapshot, rep.SnapshotTaken, rep.Objects = true, taken, int64(len(objects))
	for _, o := range objects {
		rep.Bytes += ledger.Charge(o.Size)
	}
	target := cfg.Capacity
	cfg.Capacity = math.MaxInt64
	c := newCore(store, cfg, len(objects))
	c.cfg.Capacity = target
	if err := c.restore(objects, &rep); err != nil {
		return nil, rep, err
	}
	c.fitting.Store(true)
	// The checkpoint on disk is whatever the predecessor last wrote:
	// write one soon.
	c.ckpt.saved, c.ckpt.stale = store.Changes(), true
	rep.Took = time.Since(start)
	return c, rep, nil
}

// Join brings a preloaded Core up to its predecessor's frozen state:
// fr.Delta, what changed since the checkpoint it loaded, and the grace
// of the objects it had just closed.
func (c *Core) Join(fr Frozen) error {
	if fr.Delta == nil {
		return errors.New("the predecessor sent no changes to apply")
	}
	c.Apply(fr.Delta)
	for _, g := range fr.Graced {
		c.ledger.Regrace(g.ID, g.LastClose)
	}
	return nil
}

// Apply brings a preloaded Core up to a round of its predecessor's
// changes (HandoverRound), or the last (Join).
func (c *Core) Apply(d *blob.Delta) {
	c.mu.Lock()
	c.store.ApplyHandover(d)
	c.mu.Unlock()
	for _, id := range d.Gone {
		c.ledger.Drop(id)
	}
	c.placeInOrder(d.Objects)
}

// fitCapacity sets the configured capacity on a preloaded Core (sized
// from the store's free space when none was given) and evicts what no
// longer fits, sparing what handles hold.
func (c *Core) fitCapacity() {
	capacity := c.cfg.Capacity
	if capacity == 0 {
		used := c.ledger.Stats().UsedBytes
		var err error
		if capacity, err = c.cfg.CapacityFor(used); err != nil {
			c.log.Warn("cannot size the capacity; keeping what is stored", zap.Error(err))
			capacity = used
		}
	}
	victims := c.ledger.SetCapacity(capacity)
	c.fitted = len(victims)
	c.mu.Lock()
	drops := c.dropLocked(victims, Evicted)
	c.mu.Unlock()
	c.reap(drops)
	c.deliver(drops)
}

// Fitted is how many objects Start evicted to fit the capacity of a
// Core that took a handover; call it after Start.
func (c *Core) Fitted() int { return c.fitted }

// TakeStore makes a preloaded Core's store (blob.OpenBorrowed) its own,
// with the store's lock its predecessor passed.
func (c *Core) TakeStore(lock *os.File) error { return c.store.TakeLock(lock) }

// placeInOrder puts each changed object in the ledger right after the
// one before it in the predecessor's LRU order, that one first when it
// changed too: then every object sits where the predecessor had it.
func (c *Core) placeInOrder(objs []blob.ObjectRecord) {
	at := make(map[blob.ID]int, len(objs))
	for i, o := range objs {
		at[o.ID] = i
	}
	placed := make([]bool, len(objs))
	var chain []int
	for i := range objs {
		// Walk back to the first object of the chain not placed yet.
		chain = chain[:0]
		for j := i; !placed[j]; {
			chain = append(chain, j)
			placed[j] = true
			o := objs[j]
			k, ok := at[o.After]
			if o.First || !ok {
				break
			}
			j = k
		}
		for n := len(chain) - 1; n >= 0; n-- {
			o := objs[chain[n]]
			c.ledger.Place(o.ID, o.Size, len(o.Links), o.After, o.First)
		}
	}
}
