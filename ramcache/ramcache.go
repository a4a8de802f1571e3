// Package ramcache is kvfs's optional RAM tier: whole copies of
// committed objects in the daemon's memory, for reads that FUSE
// passthrough does not serve (a daemon without CAP_SYS_ADMIN, or
// --no-passthrough) when the store's own page cache is cold: a store on
// slow or network storage, or one the kernel has pushed out of memory.
//
// It holds copies only. The ledger decides capacity and eviction; this
// tier never changes a charge, and forgetting everything in it loses
// nothing. It is built on ristretto, which admits and evicts by sampled,
// asynchronous policy: a Put may be refused or land a moment later, and
// a Get may miss what was put. Callers must treat it as a hint.
//
// A copy is only ever served for the exact bytes it was made from: each
// copy carries a Stamp (size and modification time) that readers check
// against the stored file, and Drop, which kvfs calls before any change
// to an object's bytes, removes the copy and cancels fills in flight.
package ramcache

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"
)

// Stamp identifies one version of an object's bytes.
type Stamp struct {
	Size  int64
	Mtime int64 // nanoseconds since the epoch
}

// Stats is what `kvfs stats` shows of the tier.
type Stats struct {
	CapacityBytes int64 `json:"capacity_bytes"`
	Bytes         int64 `json:"bytes"`
	Hits          int64 `json:"hits"`
	Misses        int64 `json:"misses"`
	Fills         int64 `json:"fills"`
	Drops         int64 `json:"drops"`
	// Stale counts copies found outdated by their stamp: the store
	// changed behind kvfs's back.
	Stale int64 `json:"stale"`
}

// copyOf is one cached object.
type copyOf struct {
	id    uint64
	stamp Stamp
	data  []byte
}

// Cache is the tier. The zero value is not usable; a nil *Cache is a
// tier that holds nothing, so callers need no checks of their own.
type Cache struct {
	rc       *ristretto.Cache[uint64, *copyOf]
	capacity int64
	// maxObject: larger objects are not cached, so that one object
	// cannot flush the tier.
	maxObject int64

	mu sync.Mutex
	// GUARDED_BY(mu). filling: fills in flight per object, so Drop can
	// cancel them. fillBytes is what their buffers hold.
	filling   map[uint64][]*Fill
	fillBytes int64

	// heldMu comes after mu. held: the copy offered for each object and
	// not gone since (refused, evicted, replaced or dropped), so Drop
	// counts the copies it drops; GUARDED_BY(heldMu). Not mu: ristretto
	// calls OnExit from inside a Set, which finish makes under mu.
	heldMu sync.Mutex
	held   map[uint64]*copyOf

	bytes                             atomic.Int64
	hits, misses, fills, drops, stale atomic.Int64
}

// New makes a tier of capacity bytes.
func New(capacity int64) (*Cache, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("ramcache: capacity %d must be positive", capacity)
	}
	c := &Cache{capacity: capacity, maxObject: capacity / 4, filling: map[uint64][]*Fill{}, held: map[uint64]*copyOf{}}
	// Counters: ten per object the tier could hold at 1 MiB each,
	// which is about the smallest KV chunk worth a RAM copy.
	counters := max(capacity>>20, 1024) * 10
	rc, err := ristretto.NewCache(&ristretto.Config[uint64, *copyOf]{
		NumCounters:        counters,
		MaxCost:            capacity,
		BufferItems:        64,
		IgnoreInternalCost: true,
		OnExit: func(v *copyOf) {
			if v != nil {
				c.bytes.Add(-int64(len(v.data)))
				c.gone(v)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("ramcache: %w", err)
	}
	c.rc = rc
	return c, nil
}

// Close frees the tier.
func (c *Cache) Close() {
	if c != nil {
		c.rc.Close()
	}
}

// Get returns the copy of object id made from the bytes st names, or
// false. The slice is shared and must not be written.
func (c *Cache) Get(id uint64, st Stamp) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	v, ok := c.rc.Get(id)
	if ok && v.stamp == st {
		c.hits.Add(1)
		return v.data, true
	}
	if ok {
		// The store changed without a Drop: behind kvfs's back.
		c.rc.Del(id)
		c.stale.Add(1)
	}
	c.misses.Add(1)
	return nil, false
}

// Drop forgets object id: its copy and any fill in flight. kvfs calls it
// before it changes the object's bytes and when it deletes them.
func (c *Cache) Drop(id uint64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	for _, f := range c.filling[id] {
		f.cancelled = true
	}
	delete(c.filling, id)
	c.mu.Unlock()
	c.heldMu.Lock()
	_, had := c.held[id]
	delete(c.held, id)
	c.heldMu.Unlock()
	c.rc.Del(id)
	if had {
		c.drops.Add(1)
	}
}

// offer puts cp in the tier, and reports whether it was taken; it is
// held from before the Set, so that a refusal or eviction that the
// Set's processing reports at once (OnExit) finds it.
func (c *Cache) offer(cp *copyOf) bool {
	c.heldMu.Lock()
	c.held[cp.id] = cp
	c.heldMu.Unlock()
	if c.rc.Set(cp.id, cp, int64(len(cp.data))) {
		return true
	}
	c.gone(cp)
	return false
}

// gone forgets cp as held, unless a newer copy of its object replaced it.
func (c *Cache) gone(cp *copyOf) {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	if c.held[cp.id] == cp {
		delete(c.held, cp.id)
	}
}

// Stats is a snapshot of the tier's counters.
func (c *Cache) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	return Stats{
		CapacityBytes: c.capacity, Bytes: c.bytes.Load(),
		Hits: c.hits.Load(), Misses: c.misses.Load(), Fills: c.fills.Load(), Drops: c.drops.Load(), Stale: c.stale.Load(),
	}
}

// Wait blocks until Puts so far have been applied or refused; tests use
// it.
func (c *Cache) Wait() {
	if c != nil {
		c.rc.Wait()
	}
}
