package metrics

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/internal/stats"
	"github.com/kvfs/kvfs/ramcache"
	"github.com/kvfs/kvfs/remote"
	dto "github.com/prometheus/client_model/go"
)

// distinctStats sets every figure of a snapshot to a value of its own.
func distinctStats() stats.Snapshot {
	var st stats.Snapshot
	st.RAMCache = &ramcache.Stats{}
	st.RemoteStats = &stats.RemoteStats{BreakerState: remote.BreakerHalfOpen}
	n := int64(100)
	for _, v := range []reflect.Value{reflect.ValueOf(&st.Stats.Stats).Elem(), reflect.ValueOf(&st.Stats).Elem(),
		reflect.ValueOf(st.RAMCache).Elem(), reflect.ValueOf(st.RemoteStats).Elem()} {
		for i := range v.NumField() {
			if f := v.Field(i); f.Kind() == reflect.Int64 {
				n += 7
				f.SetInt(n)
			}
		}
	}
	return st
}

// gather scrapes m: every sample as NAME{label="value",...} -> value.
func gather(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			out[sampleName(f.GetName(), s)] = sampleValue(s)
		}
	}
	return out
}

func sampleName(name string, s *dto.Metric) string {
	var labels []string
	for _, l := range s.GetLabel() {
		labels = append(labels, l.GetName()+"=\""+l.GetValue()+"\"")
	}
	if len(labels) == 0 {
		return name
	}
	return name + "{" + strings.Join(labels, ",") + "}"
}

func sampleValue(s *dto.Metric) float64 {
	switch {
	case s.Gauge != nil:
		return s.Gauge.GetValue()
	case s.Counter != nil:
		return s.Counter.GetValue()
	case s.Histogram != nil:
		return float64(s.Histogram.GetSampleCount())
	}
	return -1
}

// TestEveryStatIsAMetric: every number `kvfs stats --json` prints is a
// series of the same value, named after its JSON name (counters with
// _total), read from one snapshot per scrape.
func TestEveryStatIsAMetric(t *testing.T) {
	st := distinctStats()
	snapshots := 0
	m := New("dev")
	m.Watch(Source{Stats: func() stats.Snapshot { snapshots++; return st }})
	got := gather(t, m)
	if snapshots != 1 {
		t.Errorf("one scrape took %d snapshots, want 1", snapshots)
	}
	for key, want := range flatJSON(t, st) {
		name := metricName(key)
		v, ok := got[name]
		if !ok {
			v, ok = got[name+"_total"]
		}
		if !ok || v != want {
			t.Errorf("stats %s = %v: metric %s is %v (present %v)", key, want, name, v, ok)
		}
	}
}

// metricName is the series a stats figure is exported as.
func metricName(key string) string {
	switch key {
	case "lookups_hit":
		return `kvfs_lookups_total{result="hit"}`
	case "lookups_miss":
		return `kvfs_lookups_total{result="miss"}`
	}
	return "kvfs_" + strings.ReplaceAll(key, ".", "_")
}

// flatJSON is the snapshot as `kvfs stats --json` prints it, nested
// objects flattened with dots.
func flatJSON(t *testing.T, st stats.Snapshot) map[string]float64 {
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			switch v := v.(type) {
			case float64:
				out[prefix+k] = v
			case map[string]any:
				walk(prefix+k+".", v)
			}
		}
	}
	walk("", m)
	if len(out) < 20 {
		t.Fatalf("only %d figures in %s", len(out), b)
	}
	return out
}

// TestNoTierNoTierSeries: a mount without a RAM tier or a remote tier
// exports none of their series rather than zeros.
func TestNoTierNoTierSeries(t *testing.T) {
	m := New("dev")
	m.Watch(Source{Stats: func() stats.Snapshot { return stats.Snapshot{} }})
	for name := range gather(t, m) {
		if strings.HasPrefix(name, "kvfs_ram_cache") || strings.HasPrefix(name, "kvfs_remote") {
			t.Errorf("%s exported without its tier", name)
		}
	}
}

