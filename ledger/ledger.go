// Package ledger is kvfs's exact byte accounting: one entry per inode,
// charged its size rounded up to a block, kept in least-recently-used
// order, pinned by open handles. It only counts and chooses victims; the
// caller deletes their bytes. It never imports FUSE, and it does not know
// where IDs come from: it is generic over the ID type.
//
// Admission. Every charge that grows is admitted against the capacity
// first: the coldest unpinned entries are evicted to make room, all or
// nothing, and the growth is refused if that cannot free enough. A writer
// is admitted a reservation when it opens (Reserve); its data may then
// reach the store without the daemon seeing it (FUSE passthrough), so the
// caller reports the stored size as it grows (Observe) and once more when
// the writer closes (Settle), where whatever was not admitted must be, or
// the object must go. Bytes a writer wrote beyond what could be admitted
// are charged (they are on disk) but "unadmitted": they do not make others
// evict, and they are the only way used can pass the capacity.
package ledger

import (
	"errors"
	"math"
	"sync"
	"time"
)

// BlockSize is the unit of charge: every inode costs its size rounded up
// to a multiple of it, which is also what st_blocks reports.
const BlockSize = 4096

var (
	// ErrNoSpace means the charge cannot fit even after evicting
	// everything evictable.
	ErrNoSpace = errors.New("ledger: no space left under capacity")
	// ErrTooLarge means the charge exceeds the whole capacity: no
	// eviction could ever make it fit.
	ErrTooLarge = errors.New("ledger: object larger than capacity")
	// ErrPastBudget means a writer's growth past twice its reservation
	// did not fit in free space, and may not evict (GrowWithin): the
	// room exists, so waiting for it is no use.
	ErrPastBudget = errors.New("ledger: a writer's growth past twice its reservation does not fit in free space")
	// ErrGone means the inode was evicted or released.
	ErrGone = errors.New("ledger: object is gone")
	// ErrExists means the ID is already in the ledger.
	ErrExists = errors.New("ledger: object already exists")
	// ErrNotWriter means the operation needs an open writer.
	ErrNotWriter = errors.New("ledger: object has no writer open")
	// ErrBusy means an admission asked to take free space only (the
	// ...Free methods) needs more: an eviction, or a reservation taken
	// back. Nothing changed; the caller retries it the usual way, under
	// whatever lock must cover an eviction.
	ErrBusy = errors.New("ledger: admission needs an eviction")
)

// Charge is what an inode of the given size costs.
func Charge(size int64) int64 {
	if size <= 0 {
		return 0
	}
	if size > math.MaxInt64-(BlockSize-1) {
		// Rounding up would overflow to a negative charge, which would
		// admit the size and drive used below zero; saturate instead, so
		// that admission refuses it as larger than any capacity.
		return math.MaxInt64
	}
	return (size + BlockSize - 1) / BlockSize * BlockSize
}

// Victim is an inode the ledger evicted: its charge is already released,
// and the caller must remove its names and bytes.
type Victim[K comparable] struct {
	ID     K
	Charge int64
	// LastUse is when it was last opened or closed, unix nanoseconds; 0
	// when not since this ledger restored or adopted it (Restore).
	LastUse int64
}

// Config sets a ledger's limits. Now is injectable for tests.
type Config struct {
	Capacity int64
	Grace    time.Duration
	Now      func() time.Time
	// SizeHint is how many inodes to make room for up front.
	SizeHint int
	// FirmReservations: writers' bytes may reach the store before the
	// ledger sees them (FUSE passthrough), so a writer's reservation is
	// the only admission they get before they land. None is then taken
	// back to make room for another (reclaim): the room waits for the
	// writer to settle instead (an outside tester: reservations taken
	// back from writers of 8 MiB held a 48 MiB cache at 56 MiB).
	FirmReservations bool
}

// Ledger is safe for concurrent use; every method takes mu once and does
// O(1) work apart from eviction, which walks the LRU from its cold end
// past pinned or recently closed entries only. mu is a leaf lock: nothing
// is called while it is held.
type Ledger[K comparable] struct {
	mu sync.Mutex
	// GUARDED_BY(mu), all fields below.
	capacity int64
	grace    int64
	// firm: see Config.FirmReservations.
	firm bool
	now  func() time.Time
	// entries maps IDs to their slots in slab.
	entries map[K]uint32
	slab    slab[K]
	lru     list // of slab slots, least recently used first
	// INVARIANT: used == sum of charge over entries.
	used int64
	// INVARIANT: over == sum of over over entries, and used - over <=
	// capacity unless followed: only a store the ledger followed can put
	// admitted bytes over the capacity.
	over int64
	// INVARIANT: shadow == sum of charge over entries with nlink == 0.
	shadow int64
	// INVARIANT: pinnedObjs, pinnedBytes count entries with pins > 0.
	pinnedObjs  int64
	pinnedBytes int64
	// INVARIANT: writeBytes == sum of charge over entries with writers > 0.
	writeBytes int64
	// INVARIANT: reserved == sum of charge - Charge(size) over entries.
	reserved int64
	// INVARIANT: kept == sum of keptOf over entries, keptShadow the
	// same over entries with nlink == 0: reservations kept past a close
	// that admission counts and no figure shows (Stats, Shown).
	kept, keptShadow int64
	// open lists the writing records (of the entries with writers
	// open), in the order their first writer opened: whose reservation
	// is taken back first.
	open list
	// writing holds the state of entries with writers open.
	writing writingTable
	// peak is the most used has been over the capacity lately (see
	// overshoot.go).
	peak peakWindow
	// changed is closed and replaced when space may have been freed
	// while someone waits for it (Changed).
	changed chan struct{}
	// freeOnly: the method running takes free space only (see free).
	freeOnly bool
	// evictAtMost: the method running evicts only where that frees at
	// most this much (see ReserveEvictingAtMost); 0: no bound.
	evictAtMost int64
	evictions   int64
	evicted     int64
	refusals    int64
	// moves counts changes of writers' sizes, charges that fell, and
	// ends of writing, of objects that hold bytes: while it stands
	// still, nothing in flight progresses (Progress).
	moves      uint64
	reconciled int64
	// followed: the ledger has followed the store (a reconciliation,
	// counted or kvfs's own: see Own), or a smaller capacity found more
	// held than it (SetCapacity).
	followed bool
	// own: what the ledger follows now is kvfs's own change (Own), not
	// counted as a reconciliation.
	own bool
	// noted: the entries changed since Track (inserted, removed,
	// resized, moved in the LRU order, linked or unlinked, closed); nil:
	// not tracking.
	noted map[K]struct{}
	// walks are the Walks not yet closed, whose places in lru the
	// methods that move or remove an entry keep.
	walks []*Walk[K]
}

