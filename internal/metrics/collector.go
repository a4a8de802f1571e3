package metrics

import (
	"runtime/debug"

	"github.com/kvfs/kvfs/fusefs"
	"github.com/kvfs/kvfs/remote"
	"github.com/prometheus/client_golang/prometheus"
)

// series is one figure of the snapshot.
type series struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*fusefs.Stats) float64
}

func gauge(name, help string, v func(*fusefs.Stats) int64) series {
	return series{prometheus.NewDesc(name, help, nil, nil), prometheus.GaugeValue, asFloat(v)}
}

func counter(name, help string, v func(*fusefs.Stats) int64) series {
	return series{prometheus.NewDesc(name, help, nil, nil), prometheus.CounterValue, asFloat(v)}
}

func asFloat(v func(*fusefs.Stats) int64) func(*fusefs.Stats) float64 {
	return func(s *fusefs.Stats) float64 { return float64(v(s)) }
}

// ledgerSeries are the ledger's and the core's figures, named after the
// fields of `kvfs stats --json`.
var ledgerSeries = []series{
	gauge("kvfs_capacity_bytes", "The capacity the ledger keeps used bytes under.", func(s *fusefs.Stats) int64 { return s.CapacityBytes }),
	gauge("kvfs_used_bytes", "Bytes charged: every object's size rounded up to 4096, plus open writers' reservations (df's used).", func(s *fusefs.Stats) int64 { return s.UsedBytes }),
	gauge("kvfs_objects", "Objects (inodes) held, hard links counted once.", func(s *fusefs.Stats) int64 { return s.Objects }),
	gauge("kvfs_pinned_objects", "Objects with an open handle: never evicted.", func(s *fusefs.Stats) int64 { return s.PinnedObjects }),
	gauge("kvfs_pinned_bytes", "Bytes charged to pinned objects.", func(s *fusefs.Stats) int64 { return s.PinnedBytes }),
	gauge("kvfs_shadow_bytes", "Bytes of objects unlinked while still open.", func(s *fusefs.Stats) int64 { return s.ShadowBytes }),
	gauge("kvfs_reserved_bytes", "Space admitted to open writers beyond what they have written.", func(s *fusefs.Stats) int64 { return s.ReservedBytes }),
	gauge("kvfs_unadmitted_bytes", "Bytes passthrough writers wrote beyond what could be admitted (over the capacity until they close).", func(s *fusefs.Stats) int64 { return s.UnadmittedBytes }),
	gauge("kvfs_overshoot_max_bytes", "The most used bytes have been over the capacity in the last 10 to 20 s (0 in normal operation).", func(s *fusefs.Stats) int64 { return s.OvershootMaxBytes }),
	counter("kvfs_evictions_total", "Objects evicted to make room (also at start-up, to fit the capacity).", func(s *fusefs.Stats) int64 { return s.Evictions }),
	counter("kvfs_evicted_bytes_total", "Bytes freed by evictions.", func(s *fusefs.Stats) int64 { return s.EvictedBytes }),
	counter("kvfs_admission_failures_total", "Writes, truncates, fallocates and closes refused with ENOSPC.", func(s *fusefs.Stats) int64 { return s.AdmissionFailures }),
	counter("kvfs_reconciliations_total", "Times the ledger followed an object changed behind kvfs's back.", func(s *fusefs.Stats) int64 { return s.Reconciliations }),
	counter("kvfs_stores_total", "Writers' closes that published bytes.", func(s *fusefs.Stats) int64 { return s.Stores }),
	counter("kvfs_loads_total", "Opens of objects for reading.", func(s *fusefs.Stats) int64 { return s.Loads }),
}

var lookups = prometheus.NewDesc("kvfs_lookups_total",
	"Lookups of names that found an object (result=\"hit\") or nothing (result=\"miss\"): the cache's hit ratio as connectors see it.",
	[]string{"result"}, nil)

