package remote

import (
	"context"
	"sync"
)

// flight runs one piece of work per key however many callers ask for it
// at once: the first caller (the leader) does it, the others (followers)
// wait for its result. Unlike x/sync/singleflight the leader learns how
// many followers took the result, so that it can hand each a resource.
type flight[T any] struct {
	mu    sync.Mutex
	calls map[string]*call[T] // GUARDED_BY(mu)
}

type call[T any] struct {
	done      chan struct{}
	val       T
	err       error
	followers int // GUARDED_BY(flight.mu) until done is closed
}

// join returns key's call in progress, or a new one that the caller
// leads (lead true) and must finish.
func (g *flight[T]) join(key string) (c *call[T], lead bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[key]; ok {
		c.followers++
		return c, false
	}
	if g.calls == nil {
		g.calls = make(map[string]*call[T])
	}
	c = &call[T]{done: make(chan struct{})}
	g.calls[key] = c
	return c, true
}

// finish seals and publishes in one step.
func (g *flight[T]) finish(key string, c *call[T], val T, err error) {
	g.seal(key, c)
	c.publish(val, err)
}

// seal ends key's call for joiners (later callers start a new one) and
// returns how many followers joined it.
func (g *flight[T]) seal(key string, c *call[T]) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.calls, key)
	return c.followers
}

// publish hands the result to the followers.
func (c *call[T]) publish(val T, err error) {
	c.val, c.err = val, err
	close(c.done)
}

// wait is a follower's wait; it gives up when ctx is done (the call goes
// on for the others).
func (c *call[T]) wait(ctx context.Context) (T, error) {
	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
