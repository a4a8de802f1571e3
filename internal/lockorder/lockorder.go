// Package lockorder gives locks a rank, so that a test build can check
// that every goroutine takes them in the written order: a lock may be
// taken only while every lock the goroutine holds ranks below it. Locks
// of one rank (a striped table) may be held together when taken in
// increasing stripe order. Built without the lockcheck tag the checks
// compile to nothing; `make unit` runs the race tests with it.
package lockorder

import "sync"

// Rank orders locks: outermost lowest. Zero is unranked (never checked).
type Rank int

// Mutex is a sync.Mutex with a rank.
type Mutex struct {
	mu   sync.Mutex
	rank Rank
	sub  int
}

// SetRank ranks m; call it before m is used.
func (m *Mutex) SetRank(r Rank) { m.rank = r }

// SetStripe ranks m as stripe i of a table of rank r: stripes of one
// table are taken in increasing i. Call it before m is used.
func (m *Mutex) SetStripe(r Rank, i int) { m.rank, m.sub = r, i }

func (m *Mutex) Lock() {
	acquire(m.rank, m.sub, m)
	m.mu.Lock()
}

func (m *Mutex) Unlock() {
	release(m)
	m.mu.Unlock()
}

// RWMutex is a sync.RWMutex with a rank; shared and exclusive holds are
// checked alike.
type RWMutex struct {
	mu   sync.RWMutex
	rank Rank
}

// SetRank ranks m; call it before m is used.
func (m *RWMutex) SetRank(r Rank) { m.rank = r }

func (m *RWMutex) Lock() {
	acquire(m.rank, 0, m)
	m.mu.Lock()
}

func (m *RWMutex) Unlock() {
	release(m)
	m.mu.Unlock()
}

func (m *RWMutex) RLock() {
	acquireShared(m.rank, m)
	m.mu.RLock()
}

func (m *RWMutex) RUnlock() {
	release(m)
	m.mu.RUnlock()
}

// TryLock and TryRLock never wait, so they cannot deadlock: they are not
// checked, and what they take is recorded.
func (m *RWMutex) TryLock() bool {
	if !m.mu.TryLock() {
		return false
	}
	record(m.rank, 0, m)
	return true
}

func (m *RWMutex) TryRLock() bool {
	if !m.mu.TryRLock() {
		return false
	}
	record(m.rank, 0, m)
	return true
}
