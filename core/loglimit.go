package core

import (
	"sync"
	"time"
)

// passedWarnEvery is how often the warning of a writer past the
// capacity is logged: a client that stores objects larger than the
// cache, one after another, is refused at each (admission_failures
// counts them all), and one line per refusal filled a log with thousands
// (an outside tester: about 3,300 in four minutes).
const passedWarnEvery = 10 * time.Second

// logLimit lets a warning that clients can cause in bursts through at
// most once an interval, saying how many were left out since.
type logLimit struct {
	mu      sync.Mutex
	last    time.Time
	skipped int
}

// allow says whether to log the warning now, and how many were not
// logged since the last one that was.
func (l *logLimit) allow(now time.Time, every time.Duration) (ok bool, skipped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < every {
		l.skipped++
		return false, 0
	}
	skipped, l.last, l.skipped = l.skipped, now, 0
	return true, skipped
}