// entry is one inode; it is on the LRU list from creation to removal.
// What only an open writer needs is in its writing record (w), so that a
// closed entry is 64 bytes.
// INVARIANT: charge == max(Charge(size), res); 0 <= over <= charge,
// where res and over are its writing record's (0 without one).
type entry[K comparable] struct {
	id      K
	size    int64
	charge  int64
	lastUse int64 // unix nanoseconds, of the last open or close
	// lastClose is when the last writer closed (unix nanoseconds), which
	// starts the grace period; 0: never; published: the object went
	// through its publish step (a link or a rename to it), and no
	// writer's close starts a grace period any more.
	lastClose int64
	pins      int32
	nlink     int32
	// self is the entry's slot, w its writing record's (0: no writer),
	// and lru its place in the LRU: the slots before and after it (0:
	// the list's end), so the slab holds no pointer for the collector to
	// trace.
	self uint32
	w    uint32
	lru  [2]uint32
}

// published is an entry's lastClose once it went through its publish
// step.
const published = -1

func (e *entry[K]) final() bool { return e.lastClose == published }

// inGrace says whether e's last writer closed after cutoff, its
// publish step still to come.
func (e *entry[K]) inGrace(cutoff int64) bool { return e.lastClose > 0 && e.lastClose > cutoff }

// evictable says whether e may be evicted: not pinned, and not in its
// grace period (see inGrace).
func (e *entry[K]) evictable(cutoff int64) bool { return e.pins == 0 && !e.inGrace(cutoff) }

// New returns an empty ledger.
func New[K comparable](cfg Config) *Ledger[K] {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	l := &Ledger[K]{
		capacity: cfg.Capacity,
		grace:    int64(cfg.Grace),
		firm:     cfg.FirmReservations,
		now:      now,
		entries:  make(map[K]uint32, cfg.SizeHint),
	}
	l.slab.init()
	l.writing.init()
	l.lru = list{func(i uint32) *[2]uint32 { return &l.slab.at(i).lru }}
	l.open = list{func(i uint32) *[2]uint32 { return &l.writing.recs[i].links }}
	return l
}

// Capacity is the configured limit in bytes. SetCapacity may change it
// while requests are served (a successor's start fits a handed-over
// ledger to its own capacity after it began to serve).
func (l *Ledger[K]) Capacity() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.capacity
}

// Restore adds an inode found in the store at start-up, as most recently
// used: restore in access order, oldest first. If the store holds more
// than the capacity, the coldest inodes are returned as victims; one that
// alone is larger than the capacity is its own victim. Its last use is
// unknown here (LastUse 0) until it is used again: the stored file's
// times say when that was.
func (l *Ledger[K]) Restore(id K, size int64, nlink int) ([]Victim[K], error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.restore(id, size, nlink)
}

// RestoreAll is Restore of n objects in turn, oldest first, object(i)
// giving the i-th: a start's whole index under one hold of the lock. It
// stops at the first error, and returns the victims of the objects
// restored before it.
func (l *Ledger[K]) RestoreAll(n int, object func(i int) (id K, size int64, nlink int)) ([]Victim[K], error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var all []Victim[K]
	for i := range n {
		id, size, nlink := object(i)
		victims, err := l.restore(id, size, nlink)
		if err != nil {
			return all, err
		}
		all = append(all, victims...)
	}
	return all, nil
}

// restore is Restore with mu held.
func (l *Ledger[K]) restore(id K, size int64, nlink int) ([]Victim[K], error) {
	if _, ok := l.entries[id]; ok {
		return nil, ErrExists
	}
	e := entry[K]{id: id, size: size, charge: Charge(size), nlink: int32(nlink)}
	if e.charge > l.capacity {
		return []Victim[K]{{ID: id}}, nil
	}
	victims, err := l.room(&e, e.charge, e.charge, false)
	if err != nil {
		return victims, err
	}
	l.insert(e)
	return victims, nil
}

// Adopt adds an inode that appeared in the store behind kvfs's back, as
// most recently used, evicting others if it does not fit. It counts as a
// reconciliation.
func (l *Ledger[K]) Adopt(id K, size int64, nlink int) ([]Victim[K], error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	victims, err := l.restore(id, size, nlink)
	if err == nil {
		l.follow()
	}
	return victims, err
}

// Create adds a new empty inode with one name, pinned by the handle that
// created it.
func (l *Ledger[K]) Create(id K, write bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.entries[id]; ok {
		return ErrExists
	}
	e := l.insert(entry[K]{id: id, nlink: 1, lastUse: l.now().UnixNano()})
	l.pin(e, write)
	return nil
}

// Open pins an inode for a new handle and marks it most recently used.
func (l *Ledger[K]) Open(id K, write bool) error { return l.pinID(id, write, true) }

// Hold pins an inode as a reader's Open does, without marking it used:
// a pin that is no one's new use of it (the core's for a mapping that
// outlived its handle, whose open marked it already). A release that
// pinned each object it closed with Open made it the most recent:
// stored a, b, c, then b came after c in the LRU.
func (l *Ledger[K]) Hold(id K) error { return l.pinID(id, false, false) }

