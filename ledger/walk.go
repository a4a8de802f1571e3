package ledger

import "errors"

// A Walk visits the ledger's entries least recently used first, some at
// a time, with the ledger's lock released between the steps, so that a
// checkpoint of ten million objects never holds it (or its caller's
// locks) for the whole order: copying it at once took 1.6-4.8 s at ten
// million, with every store waiting. Every entry present from the
// walk's start to its end is visited exactly once: one used meanwhile
// moves to the back, and is visited there if the walk had not reached
// it yet; one removed before the walk reached it is not visited; one
// inserted meanwhile may be. The order is each step's, not one
// moment's.
type Walk[K comparable] struct {
	l *Ledger[K]
	// at is the slot of the next entry to visit (0: the walk is at its
	// end, or has not started: begun says which); the ledger moves it
	// on when that entry moves or goes.
	at     uint32
	begun  bool
	broken bool
	// visited marks the slots visited, so that an entry moved to the
	// back after its visit is not visited again: a bit a slot.
	visited []uint64
}

// Walk starts a walk of the entries; Close it when done.
func (l *Ledger[K]) Walk() *Walk[K] {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := &Walk[K]{l: l}
	l.walks = append(l.walks, w)
	return w
}

// ErrWalkBroken is Next's answer once a Place passed the walk by: what
// it visited may lack an entry.
var ErrWalkBroken = errors.New("ledger: a walk's order changed under it")

// Next calls fn for up to n more entries, with each one's size, under
// the ledger's lock (fn must not call the ledger), and says whether the
// walk goes on. A walk that a Place passed by (a handover's, which may
// put an entry anywhere) is broken: Next then visits nothing and
// returns ErrWalkBroken.
func (w *Walk[K]) Next(n int, fn func(id K, size int64)) (more bool, err error) {
	l := w.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.broken {
		return false, ErrWalkBroken
	}
	if !w.begun {
		w.at, w.begun = l.lru.first(), true
	}
	for ; n > 0 && w.at != 0; w.at = l.lru.next(w.at) {
		if w.mark(w.at) {
			e := l.slab.at(w.at)
			fn(e.id, e.size)
			n--
		}
	}
	return w.at != 0, nil
}

// mark notes slot i visited, and says whether it was not already.
func (w *Walk[K]) mark(i uint32) bool {
	word, bit := int(i/64), uint64(1)<<(i%64)
	if word >= len(w.visited) {
		w.visited = append(w.visited, make([]uint64, word+1-len(w.visited))...)
	}
	if w.visited[word]&bit != 0 {
		return false
	}
	w.visited[word] |= bit
	return true
}

// Close ends the walk.
func (w *Walk[K]) Close() {
	l := w.l
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, o := range l.walks {
		if o == w {
			l.walks = append(l.walks[:i], l.walks[i+1:]...)
			break
		}
	}
}

// leaving keeps the walks' places as the entry at slot i leaves its
// place in the LRU order: removed, or moved to the back (toBack). A walk
// about to visit it moves on to the next; if it is the last already, a
// move to the back leaves it where it is, and the walk visits it.
func (l *Ledger[K]) leaving(i uint32, toBack bool) {
	for _, w := range l.walks {
		if w.at != i || !w.begun {
			continue
		}
		if next := l.lru.next(i); next != 0 || !toBack {
			w.at = next
		}
	}
}
