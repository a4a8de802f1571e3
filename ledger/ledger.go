// Package ledger is kvfs's exact byte accounting: one entry per inode,
// charged its size rounded up to a block, kept in least-recently-used
// order, pinned by open handles. It only counts and chooses victims; the
// caller deletes their bytes outside the lock. It never imports FUSE.
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

// ID names an inode. IDs are never reused within one ledger.
type ID uint64

var (
	// ErrNoSpace means the charge cannot fit even after evicting
	// everything evictable.
	ErrNoSpace = errors.New("ledger: no space left under capacity")
	// ErrTooLarge means the size exceeds the whole capacity.
	ErrTooLarge = errors.New("ledger: object larger than capacity")
	// ErrGone means the inode was evicted or released.
	ErrGone = errors.New("ledger: object is gone")
	// ErrExists means the ID is already in the ledger.
	ErrExists = errors.New("ledger: object already exists")
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
type Victim struct {
	ID     ID
	Charge int64
}

// Config sets a ledger's limits. Now is injectable for tests.
type Config struct {
	Capacity int64
	Grace    time.Duration
	Now      func() time.Time
	// SizeHint is how many inodes to make room for up front.
	SizeHint int
}

// Ledger is safe for concurrent use; every method takes mu once and does
// O(1) work apart from eviction, which walks the LRU from its cold end
// past pinned or recently closed entries only.
type Ledger struct {
	mu sync.Mutex
	// GUARDED_BY(mu), all fields below.
	capacity int64
	grace    int64
	now      func() time.Time
	entries  map[ID]*entry
	lru      list
	// INVARIANT: used == sum of charge over entries; used <= capacity.
	used int64
	// INVARIANT: shadow == sum of charge over entries with nlink == 0.
	shadow int64
	// INVARIANT: pinnedObjs, pinnedBytes count entries with pins > 0.
	pinnedObjs  int64
	pinnedBytes int64
	// INVARIANT: writeBytes == sum of charge over entries with writers > 0.
	writeBytes int64
	evictions  int64
	evicted    int64
	refusals   int64
	reconciled int64
}

// entry is one inode; it is on the LRU list from creation to removal.
type entry struct {
	id         ID
	size       int64
	charge     int64
	pins       int32
	writers    int32
	nlink      int32
	lastClose  int64 // unix nanoseconds
	prev, next *entry
}

// New returns an empty ledger.
func New(cfg Config) *Ledger {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	l := &Ledger{
		capacity: cfg.Capacity,
		grace:    int64(cfg.Grace),
		now:      now,
		entries:  make(map[ID]*entry, cfg.SizeHint),
	}
	l.lru.init()
	return l
}

// Capacity is the configured limit in bytes.
func (l *Ledger) Capacity() int64 { return l.capacity }

// Restore adds an inode found in the store at start-up, as most recently
// used: restore in access order, oldest first. If the store holds more
// than the capacity, the coldest inodes are returned as victims.
func (l *Ledger) Restore(id ID, size int64, nlink int) ([]Victim, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.restore(id, size, nlink)
}

// restore is Restore with mu held.
func (l *Ledger) restore(id ID, size int64, nlink int) ([]Victim, error) {
	if _, ok := l.entries[id]; ok {
		return nil, ErrExists
	}
	e := &entry{id: id, size: size, charge: Charge(size), nlink: int32(nlink)}
	if e.charge > l.capacity {
		return []Victim{{ID: id, Charge: 0}}, nil
	}
	victims, err := l.makeRoom(e.charge, nil)
	if err != nil {
		return victims, err
	}
	l.insert(e)
	return victims, nil
}

// Adopt adds an inode that appeared in the store behind kvfs's back, as
// most recently used, evicting others if it does not fit. It counts as a
// reconciliation.
func (l *Ledger) Adopt(id ID, size int64, nlink int) ([]Victim, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	victims, err := l.restore(id, size, nlink)
	if err == nil {
		l.reconciled++
	}
	return victims, err
}

// Create adds a new empty inode with one name, pinned by the handle that
// created it.
func (l *Ledger) Create(id ID, write bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.entries[id]; ok {
		return ErrExists
	}
	e := &entry{id: id, nlink: 1}
	l.insert(e)
	l.pin(e, write)
	return nil
}

// Open pins an inode for a new handle and marks it most recently used.
func (l *Ledger) Open(id ID, write bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[id]
	if !ok {
		return ErrGone
	}
	l.pin(e, write)
	l.lru.moveToBack(e)
	return nil
}

// Close drops a handle's pin. It reports whether the inode had no names
// left and is now released, so its stored bytes can go. The close of a
// writer starts the grace period, which covers the publish step after a
// store (link or rename of the temp file); a reader's close does not, so
// hot readers cannot make a cache unevictable.
func (l *Ledger) Close(id ID, write bool) (released bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[id]
	if !ok || e.pins == 0 {
		return false
	}
	l.unpin(e, write)
	if write {
		e.lastClose = l.now().UnixNano()
	}
	l.lru.moveToBack(e)
	if e.pins == 0 && e.nlink == 0 {
		l.remove(e)
		return true
	}
	return false
}

// Touch marks an inode most recently used without pinning it.
func (l *Ledger) Touch(id ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.entries[id]; ok {
		l.lru.moveToBack(e)
	}
}

// Grow raises an inode's size to at least end (a write's end offset),
// evicting other inodes first if the charge would pass the capacity.
// Concurrent writes may arrive out of order, so Grow never shrinks.
func (l *Ledger) Grow(id ID, end int64) ([]Victim, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[id]
	if !ok {
		return nil, ErrGone
	}
	if end <= e.size {
		return nil, nil
	}
	return l.resize(e, end)
}

// SetSize sets an inode's size exactly (truncate), evicting if it grows.
func (l *Ledger) SetSize(id ID, size int64) ([]Victim, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[id]
	if !ok {
		return nil, ErrGone
	}
	return l.resize(e, size)
}

// Reconcile sets an inode's size to what the store really holds, without
// admission: the bytes are already there. Used when the store changed
// behind kvfs's back; it may leave used above capacity until the caller
// evicts with Trim.
func (l *Ledger) Reconcile(id ID, size int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[id]
	if !ok || e.size == size {
		return false
	}
	l.recharge(e, size)
	l.reconciled++
	return true
}

// Trim evicts until used is within capacity again.
func (l *Ledger) Trim() []Victim {
	l.mu.Lock()
	defer l.mu.Unlock()
	over := l.used - l.capacity
	if over <= 0 {
		return nil
	}
	victims, _ := l.evict(over, nil)
	return victims
}

// Link adds a name to an inode.
func (l *Ledger) Link(id ID) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[id]
	if !ok {
		return ErrGone
	}
	if e.nlink == 0 {
		l.shadow -= e.charge
	}
	e.nlink++
	return nil
}

