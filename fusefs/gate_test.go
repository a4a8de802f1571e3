package fusefs

import (
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestGateHoldsNewRequests: closing the gate waits for the request let
// in before it (and for the server's count of read requests to be only
// those it holds), holds the requests that come after, and opening it
// lets those run.
func TestGateHoldsNewRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g gate
		var read atomic.Int64 // the server's outstanding requests
		var ran atomic.Int64
		request := func(work time.Duration) {
			read.Add(1)
			g.enter()
			time.Sleep(work)
			ran.Add(1)
			g.leave()
			read.Add(-1)
		}
		go request(time.Second) // in before the gate closes
		synctest.Wait()
		closed := make(chan error)
		go func() { closed <- g.close(func() int { return int(read.Load()) }, time.Minute, nil) }()
		synctest.Wait()
		go request(0) // after: held
		synctest.Wait()
		select {
		case err := <-closed:
			t.Fatalf("the gate closed (%v) while a request it let in ran", err)
		default:
		}
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if ran.Load() != 1 || g.held.Load() != 1 {
			t.Fatalf("at the closed gate: %d ran, %d held; want 1 and 1", ran.Load(), g.held.Load())
		}
		g.open()
		synctest.Wait()
		if ran.Load() != 2 || read.Load() != 0 {
			t.Fatalf("after opening: %d ran, %d outstanding", ran.Load(), read.Load())
		}
	})
}

// TestGateGivesUp: a request that does not finish within the limit
// fails the close with errBusy.
func TestGateGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g gate
		release := make(chan struct{})
		go func() { g.enter(); <-release; g.leave() }()
		synctest.Wait()
		if err := g.close(func() int { return 1 }, time.Second, nil); !errors.Is(err, errBusy) {
			t.Fatalf("close: %v, want errBusy", err)
		}
		g.open()
		close(release)
	})
}

// TestGateWaitingForRoom: a request let in that waits for room fails the
// close at once (the room may be what a held request makes), long before
// the limit.
func TestGateWaitingForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g gate
		var waiting atomic.Bool
		release := make(chan struct{})
		go func() { g.enter(); waiting.Store(true); <-release; g.leave() }()
		synctest.Wait()
		start := time.Now()
		if err := g.close(func() int { return 1 }, time.Minute, waiting.Load); !errors.Is(err, ErrWaitingForRoom) || time.Since(start) > time.Millisecond {
			t.Fatalf("close: %v after %v, want ErrWaitingForRoom at once", err, time.Since(start))
		}
		g.open()
		close(release)
	})
}

// TestHandleTablePutAt: numbers given by a predecessor are kept, the
// ones between them are handed out again, and each is listed.
func TestHandleTablePutAt(t *testing.T) {
	var tb handleTable[string]
	tb.putAt(3, "c")
	tb.putAt(5, "e")
	tb.reindex()
	got := map[uint64]string{}
	tb.each(func(fh uint64, v string) { got[fh] = v })
	if len(got) != 2 || got[3] != "c" || got[5] != "e" {
		t.Fatalf("each: %v", got)
	}
	seen := map[uint64]bool{}
	for range 4 {
		seen[tb.add("new")] = true
	}
	for _, fh := range []uint64{1, 2, 4, 6} {
		if !seen[fh] {
			t.Fatalf("new handles %v; want 1, 2, 4 and 6", seen)
		}
	}
	if v, _, ok := tb.get(5); !ok || v != "e" {
		t.Fatalf("handle 5: %q, %v", v, ok)
	}
}
