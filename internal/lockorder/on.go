//go:build lockcheck

package lockorder

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"sync"
)

// Enabled says whether this build checks the order.
const Enabled = true

type held struct {
	rank Rank
	sub  int
	lock any
}

var (
	mu sync.Mutex
	// GUARDED_BY(mu): acquisitions by rank, exclusive and shared.
	counts = map[Rank]*[2]int64{}
	// GUARDED_BY(mu): the ranked locks each goroutine holds, in the
	// order taken.
	holds = map[uint64][]held{}
)

// goid is the calling goroutine's ID, read from its stack header.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

func acquire(r Rank, sub int, lock any) {
	acquireAs(r, sub, lock, 0)
}

func acquireShared(r Rank, lock any) {
	acquireAs(r, 0, lock, 1)
}

func acquireAs(r Rank, sub int, lock any, kind int) {
	if r == 0 {
		return
	}
	g := goid()
	mu.Lock()
	defer mu.Unlock()
	if counts[r] == nil {
		counts[r] = &[2]int64{}
	}
	counts[r][kind]++
	for _, h := range holds[g] {
		if h.rank > r || (h.rank == r && h.sub >= sub) {
			panic(fmt.Sprintf("lockorder: taking a lock of rank %d.%d while holding one of rank %d.%d", r, sub, h.rank, h.sub))
		}
	}
	holds[g] = append(holds[g], held{r, sub, lock})
}

func record(r Rank, sub int, lock any) {
	if r == 0 {
		return
	}
	g := goid()
	mu.Lock()
	defer mu.Unlock()
	holds[g] = append(holds[g], held{r, sub, lock})
}

func release(lock any) {
	g := goid()
	mu.Lock()
	defer mu.Unlock()
	hs := holds[g]
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].lock == lock {
			holds[g] = append(hs[:i], hs[i+1:]...)
			break
		}
	}
	if len(holds[g]) == 0 {
		delete(holds, g)
	}
}

// Counts reports how many times each rank's locks were taken so far,
// exclusively and shared.
func Counts() map[Rank][2]int64 {
	mu.Lock()
	defer mu.Unlock()
	out := make(map[Rank][2]int64, len(counts))
	for r, c := range counts {
		out[r] = *c
	}
	return out
}
