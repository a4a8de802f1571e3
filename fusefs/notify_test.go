package fusefs

import (
	"errors"
	"testing"
	"time"
)

// TestPauseGivesWayToRoom: a pause that finds a notice in the kernel
// waits for it, gives up at its limit, and says at once that a request
// waits for room when one does; either way it has resumed.
func TestPauseGivesWayToRoom(t *testing.T) {
	var q notifier
	q.init()
	q.add(notice{})
	if _, ok := q.next(); !ok {
		t.Fatal("no notice to send")
	}
	if err := q.pause(time.Millisecond, func() bool { return false }); !errors.Is(err, errNotifying) || q.paused {
		t.Fatalf("a notice in the kernel past the limit: %v, paused %v; want errNotifying, resumed", err, q.paused)
	}
	start := time.Now()
	if err := q.pause(time.Hour, func() bool { return true }); !errors.Is(err, ErrWaitingForRoom) || q.paused || time.Since(start) > time.Minute {
		t.Fatalf("a notice in the kernel while a request waits for room: %v after %v, paused %v; want ErrWaitingForRoom at once, resumed", err, time.Since(start), q.paused)
	}
	done := make(chan error, 1)
	go func() { done <- q.pause(time.Hour, func() bool { return false }) }()
	q.sent()
	if err := <-done; err != nil || !q.paused {
		t.Fatalf("the notice sent: %v, paused %v; want nil, paused", err, q.paused)
	}
}
