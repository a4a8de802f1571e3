package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// The ratio chart: one group per row that has a ratio, a bar for kvfs
// against plain and one against the loopback when it ran, each with the
// range of its per-round ratios as an error bar. The axis is a log
// scale centred on 1 (equal): a bar to the right favours kvfs, 2x
// faster and 2x slower are the same length, and one noisy round cannot
// squash the other rows. Drawn by hand: a few rectangles and lines need
// no plotting library.

// bar is one drawn ratio: the median ratio and its per-round range.
type bar struct {
	against   string
	ratio     float64
	low, high float64
	hasSpread bool
	colour    string
}

// Series of the chart, in drawing order.
const (
	vsPlainColour = "#4477aa"
	vsLoopColour  = "#ee7733"
)

// chartBars are a row's bars: none for a row without ratios (a
// kvfs-only or skipped row).
func chartBars(r *row) []bar {
	var out []bar
	if r.Ratio > 0 {
		out = append(out, ratioBar("plain", r.Ratio, r.Kvfs, r.Plain, r.HigherIsBetter, vsPlainColour))
	}
	if r.VsLoop > 0 {
		out = append(out, ratioBar("loopback", r.VsLoop, r.Kvfs, r.Loop, r.HigherIsBetter, vsLoopColour))
	}
	return out
}

// ratioBar is kvfs against base: the ratio of the medians (the table's),
// and the range of the paired per-round ratios.
func ratioBar(against string, ratio float64, kvfs, base []float64, higher bool, colour string) bar {
	b := bar{against: against, ratio: ratio, low: ratio, high: ratio, colour: colour}
	for i := range min(len(kvfs), len(base)) {
		if p := throughputRatio(kvfs[i], base[i], higher); p > 0 {
			b.low, b.high, b.hasSpread = math.Min(b.low, p), math.Max(b.high, p), true
		}
	}
	return b
}

// Layout, in SVG user units (pixels).
const (
	plotWidth    = 600
	plotRight    = 60
	charWidth    = 6.6 // of a 12px sans-serif label, about
	barHeight    = 14
	barGap       = 3
	groupGap     = 14
	headerHeight = 70
	footerHeight = 50
)

// svgPath is where the chart goes: --svg, else beside the JSON report
// (its name with .svg); none when the JSON goes to stdout or nowhere.
func (c *config) svgPath() string {
	switch {
	case c.svgFile != "":
		return c.svgFile
	case c.jsonPath == "" || c.jsonPath == "-":
		return ""
	}
	return strings.TrimSuffix(c.jsonPath, filepath.Ext(c.jsonPath)) + ".svg"
}