// pinID pins an inode, and marks it most recently used if use.
func (l *Ledger[K]) pinID(id K, write, use bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.get(id)
	if !ok {
		return ErrGone
	}
	l.pin(e, write)
	if use {
		l.use(e)
	}
	return nil
}

// Unhold drops a pin Hold made, again without marking the inode used,
// and reports whether it had no names left and is now released.
func (l *Ledger[K]) Unhold(id K) (released bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	released, _ = l.close(id, false, false)
	return released
}

// Close drops a handle's pin. It reports whether the inode had no names
// left and is now released, so its stored bytes can go. The close of a
// writer starts the grace period, which covers the publish step after a
// store (link or rename of the temp file); a reader's close does not, so
// hot readers cannot make a cache unevictable. The last writer's close
// drops the reservation; callers Settle first, and bytes a writer never
// settled are admitted here, evicting others if they must.
func (l *Ledger[K]) Close(id K, write bool) (released bool, victims []Victim[K]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.close(id, write, true)
}

// close drops a pin, and marks the inode most recently used if use.
func (l *Ledger[K]) close(id K, write, use bool) (released bool, victims []Victim[K]) {
	e, ok := l.get(id)
	if !ok || e.pins == 0 || (write && l.writers(e) == 0) {
		return false, nil
	}
	closed := l.now().UnixNano()
	if write && l.writers(e) == 1 {
		if w := l.wr(e); w.unchanged {
			closed = w.priorClose
		}
		victims = l.endWriting(e)
	}
	l.unpin(e, write)
	if write && !e.final() {
		e.lastClose = closed
	}
	if use {
		l.use(e) // notes it
	}
	l.signal()
	if e.pins == 0 && e.nlink == 0 {
		l.remove(e)
		return true, victims
	}
	return false, victims
}

// CloseFree is Close for a close that must not evict: when the last
// writer's close would have to (it admits what its writers left
// unadmitted), it changes nothing and answers ErrBusy, and the caller
// closes with Close under its namespace lock.
func (l *Ledger[K]) CloseFree(id K, write bool) (released bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.get(id); ok && write && l.writers(e) == 1 && e.pins > 0 {
		// What endWriting leaves charged, against the capacity.
		used := l.used - e.charge + Charge(e.size)
		if used-(l.over-l.wr(e).over) > l.capacity {
			return false, ErrBusy
		}
	}
	released, _ = l.close(id, write, true) // no victims: it fits
	return released, nil
}

// EndGrace is an object's publish step (a link or a rename to a name):
// the grace period that protects a just-closed object until then ends
// now, and no later writer's close starts another, so a full cache of
// published objects turns over at eviction's pace, not at capacity /
// grace.
func (l *Ledger[K]) EndGrace(id K) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.get(id); ok {
		e.lastClose = published
		l.note(e)
		l.signal()
	}
}

// Unchanged tells the ledger that id's writers, all of which are to
// close, changed nothing of the object they opened whole: the last
// one's close does not start a grace period (there is no store to
// publish), and the object keeps the grace it had before they opened,
// so room an idle writer held comes free at its close. A writer that
// opens before that close voids it.
func (l *Ledger[K]) Unchanged(id K) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.get(id); ok && e.w != 0 {
		l.wr(e).unchanged = true
	}
}

// endWriting returns the last writer's reservation and admits whatever it
// left unadmitted; mu held.
func (l *Ledger[K]) endWriting(e *entry[K]) []Victim[K] {
	unadmitted := l.wr(e).over > 0
	l.setOver(e, 0)
	l.resize(e, e.size, 0)
	victims, err := l.trim(e)
	if err != nil && unadmitted {
		// The bytes are in the store and nothing can make room now: the
		// ledger follows the store, as when it changed behind kvfs's
		// back, until a Trim can evict. A cache over its capacity for
		// others' bytes (a handover to a smaller one, its objects held
		// open) is no such change (an outside tester saw a
		// reconciliation counted for every writer refused there).
		l.follow()
	}
	return victims
}

// Reserve admits a reservation of n bytes for an open writer: its charge
// is at least Charge(n) until it settles. Whatever it holds unadmitted is
// admitted with it.
func (l *Ledger[K]) Reserve(id K, n int64) ([]Victim[K], error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reserve(id, n)
}

// Budget raises what an open writer's growth may evict for to that of
// a writer reserved n (see pastBudget), reserving nothing: a writer
// whose reservation was a guess it was given only in part, or not at
// all. With no budget its growth evicted without bound: a shell's
// `head -c 20M > big` into a full 16 MiB cache emptied it on its way
// to ENOSPC.
func (l *Ledger[K]) Budget(id K, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, err := l.writer(id); err == nil {
		w := l.wr(e)
		w.budget = max(w.budget, Charge(n))
	}
}

func (l *Ledger[K]) reserve(id K, n int64) ([]Victim[K], error) {
	e, err := l.writer(id)
	if err != nil {
		return nil, err
	}
	return l.admit(e, e.size, max(l.wr(e).res, Charge(n)), false)
}

// Grow raises an inode's size to at least end (a write's end offset that
// the caller sees), evicting others first if the charge would pass the
// capacity. A writer's growth evicts only up to twice its reservation,
// so that one write that can never fit cannot empty the cache on its way
// to ENOSPC. Past that it takes free space, else its bytes are charged
// unadmitted, as a passthrough writer's are (Observe): its close admits
// them at its final size, evicting then, all or nothing (Settle). So a
// store larger than its writer was reserved for is not refused room the
// cache can free (an outside tester: with the daemon writing, a full
// cache of 1 MiB objects refused every 8 MiB store, on every retry).
// Growth past the capacity is ErrTooLarge. Concurrent writes may arrive
// out of order, so Grow never shrinks.
func (l *Ledger[K]) Grow(id K, end int64) ([]Victim[K], error) {
	return l.grow(id, end, pastBudgetOver)
}

