package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
)

// metric describes one number a workload yields per measurement.
type metric struct {
	name   string
	unit   string
	higher bool    // a throughput (true) or a time (false)
	bar    float64 // least kvfs/plain ratio, in throughput terms; 0: none
	barTxt string
	// plainOnly: the bar is against plain alone. The mixed rows split two
	// CPUs between readers and writers, so a class that is faster than
	// the loopback's leaves the other less CPU than the loopback's had.
	plainOnly bool
}

// row is one line of the report.
type row struct {
	Workload       string    `json:"workload"`
	Mode           string    `json:"mode,omitempty"`
	Unit           string    `json:"unit"`
	HigherIsBetter bool      `json:"higher_is_better"`
	Plain          []float64 `json:"plain_samples,omitempty"`
	Kvfs           []float64 `json:"kvfs_samples,omitempty"`
	Loop           []float64 `json:"loopback_samples,omitempty"`
	PlainMedian    float64   `json:"plain_median,omitempty"`
	KvfsMedian     float64   `json:"kvfs_median"`
	LoopMedian     float64   `json:"loopback_median,omitempty"`
	// VsLoop is kvfs/loopback in throughput terms: kvfs must be at least
	// as fast as go-fuse's own loopback on every row with a bar.
	VsLoop float64 `json:"vs_loopback,omitempty"`
	// Ratio is kvfs/plain in throughput terms (plain/kvfs for times),
	// so above 1 favours kvfs; PairedRatio is the median of per-round
	// ratios, which cancels drift between rounds.
	Ratio       float64 `json:"ratio,omitempty"`
	PairedRatio float64 `json:"paired_ratio,omitempty"`
	// Spread is the range of the paired ratios (of the samples, for a
	// kvfs-only row): how much to trust the median.
	Spread string `json:"spread,omitempty"`
	Bar    string `json:"bar,omitempty"`
	Result string `json:"result"` // PASS, FAIL, INFO or SKIP
	Note   string `json:"note,omitempty"`
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// throughputRatio turns kvfs and plain values into kvfs/plain in
// throughput terms.
func throughputRatio(kvfs, plain float64, higher bool) float64 {
	if kvfs <= 0 || plain <= 0 {
		return 0 // no ratio of a failed or empty measurement
	}
	if higher {
		return kvfs / plain
	}
	return plain / kvfs
}

// loopTolerance is how far below the loopback a row may be and still be
// called at least equal: two mounts whose answers come from the same
// kernel path (a cached stat, a passthrough read) differ by this much
// from run to run on this machine, with no daemon involved at all.
const loopTolerance = 0.97

// pairRow adds the row comparing kvfs target k with plain (and with the
// loopback, when it ran) for metric m. A row with a bar passes when kvfs
// reaches the bar against plain and at least equals the loopback.
func (b *bench) pairRow(m metric, mode string, plain, kvfs, loop []float64) {
	r := &row{Workload: m.name, Mode: mode, Unit: m.unit, HigherIsBetter: m.higher,
		Plain: plain, Kvfs: kvfs, Loop: loop, PlainMedian: median(plain), KvfsMedian: median(kvfs), LoopMedian: median(loop)}
	r.Ratio = throughputRatio(r.KvfsMedian, r.PlainMedian, m.higher)
	r.VsLoop = throughputRatio(r.KvfsMedian, r.LoopMedian, m.higher)
	var paired []float64
	for i := range min(len(plain), len(kvfs)) {
		paired = append(paired, throughputRatio(kvfs[i], plain[i], m.higher))
	}
	r.PairedRatio = median(paired)
	r.Spread = spread(paired, "%.2f")
	r.Result = "INFO"
	// The bars are the default mode's (passthrough); strict capacity,
	// no passthrough and the RAM tier are shown for what they cost.
	if m.bar > 0 && mode != "strict" && mode != "no-passthrough" && mode != "ram" {
		r.Bar = fmt.Sprintf(">= %.2f%s", m.bar, m.barTxt)
		ok := r.Ratio >= m.bar
		if len(loop) > 0 && !m.plainOnly {
			r.Bar += ", >= loop"
			ok = ok && r.VsLoop >= loopTolerance
		}
		r.Result = passFail(ok)
	}
	b.rows = append(b.rows, r)
}

// absRow adds a kvfs-only row; limit > 0 is an upper bar on the median.
func (b *bench) absRow(name, unit string, samples []float64, limit float64, note string) {
	r := &row{Workload: name, Unit: unit, Kvfs: samples, KvfsMedian: median(samples), Result: "INFO", Note: note,
		Spread: spread(samples, "%.3g")}
	if limit > 0 {
		r.Bar = fmt.Sprintf("< %g %s", limit, unit)
		r.Result = passFail(r.KvfsMedian < limit)
	}
	b.rows = append(b.rows, r)
}

func (b *bench) skipRow(name, why string) {
	b.rows = append(b.rows, &row{Workload: name, Result: "SKIP", Note: why})
}

// spread is "min..max" of xs.
func spread(xs []float64, format string) string {
	if len(xs) < 2 {
		return ""
	}
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return fmt.Sprintf(format+".."+format, lo, hi)
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// printTable writes the human report.
func (b *bench) printTable(w io.Writer) {
	i := b.info
	fmt.Fprintf(w, "\nkvfs-bench: %s on %s (%s, mounted at %s), kernel %s, %d CPUs, %d rounds (medians; order rotated each round)\n",
		i.WorkDir, i.FS.Type, i.FS.Source, i.FS.MountPoint, i.Kernel, i.CPUs, b.cfg.rounds)
	for _, t := range i.Targets {
		fmt.Fprintf(w, "  %-10s %s", t.Name, t.Root)
		if t.Mode != "" {
			fmt.Fprintf(w, "  (%s requested; the daemon's stats say passthrough: %s)", t.Mode, t.Passthrough)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  load average at start %s, at end %s; some task waited for a CPU %.0f%% of the run (PSI);"+
		" other work on the machine is noise in every number; %.0fs in all\n",
		i.LoadAvgStart, i.LoadAvgEnd, 100*i.CPUPressure, i.Seconds)
	fmt.Fprintln(w, "  ratio = kvfs/plain of the medians, in throughput terms (plain/kvfs for times): above 1 favours kvfs;")
	fmt.Fprintln(w, "  vs loop = kvfs/loopback likewise, against go-fuse's example/loopback (passthrough, no accounting) on the same disk;")
	fmt.Fprintf(w, "  \">= loop\" passes at %.2f or more: the run-to-run noise of two mounts on the same kernel path;\n", loopTolerance)
	fmt.Fprintln(w, "  spread = range of the per-round paired ratios (of the samples, for kvfs-only rows)")
	wl := len("workload")
	for _, r := range b.rows {
		wl = max(wl, len(r.Workload))
	}
	line := "%-*s  %-6s  %-8s  %8s  %8s  %8s  %6s  %7s  %-11s  %-25s  %s\n"
	fmt.Fprintf(w, line, wl, "workload", "mode", "unit", "plain", "loopback", "kvfs", "ratio", "vs loop", "spread", "bar", "result")
	for _, r := range b.rows {
		ratio, vsLoop := "", ""
		if r.Ratio != 0 {
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		if r.VsLoop != 0 {
			vsLoop = fmt.Sprintf("%.2f", r.VsLoop)
		}
		fmt.Fprintf(w, line, wl, r.Workload, shortMode(r.Mode), r.Unit,
			num(r.PlainMedian, len(r.Plain) > 0), num(r.LoopMedian, len(r.Loop) > 0), num(r.KvfsMedian, r.Result != "SKIP"),
			ratio, vsLoop, r.Spread, r.Bar, r.Result)
	}
	seen := map[string]bool{}
	for _, r := range b.rows {
		if r.Note != "" && !seen[r.Note] {
			seen[r.Note] = true
			fmt.Fprintf(w, "  note: %s: %s\n", strings.TrimSpace(r.Workload), r.Note)
		}
	}
	for _, c := range i.Checks {
		fmt.Fprintf(w, "  check: %s\n", c)
	}
	for _, n := range i.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	fmt.Fprintf(w, "  summary: %d PASS, %d FAIL, %d SKIP\n", b.count("PASS"), b.count("FAIL"), b.count("SKIP"))
}

func shortMode(m string) string {
	switch m {
	case "passthrough":
		return "pt"
	case "no-passthrough":
		return "no-pt"
	case "ram":
		return "ram"
	}
	return m
}

// num formats a value with about four significant digits.
func num(v float64, ok bool) string {
	switch {
	case !ok || math.IsNaN(v):
		return "-"
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

func (b *bench) count(result string) int {
	n := 0
	for _, r := range b.rows {
		if r.Result == result {
			n++
		}
	}
	return n
}

// writeJSON writes the whole report; path "-" is stdout.
func (b *bench) writeJSON(path string) error {
	out := struct {
		Info   *runInfo `json:"run"`
		Config any      `json:"config"`
		Rows   []*row   `json:"rows"`
	}{&b.info, b.cfg.public(), b.rows}
	var w io.Writer = os.Stdout
	if path != "-" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
