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
	MinPercent = 20
	// DefaultPercent is the runtime's own GOGC.
	DefaultPercent = 100
	// Every is how often Run looks at the live heap.
	Every = 5 * time.Second
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
	set := DefaultPercent
	for {
		if p := Percent(Live()); p != set {
			debug.SetGCPercent(p)
			if p < set {
				// The pages the old headroom grew to stay resident
				// until collections paced by the new one release
				// them, which an idle daemon may never run.
				debug.FreeOSMemory()
			}
			log.Debug("heap headroom", zap.Int("gogc", p), zap.Int("was", set))
			set = p
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// liveHeap is the runtime's count of heap bytes marked live by the last
// collection.
const liveHeap = "/gc/heap/live:bytes"

// Live is the live heap as of the last collection, 0 before the first.
func Live() uint64 {
	s := []metrics.Sample{{Name: liveHeap}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
