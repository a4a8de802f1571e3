package core

import (
	"os"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/internal/lockorder"
	"github.com/kvfs/kvfs/ledger"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// marker is the lock of id's crash marker: what changes whether id is
// marked (its count of writers and the marker's syscalls) holds it.
func (c *Core) marker(id blob.ID) *lockorder.Mutex { return &c.markers[id%markerStripes] }

// startWriting records that h may change its object, so a crash from now
// until the matching endWriting leaves the object marked incomplete, and
// has a passthrough writer watched. born: the object was created marked.
// whole: the object is complete and the open left its bytes as they
// were (no O_TRUNC), so its marker records its mtime, and a crash
// before a change keeps it (blob.MarkIntact). A marker that cannot be
// made fails the call and is tried again by the next one. The first
// writer of an object records the size it was admitted at (see
// baseSize).
func (c *Core) startWriting(h *Handle, born, whole bool) error {
	m := c.marker(h.id)
	m.Lock()
	defer m.Unlock()
	c.writersMu.Lock()
	c.watchLocked(h)
	first := c.marked[h.id] == 0
	writing := h.writing
	c.writersMu.Unlock()
	if writing {
		return nil
	}
	var mark blob.Mark
	if first && !born {
		// The count changes only under the marker's lock: still first.
		var err error
		if whole {
			mark, err = c.store.MarkIntact(h.file, h.id)
		} else {
			err = c.store.MarkWriting(h.file, h.id)
		}
		if err != nil {
			return err
		}
	}
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	if first {
		c.base[h.id] = -1
		if !born {
			c.base[h.id], _, _ = c.ledger.Size(h.id)
		}
		if mark.Mtime != 0 {
			c.intact[h.id] = mark
		}
		if !born {
			c.rewriting[h.id] = mark.Mtime
		}
	} else if s, ok := c.settled[h.id]; ok && whole && !born && c.base[h.id] < 0 {
		// A writer that opens, whole, an object its earlier writer closed
		// (told its client success) whose RELEASE has not come yet: the
		// object is what that close settled, and a refusal of this
		// writer goes back to it, as after the RELEASE, instead of
		// removing it (an outside tester: a second writer growing a
		// closed 31 MiB object past a 32 MiB capacity lost the object in
		// 3 of 9 runs, whenever its open came before the first RELEASE).
		if size, _, _ := c.ledger.Size(h.id); size == s {
			c.base[h.id] = s
		}
	}
	c.marked[h.id]++
	h.writing = true
	h.base.Store(c.base[h.id])
	return nil
}

// watchLocked has the poller watch a passthrough writer, whose bytes
// reach the store without the daemon; writersMu held.
func (c *Core) watchLocked(h *Handle) {
	if !c.cfg.Passthrough {
		return
	}
	if _, ok := c.watched[h]; !ok {
		c.watched[h] = c.round
		c.nudge()
	}
}

// endWriting is the release of a writer: when no writer is left the
// object is complete (last), and publish, run under Core.mu with the
// count at zero, says what to publish; then the marker goes. rewrote:
// the object was complete when its first writer opened it, and its
// writers changed it (an intact marker's mtime moved; a plain marker's
// object is taken as changed). Writers that changed nothing leave the
// object's grace as it was (see ledger.Unchanged): an idle writer held
// its room, and at its close a store waiting for that room goes on.
func (c *Core) endWriting(h *Handle, publish func() []string) (last bool, pub []string, rewrote bool, err error) {
	m := c.marker(h.id)
	m.Lock()
	defer m.Unlock()
	c.mu.RLock()
	c.writersMu.Lock()
	var mark blob.Mark
	var opened int64
	var rewrite bool
	if h.writing {
		h.writing = false
		opened, rewrite = c.rewriting[h.id]
		last, mark = c.unmarkLocked(h.id)
	}
	c.writersMu.Unlock()
	if last && rewrite {
		var st unix.Stat_t
		rewrote = opened == 0 || unix.Fstat(int(h.file.Fd()), &st) != nil || !blob.Unchanged(&st, opened)
		if !rewrote {
			// Nothing to publish: its close starts no grace.
			c.ledger.Unchanged(h.id)
		}
	}
	if last {
		pub = publish()
	}
	c.mu.RUnlock()
	if last {
		if testHookUnmarked != nil {
			testHookUnmarked()
		}
		err = c.store.ClearIntact(h.id, mark)
	}
	return last, pub, rewrote, err
}

// testHookUnmarked, when set, runs between a last writer's counting out
// and the unlink of its marker.
var testHookUnmarked func()

// unmarkLocked ends one of id's writers (a handle or an install) and
// says whether it was the last, whose caller clears the crash marker,
// which records mark (see startWriting and remark); publishes waiting
// for it go on (see awaitRelease). The marker's lock and writersMu
// held.
func (c *Core) unmarkLocked(id blob.ID) (last bool, mark blob.Mark) {
	if c.marked[id]--; c.marked[id] > 0 {
		return false, blob.Mark{}
	}
	mark = c.intact[id]
	delete(c.marked, id)
	delete(c.base, id)
	delete(c.intact, id)
	delete(c.rewriting, id)
	delete(c.unseen, id)
	delete(c.killed, id)
	delete(c.settled, id)
	if done, ok := c.released[id]; ok {
		close(done)
		delete(c.released, id)
	}
	return true, mark
}

// baseSize is the size a refused writer's object goes back to: what it
// was admitted at when its first writer opened it, or -1 when it was
// created by a writer, or truncated or overwritten below that size by
// one since, so nothing of it is complete (see changedBelow). A writer
// that may have written unseen (Handle.WritesBypass) leaves it complete
// only if nothing was written at all: the stored file (f) still has the
// mtime it had at the first writer's open. mu held (any writer's
// refusal serialises there).
func (c *Core) baseSize(id blob.ID, f *os.File) int64 {
	c.writersMu.Lock()
	b, ok := c.base[id]
	opened, rewrite := c.rewriting[id]
	unseen := c.unseen[id]
	c.writersMu.Unlock()
	switch {
	case !ok:
		return -1
	case b > 0 && unseen:
		var st unix.Stat_t
		if !rewrite || opened == 0 || unix.Fstat(int(f.Fd()), &st) != nil || !blob.Unchanged(&st, opened) {
			return -1
		}
	}
	return b
}

// cutAtOpen records that object id's writing began with an open that
// cut it to 0 bytes (O_TRUNC): nothing of it is complete, and a refusal
// removes it, as it removes a new store, instead of leaving it empty
// under its name (an outside tester's rewrites refused ENOSPC; a cut in
// a SETATTR after the open was already so, see changedBelow). An object
// empty before (base 0) is as well gone.
func (c *Core) cutAtOpen(id blob.ID) {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	if b, ok := c.base[id]; ok && b == 0 {
		c.base[id] = -1
	}
}

// WritesBypass records that the kernel writes writer h's bytes into
// its object's stored file without the daemon (passthrough), so where
// they land is not seen: a refusal then takes the object down unless
// nothing was written at all (see baseSize). The adapter calls it for a
// writer of an existing object it serves so.
func (h *Handle) WritesBypass() {
	c := h.c
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	if h.write && c.marked[h.id] > 0 {
		c.unseen[h.id] = true
	}
}

// killedWriting records that a process a signal ended closed writer h
// as it died (the kernel closes a dying process's files): it may have
// been killed mid-write, and what it left is a prefix that reads as
// complete. The object stays here, as a file system keeps what was
// written, but its last release does not publish it (Config.Published:
// the shared tier), so other nodes miss it rather than load a prefix
// (an outside tester: a writer of its final name killed mid-write had
// its cut object uploaded and read by every node, 5 of 6 kills).
func (c *Core) killedWriting(h *Handle, signal int) {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	if c.marked[h.id] > 0 {
		c.killed[h.id] = signal
	}
}

// killedBy is the signal that ended a process as it held object id for
// writing, if any did (see killedWriting).
func (c *Core) killedBy(id blob.ID) int {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	return c.killed[id]
}

// changedBelow records that object id, being written, changed at
// offset at: a truncate to at, or a write or punched hole there through
// the daemon. Below the size it was admitted at its old bytes are gone,
// and a refusal removes it instead of giving back that size with other
// bytes in it (an outside tester: `dd conv=notrunc` of 200 MiB over a
// 4 MiB object in 64 MiB was refused ENOSPC, and the object stayed, 4
// MiB of the refused writer's zeros, 11 of 11).
func (c *Core) changedBelow(id blob.ID, at int64) {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	if b, ok := c.base[id]; ok && at < b {
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
// without the daemon seeing a write, so it reads their stored sizes while
// any is open, and has the ledger admit the growth (evicting ahead of the
// writer) or, past what can be admitted, charge it unadmitted until the
// writer closes. It polls every PollInterval while a writer grows, backs
// off to pollIdle times that while none does, and sleeps while no writer
// is open; a new writer wakes it.
func (c *Core) pollLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case <-c.wake:
		}
		every := c.cfg.PollInterval
		for {
			// A writer is first read an interval after it opened: most
			// stores have closed by then, and their close settles them.
			select {
			case <-c.done:
				return
			case <-c.cfg.After(every):
			}
			n, grew := c.poll(false)
			if n == 0 {
				break
			}
			if grew {
				every = c.cfg.PollInterval
				c.fitDiskSoon() // passthrough writes reach the disk unseen
			} else {
				every = min(2*every, pollIdle*c.cfg.PollInterval)
			}
			select {
			case <-c.wake:
				every = c.cfg.PollInterval
			default:
			}
		}
	}
}

