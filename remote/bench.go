package remote

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/minio/minio-go/v7"
)

// RawGet downloads name's object with the tier's own client into w:
// no checksum, no cache, no breaker. It is the baseline a cold remote
// hit is measured against (kvfs-bench).
func (t *Tier) RawGet(ctx context.Context, name string, w io.Writer) (int64, error) {
	key, err := t.key(name)
	if err != nil {
		return 0, err
	}
	body, _, _, err := minio.Core{Client: t.client}.GetObject(ctx, t.cfg.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return 0, err
	}
	defer body.Close()
	return io.CopyBuffer(w, body, make([]byte, copyBuf))
}

// LookupCost is what Lookup of an absent name costs.
type LookupCost struct {
	// RawHead is the median of plain HEADs of the absent key: one round
	// trip to the server.
	RawHead time.Duration
	// First is the first Lookup (one HEAD expected); HeadsFirst the
	// HEADs it sent.
	First      time.Duration
	HeadsFirst int64
	// Cached is the median of the Lookups after it, within the negative
	// TTL; HeadsCached the HEADs they sent (0 expected).
	Cached      time.Duration
	HeadsCached int64
}

// MeasureAbsentLookup measures LookupCost for name, which must be absent
// from the remote and unknown to the tier, with n cached lookups and n
// raw HEADs.
func (t *Tier) MeasureAbsentLookup(ctx context.Context, name string, n int) (LookupCost, error) {
	var c LookupCost
	key, err := t.key(name)
	if err != nil {
		return c, err
	}
	raw := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		_, err := t.client.StatObject(ctx, t.cfg.Bucket, key, minio.StatObjectOptions{})
		raw = append(raw, time.Since(start))
		if err == nil {
			return c, fmt.Errorf("remote: %s exists: an absent name is needed", key)
		}
		if statusOf(err) != http.StatusNotFound {
			return c, err
		}
	}
	c.RawHead = median(raw)
	h0 := t.st.heads.Load()
	start := time.Now()
	if _, _, err := t.Lookup(ctx, name); err != nil {
		return c, err
	}
	c.First, c.HeadsFirst = time.Since(start), t.st.heads.Load()-h0
	cached := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		t.Lookup(ctx, name)
		cached = append(cached, time.Since(start))
	}
	c.Cached, c.HeadsCached = median(cached), t.st.heads.Load()-h0-c.HeadsFirst
	return c, nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