// GrowWithin is Grow for a strict capacity, whose bytes may never pass
// it, not even unadmitted: past twice its reservation a writer's growth
// takes free space only, else ErrPastBudget.
func (l *Ledger[K]) GrowWithin(id K, end int64) ([]Victim[K], error) {
	return l.grow(id, end, pastBudgetFree)
}

// Extend is Grow for a size stated at once (fallocate): it fits in full
// or evicts nothing, so no budget applies.
func (l *Ledger[K]) Extend(id K, end int64) ([]Victim[K], error) {
	return l.grow(id, end, unbudgeted)
}

// budgeting is what a writer's growth past twice its reservation does.
type budgeting int

const (
	unbudgeted     budgeting = iota // evicts as needed (a size stated at once)
	pastBudgetOver                  // takes free space, else is charged unadmitted
	pastBudgetFree                  // takes free space, else ErrPastBudget
)

func (l *Ledger[K]) grow(id K, end int64, b budgeting) ([]Victim[K], error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.growLocked(id, end, b)
}

func (l *Ledger[K]) growLocked(id K, end int64, b budgeting) ([]Victim[K], error) {
	e, ok := l.get(id)
	if !ok {
		return nil, ErrGone
	}
	if end <= e.size {
		return nil, nil
	}
	res := l.wr(e).res
	past := b != unbudgeted && l.pastBudget(e, max(Charge(end), res))
	if past && b == pastBudgetOver {
		if Charge(end) > l.capacity {
			return nil, ErrTooLarge
		}
		return l.observe(id, end)
	}
	return l.admit(e, end, res, past)
}

// SetSize sets an inode's size exactly (truncate), evicting if it grows.
// A truncate states its whole size at once, so no budget applies: it fits
// in full or evicts nothing.
func (l *Ledger[K]) SetSize(id K, size int64) ([]Victim[K], error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.setSize(id, size)
}

func (l *Ledger[K]) setSize(id K, size int64) ([]Victim[K], error) {
	e, ok := l.get(id)
	if !ok {
		return nil, ErrGone
	}
	if e.w != 0 && size < e.size && l.wr(e).over > 0 {
		// A shrink of bytes partly unadmitted: they were on the disk
		// already, so it is never refused; the new size's charge past
		// what was admitted stays unadmitted. Admitted as a new size,
		// it waited for room and failed while readers pinned the
		// cache (an outside tester: `kvfs put --direct`'s cut-back
		// after a refused write answered ENOSPC after a second wait).
		admitted := e.charge - l.wr(e).over
		l.resize(e, size, l.wr(e).res)
		l.setOver(e, max(e.charge-admitted, 0))
		return nil, nil
	}
	return l.admit(e, size, l.wr(e).res, false)
}

// Observe records the stored size of an object whose writer writes past
// the daemon (FUSE passthrough). Growth is admitted as Grow admits it when
// it can be; when it cannot, the bytes are on disk anyway: they are
// charged unadmitted (they make nobody else evict) until the writer
// settles. Observe never shrinks an inode: a smaller size is a report
// older than a truncate.
func (l *Ledger[K]) Observe(id K, size int64) ([]Victim[K], error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.observe(id, size)
}

func (l *Ledger[K]) observe(id K, size int64) ([]Victim[K], error) {
	e, err := l.writer(id)
	if err != nil || size <= e.size {
		return nil, err
	}
	res := l.wr(e).res
	charge := max(Charge(size), res)
	if charge <= e.charge {
		l.resize(e, size, res)
		return nil, nil
	}
	grow := charge - e.charge
	over := l.wr(e).over
	victims, err := l.room(e, grow, e.charge-over+grow, l.pastBudget(e, charge))
	if errors.Is(err, ErrBusy) {
		return nil, err
	}
	if err != nil {
		over += grow
	}
	l.resize(e, size, res)
	l.setOver(e, over)
	return victims, nil
}

// Settle admits a writer's object at its size now, as a descriptor of
// it closes (a FLUSH). The reservation stays: a duplicate of the
// descriptor may write on (a Popen parent's close comes before its
// child's first byte), and a passthrough writer's bytes land before the
// ledger sees them, so its reservation is the only room they have; it
// goes at the last writer's SettleLast. (Given back here, 16-20 Popen
// writers of 1-8 MiB each took the room back for the next writer at its
// parent's close, and wrote 20 MiB past a 64 MiB capacity: an outside
// tester.) Kept, it is no longer shown: past a close of its only
// writer's descriptor the object's st_blocks, used and the other
// figures are exactly what it holds, as a client that closed its file
// expects, while admission still counts the room (kept). It evicts
// others to fit, all or nothing; on error nothing changed, and the
// caller may retry, or must remove the object: nothing over the
// capacity is ever published. Once a settle has admitted the object
// past twice its budget, later ones that free space cannot cover evict
// nothing while eviction could make the room: the rest stays unadmitted
// for the last writer's SettleLast. When even eviction could not make
// it now, they fail as any settle does.
func (l *Ledger[K]) Settle(id K, size int64) ([]Victim[K], error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.settle(id, size, false, true)
}

// SettleShown is Settle at a close known not to end the writing (another
// process's, which goes on): its reservation stays an open writer's,
// shown, and one an earlier close kept is shown again (see Show), in
// the same step. Settled, then shown, a stat between the two steps saw
// the reservation gone that the stats before and after both showed (an
// outside tester, sampling st_blocks beside a shell loop's children).
func (l *Ledger[K]) SettleShown(id K, size int64) ([]Victim[K], error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.settle(id, size, false, false)
}

