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
	// UploadDropped counts work given up because the queue was full (or
	// its journal could not be written).
	UploadDropped int64 `json:"remote_upload_dropped"`
	// Rejected counts uploads and deletes refused for good: a name that
	// cannot be a key (not UTF-8, too long), or the server's refusal of
	// the key itself (InvalidArgument, KeyTooLongError, AccessDenied...).
	// Each is dropped from the queue and the journal, and logged once.
	Rejected int64 `json:"remote_rejected"`
	// UploadReads counts reads of a local object for upload: one pass
	// per PUT sent (the HEAD before it skips keys already there).
	UploadReads int64 `json:"remote_upload_reads"`
	// UploadChanged counts uploads cut because the local object changed
	// while it was read (tried again later).
	UploadChanged int64 `json:"remote_upload_changed"`
	// Deletes counts keys deleted (rm with the shared tier; a key already
	// absent counts); DeleteRequests the DELETEs sent, retries included.
	Deletes        int64 `json:"remote_deletes"`
	DeleteRequests int64 `json:"remote_delete_requests"`
	// UploadSkipped counts Enqueue calls that needed no upload: a temp
	// name, a name known to be remote, or a local object gone by the
	// time its turn came.
	UploadSkipped int64 `json:"remote_upload_skipped"`
	// QueueDepth is the uploads and deletes pending now, in progress
	// included.
	QueueDepth int64 `json:"remote_queue_depth"`
	// BreakerState is "closed", "open" or "half-open".
	BreakerState string `json:"remote_breaker_state"`
}

type counters struct {
	hits, misses, heads, fetches, fetchedBytes, corrupt atomic.Int64
	uploads, uploadedBytes, present, failures, dropped  atomic.Int64
	skipped, rejected, reads, changed, deletes          atomic.Int64
	deleteRequests                                      atomic.Int64
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
		Rejected: c.rejected.Load(), UploadReads: c.reads.Load(), UploadChanged: c.changed.Load(),
		Deletes: c.deletes.Load(), DeleteRequests: c.deleteRequests.Load(),
		QueueDepth: int64(t.queue.depth()), BreakerState: t.breaker.State(),
	}
}
