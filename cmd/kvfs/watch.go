package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kvfs/kvfs/internal/mountinfo"
	"github.com/kvfs/kvfs/internal/progress"
	"github.com/kvfs/kvfs/internal/stats"
	"github.com/kvfs/kvfs/internal/usageerr"
	"github.com/kvfs/kvfs/mount"
)

// sample is one reading of a mount's stats: what `kvfs stats --json`
// prints, and when. A figure an older daemon does not report is absent
// from it and shown nowhere, rather than as zero. A mount still loading
// its index has no figures: loading says how far it is.
type sample struct {
	stats.Snapshot
	loading *stats.Loading
	at      time.Time
	// daemon: the pid holding the mount's store (0: not known), which
	// a handover or a restart changes.
	daemon int
}

// readSample asks a live mount for its figures through the root's stats
// extended attribute.
func readSample(mp string) (sample, error) {
	s := sample{at: time.Now()}
	// As mountinfo names it (a relative path found no mount, and the
	// watch no daemon: an outside tester's `kvfs stats --watch m`),
	// never by a stat of the mount (a stopped daemon's waits for good).
	if e, ok := mountinfo.At(mount.Point(mp)); ok && e.FSType == mount.FSType {
		s.daemon, _ = mount.StoreHolder(e.Source)
	}
	b, err := statsJSON(mp)
	if err != nil {
		return s, err
	}
	if l, ok := stats.ReadLoading(b); ok {
		s.loading = &l
		return s, nil
	}
	if err := json.Unmarshal(b, &s.Snapshot); err != nil {
		return s, fmt.Errorf("reading stats of %s: %w", mp, err)
	}
	return s, nil
}

// watchStats prints mp's stats every interval, count times (0: until
// interrupted): a compact view redrawn in place on a terminal, a line
// per reading otherwise.
func watchStats(mp string, interval time.Duration, count int, stdout io.Writer) error {
	tty := progress.IsTerminal(stdout)
	var prev *sample
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; count == 0 || i < count; i++ {
		if i > 0 {
			<-tick.C
		}
		cur, err := readSample(mp)
		if err != nil && i > 0 && errors.Is(err, usageerr.ErrUsage) {
			// It answered a moment ago: not a bad argument (exit 2)
			// but a mount that went away while watched (an outside
			// tester: `kvfs unmount` under a --watch).
			return fmt.Errorf("%s: the kvfs mount went away while watched (unmounted, or its daemon stopped): %s", mp, err)
		}
		if err != nil {
			return err
		}
		if cur.loading != nil {
			line := fmt.Sprintf("%s state=loading expected_objects=%d loading_seconds=%.1f",
				cur.at.UTC().Format(time.RFC3339), cur.loading.ExpectedObjects, cur.loading.Seconds)
			if tty {
				line = fmt.Sprintf("\x1b[H\x1b[2J%sloading its index: %d objects expected, %.1f s so far; loads, stores of new names, deletes, moves and mkdir are served; other changes wait for it",
					watchHeader(mp, cur.at, interval, i, count), cur.loading.ExpectedObjects, cur.loading.Seconds)
			}
			fmt.Fprintln(stdout, line)
			prev = nil // rates start from the first reading of the index
			continue
		}
		restarted := prev != nil && (countersFell(prev, &cur) || prev.daemon != 0 && cur.daemon != 0 && prev.daemon != cur.daemon)
		if restarted {
			// A handover or a restart: the counters start again from
			// 0, and rates across it were negative (an outside tester:
			// stores/s=-28195.6), or, where the new daemon's had passed
			// the old one's already, too low (another's).
			prev = nil
		}
		if tty {
			fmt.Fprint(stdout, "\x1b[H\x1b[2J"+watchHeader(mp, cur.at, interval, i, count)+viewBlock(prev, cur, interval))
		} else {
			line := viewLine(prev, cur)
			if restarted {
				line += " counters_restarted=1"
			}
			fmt.Fprintln(stdout, line)
		}
		prev = &cur
	}
	return nil
}

// columns are the figures --watch shows (stats.Field.Watch).
var columns = watchColumns()

func watchColumns() []stats.Field {
	var out []stats.Field
	for _, f := range stats.Fields {
		if f.Watch != "" {
			out = append(out, f)
		}
	}
	return out
}

// countersFell says whether a counter went down from prev to cur: the
// daemon that answers counts from its own start (a handover's successor,
// or a restart).
func countersFell(prev, cur *sample) bool {
	for _, f := range append([]stats.Field{stats.LookupHits, stats.LookupMisses}, columns...) {
		a, okA := f.Int(&prev.Snapshot)
		b, okB := f.Int(&cur.Snapshot)
		if f.Kind == stats.Counter && okA && okB && b < a {
			return true
		}
	}
	return false
}

