package ledger

import "time"

// What the ledger does under pressure: take back the unused part of open
// writers' reservations before anything is refused, tell waiters when
// space may have been freed, say when the cache is overloaded by objects
// being written, and keep a windowed high-water mark of the overshoot.
// The helpers below run with l.mu held.

// OvershootWindow is how far back overshoot_max_bytes looks: the most
// used has been over the capacity in this window and the one before it.
const OvershootWindow = 10 * time.Second

// ReserveFree, ObserveFree, SettleFree, GrowFree, ExtendFree and
// SetSizeFree are Reserve, Observe, Settle, Grow, Extend and SetSize
// when they fit in free space (or need none), and ErrBusy, with nothing
// changed, when they would have to evict or take a reservation back. The
// admission that evicts nothing, the common one, then needs none of the
// caller's locks that an eviction needs.
func (l *Ledger[K]) ReserveFree(id K, n int64) error {
	return l.free(func() ([]Victim[K], error) { return l.reserve(id, n) })
}

// ReserveFreeShare is ReserveFree of half the free space there is, up
// to n, where that is at least least: whole blocks of it, or ErrBusy
// with nothing changed. Half, so that the next writers of a burst find
// room too: where the first took it all, the next one's guess evicted
// (an outside tester: 3 new processes storing 4 KiB at once beside a 60
// MiB object in a 64 MiB cache evicted it, 6 of 6 runs).
func (l *Ledger[K]) ReserveFreeShare(id K, n, least int64) error {
	return l.free(func() ([]Victim[K], error) {
		if _, err := l.writer(id); err != nil {
			return nil, err
		}
		r := min(Charge(n), (l.capacity-(l.used-l.over))/2/BlockSize*BlockSize)
		if r <= 0 || r < Charge(least) {
			return nil, ErrBusy
		}
		return l.reserve(id, r)
	})
}

// ReserveFreeLeaving is ReserveFree where the free space left after it
// is at least leave, else ErrBusy with nothing changed: a reservation
// that is room to grow (a passthrough writer's of an object it opened)
// takes none of the last free room the next stores need. What of it
// its writers have not written stays loose: an admission that finds no
// room takes it back (reclaim), firm reservations or not. Many such
// writers of small objects, each leaving one object's room, left only
// that together, and stores of larger objects were refused (an outside
// tester: 12 objects of 1 MiB opened read-write in 16 MiB, 4 of 20
// stores of 1-2 MiB done); a writer that grows past what is left of it
// is admitted as it grows, as any writer past its reservation.
func (l *Ledger[K]) ReserveFreeLeaving(id K, n, leave int64) error {
	return l.free(func() ([]Victim[K], error) {
		e, err := l.writer(id)
		if err != nil {
			return nil, err
		}
		charge := max(Charge(e.size), l.wr(e).res, Charge(n))
		if l.capacity-(l.used-l.over)-(charge-e.charge) < leave {
			return nil, ErrBusy
		}
		v, err := l.reserve(id, n)
		if err == nil {
			l.wr(e).loose = true
		}
		return v, err
	})
}

// Loosen makes what id's lone writer reserved and has not written
// loose: an admission that finds no room takes it back (reclaim), firm
// reservations or not. For a writer that nothing can write to while
// the admission waits: its one process's one thread is the one that
// waits (see core's loosenIdle). It returns what is loose now; 0 where
// id has no lone writer.
func (l *Ledger[K]) Loosen(id K) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, err := l.writer(id)
	if err != nil || l.writers(e) != 1 {
		return 0
	}
	l.wr(e).loose = true
	return l.spare(e, nil)
}

// ReserveEvictingAtMost is Reserve where the objects it must evict
// free at most most bytes, and ErrBusy with nothing changed where they
// would free more: a reservation that is a guess makes room by evicting
// objects of about its size, never one far larger for bytes that may
// never come (a shell's 3-byte store beside a 60 MiB object).
func (l *Ledger[K]) ReserveEvictingAtMost(id K, n, most int64) ([]Victim[K], error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evictAtMost = max(most, 1)
	defer func() { l.evictAtMost = 0 }()
	return l.reserve(id, n)
}

func (l *Ledger[K]) ObserveFree(id K, size int64) error {
	return l.free(func() ([]Victim[K], error) { return l.observe(id, size) })
}

func (l *Ledger[K]) SettleFree(id K, size int64) error {
	return l.free(func() ([]Victim[K], error) { return l.settle(id, size, false, true) })
}

func (l *Ledger[K]) SettleShownFree(id K, size int64) error {
	return l.free(func() ([]Victim[K], error) { return l.settle(id, size, false, false) })
}

func (l *Ledger[K]) SettleLastFree(id K, size int64) error {
	return l.free(func() ([]Victim[K], error) { return l.settle(id, size, true, false) })
}

