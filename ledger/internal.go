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
	l.lru.pushBack(e.self)
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
	if e.w != 0 {
		l.over -= l.wr(e).over
		l.dropWriting(e)
	}
	if e.nlink == 0 {
		l.shadow -= e.charge
	}
	l.used -= e.charge
	l.reserved -= e.charge - Charge(e.size)
	l.note(e)
	l.leaving(e.self, false)
	l.lru.remove(e.self)
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
		if e.w == 0 {
			e.w = l.writing.alloc(e.self)
			l.wr(e).priorClose = e.lastClose
			l.writeBytes += e.charge
			l.open.pushBack(e.w)
		}
		l.wr(e).writers++
		l.wr(e).unchanged = false // this one may change it
		// A writer opening now has not closed: what is reserved shows
		// again.
		l.keep(e, false)
	}
}

// unpin drops a pin; the last writer's goes once its reservation and
// unadmitted bytes are settled (endWriting).
func (l *Ledger[K]) unpin(e *entry[K], write bool) {
	if write && e.w != 0 {
		w := l.wr(e)
		if w.writers--; w.writers == 0 {
			l.dropWriting(e)
		}
	}
	e.pins--
	if e.pins == 0 {
		l.pinnedObjs--
		l.pinnedBytes -= e.charge
	}
}

// dropWriting gives back e's writing record: it has no writers left, or
// it goes.
func (l *Ledger[K]) dropWriting(e *entry[K]) {
	if e.size > 0 {
		l.moves++ // an empty file's writer ending brings no one room
	}
	l.unkeep(e)
	l.writeBytes -= e.charge
	l.open.remove(e.w)
	l.writing.free(e.w)
	e.w = 0
}

// use marks e most recently used.
func (l *Ledger[K]) use(e *entry[K]) {
	e.lastUse = l.now().UnixNano()
	l.leaving(e.self, true)
	l.lru.moveToBack(e.self)
	l.note(e)
}

// admit sets e's size and reservation once its whole charge at them is
// admitted: growth is admitted (evicting, or from free space only), a
// shrink releases. On error nothing changed.
func (l *Ledger[K]) admit(e *entry[K], size, res int64, freeOnly bool) ([]Victim[K], error) {
	charge := max(Charge(size), res)
	victims, err := l.room(e, charge-(e.charge-l.wr(e).over), charge, freeOnly)
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
		chosen, freed := l.coldest(need-free, e)
		if l.evictAtMost > 0 && freed > l.evictAtMost {
			return nil, ErrBusy
		}
		if freed >= need-free {
			return l.commitVictims(chosen), nil
		}
	}
	// Cold objects alone cannot make the room: what open writers
	// reserved and have not written can.
	if free += l.reclaim(need-free, e); free >= need {
		return nil, nil
	}
	if freeOnly {
		return nil, ErrPastBudget
	}
	return l.evict(need-free, e)
}

// resize sets e's size and reservation and recharges it.
func (l *Ledger[K]) resize(e *entry[K], size, res int64) {
	if size != e.size {
		l.note(e)
		l.moves++
	}
	l.unkeep(e)
	l.reserved -= e.charge - Charge(e.size)
	e.size = size
	l.setRes(e, res)
	l.recharge(e, max(Charge(size), res))
	l.reserved += e.charge - Charge(size)
	l.rekeep(e)
	l.noteOver() // once kept is whole again: it is not over
}

// keptOf is the part of e's charge that a close kept and no figure
// shows: the reservation past its size, once its only writer's
// descriptor closed (writing.kept).
func (l *Ledger[K]) keptOf(e *entry[K]) int64 {
	if e.w == 0 || !l.wr(e).kept {
		return 0
	}
	return e.charge - Charge(e.size)
}

// unkeep takes e's kept part out of the kept counters, before a change
// to it; rekeep puts it back after.
func (l *Ledger[K]) unkeep(e *entry[K]) {
	k := l.keptOf(e)
	l.kept -= k
	if e.nlink == 0 {
		l.keptShadow -= k
	}
}

func (l *Ledger[K]) rekeep(e *entry[K]) {
	k := l.keptOf(e)
	l.kept += k
	if e.nlink == 0 {
		l.keptShadow += k
	}
}

// keep marks whether e's reservation past its size is kept unshown: set
// by a close of its only writer's descriptor, cleared by a writer's
// open (pin), which has not closed.
func (l *Ledger[K]) keep(e *entry[K], on bool) {
	if e.w == 0 {
		return
	}
	l.unkeep(e)
	l.wr(e).kept = on
	l.rekeep(e)
	l.noteOver()
}

func (l *Ledger[K]) setOver(e *entry[K], over int64) {
	if e.w == 0 && over != 0 {
		panic("ledger: unadmitted bytes without a writer")
	}
	l.over += over - l.wr(e).over
	if e.w != 0 {
		l.wr(e).over = over
	}
}