// perSecond is f's change per second from prev to cur, if both have it and
// it is a counter.
func perSecond(f stats.Field, prev, cur *sample) (float64, bool) {
	a, okA := f.Int(&prev.Snapshot)
	b, okB := f.Int(&cur.Snapshot)
	if f.Kind != stats.Counter || !okA || !okB {
		return 0, false
	}
	return float64(b-a) / seconds(prev, cur), true
}

func seconds(prev, cur *sample) float64 { return max(cur.at.Sub(prev.at).Seconds(), 1e-3) }

// hitRatio is the share of lookups that found an object from prev to cur
// (prev nil: since the mount started), if the daemon reports lookups and
// any happened. Of the lookups that reach kvfs: not a connector's hit
// ratio (see stats.LookupHits).
func hitRatio(prev, cur *sample) (float64, bool) {
	hits, okH := stats.LookupHits.Int(&cur.Snapshot)
	misses, okM := stats.LookupMisses.Int(&cur.Snapshot)
	if prev != nil {
		h0, okH0 := stats.LookupHits.Int(&prev.Snapshot)
		m0, okM0 := stats.LookupMisses.Int(&prev.Snapshot)
		hits, misses, okH, okM = hits-h0, misses-m0, okH && okH0, okM && okM0
	}
	if !okH || !okM || hits+misses == 0 {
		return 0, false
	}
	return float64(hits) / float64(hits+misses), true
}

// viewLine is one reading as key=value fields, for logs and pipes.
func viewLine(prev *sample, cur sample) string {
	f := []string{cur.at.UTC().Format(time.RFC3339)}
	for _, c := range columns {
		if v, ok := c.Int(&cur.Snapshot); ok {
			f = append(f, fmt.Sprintf("%s=%d", c.Watch, v))
		}
	}
	f = append(f, fmt.Sprintf("used%%=%.1f", pct(cur.UsedBytes, cur.CapacityBytes)))
	if prev != nil {
		for _, c := range columns {
			if v, ok := perSecond(c, prev, &cur); ok {
				f = append(f, fmt.Sprintf("%s/s=%.1f", c.Watch, v))
			}
		}
		if h, ok := hitRatio(prev, &cur); ok {
			f = append(f, fmt.Sprintf("lookups_found%%=%.1f", 100*h))
		}
	}
	if h, ok := hitRatio(nil, &cur); ok {
		f = append(f, fmt.Sprintf("lookups_found_total%%=%.1f", 100*h))
	}
	return strings.Join(f, " ")
}

// watchHeader heads the terminal view of reading i (from 0) of count
// (0: until interrupted); a view that ends by itself does not say
// Ctrl-C (an outside tester).
func watchHeader(mp string, at time.Time, interval time.Duration, i, count int) string {
	end := "Ctrl-C to quit"
	if count > 0 {
		end = fmt.Sprintf("reading %d of %d", i+1, count)
	}
	return fmt.Sprintf("kvfs %s   %s   every %v (%s)\n\n", mp, at.Format("15:04:05"), interval, end)
}

// viewBlock is the terminal view below its header: a bar for
// used/capacity, then counts and rates.
func viewBlock(prev *sample, cur sample, interval time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "used      %s %5.1f%%  %s / %s\n", bar(cur.UsedBytes, cur.CapacityBytes, 30),
		pct(cur.UsedBytes, cur.CapacityBytes), human(cur.UsedBytes), human(cur.CapacityBytes))
	fmt.Fprintf(&b, "objects   %d   pinned %d (%s)   shadow %s\n", cur.Objects, cur.PinnedObjects, human(cur.PinnedBytes), human(cur.ShadowBytes))
	fmt.Fprintf(&b, "totals    evictions %d (%s)   ENOSPC %d\n", cur.Evictions, human(cur.EvictedBytes), cur.AdmissionFailures)
	if prev == nil {
		return b.String()
	}
	var rs []string
	for _, c := range columns {
		if v, ok := perSecond(c, prev, &cur); ok {
			rs = append(rs, fmt.Sprintf("%s %.1f", c.Watch, v))
		}
	}
	evicted := float64(cur.EvictedBytes-prev.EvictedBytes) / seconds(prev, &cur)
	fmt.Fprintf(&b, "per sec   %s   evicted %s/s\n", strings.Join(rs, "   "), human(int64(evicted)))
	now, okNow := hitRatio(prev, &cur)
	total, okTotal := hitRatio(nil, &cur)
	if okNow || okTotal {
		fmt.Fprintf(&b, "lookups   %s found now   %s since mount (of those that reach kvfs)\n", ratio(now, okNow), ratio(total, okTotal))
	}
	return b.String()
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func ratio(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

func bar(used, capacity int64, width int) string {
	n := int(pct(used, capacity) / 100 * float64(width))
	n = min(max(n, 0), width)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

// human is a byte count in binary units.
func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}
