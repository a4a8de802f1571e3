package core

import (
	"bytes"
	"os"
	"strconv"
	"sync"
)

// Writers that store under final names.
//
// The grace period keeps a just-closed object from eviction until its
// publish step, the link or rename of a temp file (SPEC: Eviction). A
// connector that writes each object under its final name (LMCache's
// local_disk, any open(key, "wb")) has no publish step, so each of its
// objects kept the whole grace: a full cache of them turned over at
// capacity / grace, and its writers' bytes stayed over the capacity
// meanwhile (an outside tester, 4 MiB objects into 48 MiB: used over
// the capacity in 287 of 295 samples, 6 stores a second). Whether an
// object will be published cannot be known at its close; whether its
// process publishes can be learnt. A process that created directStreak
// objects since its last link or rename (or since it first stored)
// stores under final names: its later objects' grace ends at their
// writer's last release, and they are plain LRU from then on. One link
// or rename by the process, successful or not (LMCache learns from
// EEXIST that another writer published first), makes it a publisher
// again. The streak is long enough that a publisher's threads, each
// between its create and its link, never make one (64 stores under way
// at once in one process). FUSE names a request's thread; its process
// is read once from /proc.

// Client is a request's thread as FUSE names it (0: unknown).
type Client uint32

const (
	directStreak = 64
	// maxClients bounds the threads and processes remembered; past it
	// the memory starts again (every process a publisher until it shows
	// otherwise).
	maxClients = 1 << 12
)

// clients is what kvfs learnt of its clients' processes.
type clients struct {
	mu    sync.Mutex
	procs map[Client]int32 // GUARDED_BY(mu): thread -> process
	since map[int32]int    // GUARDED_BY(mu): process -> objects created since its last publish
}

// process is the process (thread group) of thread t; 0 when /proc does
// not say.
func (cl *clients) process(t Client) int32 {
	cl.mu.Lock()
	p, ok := cl.procs[t]
	cl.mu.Unlock()
	if ok {
		return p
	}
	b, _ := os.ReadFile("/proc/" + strconv.FormatUint(uint64(t), 10) + "/status")
	if i := bytes.Index(b, []byte("\nTgid:")); i >= 0 {
		line := b[i+len("\nTgid:"):]
		if j := bytes.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		n, _ := strconv.ParseInt(string(bytes.TrimSpace(line)), 10, 32)
		p = int32(n)
	}
	cl.mu.Lock()
	if cl.procs == nil || len(cl.procs) >= maxClients {
		cl.procs = map[Client]int32{}
	}
	cl.procs[t] = p
	cl.mu.Unlock()
	return p
}

// created notes an object created by thread t, and says whether t's
// process stores under final names.
func (cl *clients) created(t Client) bool {
	p := cl.process(t)
	if p == 0 {
		return false
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.since == nil || len(cl.since) >= maxClients {
		cl.since = map[int32]int{}
	}
	n := cl.since[p] + 1
	cl.since[p] = n
	return n > directStreak
}

// published notes a link or rename by thread t.
func (cl *clients) published(t Client) {
	p := cl.process(t)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	delete(cl.since, p)
}

// CreatedBy tells the core which client thread created h's object (see
// clients.go): an object of a process that stores under final names
// gets no grace once its writing ends.
func (h *Handle) CreatedBy(t Client) {
	if h.write && t != 0 {
		h.direct.Store(h.c.clients.created(t))
	}
}

// PublishedBy tells the core a client thread linked or renamed an
// object (whether it succeeded or not).
func (c *Core) PublishedBy(t Client) {
	if t != 0 {
		c.clients.published(t)
	}
}

// endDirectGrace ends the grace of a direct writer's object once its
// writing ended.
func (c *Core) endDirectGrace(h *Handle) {
	if h.direct.Load() && !h.refused.Load() {
		c.ledger.EndGrace(h.id)
	}
}