// SettleLast is Settle as the last writer's handle is released: writing
// has ended, so the object is admitted whole at exactly Charge(size),
// its reservation given back, evicting, all or nothing, however its
// earlier settles went.
func (l *Ledger[K]) SettleLast(id K, size int64) ([]Victim[K], error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.settle(id, size, true, false)
}

// settle settles id at size; hide: a close that may end the writing
// keeps the reservation unshown (Settle), else it is shown (SettleShown).
func (l *Ledger[K]) settle(id K, size int64, last, hide bool) ([]Victim[K], error) {
	v, err := l.settleAdmit(id, size, last)
	if e, ok := l.get(id); ok && err == nil && !last {
		switch {
		case !hide:
			l.keep(e, false)
		case l.writers(e) == 1:
			l.keep(e, true)
		}
	}
	return v, err
}

func (l *Ledger[K]) settleAdmit(id K, size int64, last bool) ([]Victim[K], error) {
	e, err := l.writer(id)
	if err != nil {
		return nil, err
	}
	res := l.wr(e).res
	if last && l.writers(e) == 1 {
		res = 0 // writing has ended: the reservation goes
	}
	past := l.pastBudget(e, max(Charge(size), res))
	if past && l.wr(e).settledPast && !last {
		// Settled past its budget again, grown since: a writer whose
		// descriptors are closed while it writes on (a process that
		// forks: each child's exec closes its copy, a FLUSH). Each
		// settle admitted what was written so far, evicting, and a
		// store that turned out never to fit emptied the cache (an
		// outside tester: a writer that ran `kvfs stats` every 4 MiB).
		// Its growth past the budget now waits, unadmitted, for the
		// last release (SettleLast), all or nothing.
		if Charge(size) > l.capacity {
			return nil, ErrTooLarge
		}
		var grown []Victim[K]
		if size > e.size {
			if grown, err = l.observe(id, size); err != nil {
				return grown, err
			}
		}
		// What free space admits is admitted; the rest stays
		// unadmitted while eviction could make room for it, and is
		// refused when even that could not (a writer that ran a child
		// while the readers of a shrunk cache held the rest: its close
		// answered success for an object over the capacity).
		charge := max(Charge(size), res)
		v, err := l.admit(e, size, res, true)
		if errors.Is(err, ErrPastBudget) {
			if l.couldMake(e, charge-(e.charge-l.wr(e).over)) {
				return grown, nil
			}
			return grown, ErrNoSpace
		}
		return append(grown, v...), err
	}
	v, err := l.admit(e, size, res, false)
	if err == nil && past {
		l.wr(e).settledPast = true
	}
	return v, err
}

// Show ends the hiding of a reservation a close kept (see Settle): the
// object's writer did not end within the moment a RELEASE takes after a
// close, so a duplicate of its descriptor lives on (a Popen child, a
// fork) and its reservation is an open writer's like any other, shown in
// used, df and st_blocks. Without it, children that hold files and write
// nothing had evicted a cache for their reservations while df showed it
// empty (an outside tester: 12 `sleep`s holding files, 64 MiB kept,
// every store refused after the wait limit).
func (l *Ledger[K]) Show(id K) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.get(id); ok {
		l.keep(e, false)
	}
}

// Cut sets a refused writer's object back to size, what it held before
// its writers (never more than it holds: a writer that truncated it
// leaves nothing to go back to), and gives the reservation back when it
// is the only writer: it is admitted nothing more, so it keeps no room
// from others while its descriptors close. Shrinking, it never evicts.
func (l *Ledger[K]) Cut(id K, size int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, err := l.writer(id)
	if err != nil || size > e.size {
		return
	}
	res := l.wr(e).res
	if l.writers(e) == 1 {
		res = 0
	}
	l.setOver(e, 0)
	l.resize(e, size, res)
}

// couldMake says whether room could make need more bytes for e now,
// without making them: from free space, other writers' unused
// reservations and cold objects; mu held.
func (l *Ledger[K]) couldMake(e *entry[K], need int64) bool {
	free := l.capacity - (l.used - l.over)
	for i := l.open.first(); i != 0 && free < need; i = l.open.next(i) {
		free += l.spare(l.slab.at(l.writing.recs[i].e), e)
	}
	if free >= need {
		return true
	}
	_, freed := l.coldest(need-free, e)
	return free+freed >= need
}

// writer finds id and checks that it has a writer open; mu held.
func (l *Ledger[K]) writer(id K) (*entry[K], error) {
	e, ok := l.get(id)
	switch {
	case !ok:
		return nil, ErrGone
	case e.w == 0:
		return nil, ErrNotWriter
	}
	return e, nil
}

// pastBudget says whether growth of a writer to charge goes past what it
// may evict for: twice the most it was reserved, or a quarter of the
// capacity (the largest reservation) if that is more (never reserved: no
// bound). Not its reservation now: other writers may have taken that
// back (reclaim), and a store that can never fit would then empty the
// cache. The quarter: a store larger than the objects before it (an 8
// MiB `cp` into a 32 MiB cache of 100 KB objects, reserved 100 KB) was
// past its budget at 200 KB, and its bytes went unadmitted until its
// close, 8 MiB over the capacity (an outside tester); one that can never
// fit still evicts at most half the cache, as a writer reserved a
// quarter always could; mu held.
func (l *Ledger[K]) pastBudget(e *entry[K], charge int64) bool {
	budget := l.wr(e).budget
	return budget > 0 && charge > max(2*budget, l.capacity/4)
}

// Reconcile sets an inode's size to what the store really holds, without
// admission: the bytes are already there. Used when the store changed
// behind kvfs's back, only for inodes no writer has open; it may leave
// used above capacity until the caller evicts with Trim.
func (l *Ledger[K]) Reconcile(id K, size int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.get(id)
	if !ok || e.size == size || e.w != 0 {
		return false
	}
	l.resize(e, size, 0)
	l.follow()
	return true
}