// ramSeries are the RAM tier's figures, when there is one.
var ramSeries = []series{
	gauge("kvfs_ram_cache_capacity_bytes", "The RAM tier's size.", func(s *fusefs.Stats) int64 { return s.RAMCache.CapacityBytes }),
	gauge("kvfs_ram_cache_bytes", "Bytes of object copies the RAM tier holds.", func(s *fusefs.Stats) int64 { return s.RAMCache.Bytes }),
	counter("kvfs_ram_cache_hits_total", "Opens served from a copy in RAM.", func(s *fusefs.Stats) int64 { return s.RAMCache.Hits }),
	counter("kvfs_ram_cache_misses_total", "Opens that found no copy in RAM.", func(s *fusefs.Stats) int64 { return s.RAMCache.Misses }),
	counter("kvfs_ram_cache_fills_total", "Copies made from reads passing through the daemon.", func(s *fusefs.Stats) int64 { return s.RAMCache.Fills }),
	counter("kvfs_ram_cache_drops_total", "Copies dropped because their object changed or went.", func(s *fusefs.Stats) int64 { return s.RAMCache.Drops }),
	counter("kvfs_ram_cache_stale_total", "Copies found outdated by their stamp (the store changed behind kvfs's back).", func(s *fusefs.Stats) int64 { return s.RAMCache.Stale }),
}

// remoteSeries are the remote tier's figures, when there is one, named
// after their remote_* fields of `kvfs stats --json`.
var remoteSeries = []series{
	counter("kvfs_remote_hits_total", "Remote lookups that found the name in the bucket.", func(s *fusefs.Stats) int64 { return s.RemoteStats.Hits }),
	counter("kvfs_remote_misses_total", "Remote lookups that did not (absent, excluded, or the server unavailable).", func(s *fusefs.Stats) int64 { return s.RemoteStats.Misses }),
	counter("kvfs_remote_heads_total", "HEAD requests sent (lookups and the check before an upload).", func(s *fusefs.Stats) int64 { return s.RemoteStats.Heads }),
	counter("kvfs_remote_fetches_total", "Downloads that completed and verified.", func(s *fusefs.Stats) int64 { return s.RemoteStats.Fetches }),
	counter("kvfs_remote_fetched_bytes_total", "Bytes of those downloads.", func(s *fusefs.Stats) int64 { return s.RemoteStats.FetchedBytes }),
	counter("kvfs_remote_corrupt_total", "Fetched objects whose size or checksum was wrong.", func(s *fusefs.Stats) int64 { return s.RemoteStats.Corrupt }),
	counter("kvfs_remote_uploads_total", "Objects uploaded.", func(s *fusefs.Stats) int64 { return s.RemoteStats.Uploads }),
	counter("kvfs_remote_uploaded_bytes_total", "Bytes uploaded.", func(s *fusefs.Stats) int64 { return s.RemoteStats.UploadedBytes }),
	counter("kvfs_remote_upload_already_present_total", "Uploads not needed because the key was there (the first writer won).", func(s *fusefs.Stats) int64 { return s.RemoteStats.AlreadyPresent }),
	counter("kvfs_remote_upload_failures_total", "Failed upload attempts (each retry counts).", func(s *fusefs.Stats) int64 { return s.RemoteStats.UploadFailures }),
	counter("kvfs_remote_upload_dropped_total", "Uploads and deletes given up because the queue was full.", func(s *fusefs.Stats) int64 { return s.RemoteStats.UploadDropped }),
	counter("kvfs_remote_upload_skipped_total", "Uploads not needed: temp names, names known remote, local objects gone.", func(s *fusefs.Stats) int64 { return s.RemoteStats.UploadSkipped }),
	counter("kvfs_remote_rejected_total", "Uploads and deletes refused for good (a name no key can hold, or the server's refusal of the key); dropped, logged once.", func(s *fusefs.Stats) int64 { return s.RemoteStats.Rejected }),
	counter("kvfs_remote_upload_reads_total", "Reads of stored files for upload: one per PUT sent.", func(s *fusefs.Stats) int64 { return s.RemoteStats.UploadReads }),
	counter("kvfs_remote_upload_changed_total", "Uploads cut because the stored file changed while it was read (tried again).", func(s *fusefs.Stats) int64 { return s.RemoteStats.UploadChanged }),
	counter("kvfs_remote_deletes_total", "Keys deleted from the bucket for an rm (a key already absent counts).", func(s *fusefs.Stats) int64 { return s.RemoteStats.Deletes }),
	counter("kvfs_remote_delete_requests_total", "DELETE requests sent, retries included.", func(s *fusefs.Stats) int64 { return s.RemoteStats.DeleteRequests }),
	gauge("kvfs_remote_queue_depth", "Uploads and deletes pending now, the ones in progress included.", func(s *fusefs.Stats) int64 { return s.RemoteStats.QueueDepth }),
}

