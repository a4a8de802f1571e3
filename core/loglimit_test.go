package core

import (
	"testing"
	"time"
)

// A warning clients can cause in bursts is logged at most once an
// interval, the next one saying how many were left out.
func TestLogLimit(t *testing.T) {
	var l logLimit
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at      time.Duration
		ok      bool
		skipped int
	}{{0, true, 0}, {time.Second, false, 0}, {5 * time.Second, false, 0}, {10 * time.Second, true, 2}, {11 * time.Second, false, 0}, {30 * time.Second, true, 1}}
	for _, s := range steps {
		if ok, skipped := l.allow(t0.Add(s.at), 10*time.Second); ok != s.ok || skipped != s.skipped {
			t.Errorf("at %v: allowed %v, %d left out; want %v, %d", s.at, ok, skipped, s.ok, s.skipped)
		}
	}
}
