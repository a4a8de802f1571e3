package ledger

import "fmt"

// Stats is a snapshot of the ledger, with the JSON names `kvfs stats`
// prints.
type Stats struct {
	CapacityBytes     int64 `json:"capacity_bytes"`
	UsedBytes         int64 `json:"used_bytes"`
	Objects           int64 `json:"objects"`
	PinnedObjects     int64 `json:"pinned_objects"`
	PinnedBytes       int64 `json:"pinned_bytes"`
	ShadowBytes       int64 `json:"shadow_bytes"`
	Evictions         int64 `json:"evictions"`
	EvictedBytes      int64 `json:"evicted_bytes"`
	AdmissionFailures int64 `json:"admission_failures"`
	Reconciliations   int64 `json:"reconciliations"`
}

// Stats returns a consistent snapshot.
func (l *Ledger) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{
		CapacityBytes:     l.capacity,
		UsedBytes:         l.used,
		Objects:           int64(len(l.entries)),
		PinnedObjects:     l.pinnedObjs,
		PinnedBytes:       l.pinnedBytes,
		ShadowBytes:       l.shadow,
		Evictions:         l.evictions,
		EvictedBytes:      l.evicted,
		AdmissionFailures: l.refusals,
		Reconciliations:   l.reconciled,
	}
}

// CheckInvariants recomputes every counter from the entries and the LRU
// list and reports the first disagreement. Tests call it after each step.
func (l *Ledger) CheckInvariants() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var used, shadow, pinObjs, pinBytes, writeBytes int64
	n := 0
	for e := l.lru.front(); e != nil; e = l.lru.nextOf(e) {
		n++
		if l.entries[e.id] != e {
			return fmt.Errorf("lru entry %d not in map", e.id)
		}
		if e.charge != Charge(e.size) || e.size < 0 {
			return fmt.Errorf("entry %d: charge %d for size %d", e.id, e.charge, e.size)
		}
		if e.pins < 0 || e.writers < 0 || e.writers > e.pins || e.nlink < 0 {
			return fmt.Errorf("entry %d: pins %d writers %d nlink %d", e.id, e.pins, e.writers, e.nlink)
		}
		if e.nlink == 0 && e.pins == 0 {
			return fmt.Errorf("entry %d: no names and no pins but still charged", e.id)
		}
		used += e.charge
		if e.nlink == 0 {
			shadow += e.charge
		}
		if e.pins > 0 {
			pinObjs++
			pinBytes += e.charge
		}
		if e.writers > 0 {
			writeBytes += e.charge
		}
	}
	switch {
	case n != len(l.entries):
		return fmt.Errorf("lru has %d entries, map %d", n, len(l.entries))
	case used != l.used:
		return fmt.Errorf("used %d, entries sum to %d", l.used, used)
	case l.used > l.capacity && l.reconciled == 0:
		return fmt.Errorf("used %d exceeds capacity %d", l.used, l.capacity)
	case shadow != l.shadow:
		return fmt.Errorf("shadow %d, entries sum to %d", l.shadow, shadow)
	case pinObjs != l.pinnedObjs || pinBytes != l.pinnedBytes:
		return fmt.Errorf("pinned %d/%d, entries give %d/%d", l.pinnedObjs, l.pinnedBytes, pinObjs, pinBytes)
	case writeBytes != l.writeBytes:
		return fmt.Errorf("write bytes %d, entries give %d", l.writeBytes, writeBytes)
	}
	return nil
}

// Each calls fn for every inode, least recently used first, with its
// size, under the ledger's lock: fn must not call the ledger. A clean
// stop saves this order in the store's snapshot.
func (l *Ledger) Each(fn func(id ID, size int64)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for e := l.lru.front(); e != nil; e = l.lru.nextOf(e) {
		fn(e.id, e.size)
	}
}
