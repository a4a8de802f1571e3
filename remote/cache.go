package remote

import (
	"sync"
	"time"
)

// nameCache remembers what the remote said about names: present (with
// Info) or absent, each until a deadline. It is bounded: past max
// entries the expired ones are swept, and if that is not enough, an
// arbitrary half goes (a forgotten entry only costs a HEAD).
type nameCache struct {
	max int

	mu sync.Mutex
	m  map[string]cacheEntry // GUARDED_BY(mu)
}

type cacheEntry struct {
	info  Info
	found bool
	until time.Time
}

func newNameCache(max int) *nameCache {
	return &nameCache{max: max, m: make(map[string]cacheEntry)}
}

// get returns name's entry if it has not expired at now.
func (c *nameCache) get(name string, now time.Time) (cacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[name]
	if !ok {
		return cacheEntry{}, false
	}
	if !now.Before(e.until) {
		delete(c.m, name)
		return cacheEntry{}, false
	}
	return e, true
}

func (c *nameCache) put(name string, e cacheEntry, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[name]; !ok && len(c.m) >= c.max {
		c.shrink(now)
	}
	c.m[name] = e
}

// drop forgets name.
func (c *nameCache) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, name)
}

// shrink makes room. Called with mu held.
func (c *nameCache) shrink(now time.Time) {
	for k, e := range c.m {
		if !now.Before(e.until) {
			delete(c.m, k)
		}
	}
	for k := range c.m {
		if len(c.m) < c.max/2 {
			return
		}
		delete(c.m, k)
	}
}

func (c *nameCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
