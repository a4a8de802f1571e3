package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/kvfs/kvfs/remote"
	"github.com/minio/minio-go/v7"
)

// s3Baseline is what the remote rows compare kvfs with: a plain minio
// client of the bucket (no checksum, no cache, no breaker), and the
// bench's own remote.Tier for the tier's cost without FUSE. Names are
// the tier's, under prefix in bucket.
type s3Baseline struct {
	client         *minio.Client
	bucket, prefix string
	tier           *remote.Tier
}

func (s *s3Baseline) key(name string) string { return s.prefix + "/" + name }

// rawGet downloads name's object into w: the baseline a cold remote hit
// is measured against, copied in 1 MiB reads as the tier copies.
func (s *s3Baseline) rawGet(ctx context.Context, name string, w io.Writer) (int64, error) {
	body, err := s.client.GetObject(ctx, s.bucket, s.key(name), minio.GetObjectOptions{})
	if err != nil {
		return 0, err
	}
	defer body.Close()
	return io.CopyBuffer(w, body, make([]byte, 1<<20))
}

// lookupCost is what the tier's Lookup of an absent name costs.
type lookupCost struct {
	// rawHead is the median of plain HEADs of the absent key: one round
	// trip to the server.
	rawHead time.Duration
	// first is the first Lookup (one HEAD expected); headsFirst the
	// HEADs it sent, by the tier's own count.
	first      time.Duration
	headsFirst int64
	// cached is the median of the Lookups after it, within the negative
	// TTL; headsCached the HEADs they sent (0 expected).
	cached      time.Duration
	headsCached int64
}

// absentLookup measures lookupCost for name, which must be absent from
// the bucket and unknown to the tier, with n cached lookups and n raw
// HEADs.
func (s *s3Baseline) absentLookup(ctx context.Context, name string, n int) (lookupCost, error) {
	var c lookupCost
	raw := make([]float64, 0, n)
	for range n {
		start := time.Now()
		_, err := s.client.StatObject(ctx, s.bucket, s.key(name), minio.StatObjectOptions{})
		raw = append(raw, float64(time.Since(start)))
		if err == nil {
			return c, fmt.Errorf("%s exists: an absent name is needed", s.key(name))
		}
		if minio.ToErrorResponse(err).StatusCode != http.StatusNotFound {
			return c, err
		}
	}
	c.rawHead = time.Duration(median(raw))
	h0 := s.tier.Stats().Heads
	start := time.Now()
	if _, _, err := s.tier.Lookup(ctx, name); err != nil {
		return c, err
	}
	c.first, c.headsFirst = time.Since(start), s.tier.Stats().Heads-h0
	cached := make([]float64, 0, n)
	for range n {
		start := time.Now()
		s.tier.Lookup(ctx, name)
		cached = append(cached, float64(time.Since(start)))
	}
	c.cached, c.headsCached = time.Duration(median(cached)), s.tier.Stats().Heads-h0-c.headsFirst
	return c, nil
}