// pollIdle bounds the poller's back-off while no watched writer grows.
const pollIdle = 8

// Poll reads every watched writer's stored size once and reports the
// ledger's view of them; it returns how many writers are watched. Tests
// call it to drive the poller.
func (c *Core) Poll() int {
	n, _ := c.poll(true)
	return n
}

// poll reads the watched writers (all: also those watched since the last
// round) and says how many are watched and whether any grew.
func (c *Core) poll(all bool) (n int, grew bool) {
	c.writersMu.Lock()
	watched := make([]*Handle, 0, len(c.watched))
	for h, since := range c.watched {
		if all || since != c.round {
			watched = append(watched, h)
		}
	}
	n = len(c.watched)
	c.round++
	c.writersMu.Unlock()
	now := c.cfg.Now().UnixNano()
	for _, h := range watched {
		if c.observeWatched(h) {
			grew = true
		}
		c.showKept(h, now)
	}
	return n, grew
}

// showKept shows again the reservation a close of writer h's descriptor
// kept unshown, once the RELEASE that ends most writers just after their
// close (releaseWait) has not come: a duplicate of the descriptor lives
// on, and what it holds is an open writer's reservation (see
// ledger.Show). So `du` right after a close says what the file holds,
// and `df` says what room is left while a child holds a file.
func (c *Core) showKept(h *Handle, now int64) {
	if at := h.closedAt.Load(); at != 0 && time.Duration(now-at) >= releaseWait && h.closedAt.CompareAndSwap(at, 0) {
		c.ledger.Show(h.id)
		if c.cfg.Reshown != nil {
			c.cfg.Reshown(h.id)
		}
	}
}

