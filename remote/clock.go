package remote

import "time"

// Clock is the time the tier's TTLs, breaker cool-down and upload
// backoff run on; tests pass one they move by hand. Network timeouts
// (Config.Timeout) run on real time.
type Clock interface {
	Now() time.Time
	// After is time.After on this clock.
	After(d time.Duration) <-chan time.Time
}

var _ Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
