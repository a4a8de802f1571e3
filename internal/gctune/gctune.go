// Package gctune keeps the Go runtime's heap headroom in proportion to
// what a daemon can afford once its index is large.
//
// The runtime lets the heap grow by GOGC percent of the live heap before
// it collects (100 by default), and the process's RSS follows the peak.
// A kvfs daemon's live heap is its index, a few hundred bytes an object:
// at ten million objects that doubling is gigabytes of garbage room the
// node pays for in RSS. Most of the index is pointer-free (the ledger's
// slab, the maps of IDs), so a collection marks little of it, and the
// serving path allocates little per request: a smaller percentage costs
// a few more, cheap, collections.
//
// So the daemon's headroom is a fixed amount (Headroom) or MinPercent of
// the live heap, whichever is larger, and never more than the runtime's
// default. An operator's GOGC or GOMEMLIMIT in the environment wins: Run
// then does nothing.
package gctune

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"go.uber.org/zap"
)

const (
	// Headroom is the heap growth allowed between collections whatever
	// the live heap: a small daemon keeps the runtime's default.
	Headroom = 64 << 20
	// MinPercent is the least growth, in percent of the live heap.
	MinPercent = 10
	// DefaultPercent is the runtime's own GOGC.
	DefaultPercent = 100
	// Every is how often Run looks at the heap.
	Every = 5 * time.Second
	// ReleaseEvery is the least time between two releases of free pages
	// (each costs a collection).
	ReleaseEvery = time.Minute
)

// Percent is the GOGC for a live heap of live bytes.
func Percent(live uint64) int {
	if live <= Headroom {
		return DefaultPercent
	}
	return max(MinPercent, int(Headroom*100/live))
}

// Overridden says whether the environment sets the collector's pacing,
// in which case the operator's choice stands.
func Overridden(getenv func(string) string) bool {
	return getenv("GOGC") != "" || getenv("GOMEMLIMIT") != ""
}

// Run sets the collector's percentage from the live heap now and every
// Every until ctx is done; with GOGC or GOMEMLIMIT set, it returns at
// once.
func Run(ctx context.Context, log *zap.Logger) {
	if Overridden(os.Getenv) {
		log.Info("GOGC or GOMEMLIMIT set: heap headroom left to the runtime")
		return
	}
	t := time.NewTicker(Every)
	defer t.Stop()
	tn := tuner{set: DefaultPercent, log: log}
	for {
		tn.step(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tuner is Run's state.
type tuner struct {
	set      int
	released time.Time
	log      *zap.Logger
}

// step sets the percentage for the live heap, and gives the free pages
// back to the system when more than the headroom of them stay
// resident. The runtime's scavenger returns them only as collections
// paced by a lower percentage run, which an idle daemon may never do:
// after a start's load and audit, or after the percentage was lowered,
// the daemon would keep its peak.
func (tn *tuner) step(now time.Time) {
	live, free := heap()
	if p := Percent(live); p != tn.set {
		debug.SetGCPercent(p)
		tn.log.Debug("heap headroom", zap.Int("gogc", p), zap.Int("was", tn.set))
		tn.set = p
	}
	headroom := max(Headroom, live*uint64(tn.set)/100)
	if free > headroom && now.Sub(tn.released) >= ReleaseEvery {
		debug.FreeOSMemory()
		tn.released = now
		tn.log.Debug("free heap pages released", zap.Uint64("bytes", free))
	}
}

// The runtime's counts of heap bytes marked live by the last collection,
// and of free heap pages not yet given back to the system.
const (
	liveHeap = "/gc/heap/live:bytes"
	freeHeap = "/memory/classes/heap/free:bytes"
)

// heap reads the live heap as of the last collection (0 before the
// first) and the free pages still resident.
func heap() (live, free uint64) {
	s := []metrics.Sample{{Name: liveHeap}, {Name: freeHeap}}
	metrics.Read(s)
	return value(s[0]), value(s[1])
}

func value(s metrics.Sample) uint64 {
	if s.Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s.Value.Uint64()
}