// breakerState is 1 for the remote tier's circuit breaker's state and 0
// for the others: every state is always exported, so that an alert on
// state="open" selects a series whatever the state now.
var breakerState = prometheus.NewDesc("kvfs_remote_breaker_state",
	"The remote tier's circuit breaker: 1 for its state now (closed: requests go to the server; open: they are not sent; half-open: one probe is), 0 for the others.",
	[]string{"state"}, nil)

var breakerStates = []string{remote.BreakerClosed, remote.BreakerOpen, remote.BreakerHalfOpen}

// snapshotCollector reads one snapshot per scrape, so every figure of a
// scrape is from the same moment, and equals what `kvfs stats` printed
// had it asked at that moment.
type snapshotCollector struct {
	src     Source
	startup []prometheus.Metric
}

var _ prometheus.Collector = (*snapshotCollector)(nil)

func newSnapshotCollector(src Source) *snapshotCollector {
	return &snapshotCollector{src: src, startup: startupMetrics(src)}
}

func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, ss := range [][]series{ledgerSeries, ramSeries, remoteSeries} {
		for _, s := range ss {
			ch <- s.desc
		}
	}
	ch <- lookups
	ch <- breakerState
	for _, m := range c.startup {
		ch <- m.Desc()
	}
}

func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	emit(ch, ledgerSeries, &st)
	ch <- prometheus.MustNewConstMetric(lookups, prometheus.CounterValue, float64(st.LookupHits), "hit")
	ch <- prometheus.MustNewConstMetric(lookups, prometheus.CounterValue, float64(st.LookupMisses), "miss")
	if st.RAMCache != nil {
		emit(ch, ramSeries, &st)
	}
	if st.RemoteStats != nil {
		emit(ch, remoteSeries, &st)
		for _, state := range breakerStates {
			ch <- prometheus.MustNewConstMetric(breakerState, prometheus.GaugeValue, oneIf(state == st.BreakerState), state)
		}
	}
	for _, m := range c.startup {
		ch <- m
	}
}

func emit(ch chan<- prometheus.Metric, ss []series, st *fusefs.Stats) {
	for _, s := range ss {
		ch <- prometheus.MustNewConstMetric(s.desc, s.kind, s.value(st))
	}
}

func oneIf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// startupMetrics are what start-up found: fixed for the mount's life.
func startupMetrics(src Source) []prometheus.Metric {
	r := src.Loaded
	fixed := func(name, help string, v float64) prometheus.Metric {
		return prometheus.MustNewConstMetric(prometheus.NewDesc(name, help, nil, nil), prometheus.GaugeValue, v)
	}
	return []prometheus.Metric{
		fixed("kvfs_startup_duration_seconds", "How long start-up took to rebuild the index and the ledger from the store.", r.Took.Seconds()),
		fixed("kvfs_startup_objects", "Objects start-up found in the store.", float64(r.Objects)),
		fixed("kvfs_startup_bytes", "Bytes start-up charged for them.", float64(r.Bytes)),
		fixed("kvfs_startup_from_snapshot", "1 if start-up read the index a clean stop saved, 0 if it walked the store.", oneIf(r.FromSnapshot)),
		fixed("kvfs_startup_incomplete_objects", "Objects start-up deleted because they were being written at a crash.", float64(r.Incomplete)),
		fixed("kvfs_startup_evicted_objects", "Objects start-up evicted to fit the capacity.", float64(r.Evicted)),
		fixed("kvfs_store_quota_bytes", "The block limit of the project quota that caps the store even with no daemon (capacity plus slack); 0: the store's file system enforces none.", float64(src.StoreQuotaBytes)),
	}
}

// buildInfo is kvfs_build_info: 1, labelled with what built the binary.
func buildInfo() prometheus.Collector {
	version, revision, goVersion := "unknown", "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version, goVersion = bi.Main.Version, bi.GoVersion
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "kvfs_build_info",
		Help:        "Always 1; its labels say which kvfs is running.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	}, func() float64 { return 1 })
}
