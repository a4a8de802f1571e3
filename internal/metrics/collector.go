package metrics

import (
	"runtime/debug"
	"strings"

	"github.com/kvfs/kvfs/internal/stats"
	"github.com/kvfs/kvfs/remote"
	"github.com/prometheus/client_golang/prometheus"
)

// series is the metric of one figure of stats.Fields, or of a family
// of them (a Label), named after it: kvfs_, its name with dots as
// underscores, and _total for a counter.
type series struct {
	field stats.Field
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	label string // the field's value of the family's label; "" for none
}

// allSeries are every figure's series, in the order of stats.Fields;
// allDescs their metrics, each family once.
var allSeries, allDescs = seriesOf(stats.Fields)

func seriesOf(fields []stats.Field) ([]series, []*prometheus.Desc) {
	var out []series
	var descs []*prometheus.Desc
	families := map[string]*prometheus.Desc{}
	for _, f := range fields {
		if f.Kind == stats.ByOp {
			continue // the request histograms' _count says it
		}
		name, label, labels := familyOf(f)
		if families[name] == nil {
			families[name] = prometheus.NewDesc(name, f.Help, labels, nil)
			descs = append(descs, families[name])
		}
		kind := prometheus.GaugeValue
		if f.Kind == stats.Counter {
			kind = prometheus.CounterValue
		}
		out = append(out, series{field: f, desc: families[name], kind: kind, label: label})
	}
	return out, descs
}

// familyOf is the family f is exported in, f's value of its label
// (if it shares the family), and the family's label names.
func familyOf(f stats.Field) (name, label string, labels []string) {
	name = f.Name
	switch {
	case f.Label != "":
		i := strings.LastIndex(name, "_")
		name, label, labels = name[:i], name[i+1:], []string{f.Label}
	case f.Kind == stats.State:
		labels = []string{"state"}
	}
	if f.Kind == stats.Counter {
		name += "_total"
	}
	return "kvfs_" + strings.ReplaceAll(name, ".", "_"), label, labels
}

// breakerStates are the remote_breaker_state series: every state is
// always exported, 1 for the one now and 0 for the others, so that an
// alert on state="open" selects a series whatever the state now.
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
	for _, d := range allDescs {
		ch <- d
	}
	for _, m := range c.startup {
		ch <- m.Desc()
	}
}

func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	for _, s := range allSeries {
		s.emit(ch, &st)
	}
	for _, m := range c.startup {
		ch <- m
	}
}

// emit sends the series' samples, if the snapshot has its figure (a
// mount without a tier exports none of its series rather than zeros).
func (s series) emit(ch chan<- prometheus.Metric, st *stats.Snapshot) {
	if s.field.Kind == stats.State {
		if now, ok := s.field.Word(st); ok {
			for _, state := range breakerStates {
				ch <- prometheus.MustNewConstMetric(s.desc, s.kind, oneIf(state == now), state)
			}
		}
		return
	}
	v, ok := s.field.Int(st)
	if !ok {
		return
	}
	var labels []string
	if s.label != "" {
		labels = []string{s.label}
	}
	ch <- prometheus.MustNewConstMetric(s.desc, s.kind, float64(v), labels...)
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

// buildInfo is kvfs_build_info: 1, labelled with what built the binary:
// version is its build name (make's, or "dev"), as `kvfs version` and
// the log say it, where it was the module's version, "(devel)" for
// every build from a checkout (an outside tester).
func buildInfo(build string) prometheus.Collector {
	version, revision, goVersion := build, "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
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
