package core

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
)

// goid is the calling goroutine's ID, from the header of its stack.
func goid() uint64 {
	var b [64]byte
	f := strings.Fields(string(b[:runtime.Stack(b[:], false)]))
	id, _ := strconv.ParseUint(f[1], 10, 64)
	return id
}

// parked says whether goroutine id is parked (blocked, not runnable) in
// the state given (the bracketed reason in its stack header, such as
// "sync.RWMutex.RLock" or "chan receive"), with frame somewhere on its
// stack. A test waits on it to know, not guess, that a goroutine has
// reached the point where it must wait.
func parked(id uint64, frame string, states ...string) bool {
	b := make([]byte, 1<<20)
	b = b[:runtime.Stack(b, true)]
	head := []byte("goroutine " + strconv.FormatUint(id, 10) + " [")
	for g := range bytes.SplitSeq(b, []byte("\n\n")) {
		if !bytes.HasPrefix(g, head) {
			continue
		}
		state, _, _ := strings.Cut(string(g[len(head):]), "]")
		state, _, _ = strings.Cut(state, ",") // ", 2 minutes"
		for _, s := range states {
			if state == s {
				return strings.Contains(string(g), frame)
			}
		}
		return false
	}
	return false
}

// lockWaits are the states of a goroutine parked on a sync.RWMutex:
// RLock, or Lock behind another writer (its inner Mutex) or behind
// readers.
var lockWaits = []string{"sync.RWMutex.RLock", "sync.RWMutex.Lock", "sync.Mutex.Lock"}

// goParked runs f on a goroutine of its own and returns once f has
// returned (finished true) or that goroutine is parked in one of states
// with frame on its stack (see parked). wait blocks until f has returned.
// A test calls it where a change is half-way, to know whether f waited
// for the change or went through it.
func goParked(f func(), frame string, states ...string) (finished bool, wait func()) {
	done := make(chan struct{})
	started := make(chan uint64)
	go func() {
		defer close(done)
		started <- goid()
		f()
	}()
	g := <-started
	wait = func() { <-done }
	for !parked(g, frame, states...) {
		select {
		case <-done:
			return true, wait
		default:
			runtime.Gosched()
		}
	}
	return false, wait
}