// Trim evicts until the admitted bytes are within capacity again.
func (l *Ledger[K]) Trim() []Victim[K] {
	l.mu.Lock()
	defer l.mu.Unlock()
	victims, _ := l.trim(nil)
	return victims
}

// Shed evicts count objects from the cold end, as an admission would
// (sparing pinned objects and those in their grace period), or as many
// as may go: for inodes the store's file system lacks, which the
// capacity does not count.
func (l *Ledger[K]) Shed(count int) []Victim[K] {
	l.mu.Lock()
	defer l.mu.Unlock()
	cutoff := l.now().UnixNano() - l.grace
	var chosen []*entry[K]
	for i := l.lru.first(); i != 0 && len(chosen) < count; i = l.lru.next(i) {
		if e := l.slab.at(i); e.evictable(cutoff) {
			chosen = append(chosen, e)
		}
	}
	return l.commitVictims(chosen)
}

// Link adds a name to an inode.
func (l *Ledger[K]) Link(id K) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.get(id)
	if !ok {
		return ErrGone
	}
	if e.nlink == 0 {
		l.shadow -= e.charge
		l.keptShadow -= l.keptOf(e)
	}
	e.nlink++
	l.note(e)
	return nil
}

// Unlink removes a name. When the last name goes, an open inode turns to
// shadow bytes until its last close; a closed one is released at once,
// and Unlink reports that its bytes can go.
func (l *Ledger[K]) Unlink(id K) (released bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.get(id)
	if !ok || e.nlink == 0 {
		return false
	}
	e.nlink--
	l.note(e)
	if e.nlink > 0 {
		return false
	}
	// Shadow even when released at once: remove takes it back out.
	l.shadow += e.charge
	l.keptShadow += l.keptOf(e)
	if e.pins > 0 {
		return false
	}
	l.remove(e)
	return true
}

// Forget drops an inode whatever its state: its bytes vanished from the
// store. It counts as a reconciliation, not an eviction.
func (l *Ledger[K]) Forget(id K) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.get(id)
	if !ok {
		return false
	}
	l.remove(e)
	l.follow()
	return true
}

// Size reports an inode's size and charge.
func (l *Ledger[K]) Size(id K) (size, charge int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.get(id)
	if !ok {
		return 0, 0, false
	}
	return e.size, e.charge, true
}

// Shown is Size as stat(2) shows it (st_blocks): without a reservation
// kept past a close (see Settle). writing: the inode has write handles
// open, so what is shown may change with no request (a reservation kept
// at a close, shown again after it, a passthrough writer's growth).
func (l *Ledger[K]) Shown(id K) (size, charge int64, writing, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.get(id)
	if !ok {
		return 0, 0, false, false
	}
	return e.size, e.charge - l.keptOf(e), l.writers(e) > 0, true
}

// Writers reports how many write handles an inode has open.
func (l *Ledger[K]) Writers(id K) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.get(id); ok {
		return int(l.writers(e))
	}
	return 0
}

// Unadmitted reports the bytes of an inode's charge not admitted against
// the capacity (its writers' growth past what could be admitted).
func (l *Ledger[K]) Unadmitted(id K) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.get(id); ok {
		return l.wr(e).over
	}
	return 0
}

// WaitHint says how long a refused admission of n bytes should wait
// before retrying: the space exists but is held by recently closed or
// read-pinned inodes, or reserved by writers, and will become evictable.
// Zero means retrying cannot help: what open writers have written leaves
// less than n.
func (l *Ledger[K]) WaitHint(n int64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n > l.capacity-(l.writeBytes-l.reserved) {
		return 0
	}
	return time.Duration(l.grace)/4 + time.Millisecond
}

// GiveWay says whether id's writer is the one that gives way where
// writers in flight together wrote more than the cache holds and none of
// them can be admitted until one is refused: the writer whose writing
// began last of those that hold room (a charge), so that of two stores
// that cannot both fit the older one is kept, and each refusal frees
// room for the rest (see core's admit); a writer that holds none waits
// for them. Where nothing has changed for a while (stalled), it is the
// youngest of the writers that wait, itself included, whatever they
// hold: a writer that holds room but neither writes nor waits (a data
// file held open while its thread's metadata file waits) gives it back
// only once that thread's waiting writer is refused; but not one that
// holds nothing behind an older writer that waits holding room (Behind):
// its refusal frees nothing. While a writer that
// gave way is still being written, none yields: what it holds comes
// free at its release, and the next one's turn is after that. Where
// id's writer gives way, it notes so in the same step: asked and noted
// apart, two writers that asked at the same moment were both told to
// give way before either noted it (a race test, 2 of 150 runs).
func (l *Ledger[K]) GiveWay(id K, stalled bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.yields(id, stalled) {
		return false
	}
	if e, ok := l.get(id); ok && e.w != 0 {
		l.wr(e).gaveWay = true
	}
	return true
}

// Group notes the process that made id, being written (g > 0): a
// stalled writer of it that holds nothing gives way only where another
// writer of that process holds room its refusal may free (see yields).
func (l *Ledger[K]) Group(id K, g int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.get(id); ok && e.w != 0 && g > 0 {
		l.wr(e).group = g
	}
}

// Inert says whether a refusal of id's writer would free nothing: it
// holds nothing, and its process (Group) no other writer that holds
// room. Such a writer does not give way when stalled (yields); a wait
// for a whole reservation does without it instead (core's admitWhole).
func (l *Ledger[K]) Inert(id K) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.get(id)
	return ok && e.w != 0 && l.inert(e, l.holdingGroups())
}

// holdingGroups are the processes (Group) with a writer that holds
// room; mu held.
func (l *Ledger[K]) holdingGroups() map[int32]bool {
	held := map[int32]bool{}
	for i := l.open.first(); i != 0; i = l.open.next(i) {
		if w := &l.writing.recs[i]; w.group != 0 && l.slab.at(w.e).charge > 0 {
			held[w.group] = true
		}
	}
	return held
}

