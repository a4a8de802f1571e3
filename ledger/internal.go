package ledger

// The helpers below run with l.mu held.

func (l *Ledger) insert(e *entry) {
	l.entries[e.id] = e
	l.lru.pushBack(e)
	l.used += e.charge
	if e.nlink == 0 {
		l.shadow += e.charge
	}
}

func (l *Ledger) remove(e *entry) {
	if e.pins > 0 {
		l.pinnedObjs--
		l.pinnedBytes -= e.charge
	}
	if e.writers > 0 {
		l.writeBytes -= e.charge
	}
	if e.nlink == 0 {
		l.shadow -= e.charge
	}
	l.used -= e.charge
	l.lru.remove(e)
	delete(l.entries, e.id)
}

func (l *Ledger) pin(e *entry, write bool) {
	if e.pins == 0 {
		l.pinnedObjs++
		l.pinnedBytes += e.charge
	}
	e.pins++
	if write {
		if e.writers == 0 {
			l.writeBytes += e.charge
		}
		e.writers++
	}
}

func (l *Ledger) unpin(e *entry, write bool) {
	if write && e.writers > 0 {
		e.writers--
		if e.writers == 0 {
			l.writeBytes -= e.charge
		}
	}
	e.pins--
	if e.pins == 0 {
		l.pinnedObjs--
		l.pinnedBytes -= e.charge
	}
}

// resize admits a new size for e, evicting others when it grows.
func (l *Ledger) resize(e *entry, size int64) ([]Victim, error) {
	delta := Charge(size) - e.charge
	if delta > 0 {
		if Charge(size) > l.capacity {
			l.refusals++
			return nil, ErrTooLarge
		}
		victims, err := l.makeRoom(delta, e)
		if err != nil {
			l.refusals++
			return nil, err
		}
		l.recharge(e, size)
		return victims, nil
	}
	l.recharge(e, size)
	return nil, nil
}

// recharge sets e's size and moves every counter that includes its charge.
func (l *Ledger) recharge(e *entry, size int64) {
	delta := Charge(size) - e.charge
	e.size = size
	e.charge += delta
	l.used += delta
	if e.pins > 0 {
		l.pinnedBytes += delta
	}
	if e.writers > 0 {
		l.writeBytes += delta
	}
	if e.nlink == 0 {
		l.shadow += delta
	}
}

// makeRoom evicts until need more bytes fit, or evicts nothing and fails.
func (l *Ledger) makeRoom(need int64, self *entry) ([]Victim, error) {
	if l.capacity-l.used >= need {
		return nil, nil
	}
	return l.evict(need-(l.capacity-l.used), self)
}

// evict frees at least need bytes from the cold end of the LRU, skipping
// self, pinned entries and those closed within the grace period. It
// commits only if it can free enough.
func (l *Ledger) evict(need int64, self *entry) ([]Victim, error) {
	cutoff := l.now().UnixNano() - l.grace
	var chosen []*entry
	var freed int64
	for e := l.lru.front(); e != nil && freed < need; e = l.lru.nextOf(e) {
		if e == self || e.pins > 0 || (e.lastClose != 0 && e.lastClose > cutoff) {
			continue
		}
		chosen = append(chosen, e)
		freed += e.charge
	}
	if freed < need {
		return nil, ErrNoSpace
	}
	victims := make([]Victim, len(chosen))
	for i, e := range chosen {
		victims[i] = Victim{ID: e.id, Charge: e.charge}
		l.evictions++
		l.evicted += e.charge
		l.remove(e)
	}
	return victims, nil
}

// list is an intrusive doubly linked list with a sentinel: front is the
// least recently used entry.
type list struct{ root entry }

func (q *list) init() { q.root.next, q.root.prev = &q.root, &q.root }

func (q *list) front() *entry { return q.nextOf(&q.root) }

func (q *list) nextOf(e *entry) *entry {
	if e.next == &q.root {
		return nil
	}
	return e.next
}

func (q *list) pushBack(e *entry) {
	e.prev, e.next = q.root.prev, &q.root
	q.root.prev.next = e
	q.root.prev = e
}

func (q *list) remove(e *entry) {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
}

func (q *list) moveToBack(e *entry) {
	if q.root.prev == e {
		return
	}
	q.remove(e)
	q.pushBack(e)
}
