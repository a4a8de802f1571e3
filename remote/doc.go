// Package remote is kvfs's shared remote tier on S3-compatible object
// storage: the node's misses are looked up and fetched from a bucket
// prefix, and its published objects are uploaded there behind its back,
// so that a fleet reuses each other's KV cache. It knows nothing of FUSE
// or of the ledger: the daemon asks it (Lookup, Fetch), feeds it
// (Enqueue, with an Opener to read local objects), and reads its Stats.
//
// Objects are immutable and named by the cache key: the first writer of
// a key wins (PUT with If-None-Match: *), a loser is not an error. Each
// object carries its size and CRC32C in user metadata, and a fetch that
// does not match them fails with ErrCorrupt. See docs/remote.md for the
// consistency argument, the settings and how to point it at a bucket.
//
// Requests: one HEAD per Lookup that memory cannot answer (absent names
// are remembered for NegativeTTL, present ones for PositiveTTL; one HEAD
// is shared by concurrent callers), one GET per Fetch however many
// callers, a HEAD and then (if the key is absent) one conditional PUT
// per upload, which reads the local object once and carries its CRC32C
// as a trailer, and one DELETE per Delete (an rm). A circuit breaker
// stops all of them after BreakerFailures consecutive failures, for
// BreakerCoolDown, then lets one probe through. Refusals of a key for
// good are dropped (refuse.go); the rest back off.
//
// Locks: nameCache.mu, flight.mu, queue.mu, breaker.mu, rejected.mu and
// Tier.wakeMu each guard their own struct and are never held while
// another is taken, nor across a request or a file operation (the
// breaker calls its onClose hook after releasing its lock). The one
// exception is queue.fileMu, outermost: it is held across a journal
// file's write or removal and the change of the pending set it records
// (queue.mu inside it), and may wake the uploaders (Tier.wakeMu).
package remote