// inert: e, being written, holds nothing, and is of a known process no
// other writer of which holds room; mu held.
func (l *Ledger[K]) inert(e *entry[K], held map[int32]bool) bool {
	w := l.wr(e)
	return e.charge == 0 && w.group != 0 && !held[w.group]
}

// yields is GiveWay's answer, noting nothing; mu held.
func (l *Ledger[K]) yields(id K, stalled bool) bool {
	self, ok := l.get(id)
	if !ok || self.w == 0 {
		return true
	}
	// Stalled, a writer that holds nothing and comes after an older one
	// that waits holding room (see Behind) does not give way: that frees
	// nothing, and the room the older ones wait for stays held. (A
	// thread refused so stored again at once, and its next store was
	// the youngest in turn: 8 writers into 16 MiB each refused one store
	// every 0.3 s for nothing while the older writers waited out the
	// limit; an outside tester.)
	// Nor does a writer that holds nothing and whose process holds no
	// other room (inert): its refusal frees nothing either. A writer
	// stopped (SIGSTOP) as it waited for room, older, had the next store
	// of a cache that readers held give way 0.3 s in, where alone it
	// waited for the readers to close and was stored (an outside tester,
	// 3 of 3). A thread whose data file holds room while its metadata
	// file's write waits still gives way: its refusal lets it close the
	// data file.
	var oldestHolder uint32
	var held map[int32]bool
	if stalled {
		oldestHolder = l.waitingHolder(0)
		held = l.holdingGroups()
	}
	behind := oldestHolder != 0 // going from the youngest: until oldestHolder
	yields := false
	for i := l.open.last(); i != 0; i = l.open.prev(i) {
		w := &l.writing.recs[i]
		e := l.slab.at(w.e)
		if w.gaveWay && e != self {
			return false
		}
		stuck := stalled && (e == self || w.waiting > 0) && !(behind && e.charge == 0) && !l.inert(e, held)
		if !yields && (stuck || !stalled && e.charge > 0) {
			if e != self {
				return false
			}
			yields = true
		}
		if i == oldestHolder {
			behind = false
		}
	}
	return yields || !stalled && l.writeBytes == 0
}

// GraceEnding says whether an object that nothing pins is kept from
// eviction by its grace alone (closed, its publish step to come): room
// that comes free by itself once the grace ends, so an admission that
// waits for it is not stalled though nothing in flight moves (see
// core's admit). It looks from the LRU's hot end at the objects used
// within the grace, where every such object is (its close used it).
func (l *Ledger[K]) GraceEnding() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	cutoff := l.now().UnixNano() - l.grace
	for i := l.lru.last(); i != 0; i = l.lru.prev(i) {
		e := l.slab.at(i)
		if e.lastUse <= cutoff {
			return false
		}
		if e.pins == 0 && e.charge > 0 && e.inGrace(cutoff) {
			return true
		}
	}
	return false
}

// Progress is a count that moves whenever a size or a charge changes or
// a writing ends: an admission that waits sees by it whether anything in
// flight moves at all (see core's admit).
func (l *Ledger[K]) Progress() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.moves
}

// Behind says whether id's writer, which holds no room yet, comes after
// an older writer that holds room and waits for more: the room that
// frees goes to that one first (see core's admit).
func (l *Ledger[K]) Behind(id K) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	self, ok := l.get(id)
	if !ok || self.w == 0 || self.charge > 0 {
		return false
	}
	return l.waitingHolder(self.w) != 0
}

// waitingHolder is the oldest writer, older than the one at until (0:
// any), that holds room and waits for more, or 0; mu held.
func (l *Ledger[K]) waitingHolder(until uint32) uint32 {
	for i := l.open.first(); i != 0 && i != until; i = l.open.next(i) {
		if w := &l.writing.recs[i]; w.waiting > 0 && l.slab.at(w.e).charge > 0 {
			return i
		}
	}
	return 0
}

// Writing reports how many objects are being written now.
func (l *Ledger[K]) Writing() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writing.inUse()
}

// Waiting notes that a writer of id waits in an admission for room (on),
// or no longer does.
func (l *Ledger[K]) Waiting(id K, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.get(id)
	if !ok || e.w == 0 {
		return
	}
	if w := l.wr(e); on {
		w.waiting++
	} else if w.waiting > 0 {
		w.waiting--
	}
}

// OthersFinishing says whether another object than id is being written,
// holds bytes, all of them admitted, and has no writer waiting for room:
// its writing goes on, and its object will leave the writers' bytes at
// its last release, to be evicted once it is published or its grace
// ends. What such writers hold is room that comes free; what writers
// that wait hold (bytes written past what could be admitted, or admitted
// piece by piece with the next piece waiting) is not, until one of them
// is refused (see core's admit).
func (l *Ledger[K]) OthersFinishing(id K) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	self, _ := l.get(id)
	for i := l.open.first(); i != 0; i = l.open.next(i) {
		w := &l.writing.recs[i]
		e := l.slab.at(w.e)
		if e != self && w.over == 0 && w.waiting == 0 && e.size > 0 {
			return true
		}
	}
	return false
}

// follow notes that the ledger followed the store, counted as a
// reconciliation unless it is kvfs's own change; mu held.
func (l *Ledger[K]) follow() {
	l.followed = true
	if !l.own {
		l.reconciled++
	}
}

// Own has the ledger follow the store from now until Own(false)
// without counting reconciliations: the changes are kvfs's own (the
// stores taken while the index loaded, settled as it is built), none
// made behind its back.
func (l *Ledger[K]) Own(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.own = on
}

// Owning says whether the ledger follows kvfs's own changes now (Own).
func (l *Ledger[K]) Owning() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.own
}

