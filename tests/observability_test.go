package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/internal/s3test"
	promodel "github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// The dashboard and the alert rules operators import (docs/operations.md).
var (
	dashboardFile = filepath.Join("..", "contrib", "grafana", "kvfs-dashboard.json")
	rulesFile     = filepath.Join("..", "contrib", "prometheus", "kvfs-alerts.yml")
)

// targetLabels are added by Prometheus to every series it scrapes, and
// up is the series it makes for every target: no exporter has them.
var targetLabels = []string{"job", "instance"}

const synthesized = "up"

// promql parses with Prometheus's own parser, as Prometheus and
// Grafana's Prometheus data source send it.
var promql = parser.NewParser(parser.Options{})

// TestDashboardAndAlertsUseExportedSeries: every metric, label matcher
// and grouping label of the Grafana dashboard and the alert rules is
// one a live mount with a remote tier exports, and the rules file
// passes Prometheus's rule parser (PromQL, templates, fields). A series
// renamed in internal/metrics fails it.
func TestDashboardAndAlertsUseExportedSeries(t *testing.T) {
	requireRoot(t)
	srv := s3test.New(t)
	n := startRemoteNode(t, srv, t.TempDir(), "node", "--metrics-addr", "127.0.0.1:0")
	n.put("stored", objectBytes("stored", MiB))
	n.mustLoad("stored", objectBytes("stored", MiB))
	exported := indexScrape(t, scrapeMetrics(t, metricsURL(t, n.daemon)))
	if len(exported.labels["kvfs_remote_queue_depth"]) == 0 || len(exported.values["kvfs_fuse_request_duration_seconds_bucket"]["op"]) == 0 {
		t.Fatalf("the mount exports no remote tier or no request histograms: %v", exported.names())
	}

	exprs := append(dashboardExprs(t), ruleExprs(t)...)
	if len(exprs) < 40 {
		t.Fatalf("only %d expressions found in %s and %s", len(exprs), dashboardFile, rulesFile)
	}
	used := map[string]bool{}
	for _, e := range exprs {
		for _, err := range exported.check(e.expr, used) {
			t.Errorf("%s: %s: %v", e.where, e.expr, err)
		}
	}
	// Every kvfs series the issue asks to watch is on the dashboard or in a rule.
	for _, name := range []string{"kvfs_used_bytes", "kvfs_capacity_bytes", "kvfs_lookups_total", "kvfs_stores_total",
		"kvfs_loads_total", "kvfs_evictions_total", "kvfs_admission_failures_total", "kvfs_pinned_bytes", "kvfs_shadow_bytes",
		"kvfs_evicted_idle_seconds_bucket", "kvfs_fuse_request_duration_seconds_bucket", "kvfs_reconciliations_total",
		"kvfs_remote_hits_total", "kvfs_remote_fetches_total", "kvfs_remote_uploads_total", "kvfs_remote_queue_depth",
		"kvfs_remote_breaker_state", "up"} {
		if !used[name] {
			t.Errorf("neither the dashboard nor the rules use %s", name)
		}
	}
}

// TestSeriesCheckRefuses: the check above finds a missing metric, a
// label no sample has, a value no sample has and a grouping label no
// series has (so that passing means something).
func TestSeriesCheckRefuses(t *testing.T) {
	s := scrape{`kvfs_lookups_total{result="hit"}`: 1, `kvfs_lookups_total{result="miss"}`: 1, "kvfs_used_bytes": 1}
	idx := indexScrape(t, s)
	for expr, bad := range map[string]bool{
		`rate(kvfs_lookups_total{result="hit",instance=~".*"}[5m])`:                 false,
		`sum by (result, job) (kvfs_lookups_total) / on (instance) kvfs_used_bytes`: false,
		`up{job="kvfs"} == 0`:                                false,
		`kvfs_used_byte`:                                     true,
		`kvfs_lookups_total{outcome="hit"}`:                  true,
		`kvfs_lookups_total{result="hits"}`:                  true,
		`sum by (op) (kvfs_lookups_total)`:                   true,
		`kvfs_used_bytes and on (result) kvfs_lookups_total`: false,
		`kvfs_used_bytes and on (op) kvfs_lookups_total`:     true,
		`rate(kvfs_lookups_total[5m]`:                        true,
	} {
		if errs := idx.check(expr, map[string]bool{}); (len(errs) > 0) != bad {
			t.Errorf("%s: %v; want errors: %v", expr, errs, bad)
		}
	}
}

// exportIndex is a scrape by metric: the labels each has, and the
// values each label takes.
type exportIndex struct {
	labels map[string][]labels.Labels
	values map[string]map[string][]string
}

func indexScrape(t *testing.T, s scrape) exportIndex {
	t.Helper()
	idx := exportIndex{labels: map[string][]labels.Labels{}, values: map[string]map[string][]string{}}
	for sample := range s {
		ls, err := promql.ParseMetric(sample)
		if err != nil {
			t.Fatalf("sample %s: %v", sample, err)
		}
		name := ls.Get(promodel.MetricNameLabel)
		idx.labels[name] = append(idx.labels[name], ls)
		if idx.values[name] == nil {
			idx.values[name] = map[string][]string{}
		}
		ls.Range(func(l labels.Label) { idx.values[name][l.Name] = append(idx.values[name][l.Name], l.Value) })
	}
	return idx
}

