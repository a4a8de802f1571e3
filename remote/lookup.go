package remote

import (
	"context"
	"errors"
	"fmt"

	"github.com/minio/minio-go/v7"
	"go.uber.org/zap"
)

type lookupResult struct {
	info  Info
	found bool
}

// Lookup asks whether the remote holds name, and its Info if so. It
// answers from memory when it can: an absent name is remembered for
// NegativeTTL, a present one for PositiveTTL (a 404 on Fetch drops it).
// Otherwise it sends one HEAD, shared by all callers asking for name at
// the time, bounded by Config.Timeout. A temp name (Excluded) is never
// asked for. With the server failing, the circuit breaker opens and
// Lookup answers at once. Any error means "treat as not found": found
// is false whenever err is not nil.
func (t *Tier) Lookup(ctx context.Context, name string) (Info, bool, error) {
	r, err := t.lookup(ctx, name)
	if r.found {
		t.st.hits.Add(1)
	} else {
		t.st.misses.Add(1)
	}
	return r.info, r.found, err
}

func (t *Tier) lookup(ctx context.Context, name string) (lookupResult, error) {
	if t.closed.Load() {
		return lookupResult{}, ErrClosed
	}
	if t.exclude.match(name) {
		return lookupResult{}, nil
	}
	key, err := t.key(name)
	if err != nil {
		return lookupResult{}, err
	}
	if t.queue.tombstone(name) {
		return lookupResult{}, nil // an rm is pending: absent here
	}
	if r, ok := t.cached(name); ok {
		return r, nil
	}
	c, lead := t.lookups.join(name)
	if !lead {
		return c.wait(ctx)
	}
	r, ok := t.cached(name) // a call that just finished may have answered
	if !ok {
		r, err = t.head(name, key)
	}
	if t.queue.tombstone(name) {
		r = lookupResult{} // an rm came during the HEAD
	}
	t.lookups.finish(name, c, r, err)
	return r, err
}

func (t *Tier) cached(name string) (lookupResult, bool) {
	e, ok := t.names.get(name, t.clock.Now())
	return lookupResult{e.info, e.found}, ok
}

// head sends the HEAD. It runs for every caller waiting, so it is bound
// to the tier's life and the timeout, not to the leader's context.
func (t *Tier) head(name, key string) (lookupResult, error) {
	if !t.breaker.allow() {
		return lookupResult{}, fmt.Errorf("%w: circuit breaker open", ErrUnavailable)
	}
	oi, err := t.stat(key)
	switch {
	case errors.Is(err, ErrNotFound):
		t.rememberAbsent(name)
		return lookupResult{}, nil
	case err != nil:
		return lookupResult{}, err
	}
	info, _, err := infoOf(oi)
	if err != nil {
		t.log.Warn("remote object without kvfs metadata: treated as absent", zap.String("key", key))
		t.rememberAbsent(name)
		return lookupResult{}, nil
	}
	t.rememberPresent(name, info)
	return lookupResult{info, true}, nil
}

// stat is one HEAD, classified (the breaker is told).
func (t *Tier) stat(key string) (minio.ObjectInfo, error) {
	ctx, cancel := context.WithTimeout(t.baseCtx, t.cfg.Timeout)
	defer cancel()
	t.st.heads.Add(1)
	// Checksum mode: the answer carries the CRC32C stored with the object.
	oi, err := t.client.StatObject(ctx, t.cfg.Bucket, key, minio.StatObjectOptions{Checksum: true})
	return oi, t.classify(t.baseCtx, err)
}

func (t *Tier) rememberAbsent(name string) {
	now := t.clock.Now()
	t.names.put(name, cacheEntry{until: now.Add(t.cfg.NegativeTTL)}, now)
}

func (t *Tier) rememberPresent(name string, info Info) {
	now := t.clock.Now()
	t.names.put(name, cacheEntry{info: info, found: true, until: now.Add(t.cfg.PositiveTTL)}, now)
}

// Forget drops what the tier remembers about name, present or absent.
// The daemon calls it when it learns better (for example, a remote
// publish announced out of band).
func (t *Tier) Forget(name string) { t.names.drop(name) }