// showKeptLater is showKept, releaseWait after writer h's close, for a
// mount without passthrough: its writers are not watched, and the
// poller that shows passthrough writers' kept reservations never ran
// for them, so a reservation a close hid (a shell's redirect whose child
// wrote and exited, the shell holding it on) stayed hidden from
// used_bytes and df until the writer's release (an outside tester: 6 of
// 6 with --no-passthrough, 0 of 6 with passthrough).
func (c *Core) showKeptLater(h *Handle) {
	done := c.done
	go func() {
		select {
		case <-done:
		case <-c.cfg.After(releaseWait):
			if !h.released() {
				c.showKept(h, c.cfg.Now().UnixNano())
			}
		}
	}()
}

// statOpen reads a watched writer's stored file, if it is still open:
// Release marks it closed under its lock before closing its file.
func (c *Core) statOpen(h *Handle, st *unix.Stat_t) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return syscall.EBADF
	}
	return unix.Fstat(int(h.file.Fd()), st)
}

// observeWatched observes a watched writer, if it is still open: Release
// marks it closed under its lock before closing its file, so the file is
// read only while it is open. It says whether the writer grew.
func (c *Core) observeWatched(h *Handle) bool {
	// The ledger first, then the file: a refusal elsewhere (a daemon
	// write, a close answered ENOSPC) cuts the file, then settles the
	// ledger, so the file read after the ledger never holds bytes the
	// ledger read before has let go. Read the other way round, a poll
	// between the cut and the settle noted the cut bytes as held
	// (overshoot_max 10 MiB in a run whose store never passed it); and
	// read again after the ledger, as it was then, a poll that saw the
	// bytes before a close's cut noted none (a fresh-clone CI run:
	// TestWriteLargerThanCapacity's 512 KiB over 256 KiB showed no
	// overshoot).
	known, charge, _ := c.ledger.Size(h.id)
	var st unix.Stat_t
	if c.statOpen(h, &st) != nil {
		return false
	}
	size := st.Size
	if h.refused.Load() || ledger.Charge(size) > c.ledger.Capacity() {
		// It can never be admitted: its close will answer ENOSPC and
		// remove it. Refused now, and cut to what it had each time it
		// grows, its writes (which passthrough keeps feeding into the
		// store) hold at most what one interval adds, not the disk.
		if size <= known {
			return false
		}
		if !h.refused.Swap(true) {
			if ok, skipped := c.passedWarn.allow(c.cfg.Now(), passedWarnEvery); ok {
				c.log.Warn("a writer passed the capacity: refused, what it writes is cut as it writes, and its close answers ENOSPC",
					zap.Uint64("id", uint64(h.id)), zap.Int64("size", size), zap.Int64("capacity", c.ledger.Capacity()),
					zap.Int("more_since_last_logged", skipped))
			}
		}
		// Its bytes were in the store, past the capacity, until cut: the
		// overshoot shows them, seen at the first poll or not. What
		// the store holds is its blocks: cut, the file keeps the size
		// its writer reached, with holes where its bytes were (an
		// outside tester: dd of 512 MiB into 32 MiB showed 478 MiB over
		// where the store held 8 MiB).
		c.ledger.NoteUncounted(min(ledger.Charge(st.Size), st.Blocks*512) - charge)
		c.refuseWatched(h.id)
		c.refuse(h)
		return true
	}
	c.observed(h.id, size)
	return size > known
}

