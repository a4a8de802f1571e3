package mount

import (
	"time"

	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/internal/stats"
)

// Observer is told what happens as it happens: every object whose names
// kvfs dropped, and how long each FUSE request took. The metrics
// endpoint (internal/metrics) is one. Both are called on hot paths and
// from many goroutines: quick, and safe for concurrent use.
type Observer interface {
	Dropped(core.Drop)
	Request(op stats.Op, took time.Duration)
}

// dropped hands a dropped object to the file system (kernel notices,
// RAM tier), then to the observer.
func (m *Mount) dropped(d core.Drop) {
	m.fs.Dropped(d)
	if m.Observer != nil {
		m.Observer.Dropped(d)
	}
}

// reshown is the core's Config.Reshown: the kernel drops the attributes
// it caches of a file whose writer's reservation the core shows again.
// The core asks only after a close (a FLUSH) that fs served, so fs is
// made by then.
func (m *Mount) reshown(id core.ID) { m.fs.AttrsChanged(id) }

// requestTimer is what times FUSE requests: nothing without an observer
// (they are still counted).
func (m *Mount) requestTimer() func(stats.Op, time.Duration) {
	if m.Observer == nil {
		return nil
	}
	return m.Observer.Request
}
