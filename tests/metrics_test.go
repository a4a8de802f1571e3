package tests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// scrape is one reading of /metrics: every sample, by its name and
// labels as the exposition writes them (NAME{label="value"}).
type scrape map[string]float64

func scrapeMetrics(t *testing.T, url string) scrape {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	s := scrape{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q", line)
		}
		s[line[:i]] = v
	}
	return s
}

// need is a sample that must be there.
func (s scrape) need(t *testing.T, name string) float64 {
	t.Helper()
	v, ok := s[name]
	if !ok {
		t.Fatalf("no %s in /metrics", name)
	}
	return v
}

var metricsLine = regexp.MustCompile(`kvfs: metrics at (http://\S+/metrics)`)

// metricsURL is where the daemon said it serves /metrics.
func metricsURL(t *testing.T, d *daemon) string {
	t.Helper()
	var m []string
	if !d.waitOutput(func(out string) bool { m = metricsLine.FindStringSubmatch(out); return m != nil }) {
		t.Fatalf("the daemon never said where it serves metrics:\n%s", d.out)
	}
	return m[1]
}

// fullStats is `kvfs stats --json` with the request counts.
type fullStats struct {
	kvfsStats
	FuseRequests map[string]int64 `json:"fuse_requests"`
}

func statsWithRequests(t *testing.T, mp string) fullStats {
	t.Helper()
	var st fullStats
	statsJSON(t, mp, &st)
	return st
}

// TestMetrics: a mount serving /metrics (on a port it picked) exports
// the ledger exactly as `kvfs stats`, du and df give it at rest, and its
// hit and miss counters, eviction-age histogram and per-request latency
// histograms follow a workload of lookups, loads, stores and an
// evicting flood. The store is filled by an earlier mount, so the kernel
// knows none of its names and every stat of one is a LOOKUP that hits.
func TestMetrics(t *testing.T) {
	requireRoot(t)
	_, mp, store := mountDirs(t)
	const kept = 4
	first := startDaemon(t, mp, "--store", store)
	for i := range kept {
		putFile(t, filepath.Join(mp, fmt.Sprint("kept", i)), objectBytes(fmt.Sprint("kept", i), MiB))
	}
	first.stop()

	d := startDaemon(t, mp, "--store", store, "--capacity", "16MiB", "--grace", "0s", "--metrics-addr", "127.0.0.1:0")
	url := metricsURL(t, d)
	before := scrapeMetrics(t, url)
	checkStartup(t, before, kept)

	for i := range kept {
		if _, err := os.Stat(filepath.Join(mp, fmt.Sprint("kept", i))); err != nil {
			t.Fatal(err)
		}
		if _, err := os.ReadFile(filepath.Join(mp, fmt.Sprint("kept", i))); err != nil {
			t.Fatal(err)
		}
	}
	const absent = 5
	for i := range absent {
		if _, err := os.Stat(filepath.Join(mp, fmt.Sprint("absent", i))); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stat of an absent name: %v", err)
		}
	}
	const floodN = 8
	flood(t, mp, "flood", floodN, 4*MiB)

	st := assertQuietEqual(t, d)
	after := awaitEvictionsObserved(t, url)
	checkLedgerAtRest(t, d, after, st)
	moved := func(name string) float64 { return after.need(t, name) - before[name] }
	if moved(`kvfs_lookups_total{result="hit"}`) < kept {
		t.Errorf("lookup hits moved %v for %d stats of stored names", moved(`kvfs_lookups_total{result="hit"}`), kept)
	}
	if moved(`kvfs_lookups_total{result="miss"}`) < absent+floodN {
		t.Errorf("lookup misses moved %v for %d absent names and %d new ones", moved(`kvfs_lookups_total{result="miss"}`), absent, floodN)
	}
	if moved("kvfs_loads_total") < kept || moved("kvfs_stores_total") < floodN {
		t.Errorf("loads moved %v, stores %v; want at least %d and %d", moved("kvfs_loads_total"), moved("kvfs_stores_total"), kept, floodN)
	}
	for op, least := range map[string]float64{"LOOKUP": kept + absent + floodN, "CREATE": floodN, "OPEN": kept, "FLUSH": floodN} {
		count := fmt.Sprintf(`kvfs_fuse_request_duration_seconds_count{op="%s"}`, op)
		sum := fmt.Sprintf(`kvfs_fuse_request_duration_seconds_sum{op="%s"}`, op)
		if moved(count) < least || moved(sum) <= 0 {
			t.Errorf("%s: %v more requests taking %v s more; want at least %v, and time", op, moved(count), moved(sum), least)
		}
	}
	checkRequestCounts(t, d.mp, url)
}

