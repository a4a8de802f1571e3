package fusefs

import (
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/internal/stats"
)

// requests counts the FUSE requests a mount answered, by type, and lets
// them in through its gate.
type requests struct {
	n    [stats.NumOps]atomic.Int64
	gate gate
}

// counts are the types seen so far and how many of each were answered:
// the mount's fuse_requests.
func (r *requests) counts() map[string]int64 {
	out := map[string]int64{}
	for op := range stats.NumOps {
		if n := r.n[op].Load(); n > 0 {
			out[op.String()] = n
		}
	}
	return out
}

// Instrument is f as the server is to call it: every request counted
// by type (Requests) once it is answered, and, when timed is set, timed
// from the call into f until it returns. timed must be quick and safe
// for concurrent use.
func (f *FS) Instrument(timed func(op stats.Op, took time.Duration)) fuse.RawFileSystem {
	return instrument(f, f.reqs, timed)
}

// instrument wraps raw, counting into reqs.
func instrument(raw fuse.RawFileSystem, reqs *requests, timed func(op stats.Op, took time.Duration)) fuse.RawFileSystem {
	return &counted{raw: raw, reqs: reqs, timed: timed}
}