func (l *Ledger[K]) GrowFree(id K, end int64) error {
	return l.free(func() ([]Victim[K], error) { return l.growLocked(id, end, pastBudgetOver) })
}

func (l *Ledger[K]) GrowWithinFree(id K, end int64) error {
	return l.free(func() ([]Victim[K], error) { return l.growLocked(id, end, pastBudgetFree) })
}

func (l *Ledger[K]) ExtendFree(id K, end int64) error {
	return l.free(func() ([]Victim[K], error) { return l.growLocked(id, end, unbudgeted) })
}

func (l *Ledger[K]) SetSizeFree(id K, size int64) error {
	return l.free(func() ([]Victim[K], error) { return l.setSize(id, size) })
}

// free runs an admission that takes free space only.
func (l *Ledger[K]) free(op func() ([]Victim[K], error)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.freeOnly = true
	defer func() { l.freeOnly = false }()
	_, err := op()
	return err
}

// reclaim takes back up to need bytes of the reservations open writers
// other than self hold beyond what they have written, oldest writer
// first, and returns how much it freed. A reservation is a guess at an
// object's size made when its writer opened; bytes written are never
// taken back. A writer that then writes past what it kept is admitted as
// it grows, like one that had no reservation.
func (l *Ledger[K]) reclaim(need int64, self *entry[K]) int64 {
	var got int64
	for i := l.open.first(); i != 0 && got < need; i = l.open.next(i) {
		e := l.slab.at(l.writing.recs[i].e)
		if spare := l.spare(e, self); spare > 0 {
			take := min(spare, Charge(need-got))
			l.resize(e, e.size, l.wr(e).res-take)
			got += take
		}
	}
	return got
}

// spare is what writer e reserved and has not written, none for self
// and none where reservations are firm but loose room to grow
// (ReserveFreeLeaving): what reclaim may take back from it.
func (l *Ledger[K]) spare(e, self *entry[K]) int64 {
	if e == self || l.firm && !l.wr(e).loose {
		return 0
	}
	return max(l.wr(e).res-Charge(e.size), 0)
}

// Overloaded says whether id's writer, expecting to store n bytes,
// cannot fit beside what the other open writers have already written:
// the cache is full of objects in flight, so the only way for it to fit
// is to wait for them to finish and publish. Admission refuses such a
// writer at once, rather than have it write its object and fail at
// close. What id holds already is its own, not another writer's: an
// object opened to be rewritten, cut or grown needs room for the larger
// of its size and n (an outside tester: a 13 MiB object in a 16 MiB cache
// could not be opened for writing at all, not even to truncate it).
func (l *Ledger[K]) Overloaded(id K, n int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	room, own := l.roomBeside(id)
	return max(own, Charge(n)) > room
}

// Room is what the capacity leaves id's writer beside the bytes the
// other open writers have written (see Overloaded).
func (l *Ledger[K]) Room(id K) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	room, _ := l.roomBeside(id)
	return room
}

// roomBeside is Room, and what id's writer has written itself; mu held.
func (l *Ledger[K]) roomBeside(id K) (room, own int64) {
	if e, ok := l.get(id); ok && e.w != 0 {
		own = Charge(e.size)
	}
	return l.capacity - (l.writeBytes - l.reserved - own), own
}

// Changed returns a channel closed the next time space may be freed (a
// handle closed, a name removed, a grace period ended, a charge shrunk):
// take it before an admission, and wait on it if the admission fails.
func (l *Ledger[K]) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

// signal wakes whoever waits on Changed.
func (l *Ledger[K]) signal() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// NoteUncounted records, in the overshoot high-water mark, that the store
// held extra bytes more than the ledger counts for a moment: a
// passthrough writer first seen past the capacity, refused and cut
// without its growth ever being counted.
func (l *Ledger[K]) NoteUncounted(extra int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if over := l.used + extra - l.capacity; extra > 0 && over > 0 {
		l.peak.note(l.now().UnixNano(), over)
	}
}

// noteOver records used's excess over the capacity, if any.
func (l *Ledger[K]) noteOver() {
	if over := l.used - l.kept - l.capacity; over > 0 {
		l.peak.note(l.now().UnixNano(), over)
	}
}

// peakWindow is a high-water mark that forgets: the most seen in the
// present window of OvershootWindow and the one before.
type peakWindow struct {
	idx       int64
	cur, prev int64
}

func (p *peakWindow) roll(now int64) {
	idx := now / int64(OvershootWindow)
	if idx == p.idx {
		return
	}
	p.prev = 0
	if idx == p.idx+1 {
		p.prev = p.cur
	}
	p.cur, p.idx = 0, idx
}

func (p *peakWindow) note(now, over int64) {
	p.roll(now)
	p.cur = max(p.cur, over)
}

// max is the mark at now, counting the present excess.
func (p *peakWindow) max(now, present int64) int64 {
	p.note(now, present)
	return max(p.cur, p.prev)
}