// checkStartup: the start-up figures are those of the store the first
// mount left (a clean stop: from its snapshot).
func checkStartup(t *testing.T, s scrape, objects int) {
	t.Helper()
	if s.need(t, "kvfs_startup_objects") != float64(objects) || s.need(t, "kvfs_startup_from_snapshot") != 1 ||
		s.need(t, "kvfs_startup_bytes") != float64(objects*MiB) || s.need(t, "kvfs_startup_duration_seconds") <= 0 {
		t.Errorf("start-up: objects %v bytes %v from_snapshot %v took %v; want %d objects of 1 MiB from the snapshot",
			s["kvfs_startup_objects"], s["kvfs_startup_bytes"], s["kvfs_startup_from_snapshot"], s["kvfs_startup_duration_seconds"], objects)
	}
	if !hasSample(s, "kvfs_build_info{") || !hasSample(s, "process_resident_memory_bytes") || !hasSample(s, "go_goroutines") {
		t.Errorf("build info, process or Go runtime series missing")
	}
	// The build is named as `kvfs version` names it (was: "(devel)"
	// beside its "dev", an outside tester).
	if f := strings.Fields(runKvfs(t, "version").stdout); len(f) < 2 || !hasLabel(s, "kvfs_build_info{", `version="`+f[1]+`"`) {
		t.Errorf("kvfs_build_info does not name the build as `kvfs version` does (%q)", f)
	}
}

// hasLabel says whether a series whose key begins with prefix carries
// label (name="value").
func hasLabel(s scrape, prefix, label string) bool {
	for k := range s {
		if strings.HasPrefix(k, prefix) && strings.Contains(k, label) {
			return true
		}
	}
	return false
}

