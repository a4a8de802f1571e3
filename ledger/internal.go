package ledger

// The helpers below run with l.mu held.

// note notes that e changed, if tracking.
func (l *Ledger[K]) note(e *entry[K]) {
	if l.noted != nil {
		l.noted[e.id] = struct{}{}
	}
}

// get is id's entry.
func (l *Ledger[K]) get(id K) (*entry[K], bool) {
	i, ok := l.entries[id]
	if !ok {
		return nil, false
	}
	return l.slab.at(i), true
}

// insert puts v in a slot of its own, most recently used, and returns it.
func (l *Ledger[K]) insert(v entry[K]) *entry[K] {
	e := l.slab.alloc()
	v.self = e.self
	*e = v
	l.entries[e.id] = e.self
	l.lru.pushBack(e)
	l.note(e)
	l.used += e.charge
	l.noteOver()
	if e.nlink == 0 {
		l.shadow += e.charge
	}
	return e
}

func (l *Ledger[K]) remove(e *entry[K]) {
	if e.pins > 0 {
		l.pinnedObjs--
		l.pinnedBytes -= e.charge
	}
	if e.writers > 0 {
		l.writeBytes -= e.charge
		l.open.remove(e)
	}
	if e.nlink == 0 {
		l.shadow -= e.charge
	}
	l.used -= e.charge
	l.over -= e.over
	l.reserved -= e.charge - Charge(e.size)
	l.note(e)
	l.lru.remove(e)
	delete(l.entries, e.id)
	l.slab.free(e)
	l.signal()
}

func (l *Ledger[K]) pin(e *entry[K], write bool) {
	if e.pins == 0 {
		l.pinnedObjs++
		l.pinnedBytes += e.charge
	}
	e.pins++
	if write {
		if e.writers == 0 {
			l.writeBytes += e.charge
			l.open.pushBack(e)
		}
		e.writers++
	}
}

func (l *Ledger[K]) unpin(e *entry[K], write bool) {
	if write && e.writers > 0 {
		e.writers--
		if e.writers == 0 {
			l.writeBytes -= e.charge
			l.open.remove(e)
		}
	}
	e.pins--
	if e.pins == 0 {
		l.pinnedObjs--
		l.pinnedBytes -= e.charge
	}
}

// use marks e most recently used.
func (l *Ledger[K]) use(e *entry[K]) {
	e.lastUse = l.now().UnixNano()
	l.lru.moveToBack(e)
	l.note(e)
}

// admit sets e's size and reservation once its whole charge at them is
// admitted: growth is admitted (evicting, or from free space only), a
// shrink releases. On error nothing changed.
func (l *Ledger[K]) admit(e *entry[K], size, res int64, freeOnly bool) ([]Victim[K], error) {
	charge := max(Charge(size), res)
	victims, err := l.room(e, charge-(e.charge-e.over), charge, freeOnly)
	if err == nil {
		l.setOver(e, 0)
		l.resize(e, size, res)
	}
	return victims, err
}

// room admits need more bytes for e, whose admitted charge is then total:
// from free space, by evicting others from the cold end, or, when that
// cannot free enough, by taking back other writers' unused reservations
// first, all or nothing (a reservation taken back stays taken). Unadmitted bytes take no room: they must not make others
// evict.
func (l *Ledger[K]) room(e *entry[K], need, total int64, freeOnly bool) ([]Victim[K], error) {
	if need <= 0 {
		return nil, nil
	}
	if total > l.capacity {
		return nil, ErrTooLarge
	}
	free := l.capacity - (l.used - l.over)
	if free >= need {
		return nil, nil
	}
	if l.freeOnly {
		return nil, ErrBusy
	}
	if !freeOnly {
		if victims, err := l.evict(need-free, e); err == nil {
			return victims, nil
		}
	}
	// Cold objects alone cannot make the room: what open writers
	// reserved and have not written can.
	if free += l.reclaim(need-free, e); free >= need {
		return nil, nil
	}
	if freeOnly {
		return nil, ErrNoSpace
	}
	return l.evict(need-free, e)
}

// resize sets e's size and reservation and recharges it.
func (l *Ledger[K]) resize(e *entry[K], size, res int64) {
	if size != e.size {
		l.note(e)
	}
	l.reserved -= e.charge - Charge(e.size)
	e.size, e.res = size, res
	l.recharge(e, max(Charge(size), res))
	l.reserved += e.charge - Charge(size)
}