// Refused counts an ENOSPC answered to a client: admission_failures
// counts those, not the refusals a caller turned into a wait and a retry.
func (l *Ledger[K]) Refused() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refusals++
}

// Closed is an object within its grace period: when its last writer
// closed (unix nanoseconds).
type Closed[K comparable] struct {
	ID        K     `json:"id"`
	LastClose int64 `json:"last_close"`
}

// InGrace lists the objects whose grace period still runs, for a
// successor to keep it (Regrace): a store closed just before a handover
// has its publish step still to come.
func (l *Ledger[K]) InGrace() []Closed[K] {
	l.mu.Lock()
	defer l.mu.Unlock()
	cutoff := l.now().UnixNano() - l.grace
	var out []Closed[K]
	for id := range l.entries {
		if e, ok := l.get(id); ok && e.inGrace(cutoff) {
			out = append(out, Closed[K]{ID: id, LastClose: e.lastClose})
		}
	}
	return out
}

// Regrace gives an object the grace period a predecessor's ledger had
// started for it at lastClose.
func (l *Ledger[K]) Regrace(id K, lastClose int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.get(id); ok {
		e.lastClose = lastClose
	}
}

// Place sets id's entry as a handover's predecessor held it: its size
// and names, and its place in the LRU order right after after's entry
// (the coldest place when first). Nothing is admitted: the predecessor
// admitted it; the entry has no handles yet.
func (l *Ledger[K]) Place(id K, size int64, nlink int, after K, first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now().UnixNano()
	if e, ok := l.get(id); ok {
		now = e.lastUse
		l.remove(e)
	}
	e := l.insert(entry[K]{id: id, size: size, charge: Charge(size), nlink: int32(nlink), lastUse: now})
	at := uint32(0)
	if !first {
		if p, ok := l.get(after); ok && p != e {
			at = p.self
		}
	}
	for _, w := range l.walks {
		w.broken = true // a place anywhere: the walk may pass it by
	}
	l.lru.remove(e.self)
	l.lru.insertAfter(e.self, at)
}

// Drop removes id's entry, as a handover's predecessor no longer had
// it; it counts as nothing.
func (l *Ledger[K]) Drop(id K) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.get(id); ok {
		l.remove(e)
	}
}

// SetCapacity changes the capacity and evicts what no longer fits
// (sparing, as always, pinned objects and those in their grace period:
// if those alone are over it, nothing is evicted and the admitted bytes
// stay over until enough are let go). Where the cache is over, objects
// larger than the whole new capacity go first, whatever their place in
// the LRU: they can never fit, and evicting the colder ones before them
// only to evict them too emptied the cache (an outside tester: a
// handover from 64 MiB to 32 MiB evicted 24 MiB of cold objects, then a
// recently read 40 MiB one, and kept nothing).
func (l *Ledger[K]) SetCapacity(capacity int64) []Victim[K] {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.capacity = capacity
	var chosen []*entry[K]
	if l.used-l.over > capacity {
		cutoff := l.now().UnixNano() - l.grace
		for i := l.lru.first(); i != 0; i = l.lru.next(i) {
			if e := l.slab.at(i); e.charge > capacity && e.evictable(cutoff) {
				chosen = append(chosen, e)
			}
		}
	}
	victims := l.commitVictims(chosen)
	more, err := l.trim(nil)
	victims = append(victims, more...)
	if err != nil {
		// Held over the new capacity: no reconciliation, but the
		// admitted bytes may pass it until enough are let go.
		l.followed = true
	}
	return victims
}

// Change is an entry as it is now, for a handover's successor: its size,
// names (links) and the entry before it in the LRU order (First: none),
// and when its last writer closed, if its grace period still runs; or
// Gone.
type Change[K comparable] struct {
	ID        K
	Size      int64
	Links     int
	After     K
	First     bool
	Gone      bool
	LastClose int64
}

// Track starts noting the entries that change (Changes).
func (l *Ledger[K]) Track() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noted = map[K]struct{}{}
}

// Untrack stops it.
func (l *Ledger[K]) Untrack() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noted = nil
}

// Note notes ids as changed.
func (l *Ledger[K]) Note(ids ...K) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.noted == nil {
		return
	}
	for _, id := range ids {
		l.noted[id] = struct{}{}
	}
}

// Changes returns the entries noted since Track or the last call, and
// those of extra, as they are now, and starts noting afresh (if it
// notes at all: without Track, extra alone).
func (l *Ledger[K]) Changes(extra []K) []Change[K] {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := l.noted
	if ids == nil {
		ids = map[K]struct{}{}
	}
	for _, id := range extra {
		ids[id] = struct{}{}
	}
	cutoff := l.now().UnixNano() - l.grace
	out := make([]Change[K], 0, len(ids))
	for id := range ids {
		e, ok := l.get(id)
		if !ok {
			out = append(out, Change[K]{ID: id, Gone: true})
			continue
		}
		c := Change[K]{ID: id, Size: e.size, Links: int(e.nlink)}
		if prev := e.lru[before]; prev != 0 {
			c.After = l.slab.at(prev).id
		} else {
			c.First = true
		}
		if e.inGrace(cutoff) {
			c.LastClose = e.lastClose
		}
		out = append(out, c)
	}
	clear(l.noted)
	return out
}

// Unpublished says whether an object is there, held by no writer, and
// was closed by one without a publish step since (its grace running or
// run out): what a thread left behind when it creates its next object.
// (An object whose last close came just before, its RELEASE still to
// come, does not count: the evidence errs on the side of the grace.)
func (l *Ledger[K]) Unpublished(id K) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.get(id)
	return ok && e.w == 0 && e.lastClose > 0
}

// Unfinished says whether an object is there and held by a writer,
// without a publish step yet: the core asks it of a writer whose
// descriptor was closed, its RELEASE still to come.
func (l *Ledger[K]) Unfinished(id K) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.get(id)
	return ok && e.w > 0 && !e.final()
}