// refuseWatched refuses every watched writer of object id: the poller
// found it past the capacity through one of them, and which one it read
// first is chance. Refusing that one alone, where another writer held
// the object too (a closed writer whose RELEASE had not come yet), cut
// the object under the other, whose close then answered success for
// bytes that were gone.
func (c *Core) refuseWatched(id blob.ID) {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	for w := range c.watched {
		if w.id == id {
			w.refused.Store(true)
		}
	}
}

// The publish step (a link or rename to an object) is its client saying
// the object is complete; its writing ends at its last RELEASE, which
// the kernel sends after close(2) has returned, and which kvfs may
// answer after the publish. A crash before it reclaims the object (it
// is marked as being written), so a publish of an object a close has
// settled waits for that release a moment (releaseWait): a connector's
// publish that returns leaves its object safe from a crash. A writer
// that holds a duplicate of the descriptor (a shell, Popen's child)
// keeps the object marked until it closes that too: a crash before
// then does not serve what it may still be writing. (Until 2026-12 a
// publish cleared the marker at once, and a crash then served the
// prefix a duplicate had written.)

// releaseWait bounds how long a publish waits for its object's last
// release: the kernel's RELEASE of a descriptor closed just before is
// in flight, microseconds away on an idle node.
const releaseWait = 100 * time.Millisecond

