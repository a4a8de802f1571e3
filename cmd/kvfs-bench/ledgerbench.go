package main

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/ledger"
)

// ledgerSample is one in-process measurement of the ledger.
type ledgerSample struct {
	restoreNs, growNs, openCloseNs, heapPerObj float64
}

// measureLedger restores n objects into a fresh ledger (coldest first,
// as a restart does) and reports the heap that holds them, then times
// Grow and Open+Close on objects picked at random, so the map and the
// LRU list are exercised at full size, not on one hot entry.
func measureLedger(n int) (ledgerSample, error) {
	var s ledgerSample
	const size = 64 << 10
	before := heapInUse()
	l := ledger.New[blob.ID](ledger.Config{Capacity: 1 << 60, Grace: 2 * time.Second})
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := l.Restore(blob.ID(i+2), size, 1); err != nil {
			return s, fmt.Errorf("ledger Restore: %w", err)
		}
	}
	s.restoreNs = perOp(time.Since(start), n)
	s.heapPerObj = float64(heapInUse()-before) / float64(n)

	ids := rand.Perm(n)
	start = time.Now()
	for _, i := range ids {
		if _, err := l.Grow(blob.ID(i+2), size+ledger.BlockSize); err != nil {
			return s, fmt.Errorf("ledger Grow: %w", err)
		}
	}
	s.growNs = perOp(time.Since(start), n)

	start = time.Now()
	for _, i := range ids {
		id := blob.ID(i + 2)
		if err := l.Open(id, false); err != nil {
			return s, fmt.Errorf("ledger Open: %w", err)
		}
		l.Close(id, false)
	}
	s.openCloseNs = perOp(time.Since(start), n)
	if err := l.CheckInvariants(); err != nil {
		return s, fmt.Errorf("ledger invariants after the bench: %w", err)
	}
	if st := l.Stats(); st.Objects != int64(n) || st.UsedBytes != int64(n)*ledger.Charge(size+ledger.BlockSize) {
		return s, fmt.Errorf("ledger stats after the bench: %+v", st)
	}
	runtime.KeepAlive(l)
	return s, nil
}

func perOp(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / float64(n) }

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// ledgerRows measures the ledger rounds times and adds its rows.
func (b *bench) ledgerRows() error {
	var restore, grow, oc, heap []float64
	for r := 0; r < b.cfg.ledgerRounds; r++ {
		if err := b.ctx.Err(); err != nil {
			return err
		}
		s, err := measureLedger(b.cfg.ledgerObjects)
		if err != nil {
			return err
		}
		restore, grow = append(restore, s.restoreNs), append(grow, s.growNs)
		oc, heap = append(oc, s.openCloseNs), append(heap, s.heapPerObj)
		b.progress("ledger round %d/%d: restore %.0f ns, grow %.0f ns, open+close %.0f ns, heap %.1f B/object",
			r+1, b.cfg.ledgerRounds, s.restoreNs, s.growNs, s.openCloseNs, s.heapPerObj)
	}
	note := ""
	if b.cfg.ledgerObjects < 1_000_000 {
		note = fmt.Sprintf("%d objects, not the 1,000,000 the spec names", b.cfg.ledgerObjects)
	}
	objs := fmt.Sprintf("%s objects", count(b.cfg.ledgerObjects))
	b.absRow("ledger Restore, "+objs, "ns/op", restore, 0, note)
	b.absRow("ledger Grow, random object", "ns/op", grow, 0, note)
	b.absRow("ledger Open+Close, random object", "ns/op", oc, 0, note)
	b.absRow("ledger heap after Restore", "B/object", heap, 256, note)
	return nil
}

// count prints 1000000 as 1M, 10000 as 10k.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