func (l *Ledger[K]) setRes(e *entry[K], res int64) {
	if e.w == 0 && res != 0 {
		panic("ledger: a reservation without a writer")
	}
	if e.w != 0 {
		w := l.wr(e)
		w.res = res
		w.budget = max(w.budget, res)
	}
}

// recharge sets e's charge and moves every counter that includes it;
// its caller notes the overshoot.
func (l *Ledger[K]) recharge(e *entry[K], charge int64) {
	delta := charge - e.charge
	if delta < 0 && e.size > 0 {
		// Room freed. Not room taken, nor an empty file's reservation
		// given back: a client making and removing empty files (a lock,
		// a marker) reserves and frees all along, which restarted every
		// stalled writer's wait (an outside tester: 8 writers stuck
		// beside a reader's pin waited out the wait limit, 4 of 6 runs).
		l.moves++
	}
	e.charge = charge
	l.used += delta
	if delta < 0 {
		l.signal()
	}
	if e.pins > 0 {
		l.pinnedBytes += delta
	}
	if e.w != 0 {
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
		return l.evictSome(over, self)
	}
	return nil, nil
}

// evict frees at least need bytes from the cold end of the LRU, skipping
// self, pinned entries and those closed within the grace period. It
// commits only if it can free enough: an admission that cannot fit
// evicts no one.
func (l *Ledger[K]) evict(need int64, self *entry[K]) ([]Victim[K], error) {
	chosen, freed := l.coldest(need, self)
	if freed < need {
		return nil, ErrNoSpace
	}
	return l.commitVictims(chosen), nil
}

// evictSome is evict for a cache over its capacity (a smaller capacity,
// bytes that came without admission): it evicts what it can toward need
// even when that is not all of it, and says ErrNoSpace if it fell short
// (the rest is in grace or held; the caller trims again later).
func (l *Ledger[K]) evictSome(need int64, self *entry[K]) ([]Victim[K], error) {
	chosen, freed := l.coldest(need, self)
	victims := l.commitVictims(chosen)
	if freed < need {
		return victims, ErrNoSpace
	}
	return victims, nil
}

// coldest picks entries from the cold end of the LRU until they free
// need bytes or none is left; mu held. An empty object frees nothing:
// it stays (an outside tester's lock and marker files, 0 bytes each,
// were evicted for room they never held; Shed, for inodes, takes them).
func (l *Ledger[K]) coldest(need int64, self *entry[K]) ([]*entry[K], int64) {
	cutoff := l.now().UnixNano() - l.grace
	var chosen []*entry[K]
	var freed int64
	for i := l.lru.first(); i != 0 && freed < need; i = l.lru.next(i) {
		e := l.slab.at(i)
		if e == self || e.charge == 0 || !e.evictable(cutoff) {
			continue
		}
		chosen = append(chosen, e)
		freed += e.charge
	}
	return chosen, freed
}

// commitVictims removes the chosen entries as evicted; mu held.
func (l *Ledger[K]) commitVictims(chosen []*entry[K]) []Victim[K] {
	if len(chosen) == 0 {
		return nil
	}
	victims := make([]Victim[K], len(chosen))
	for i, e := range chosen {
		victims[i] = Victim[K]{ID: e.id, Charge: e.charge, LastUse: e.lastUse}
		l.evictions++
		l.evicted += e.charge
		l.remove(e)
	}
	return victims
}

// slab holds the entries in chunks that never move, so an *entry stays
// valid while its entry lives, and hands out free slots again. Slot 0 is
// no entry: the LRU's end.
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

// list is a doubly linked list of slots (the slab's entries or the
// writing table's records), through a pair of links each slot holds
// (links), its ends linked to slot 0.
type list struct {
	links func(slot uint32) *[2]uint32
}

// The two links of a pair.
const before, after = 0, 1

func (q list) first() uint32 { return q.links(0)[after] }

func (q list) last() uint32 { return q.links(0)[before] }

func (q list) next(i uint32) uint32 { return q.links(i)[after] }

func (q list) prev(i uint32) uint32 { return q.links(i)[before] }

func (q list) pushBack(i uint32) { q.insertAfter(i, q.last()) }

// insertAfter puts i, on no list, right after at (0: first).
func (q list) insertAfter(i, at uint32) {
	next := q.links(at)[after]
	*q.links(i) = [2]uint32{at, next}
	q.links(at)[after] = i
	q.links(next)[before] = i
}

func (q list) remove(i uint32) {
	l := q.links(i)
	q.links(l[before])[after] = l[after]
	q.links(l[after])[before] = l[before]
	*l = [2]uint32{}
}

func (q list) moveToBack(i uint32) {
	if q.last() == i {
		return
	}
	q.remove(i)
	q.pushBack(i)
}