// TestBreakerState: every state of the remote tier's breaker is a
// series, 1 for the state now and 0 for the others.
func TestBreakerState(t *testing.T) {
	m := New("dev")
	m.Watch(Source{Stats: distinctStats})
	got := gather(t, m)
	for state, want := range map[string]float64{remote.BreakerClosed: 0, remote.BreakerOpen: 0, remote.BreakerHalfOpen: 1} {
		name := `kvfs_remote_breaker_state{state="` + state + `"}`
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}

// TestEvictionAge: evictions are observed with their idle time; objects
// dropped for other reasons are not.
func TestEvictionAge(t *testing.T) {
	m := New("dev")
	m.Dropped(core.Drop{Why: core.Evicted, Idle: 90 * time.Second})
	m.Dropped(core.Drop{Why: core.Evicted, Idle: 3 * time.Hour})
	m.Dropped(core.Drop{Why: core.Vanished, Idle: time.Second})
	m.Dropped(core.Drop{Why: core.Refused})
	h := histogram(t, m, "kvfs_evicted_idle_seconds", "")
	if h.GetSampleCount() != 2 || h.GetSampleSum() != 90+3*3600 {
		t.Fatalf("count %d sum %v, want 2 and %v", h.GetSampleCount(), h.GetSampleSum(), 90+3*3600)
	}
	if below(h, 300) != 1 {
		t.Errorf("%d samples at or below 300 s, want 1", below(h, 300))
	}
}

// TestRequestLatency: each request type gets its own histogram, made at
// its first request.
func TestRequestLatency(t *testing.T) {
	m := New("dev")
	m.Request(stats.OpLookup, 20*time.Microsecond)
	m.Request(stats.OpLookup, 2*time.Millisecond)
	m.Request(stats.OpCreate, time.Second)
	if h := histogram(t, m, "kvfs_fuse_request_duration_seconds", "LOOKUP"); h.GetSampleCount() != 2 || below(h, 1e-4) != 1 {
		t.Errorf("LOOKUP: %d samples, %d below 100 µs; want 2, 1", h.GetSampleCount(), below(h, 1e-4))
	}
	if h := histogram(t, m, "kvfs_fuse_request_duration_seconds", "CREATE"); h.GetSampleCount() != 1 {
		t.Errorf("CREATE: %d samples, want 1", h.GetSampleCount())
	}
	for name := range gather(t, m) {
		if strings.Contains(name, `op="`) && !strings.Contains(name, "LOOKUP") && !strings.Contains(name, "CREATE") {
			t.Errorf("%s exported without a request", name)
		}
	}
}

// TestStartupFigures: what start-up found is exported as it was.
func TestStartupFigures(t *testing.T) {
	m := New("dev")
	rep := core.LoadReport{Bytes: 8192, Evicted: 3, Took: 1500 * time.Millisecond}
	rep.Objects, rep.Incomplete, rep.FromSnapshot = 2, 1, true
	m.Watch(Source{Stats: func() stats.Snapshot { return stats.Snapshot{} }, Loaded: rep})
	got := gather(t, m)
	for name, want := range map[string]float64{"kvfs_startup_duration_seconds": 1.5, "kvfs_startup_objects": 2,
		"kvfs_startup_bytes": 8192, "kvfs_startup_from_snapshot": 1, "kvfs_startup_incomplete_objects": 1,
		"kvfs_startup_evicted_objects": 3} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	if !hasPrefix(got, "kvfs_build_info{") {
		t.Errorf("no kvfs_build_info")
	}
}

func histogram(t *testing.T, m *Metrics, name, op string) *dto.Histogram {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			if f.GetName() == name && (op == "" || strings.Contains(sampleName(name, s), `op="`+op+`"`)) {
				return s.Histogram
			}
		}
	}
	t.Fatalf("no histogram %s %s", name, op)
	return nil
}

// below is how many samples were at most le seconds.
func below(h *dto.Histogram, le float64) uint64 {
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == le {
			return b.GetCumulativeCount()
		}
	}
	return 0
}

func hasPrefix(m map[string]float64, prefix string) bool {
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}
