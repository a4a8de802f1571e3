package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testBench is a run with rows as pairRow, absRow and skipRow make them:
// one with the loopback, one without, a time (lower is better), a
// kvfs-only row and a skipped one.
func testBench(t *testing.T) *bench {
	b := &bench{cfg: &config{rounds: 3}, log: io.Discard, started: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	b.info.Kernel, b.info.CPUs = "6.1.0-test", 2
	b.pairRow(metric{name: "warm read", unit: "MiB/s", higher: true}, "passthrough", []float64{100, 110, 90}, []float64{95, 120, 90}, []float64{90, 100, 80})
	b.pairRow(metric{name: "direct read", unit: "MiB/s", higher: true}, "", []float64{200, 200}, []float64{180, 160}, nil)
	b.pairRow(metric{name: "store", unit: "ms", higher: false}, "strict", []float64{10, 10, 10}, []float64{20, 25, 10}, []float64{12, 12, 12})
	b.absRow("ledger restore", "s", []float64{1, 2}, 0, "")
	b.skipRow("restart", "not root")
	return b
}

// TestChart: every row with a ratio gets a bar per baseline that ran,
// with the range of its per-round ratios; kvfs-only and skipped rows
// get none; the file is well-formed SVG.
func TestChart(t *testing.T) {
	b := testBench(t)
	var buf bytes.Buffer
	var rows []*row
	for _, r := range b.rows {
		if len(chartBars(r)) > 0 {
			rows = append(rows, r)
		}
	}
	if err := b.drawChart(&buf, rows); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	checkXML(t, svg)
	for _, want := range []string{
		"warm read [pt]", "direct read", "store [strict]",
		"kvfs / plain: 0.95 (0.95..1.09)", "kvfs / loopback: 1.06 (1.06..1.20)", // medians 95 against 100 and 90
		"kvfs / plain: 0.85 (0.80..0.90)",
		"kvfs / plain: 0.50 (0.40..1.00)", "kvfs / loopback: 0.60 (0.48..1.20)", // times: base/kvfs
		"2026-12-01, kernel 6.1.0-test, 2 CPUs",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("no %q in the chart:\n%s", want, svg)
		}
	}
	if n := strings.Count(svg, "<title>"); n != 5 {
		t.Errorf("%d bars, want 5 (2 + 1 + 2)", n)
	}
	if strings.Contains(svg, "ledger restore") || strings.Contains(svg, "restart") {
		t.Errorf("a row without a ratio is drawn:\n%s", svg)
	}
}

// TestChartBesideJSON: the chart goes beside the JSON report unless
// --svg says where; a run whose rows have no ratio writes none.
func TestChartBesideJSON(t *testing.T) {
	for _, c := range []struct{ json, svg, want string }{
		{"out/run.json", "", "out/run.svg"}, {"run", "", "run.svg"}, {"-", "", ""}, {"", "", ""}, {"-", "c.svg", "c.svg"},
	} {
		if got := (&config{jsonPath: c.json, svgFile: c.svg}).svgPath(); got != c.want {
			t.Errorf("--json %q --svg %q: chart at %q, want %q", c.json, c.svg, got, c.want)
		}
	}
	b := testBench(t)
	b.rows = b.rows[3:] // the kvfs-only and skipped rows: --workloads ledger,restart
	path := filepath.Join(t.TempDir(), "run.svg")
	if err := b.writeSVG(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a chart without ratios was written (%v)", err)
	}
	b = testBench(t)
	b.rows = b.rows[1:2] // one row: --workloads direct
	if err := b.writeSVG(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkXML(t, string(data))
	if n := strings.Count(string(data), "<title>"); n != 1 {
		t.Errorf("%d bars for one row without a loopback, want 1", n)
	}
}

func checkXML(t *testing.T, svg string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, svg)
		}
	}
}
