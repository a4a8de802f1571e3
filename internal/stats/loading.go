package stats

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Loading is what a mount serving while its index loads (docs/restart.md)
// answers in place of a Snapshot: it has no index, so no figures yet, and
// says how far it is. Its JSON has "loading": true, which a Snapshot's
// never has.
type Loading struct {
	Loading         bool    `json:"loading"`
	ExpectedObjects int64   `json:"expected_objects"` // the checkpoint's count, or the last start's
	Seconds         float64 `json:"loading_seconds"`  // since the load began
	// CapacityBytes as the mount was given it; absent (0) where the
	// load derives it from the store's free space.
	CapacityBytes int64 `json:"capacity_bytes,omitempty"`
}

// NewLoading is the figures of a load of expected objects that began at
// began.
func NewLoading(expected, capacity int64, began time.Time) Loading {
	return Loading{Loading: true, ExpectedObjects: expected, CapacityBytes: capacity,
		Seconds: time.Since(began).Round(time.Millisecond).Seconds()}
}

// ReadLoading reads a mount's stats JSON as a Loading: ok only if it is
// one.
func ReadLoading(b []byte) (Loading, bool) {
	var l Loading
	if json.Unmarshal(b, &l) != nil || !l.Loading {
		return Loading{}, false
	}
	return l, true
}

// Rows are l as `kvfs stats` prints it.
func (l Loading) Rows() []Row {
	capacity := "derived from the store's free space once loaded"
	if l.CapacityBytes > 0 {
		capacity = strconv.FormatInt(l.CapacityBytes, 10)
	}
	return []Row{
		{"state", "loading its index: loads, stores of new names, deletes, moves and mkdir are served; other changes wait for it"},
		{"expected_objects", strconv.FormatInt(l.ExpectedObjects, 10)},
		{"loading_seconds", fmt.Sprintf("%.1f", l.Seconds)},
		{"capacity_bytes", capacity},
	}
}
