package ledger

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestWalkVisitsEachOnce: a walk taken in steps, with entries used
// (moved to the back), removed and added between the steps, visits
// every entry present throughout exactly once, nothing twice, and
// nothing removed before its visit.
func TestWalkVisitsEachOnce(t *testing.T) {
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 7))
		l := New[ID](Config{Capacity: 1 << 40, Grace: time.Second})
		present := map[ID]bool{}
		next := ID(1)
		add := func() {
			if _, err := l.Restore(next, blk, 1); err != nil {
				t.Fatal(err)
			}
			present[next] = true
			next++
		}
		for range 200 + r.IntN(200) {
			add()
		}
		throughout := map[ID]bool{}
		for id := range present {
			throughout[id] = true
		}
		w := l.Walk()
		visited := map[ID]int{}
		for more := true; more; {
			var err error
			more, err = w.Next(1+r.IntN(20), func(id ID, _ int64) {
				if !present[id] {
					t.Fatalf("seed %d: visited %d, removed", seed, id)
				}
				visited[id]++
			})
			if err != nil {
				t.Fatal(err)
			}
			for range r.IntN(30) {
				ids := keys(present)
				id := ids[r.IntN(len(ids))]
				switch r.IntN(3) {
				case 0: // used: to the back
					if err := l.Open(id, false); err != nil {
						t.Fatal(err)
					}
					release(l, id, false)
				case 1:
					l.Forget(id)
					delete(present, id)
					delete(throughout, id)
				case 2:
					add()
				}
			}
		}
		w.Close()
		for id, n := range visited {
			if n != 1 {
				t.Fatalf("seed %d: %d visited %d times", seed, id, n)
			}
		}
		for id := range throughout {
			if visited[id] != 1 {
				t.Fatalf("seed %d: %d, present throughout, not visited", seed, id)
			}
		}
		if len(l.walks) != 0 {
			t.Fatalf("seed %d: %d walks left", seed, len(l.walks))
		}
		if err := l.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWalkLastUsed: the entry the walk is about to visit, moved to the
// back while it is the last already, is still visited; and a Place
// breaks a walk.
func TestWalkLastUsed(t *testing.T) {
	l := New[ID](Config{Capacity: 1 << 40, Grace: time.Second})
	for id := ID(1); id <= 3; id++ {
		if _, err := l.Restore(id, blk, 1); err != nil {
			t.Fatal(err)
		}
	}
	w := l.Walk()
	defer w.Close()
	var got []ID
	visit := func(id ID, _ int64) { got = append(got, id) }
	w.Next(2, visit)
	if err := l.Open(3, false); err != nil {
		t.Fatal(err)
	}
	release(l, 3, false)
	if more, err := w.Next(5, visit); more || err != nil || len(got) != 3 || got[2] != 3 {
		t.Fatalf("visited %v, more %v, %v", got, more, err)
	}
	w2 := l.Walk()
	defer w2.Close()
	w2.Next(1, visit)
	l.Place(4, blk, 1, 0, true)
	if more, err := w2.Next(5, visit); more || err != ErrWalkBroken {
		t.Fatalf("a walk a Place passed by: more %v, %v", more, err)
	}
}

func keys(m map[ID]bool) []ID { return slices.Sorted(maps.Keys(m)) }

// each calls fn for every entry, least recently used first: one walk.
func each(l *Ledger[ID], fn func(id ID, size int64)) {
	w := l.Walk()
	defer w.Close()
	for more := true; more; {
		more, _ = w.Next(1<<20, fn)
	}
}
