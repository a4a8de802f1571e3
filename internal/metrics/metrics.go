// Package metrics serves a kvfs mount's figures to Prometheus: the
// ledger and the core's counters, read at scrape time from the same
// snapshot `kvfs stats` prints (so the two agree at the same moment);
// the age of evicted objects and the latency of FUSE requests by type,
// observed as they happen; what start-up found; the RAM tier's figures;
// and the Go runtime's and the process's own.
package metrics

import (
	"time"

	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/internal/stats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// DefaultAddr is the address the docs suggest for --metrics-addr: the
// loopback only (the figures name no object, but they are nobody else's
// business), and a port no common service or well-known exporter takes
// by default.
const DefaultAddr = "127.0.0.1:9580"

// Buckets of the histograms, in seconds. An evicted object's idle time
// runs from the grace period (2 s by default) to days: the buckets say
// whether the capacity holds a working set for minutes or for hours. A
// FUSE request takes from microseconds (a lookup the index answers) to
// the --wait-limit (a write waiting for space).
var (
	IdleBuckets    = []float64{0.1, 0.5, 1, 2, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 7 * 86400}
	LatencyBuckets = []float64{1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.1, 0.5, 1, 5, 10}
)

// Metrics is one mount's registry. It is told of drops and requests as
// they happen (mount.Observer) and reads the rest from Source at scrape
// time.
type Metrics struct {
	reg      *prometheus.Registry
	idle     prometheus.Histogram
	requests *prometheus.HistogramVec
	// byOp caches each request type's histogram once seen, so that a
	// request pays no label lookup and unseen types export nothing.
	byOp [stats.NumOps]lazyObserver
}

// Source is where the figures read at scrape time come from.
type Source struct {
	// Stats is one snapshot of the mount: what `kvfs stats --json` prints.
	Stats  func() stats.Snapshot
	Loaded core.LoadReport
	// StoreQuotaBytes is the limit of the project quota that caps the
	// store when the daemon is gone (mount.Mount.QuotaBytes); 0: none.
	StoreQuotaBytes int64
}

// New makes the registry and the histograms fed as things happen; Watch
// adds the figures read at scrape time once the mount exists. build is
// the binary's build name, as `kvfs version` and the log say it.
func New(build string) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		idle: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvfs_evicted_idle_seconds",
			Help:    "Time since last use of each object evicted to make room (the age of what the capacity could not keep).",
			Buckets: IdleBuckets,
		}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvfs_fuse_request_duration_seconds",
			Help:    "Time the daemon took to answer FUSE requests, by request type (its _count is kvfs stats' fuse_requests).",
			Buckets: LatencyBuckets,
		}, []string{"op"}),
	}
	m.reg.MustRegister(m.idle, m.requests, buildInfo(build),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Watch registers the figures read from src at every scrape.
func (m *Metrics) Watch(src Source) {
	m.reg.MustRegister(newSnapshotCollector(src))
}

// Registry is what /metrics serves; tests gather from it.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Dropped observes the idle time of an evicted object; objects dropped
// for other reasons (vanished, refused) are not evictions.
func (m *Metrics) Dropped(d core.Drop) {
	if d.Why == core.Evicted {
		m.idle.Observe(d.Idle.Seconds())
	}
}

// Request observes how long a FUSE request took.
func (m *Metrics) Request(op stats.Op, took time.Duration) {
	if op < stats.NumOps {
		m.byOp[op].get(m.requests, op).Observe(took.Seconds())
	}
}