func hasSample(s scrape, prefix string) bool {
	for k := range s {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// awaitEvictionsObserved scrapes until every eviction the ledger counted
// has reached the idle-time histogram (the core reports an eviction just
// after the ledger counts it), and there was at least one.
func awaitEvictionsObserved(t *testing.T, url string) scrape {
	t.Helper()
	var s scrape
	var ev, aged float64
	if !waitFor(func() bool {
		s = scrapeMetrics(t, url)
		ev, aged = s.need(t, "kvfs_evictions_total"), s.need(t, "kvfs_evicted_idle_seconds_count")
		return ev > 0 && aged == ev && s.need(t, "kvfs_evicted_idle_seconds_sum") > 0
	}) {
		t.Fatalf("%v evictions, %v in the idle-time histogram (sum %v s); want them equal and above 0",
			ev, aged, s["kvfs_evicted_idle_seconds_sum"])
	}
	return s
}

// checkLedgerAtRest: on a quiet mount the ledger's series equal `kvfs
// stats` read just after the scrape, and so (at rest) what
// assertQuietEqual found equal to du, df and the store.
func checkLedgerAtRest(t *testing.T, d *daemon, s scrape, quiet kvfsStats) {
	t.Helper()
	st := stats(t, d.mp)
	if st.UsedBytes != quiet.UsedBytes || st.Objects != quiet.Objects || st.Evictions != quiet.Evictions {
		t.Fatalf("the mount was not at rest: %+v then %+v", quiet, st)
	}
	df, err := dfUsed(d.mp)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int64{
		"kvfs_used_bytes": st.UsedBytes, "kvfs_capacity_bytes": st.CapacityBytes, "kvfs_objects": st.Objects,
		"kvfs_pinned_objects": 0, "kvfs_pinned_bytes": 0, "kvfs_shadow_bytes": 0, "kvfs_reserved_bytes": st.ReservedBytes,
		"kvfs_kept_bytes": 0, "kvfs_unadmitted_bytes": st.UnadmittedBytes, "kvfs_overshoot_max_bytes": st.OvershootMaxBytes,
		"kvfs_evictions_total": st.Evictions, "kvfs_evicted_bytes_total": st.EvictedBytes,
		"kvfs_admission_failures_total": st.AdmissionFailures, "kvfs_reconciliations_total": st.Reconciliations,
		"kvfs_stores_total": st.Stores, "kvfs_loads_total": st.Loads,
		`kvfs_lookups_total{result="hit"}`: st.LookupHits, `kvfs_lookups_total{result="miss"}`: st.LookupMisses,
	} {
		if got := s.need(t, name); got != float64(want) {
			t.Errorf("%s = %v, kvfs stats says %d", name, got, want)
		}
	}
	if s["kvfs_used_bytes"] != float64(df) || st.Evictions == 0 {
		t.Errorf("kvfs_used_bytes %v, df used %d; evictions %d (want some)", s["kvfs_used_bytes"], df, st.Evictions)
	}
}

// checkRequestCounts: each request type's latency histogram counts what
// `kvfs stats` counts. Requests keep coming (stats itself is a GETXATTR,
// the kernel may FORGET at any time), so a scrape between two readings
// of stats must lie between them.
func checkRequestCounts(t *testing.T, mp, url string) {
	t.Helper()
	lo := statsWithRequests(t, mp)
	s := scrapeMetrics(t, url)
	hi := statsWithRequests(t, mp)
	if len(lo.FuseRequests) < 5 {
		t.Fatalf("kvfs stats counts only %v", lo.FuseRequests)
	}
	for op, n := range hi.FuseRequests {
		got := s[fmt.Sprintf(`kvfs_fuse_request_duration_seconds_count{op="%s"}`, op)]
		if got < float64(lo.FuseRequests[op]) || got > float64(n) {
			t.Errorf("%s: /metrics counts %v, kvfs stats %d then %d", op, got, lo.FuseRequests[op], n)
		}
	}
}

// TestMetricsAddrRefused: a malformed --metrics-addr is a usage error
// (exit 2), a port in use a failure (exit 1), both before anything is
// mounted or loaded; with --background the same one line (was, for the
// port: that line, then "the daemon exited before serving (exit status
// 1; see its output)": an outside tester).
func TestMetricsAddrRefused(t *testing.T) {
	requireRoot(t)
	_, mp, store := mountDirs(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, c := range []struct {
		addr string
		code int
		want string
	}{
		{"localhost", 2, "want HOST:PORT"},
		{"127.0.0.1:99999", 2, "port must be a number"},
		{taken.Addr().String(), 1, "address already in use"},
	} {
		for _, bg := range [][]string{nil, {"--background"}} {
			res := runKvfs(t, append([]string{"mount", "--store", store, "--metrics-addr", c.addr, mp}, bg...)...)
			if res.code != c.code || !strings.Contains(res.stderr, c.want) || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 || res.stdout != "" {
				t.Errorf("--metrics-addr %s %v: exit %d, stdout %q, stderr %q; want exit %d and one line with %q", c.addr, bg, res.code, res.stdout, res.stderr, c.code, c.want)
			}
		}
		if _, mounted := mountAt(mp); mounted {
			t.Fatalf("--metrics-addr %s: mounted anyway", c.addr)
		}
		if _, err := os.Stat(store); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("--metrics-addr %s: the store was made (%v)", c.addr, err)
		}
	}
}

// TestHandoverKeepsMetricsAddr: a successor given the same
// --metrics-addr takes the mount over and then the address, as
// `systemctl reload` does with the unit's own options, including with no
// --store (the default store beside the mount point). It exited 1,
// "address already in use", and the reload never happened: the address
// check took the default store for no store (an outside tester).
func TestHandoverKeepsMetricsAddr(t *testing.T) {
	requireRoot(t)
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	mp := filepath.Join(t.TempDir(), "mnt")
	os.Mkdir(mp, 0o755)
	old := startDaemon(t, mp, "--capacity", "16MiB", "--metrics-addr", addr)
	p := filepath.Join(mp, "k")
	putFile(t, p, objectBytes(p, 8192))
	url := "http://" + addr + "/metrics"
	if m := scrapeMetrics(t, url); m["kvfs_objects"] != 1 {
		t.Fatalf("the first daemon's kvfs_objects %v, want 1", m["kvfs_objects"])
	}
	d := handOver(t, kvfsBin, old, "--capacity", "16MiB", "--metrics-addr", addr)
	if !d.waitOutput(func(out string) bool { return strings.Contains(out, "metrics at http://"+addr) }) {
		t.Fatalf("the successor does not serve metrics at %s; its output:\n%s", addr, d.out)
	}
	putFile(t, filepath.Join(mp, "k2"), objectBytes("k2", 4096))
	if m := scrapeMetrics(t, url); m["kvfs_objects"] != 2 {
		t.Fatalf("the successor's kvfs_objects %v, want 2", m["kvfs_objects"])
	}
	if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, objectBytes(p, 8192)) {
		t.Fatalf("the object stored before the handover: %d bytes, %v", len(b), err)
	}
}

// TestHandoverMetricsAddrTakenMeanwhile: a successor whose
// --metrics-addr another process holds once the old daemon is gone
// serves the mount, says so, and takes the address when it comes free.
// It gave up after 5 s, for good: a reload (exit 0) left the mount with
// no /metrics (an outside tester).
func TestHandoverMetricsAddrTakenMeanwhile(t *testing.T) {
	requireRoot(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	mp := filepath.Join(t.TempDir(), "mnt")
	os.Mkdir(mp, 0o755)
	old := startDaemon(t, mp, "--capacity", "16MiB")
	d := handOver(t, kvfsBin, old, "--capacity", "16MiB", "--metrics-addr", addr)
	if !d.waitOutput(func(out string) bool { return strings.Contains(out, "no metrics endpoint: "+addr+" is in use") }) {
		t.Fatalf("the successor does not say its metrics address is taken; its output:\n%s", d.out)
	}
	putFile(t, filepath.Join(mp, "k"), objectBytes("k", 4096))
	taken.Close()
	url := "http://" + addr + "/metrics"
	if !waitFor(func() bool {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("no metrics at %s once the address came free", url)
	}
	if m := scrapeMetrics(t, url); m["kvfs_objects"] != 1 {
		t.Fatalf("the successor's kvfs_objects %v, want 1", m["kvfs_objects"])
	}
}