func (l *Ledger[K]) setOver(e *entry[K], over int64) {
	l.over += over - e.over
	e.over = over
}

// recharge sets e's charge and moves every counter that includes it.
func (l *Ledger[K]) recharge(e *entry[K], charge int64) {
	delta := charge - e.charge
	e.charge = charge
	l.used += delta
	if delta < 0 {
		l.signal()
	}
	l.noteOver()
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

// trim evicts, sparing self, until the admitted bytes are within the
// capacity, or evicts nothing and fails.
func (l *Ledger[K]) trim(self *entry[K]) ([]Victim[K], error) {
	if over := l.used - l.over - l.capacity; over > 0 {
		return l.evict(over, self)
	}
	return nil, nil
}

// evict frees at least need bytes from the cold end of the LRU, skipping
// self, pinned entries and those closed within the grace period. It
// commits only if it can free enough.
func (l *Ledger[K]) evict(need int64, self *entry[K]) ([]Victim[K], error) {
	cutoff := l.now().UnixNano() - l.grace
	var chosen []*entry[K]
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
	victims := make([]Victim[K], len(chosen))
	for i, e := range chosen {
		victims[i] = Victim[K]{ID: e.id, Charge: e.charge, LastUse: e.lastUse}
		l.evictions++
		l.evicted += e.charge
		l.remove(e)
	}
	return victims, nil
}

// slab holds the entries in chunks that never move, so an *entry stays
// valid while its entry lives, and hands out free slots again. Slot 0 is
// no entry: the LRU's and the writer list's end.
type slab[K comparable] struct {
	chunks [][]entry[K]
	n      uint32   // slots ever handed out, slot 0 included
	freed  []uint32 // slots to hand out again
}

const (
	chunkBits = 12
	chunkSize = 1 << chunkBits
)

func (s *slab[K]) init() {
	s.chunks, s.n, s.freed = nil, 0, nil
	s.alloc() // slot 0, the lists' end
}

func (s *slab[K]) at(i uint32) *entry[K] { return &s.chunks[i>>chunkBits][i&(chunkSize-1)] }

// alloc returns a zero entry in a free slot, its self set.
func (s *slab[K]) alloc() *entry[K] {
	var i uint32
	if n := len(s.freed); n > 0 {
		i, s.freed = s.freed[n-1], s.freed[:n-1]
	} else {
		if s.n>>chunkBits == uint32(len(s.chunks)) {
			s.chunks = append(s.chunks, make([]entry[K], chunkSize))
		}
		i = s.n
		s.n++
	}
	e := s.at(i)
	e.self = i
	return e
}

// free zeroes e's slot for reuse.
func (s *slab[K]) free(e *entry[K]) {
	i := e.self
	*e = entry[K]{}
	s.freed = append(s.freed, i)
}

// list is a doubly linked list through the slab, by one pair of its
// entries' links (the LRU's or the writer list's), its ends linked to
// slot 0.
type list[K comparable] struct {
	s     *slab[K]
	which int // lruLinks or writerLinks
}

// Which of an entry's links a list uses, and the two of a pair.
const (
	lruLinks, writerLinks = 0, 1
	before, after         = 0, 1
)

func (q list[K]) end() *entry[K] { return q.s.at(0) }

func (q list[K]) front() *entry[K] { return q.nextOf(q.end()) }

func (q list[K]) nextOf(e *entry[K]) *entry[K] {
	if n := e.links[q.which][after]; n != 0 {
		return q.s.at(n)
	}
	return nil
}

func (q list[K]) pushBack(e *entry[K]) {
	end := q.end()
	last := q.s.at(end.links[q.which][before])
	e.links[q.which] = [2]uint32{last.self, 0}
	last.links[q.which][after] = e.self
	end.links[q.which][before] = e.self
}

// insertAfter puts e, on no list, right after at (the end: first).
func (q list[K]) insertAfter(e, at *entry[K]) {
	next := at.links[q.which][after]
	e.links[q.which] = [2]uint32{at.self, next}
	at.links[q.which][after] = e.self
	q.s.at(next).links[q.which][before] = e.self
}

func (q list[K]) remove(e *entry[K]) {
	l := &e.links[q.which]
	q.s.at(l[before]).links[q.which][after] = l[after]
	q.s.at(l[after]).links[q.which][before] = l[before]
	*l = [2]uint32{}
}

func (q list[K]) moveToBack(e *entry[K]) {
	if q.end().links[q.which][before] == e.self {
		return
	}
	q.remove(e)
	q.pushBack(e)
}