// writeSVG writes the chart of the rows that have ratios; with none
// (a run of kvfs-only workloads) it writes nothing and says so.
func (b *bench) writeSVG(path string) error {
	var rows []*row
	for _, r := range b.rows {
		if len(chartBars(r)) > 0 {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		fmt.Fprintln(b.log, "kvfs-bench: no row has a ratio to chart; no", path)
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := b.drawChart(f, rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (b *bench) drawChart(w io.Writer, rows []*row) error {
	lo, hi := scaleRange(rows)
	labelWidth := 0.0
	for _, r := range rows {
		labelWidth = max(labelWidth, charWidth*float64(len(rowLabel(r)))+16)
	}
	x := func(v float64) float64 { return labelWidth + plotWidth*(math.Log2(v)-lo)/(hi-lo) }
	width := int(labelWidth) + plotWidth + plotRight
	height := headerHeight + footerHeight
	for _, r := range rows {
		height += len(chartBars(r))*(barHeight+barGap) + groupGap
	}
	s := &svgWriter{w: w}
	s.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	s.printf(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	s.text(10, 20, "start", `font-size="15" font-weight="bold"`, "kvfs against a plain directory and go-fuse's loopback: throughput ratio, right of 1 favours kvfs")
	s.text(10, 38, "start", "", b.chartSubtitle())
	s.legend(10, 56)
	plotBottom := height - footerHeight
	s.axis(x, lo, hi, headerHeight-4, plotBottom)
	y := headerHeight
	for _, r := range rows {
		bars := chartBars(r)
		groupH := len(bars)*(barHeight+barGap) - barGap
		s.text(labelWidth-8, float64(y+groupH/2+4), "end", "", rowLabel(r))
		for _, br := range bars {
			s.bar(x, y, br)
			y += barHeight + barGap
		}
		y += groupGap - barGap
	}
	s.printf(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#222" stroke-width="1.5"/>`+"\n",
		x(1), headerHeight-4, x(1), plotBottom)
	s.text(10, float64(height-12), "start", `fill="#555"`,
		"bar: ratio of the medians (the table's ratio and vs loop); whisker: range of the per-round paired ratios; log scale")
	s.printf("</svg>\n")
	return s.err
}

// scaleRange is the axis in powers of 2: from the smallest to the
// largest value drawn, at least 1/2 to 2.
func scaleRange(rows []*row) (lo, hi float64) {
	lo, hi = -1, 1
	for _, r := range rows {
		for _, br := range chartBars(r) {
			lo, hi = math.Min(lo, math.Floor(math.Log2(br.low))), math.Max(hi, math.Ceil(math.Log2(br.high)))
		}
	}
	return lo, hi
}

func rowLabel(r *row) string {
	label := strings.TrimSpace(r.Workload)
	if m := shortMode(r.Mode); m != "" {
		label += " [" + m + "]"
	}
	return label
}

func (b *bench) chartSubtitle() string {
	i := b.info
	return fmt.Sprintf("%s, kernel %s, %d CPUs, %s on %s, %d rounds; other work on the machine is noise in every number",
		b.started.UTC().Format("2006-01-02"), i.Kernel, i.CPUs, i.FS.Type, i.FS.Source, b.cfg.rounds)
}

// svgWriter writes SVG elements and keeps the first error.
type svgWriter struct {
	w   io.Writer
	err error
}

func (s *svgWriter) printf(format string, args ...any) {
	if s.err == nil {
		_, s.err = fmt.Fprintf(s.w, format, args...)
	}
}

func (s *svgWriter) text(x, y float64, anchor, attrs, text string) {
	s.printf(`<text x="%.1f" y="%.1f" text-anchor="%s" %s>%s</text>`+"\n", x, y, anchor, attrs, html.EscapeString(text))
}

func (s *svgWriter) legend(x, y float64) {
	for _, l := range []struct{ colour, text string }{{vsPlainColour, "kvfs / plain"}, {vsLoopColour, "kvfs / loopback"}} {
		s.printf(`<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/>`+"\n", x, y-10, l.colour)
		s.text(x+16, y, "start", "", l.text)
		x += 130
	}
}

// axis draws a grid line and a label at each power of 2.
func (s *svgWriter) axis(x func(float64) float64, lo, hi float64, y0, y1 int) {
	for e := lo; e <= hi; e++ {
		v := math.Exp2(e)
		label := fmt.Sprintf("%g", v)
		if v < 1 {
			label = fmt.Sprintf("1/%g", 1/v)
		}
		s.printf(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x(v), y0, x(v), y1)
		s.text(x(v), float64(y1+14), "middle", `fill="#555"`, label)
	}
}

// bar draws a ratio from 1 to its value, its whisker, and its value
// right of whichever reaches further right.
func (s *svgWriter) bar(x func(float64) float64, y int, br bar) {
	left, right := x(math.Min(1, br.ratio)), x(math.Max(1, br.ratio))
	s.printf(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>kvfs / %s: %.2f (%.2f..%.2f)</title></rect>`+"\n",
		left, y, math.Max(right-left, 1), barHeight, br.colour, br.against, br.ratio, br.low, br.high)
	mid := float64(y) + barHeight/2.0
	if br.hasSpread {
		s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#111"/>`+"\n", x(br.low), mid, x(br.high), mid)
		for _, v := range []float64{br.low, br.high} {
			s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#111"/>`+"\n", x(v), mid-4, x(v), mid+4)
		}
	}
	s.text(x(math.Max(1, br.high))+5, mid+4, "start", `font-size="11"`, fmt.Sprintf("%.2f", br.ratio))
}