func (x exportIndex) names() []string {
	var out []string
	for n := range x.labels {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// check parses expr and returns what in it no exported series has;
// used collects the metric names it selects.
func (x exportIndex) check(expr string, used map[string]bool) []error {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return []error{err}
	}
	var errs []error
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			used[n.Name] = true
			errs = append(errs, x.checkSelector(n)...)
		case *parser.AggregateExpr:
			if !n.Without {
				errs = append(errs, x.checkLabelsIn(n.Expr, n.Grouping, "by")...)
			}
		case *parser.BinaryExpr:
			if m := n.VectorMatching; m != nil && m.On {
				errs = append(errs, x.checkLabelsIn(n, m.MatchingLabels, "on")...)
			}
		}
		return nil
	})
	return errs
}

// checkSelector: the metric is exported and some sample of it matches
// every matcher of a label that is not a target label.
func (x exportIndex) checkSelector(vs *parser.VectorSelector) []error {
	if vs.Name == synthesized {
		return nil
	}
	samples, ok := x.labels[vs.Name]
	if !ok {
		return []error{fmt.Errorf("%s is not exported", vs.Name)}
	}
	var errs []error
	for _, m := range vs.LabelMatchers {
		if m.Name == promodel.MetricNameLabel || slices.Contains(targetLabels, m.Name) {
			continue
		}
		if !slices.ContainsFunc(samples, func(ls labels.Labels) bool { return ls.Has(m.Name) && m.Matches(ls.Get(m.Name)) }) {
			errs = append(errs, fmt.Errorf("no sample of %s has %s (its %s values: %v)", vs.Name, m, m.Name, x.values[vs.Name][m.Name]))
		}
	}
	return errs
}

// checkLabelsIn: each label of a by() or on() is a target label or a
// label of a series selected under node (le is one of every _bucket).
func (x exportIndex) checkLabelsIn(node parser.Node, names []string, clause string) []error {
	var errs []error
	for _, l := range names {
		if slices.Contains(targetLabels, l) {
			continue
		}
		found := false
		parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok && len(x.values[vs.Name][l]) > 0 {
				found = true
			}
			return nil
		})
		if !found {
			errs = append(errs, fmt.Errorf("%s (%s): no series selected there has that label", clause, l))
		}
	}
	return errs
}

// sourced is one PromQL expression and where it was found.
type sourced struct{ where, expr string }

// grafanaVars are what Grafana puts for its built-in interval
// variables; the dashboard's own variables take "all".
var grafanaVars = map[string]string{"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}

// labelValues is the variable query of Grafana's Prometheus data source.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// dashboard is the part of Grafana's dashboard model the test reads.
type dashboard struct {
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			AllValue   string          `json:"allValue"`
			Datasource *datasourceRef  `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
	ID     *int    `json:"id"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	Title      string         `json:"title"`
	Type       string         `json:"type"`
	Datasource *datasourceRef `json:"datasource"`
	Targets    []struct {
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// dashboardExprs reads every query of the dashboard, Grafana's variables
// replaced, and checks that it imports as it is: no id, Prometheus
// queries on the datasource variable, which the dashboard defines.
func dashboardExprs(t *testing.T) []sourced {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.ID != nil {
		t.Errorf("%s has an id: importing would overwrite another dashboard", dashboardFile)
	}
	vars := map[string]string{}
	for k, v := range grafanaVars {
		vars[k] = v
	}
	var out []sourced
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			vars[v.Name] = "prometheus"
		case "query":
			vars[v.Name] = v.AllValue
			m := labelValues.FindStringSubmatch(v.Definition)
			if m == nil || !strings.Contains(string(v.Query), v.Definition) {
				t.Errorf("variable %s: query %s, definition %q: want label_values(SELECTOR, LABEL) in both", v.Name, v.Query, v.Definition)
				continue
			}
			out = append(out, sourced{"variable " + v.Name, fmt.Sprintf("count by (%s) (%s)", m[2], m[1])})
		}
	}
	if vars["datasource"] != "prometheus" || vars["instance"] == "" {
		t.Fatalf("%s: want a Prometheus datasource variable and an instance variable, got %v", dashboardFile, vars)
	}
	for _, p := range allPanels(d.Panels) {
		for i, q := range p.Targets {
			where := fmt.Sprintf("panel %q query %d", p.Title, i)
			if p.Datasource == nil || q.Datasource == nil || *p.Datasource != *q.Datasource || *p.Datasource != (datasourceRef{"prometheus", "${datasource}"}) {
				t.Errorf("%s: datasource %v/%v, want the datasource variable", where, p.Datasource, q.Datasource)
			}
			out = append(out, sourced{where, expand(t, where, q.Expr, vars)})
		}
	}
	return out
}

func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(append(out, p), allPanels(p.Panels)...)
	}
	return out
}

var grafanaVar = regexp.MustCompile(`\$\{?(\w+)\}?`)

// expand replaces the variables Grafana would; one it does not know
// fails (the query would reach Prometheus with a "$" in it).
func expand(t *testing.T, where, expr string, vars map[string]string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		name := grafanaVar.FindStringSubmatch(v)[1]
		val, ok := vars[name]
		if !ok {
			t.Errorf("%s: %s uses variable %s, which the dashboard does not define", where, expr, name)
		}
		return val
	})
}

// ruleExprs parses the rules file with Prometheus's rule parser and
// returns each rule's expression.
func ruleExprs(t *testing.T) []sourced {
	t.Helper()
	groups, errs := rulefmt.ParseFile(rulesFile, false, promodel.UTF8Validation, promql, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, err := range errs {
		t.Error(err) // it names the file, the group and the rule
	}
	if groups == nil {
		t.FailNow()
	}
	var out []sourced
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("rule %q %q: want an alert with a summary and a description (the reason)", r.Alert, r.Record)
			}
			out = append(out, sourced{"rule " + r.Alert, r.Expr})
		}
	}
	return out
}
