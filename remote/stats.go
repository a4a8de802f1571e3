package remote

import "sync/atomic"

// Stats are the tier's counters since New, with the JSON names that
// `kvfs stats` and the metrics use.
type Stats struct {
	// Hits and Misses count Lookup answers: found, and not found (absent,
	// excluded, or the server unavailable).
	Hits   int64 `json:"remote_hits"`
	Misses int64 `json:"remote_misses"`
	// Heads counts HEAD requests sent (lookups and the check before an
	// upload).
	Heads int64 `json:"remote_heads"`
	// Fetches counts downloads that completed and verified.
	Fetches      int64 `json:"remote_fetches"`
	FetchedBytes int64 `json:"remote_fetched_bytes"`
	// Corrupt counts fetched objects whose size or checksum was wrong.
	Corrupt int64 `json:"remote_corrupt"`
	// Uploads counts objects stored; AlreadyPresent, uploads not needed
	// because the key was there (first writer won).
	Uploads        int64 `json:"remote_uploads"`
	UploadedBytes  int64 `json:"remote_uploaded_bytes"`
	AlreadyPresent int64 `json:"remote_upload_already_present"`
	// UploadFailures counts failed upload attempts (each retry counts).
	UploadFailures int64 `json:"remote_upload_failures"`
	// UploadDropped counts uploads given up: the queue was full, or the
	// server refused the request for good.
	UploadDropped int64 `json:"remote_upload_dropped"`
	// UploadSkipped counts Enqueue calls that needed no upload: a temp
	// name, a name known to be remote, or a local object gone by the
	// time its turn came.
	UploadSkipped int64 `json:"remote_upload_skipped"`
	// QueueDepth is the uploads pending now, in progress included.
	QueueDepth int64 `json:"remote_queue_depth"`
	// BreakerState is "closed", "open" or "half-open".
	BreakerState string `json:"remote_breaker_state"`
}

type counters struct {
	hits, misses, heads, fetches, fetchedBytes, corrupt atomic.Int64
	uploads, uploadedBytes, present, failures, dropped  atomic.Int64
	skipped                                             atomic.Int64
}

// Stats reads the counters now.
func (t *Tier) Stats() Stats {
	c := &t.st
	return Stats{
		Hits: c.hits.Load(), Misses: c.misses.Load(), Heads: c.heads.Load(),
		Fetches: c.fetches.Load(), FetchedBytes: c.fetchedBytes.Load(), Corrupt: c.corrupt.Load(),
		Uploads: c.uploads.Load(), UploadedBytes: c.uploadedBytes.Load(),
		AlreadyPresent: c.present.Load(), UploadFailures: c.failures.Load(),
		UploadDropped: c.dropped.Load(), UploadSkipped: c.skipped.Load(),
		QueueDepth: int64(t.queue.depth()), BreakerState: t.breaker.State(),
	}
}