// awaitRelease waits, up to releaseWait, for the last release of
// id if a close settled it and a writer still has it open; no lock held.
func (c *Core) awaitRelease(id blob.ID) {
	c.writersMu.Lock()
	var done chan struct{}
	if _, settled := c.settled[id]; settled && c.marked[id] > 0 {
		if done = c.released[id]; done == nil {
			done = make(chan struct{})
			c.released[id] = done
		}
	}
	c.writersMu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-c.cfg.After(releaseWait):
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

// MtimeSet is told before a client sets object id's mtime (utimes,
// touch): an intact marker of it, which trusts the mtime to tell a
// change, becomes plain, and the object counts as changed (a writer
// could otherwise write, put the mtime back, and have a crash keep the
// changed object as complete). No lock held.
func (c *Core) MtimeSet(id blob.ID) {
	m := c.marker(id)
	m.Lock()
	defer m.Unlock()
	c.writersMu.Lock()
	mark, ok := c.intact[id]
	c.writersMu.Unlock()
	if !ok {
		return
	}
	if err := c.store.Demote(id, mark); err != nil {
		c.log.Warn("making an intact marker plain", zap.Uint64("id", uint64(id)), zap.Error(err))
		return
	}
	c.writersMu.Lock()
	delete(c.intact, id)
	if _, ok := c.rewriting[id]; ok {
		c.rewriting[id] = 0 // changed, whatever its mtime says
	}
	c.writersMu.Unlock()
}

// remark records that a close of writer h returned, leaving its object
// with attributes st: its marker records that state (blob.Store.Remark),
// so a crash before the RELEASE that ends writing, or before anything
// changes the object again, keeps it as the close left it. It says
// whether the marker records a close. No lock held.
func (c *Core) remark(h *Handle, st *unix.Stat_t) (recorded bool) {
	m := c.marker(h.id)
	m.Lock()
	defer m.Unlock()
	c.writersMu.Lock()
	writing, others, old := h.writing, c.marked[h.id] > 1, c.intact[h.id]
	c.writersMu.Unlock()
	if !writing || others {
		// Another writer's handle, of another open, may write on (an
		// outside tester's second O_APPEND open, whose object a crash
		// served as the first close left it).
		return false
	}
	mark, err := c.store.Remark(h.id, st, old)
	if err != nil {
		c.log.Warn("recording a closed object's state in its crash marker", zap.Uint64("id", uint64(h.id)), zap.Error(err))
	}
	if mark != old {
		c.writersMu.Lock()
		c.intact[h.id] = mark
		c.writersMu.Unlock()
	}
	return mark.Closed
}

// still stops unrecordClosed for good (until Thaw): it sets
// stilled, then takes each marker lock once, so one that checked before
// has made its change when still returns. A stop and a freeze still the
// core before they hand on or write what the markers record.
func (c *Core) still() {
	c.stilled.Store(true)
	for i := range c.markers {
		c.markers[i].Lock()
		c.markers[i].Unlock() // a barrier: nothing to do inside
	}
}

// closedHeldWait is how long the RELEASE of a writer whose opener
// closed it may take before kvfs asks what still holds the object: it
// follows the close of a lone descriptor by microseconds, by tens of
// milliseconds on a loaded node.
const closedHeldWait = 2 * time.Millisecond

// watchClosed asks, once closedHeldWait has passed since writer h's
// opener closed it and its RELEASE has still not come, whether the
// opener or a process it forked holds the object (a duplicate of the
// descriptor, a child's inherited one, a mapping): one that does may
// write on, so the marker no longer records the close (unrecordClosed),
// and a crash reclaims the object. The dead daemon's guard asks every
// process the same as the daemon dies, and vouches for the record where
// nothing holds the object; but a holder killed with the daemon (a
// container's kill) was gone by then, and the prefix the opener's close
// left was kept as complete (an outside tester: a child forked to write
// the second half, killed with the daemon 20 ms after the parent's
// close, 10 of 10). What is left is a kill within closedHeldWait and
// the look of the close, and a holder outside the opener's tree (a
// descriptor passed over a socket, a child whose parent exited).
func (c *Core) watchClosed(h *Handle) {
	if c.cfg.HeldInTree == nil || h.by == nil {
		return
	}
	pid, done := int(h.by.pid), c.done
	go func() {
		// Not one of the background goroutines a stop or a freeze waits
		// for: its look at /proc can wait on a process that waits on a
		// request the freeze holds. unrecordClosed does nothing once
		// the core is stilled.
		select {
		case <-done:
			return
		case <-c.cfg.After(closedHeldWait):
		}
		if !h.released() && !c.stilled.Load() && c.cfg.HeldInTree(pid, h.id) {
			c.unrecordClosed(h)
		}
	}()
}

// unrecordClosed makes writer h's marker plain while h still writes:
// something holds its object after its opener's close (watchClosed).
// Not once the core is stilled (see still): a successor owns the
// markers then.
func (c *Core) unrecordClosed(h *Handle) {
	m := c.marker(h.id)
	m.Lock()
	defer m.Unlock()
	c.writersMu.Lock()
	mark, ok := c.intact[h.id]
	writing := h.writing
	c.writersMu.Unlock()
	if !ok || !writing || !mark.Closed || c.stilled.Load() {
		return
	}
	if err := c.store.Demote(h.id, mark); err != nil {
		c.log.Warn("making a closed object's crash marker plain", zap.Uint64("id", uint64(h.id)), zap.Error(err))
		return
	}
	c.writersMu.Lock()
	delete(c.intact, h.id)
	c.writersMu.Unlock()
	c.log.Debug("a closed object is still held: its crash marker no longer records the close", zap.Uint64("id", uint64(h.id)))
}

// A writer's settle reads its object's size, then commits it to the
// ledger; a truncate by another handle, or by path, commits its size,
// then cuts the file. Interleaved, the settle's older size would
// overwrite the truncate's, and the ledger would count a size the file
// does not have until the audit. So a truncate is under way
// (beginTruncate) from before its commit until after its cut, and a
// settle commits a size only if no truncate of its object was under way
// or ended meanwhile (sizeStable); otherwise it reads the size again.
// Connectors do not truncate: a settle pays two short holds of
// writersMu for this.

// truncation is one object's truncates under way; done closes when the
// last ends.
type truncation struct {
	n    int
	done chan struct{}
}

// beginTruncate records a truncate of id under way and returns its end.
func (c *Core) beginTruncate(id blob.ID) (end func()) {
	c.writersMu.Lock()
	t := c.truncating[id]
	if t == nil {
		t = &truncation{done: make(chan struct{})}
		c.truncating[id] = t
	}
	t.n++
	c.writersMu.Unlock()
	return func() {
		c.writersMu.Lock()
		defer c.writersMu.Unlock()
		c.truncEnds++
		if t.n--; t.n == 0 {
			delete(c.truncating, id)
			close(t.done)
		}
	}
}

// sizeEpoch waits until no truncate of id is under way and returns the
// count of ended truncates, for sizeStable; no lock held.
func (c *Core) sizeEpoch(id blob.ID) uint64 {
	for {
		c.writersMu.Lock()
		t, ends := c.truncating[id], c.truncEnds
		c.writersMu.Unlock()
		if t == nil {
			return ends
		}
		<-t.done
	}
}

// sizeStable says whether no truncate of id began or ended since
// sizeEpoch returned epoch.
func (c *Core) sizeStable(id blob.ID, epoch uint64) bool {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	return c.truncating[id] == nil && c.truncEnds == epoch
}

// testHookSettling, when set, runs between a settle's read of the size
// and its commit.
var testHookSettling func()
