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
	// ReservedBytes is what open writers hold beyond their objects'
	// present sizes: admitted, not yet written.
	ReservedBytes int64 `json:"reserved_bytes"`
	// UnadmittedBytes is what writers wrote past the daemon beyond what
	// could be admitted: on disk over the capacity until they close.
	UnadmittedBytes int64 `json:"unadmitted_bytes"`
	// OvershootMaxBytes is the most used_bytes has been over the
	// capacity lately (in the last one to two OvershootWindows; the
	// high-water mark of unadmitted bytes); 0 in normal operation.
	OvershootMaxBytes int64 `json:"overshoot_max_bytes"`
	// KeptBytes is what writers reserved beyond what they have written
	// and kept past a close of their descriptor, for a duplicate of it
	// that may write on (a Popen child), and do not show yet (see
	// Settle, Show): admission counts it, no other figure shows it (not
	// used_bytes, df or st_blocks).
	KeptBytes int64 `json:"kept_bytes"`
}

// Over says whether the admitted bytes are past the capacity: a smaller
// capacity, or bytes that came without admission, that a Trim could not
// evict all at once (they were in grace or held).
func (l *Ledger[K]) Over() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.used-l.over > l.capacity
}

// Stats returns a consistent snapshot.
func (l *Ledger[K]) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Reservations kept past a close are shown nowhere (see Settle):
	// every one is a writer's, so pinned, and its entry's shadow when
	// the entry has no name.
	used := l.used - l.kept
	return Stats{
		CapacityBytes:     l.capacity,
		UsedBytes:         used,
		Objects:           int64(len(l.entries)),
		PinnedObjects:     l.pinnedObjs,
		PinnedBytes:       l.pinnedBytes - l.kept,
		ShadowBytes:       l.shadow - l.keptShadow,
		Evictions:         l.evictions,
		EvictedBytes:      l.evicted,
		AdmissionFailures: l.refusals,
		Reconciliations:   l.reconciled,
		ReservedBytes:     l.reserved - l.kept,
		UnadmittedBytes:   l.over,
		OvershootMaxBytes: l.peak.max(l.now().UnixNano(), max(used-l.capacity, 0)),
		KeptBytes:         l.kept,
	}
}

// sums are the counters CheckInvariants recomputes from the entries.
type sums struct {
	used, over, shadow, pinObjs, pinBytes, writeBytes, reserved, kept, keptShadow int64
}

// CheckInvariants recomputes every counter from the entries and the LRU
// list and reports the first disagreement. Tests call it after each step.
func (l *Ledger[K]) CheckInvariants() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s sums
	n, writers := 0, 0
	for i := l.lru.first(); i != 0; i = l.lru.next(i) {
		e := l.slab.at(i)
		n++
		if i, ok := l.entries[e.id]; !ok || i != e.self {
			return fmt.Errorf("lru entry %v not in map", e.id)
		}
		if err := l.checkEntry(e); err != nil {
			return err
		}
		if e.w != 0 {
			writers++
		}
		l.sumInto(e, &s)
	}
	if err := l.checkWriting(writers); err != nil {
		return err
	}
	return l.checkSums(n, s)
}

// checkEntry checks one entry's own invariants.
func (l *Ledger[K]) checkEntry(e *entry[K]) error {
	w := l.wr(e)
	switch {
	case e.size < 0 || e.charge != max(Charge(e.size), w.res):
		return fmt.Errorf("entry %v: charge %d for size %d, reservation %d", e.id, e.charge, e.size, w.res)
	case w.over < 0 || w.over > e.charge:
		return fmt.Errorf("entry %v: unadmitted %d of charge %d", e.id, w.over, e.charge)
	case e.w != 0 && (w.writers <= 0 || w.e != e.self):
		return fmt.Errorf("entry %v: writing record %d has %d writers, entry slot %d", e.id, e.w, w.writers, w.e)
	case e.pins < 0 || w.writers > e.pins || e.nlink < 0:
		return fmt.Errorf("entry %v: pins %d writers %d nlink %d", e.id, e.pins, w.writers, e.nlink)
	case e.nlink == 0 && e.pins == 0:
		return fmt.Errorf("entry %v: no names and no pins but still charged", e.id)
	}
	return nil
}

func (l *Ledger[K]) sumInto(e *entry[K], s *sums) {
	s.used += e.charge
	s.over += l.wr(e).over
	s.reserved += e.charge - Charge(e.size)
	s.kept += l.keptOf(e)
	if e.nlink == 0 {
		s.shadow += e.charge
		s.keptShadow += l.keptOf(e)
	}
	if e.pins > 0 {
		s.pinObjs++
		s.pinBytes += e.charge
	}
	if e.w != 0 {
		s.writeBytes += e.charge
	}
}

// checkSums compares the recomputed counters with the ledger's.
func (l *Ledger[K]) checkSums(n int, s sums) error {
	switch {
	case n != len(l.entries):
		return fmt.Errorf("lru has %d entries, map %d", n, len(l.entries))
	case int(l.slab.n)-1-len(l.slab.freed) != n:
		return fmt.Errorf("slab has %d slots in use (%d handed out, %d free), lru %d entries",
			int(l.slab.n)-1-len(l.slab.freed), l.slab.n-1, len(l.slab.freed), n)
	case s.used != l.used || s.over != l.over:
		return fmt.Errorf("used %d (unadmitted %d), entries sum to %d (%d)", l.used, l.over, s.used, s.over)
	case l.used-l.over > l.capacity && !l.followed:
		return fmt.Errorf("admitted %d exceeds capacity %d", l.used-l.over, l.capacity)
	case s.shadow != l.shadow:
		return fmt.Errorf("shadow %d, entries sum to %d", l.shadow, s.shadow)
	case s.pinObjs != l.pinnedObjs || s.pinBytes != l.pinnedBytes:
		return fmt.Errorf("pinned %d/%d, entries give %d/%d", l.pinnedObjs, l.pinnedBytes, s.pinObjs, s.pinBytes)
	case s.writeBytes != l.writeBytes:
		return fmt.Errorf("write bytes %d, entries give %d", l.writeBytes, s.writeBytes)
	case s.reserved != l.reserved:
		return fmt.Errorf("reserved %d, entries give %d", l.reserved, s.reserved)
	case s.kept != l.kept || s.keptShadow != l.keptShadow:
		return fmt.Errorf("kept %d (shadow %d), entries give %d (%d)", l.kept, l.keptShadow, s.kept, s.keptShadow)
	case max(l.peak.cur, l.peak.prev) < l.used-l.kept-l.capacity:
		return fmt.Errorf("overshoot high-water mark %d below present %d", max(l.peak.cur, l.peak.prev), l.used-l.kept-l.capacity)
	}
	return nil
}

// checkWriting checks the writing table against the entries, writers of
// which have a record: one record each, all on the open list, and the
// end record zero.
func (l *Ledger[K]) checkWriting(writers int) error {
	onList := 0
	for i := l.open.first(); i != 0; i = l.open.next(i) {
		onList++
		if e := l.slab.at(l.writing.recs[i].e); e.w != i {
			return fmt.Errorf("writing record %d names entry %v, whose record is %d", i, e.id, e.w)
		}
	}
	end := l.writing.recs[0]
	switch {
	case onList != writers || l.writing.inUse() != writers:
		return fmt.Errorf("%d entries have writers; the open list has %d, the writing table %d records", writers, onList, l.writing.inUse())
	case end.res != 0 || end.over != 0 || end.writers != 0 || end.waiting != 0 || end.gaveWay || end.e != 0:
		return fmt.Errorf("writing table's end record is not zero: %+v", end)
	}
	return nil
}
