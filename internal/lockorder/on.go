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
	if r == 0 {
		return
	}
	g := goid()
	mu.Lock()
	defer mu.Unlock()
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