// Unlink removes a name. When the last name goes, an open inode turns to
// shadow bytes until its last close; a closed one is released at once,
// and Unlink reports that its bytes can go.
func (l *Ledger) Unlink(id ID) (released bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[id]
	if !ok || e.nlink == 0 {
		return false
	}
	e.nlink--
	if e.nlink > 0 {
		return false
	}
	// Shadow even when released at once: remove takes it back out.
	l.shadow += e.charge
	if e.pins > 0 {
		return false
	}
	l.remove(e)
	return true
}

// Forget drops an inode whatever its state: its bytes vanished from the
// store. It counts as a reconciliation, not an eviction.
func (l *Ledger) Forget(id ID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[id]
	if !ok {
		return false
	}
	l.remove(e)
	l.reconciled++
	return true
}

// Size reports an inode's size and charge.
func (l *Ledger) Size(id ID) (size, charge int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[id]
	if !ok {
		return 0, 0, false
	}
	return e.size, e.charge, true
}

// Writers reports how many write handles an inode has open.
func (l *Ledger) Writers(id ID) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.entries[id]; ok {
		return int(e.writers)
	}
	return 0
}

// WaitHint says how long a refused reservation of n bytes should wait
// before retrying: the space exists but is held by recently closed or
// read-pinned inodes that will become evictable. Zero means retrying
// cannot help.
func (l *Ledger) WaitHint(n int64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n > l.capacity-l.writeBytes {
		return 0
	}
	return time.Duration(l.grace)/4 + time.Millisecond
}

// Retried takes back the refusal just counted for a reservation that the
// caller turns into a wait and a retry: admission_failures counts the
// ENOSPC answers clients get, not backpressure.
func (l *Ledger) Retried() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refusals > 0 {
		l.refusals--
	}
}
