package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kvfs/kvfs/fusefs"
	"github.com/kvfs/kvfs/internal/progress"
)

// sample is one reading of a mount's stats: what `kvfs stats --json`
// prints, plus counters a daemon may add. Those are pointers so that a
// daemon without them shows nothing rather than zeros.
type sample struct {
	fusefs.Stats
	Stores      *int64 `json:"stores"`       // objects stored (writers closed)
	Loads       *int64 `json:"loads"`        // objects opened for reading
	LookupsHit  *int64 `json:"lookups_hit"`  // lookups of a name that found an object
	LookupsMiss *int64 `json:"lookups_miss"` // lookups of a name that found none
	at          time.Time
}

func readSample(mp string) (sample, error) {
	s := sample{at: time.Now()}
	b, err := statsJSON(mp)
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	return s, err
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
		if err != nil {
			return err
		}
		if tty {
			fmt.Fprint(stdout, "\x1b[H\x1b[2J"+viewBlock(mp, prev, cur, interval))
		} else {
			fmt.Fprintln(stdout, viewLine(prev, cur))
		}
		prev = &cur
	}
	return nil
}

// rates are per-second changes between two readings; a rate whose
// counter the daemon does not expose is absent.
type rates struct {
	stores, loads, evictions, evictedBytes, enospc *float64
	hit                                            *float64 // ratio of lookups that hit, over the interval
}

func rateOf(prev, cur sample) rates {
	secs := max(cur.at.Sub(prev.at).Seconds(), 1e-3)
	per := func(a, b int64) *float64 { v := float64(b-a) / secs; return &v }
	opt := func(a, b *int64) *float64 {
		if a == nil || b == nil {
			return nil
		}
		return per(*a, *b)
	}
	return rates{
		stores: opt(prev.Stores, cur.Stores), loads: opt(prev.Loads, cur.Loads),
		evictions:    per(prev.Evictions, cur.Evictions),
		evictedBytes: per(prev.EvictedBytes, cur.EvictedBytes),
		enospc:       per(prev.AdmissionFailures, cur.AdmissionFailures),
		hit:          hitRatio(delta(prev.LookupsHit, cur.LookupsHit), delta(prev.LookupsMiss, cur.LookupsMiss)),
	}
}

func delta(a, b *int64) *int64 {
	if a == nil || b == nil {
		return nil
	}
	d := *b - *a
	return &d
}

// totalHit is the hit ratio since the mount started, if known.
func totalHit(s sample) *float64 { return hitRatio(s.LookupsHit, s.LookupsMiss) }

// hitRatio is hits/(hits+misses), if both are known and any happened.
func hitRatio(hits, misses *int64) *float64 {
	if hits == nil || misses == nil || *hits+*misses == 0 {
		return nil
	}
	v := float64(*hits) / float64(*hits+*misses)
	return &v
}

// viewLine is one reading as key=value fields, for logs and pipes.
func viewLine(prev *sample, cur sample) string {
	f := []string{cur.at.UTC().Format(time.RFC3339),
		fmt.Sprintf("used=%d", cur.UsedBytes), fmt.Sprintf("capacity=%d", cur.CapacityBytes),
		fmt.Sprintf("used%%=%.1f", pct(cur.UsedBytes, cur.CapacityBytes)),
		fmt.Sprintf("objects=%d", cur.Objects), fmt.Sprintf("pinned=%d", cur.PinnedObjects),
		fmt.Sprintf("evictions=%d", cur.Evictions), fmt.Sprintf("enospc=%d", cur.AdmissionFailures)}
	if cur.Stores != nil {
		f = append(f, fmt.Sprintf("stores=%d", *cur.Stores))
	}
	if cur.Loads != nil {
		f = append(f, fmt.Sprintf("loads=%d", *cur.Loads))
	}
	if prev != nil {
		r := rateOf(*prev, cur)
		f = appendRate(f, "stores/s", r.stores)
		f = appendRate(f, "loads/s", r.loads)
		f = appendRate(f, "evictions/s", r.evictions)
		f = appendRate(f, "enospc/s", r.enospc)
		if r.hit != nil {
			f = append(f, fmt.Sprintf("hit%%=%.1f", 100**r.hit))
		}
	}
	if h := totalHit(cur); h != nil {
		f = append(f, fmt.Sprintf("hit_total%%=%.1f", 100**h))
	}
	return strings.Join(f, " ")
}

func appendRate(f []string, name string, v *float64) []string {
	if v == nil {
		return f
	}
	return append(f, fmt.Sprintf("%s=%.1f", name, *v))
}

// viewBlock is the terminal view: a bar for used/capacity, then counts
// and rates.
func viewBlock(mp string, prev *sample, cur sample, interval time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "kvfs %s   %s   every %v (Ctrl-C to quit)\n\n", mp, cur.at.Format("15:04:05"), interval)
	fmt.Fprintf(&b, "used      %s %5.1f%%  %s / %s\n", bar(cur.UsedBytes, cur.CapacityBytes, 30),
		pct(cur.UsedBytes, cur.CapacityBytes), human(cur.UsedBytes), human(cur.CapacityBytes))
	fmt.Fprintf(&b, "objects   %d   pinned %d (%s)   shadow %s\n", cur.Objects, cur.PinnedObjects, human(cur.PinnedBytes), human(cur.ShadowBytes))
	fmt.Fprintf(&b, "totals    evictions %d (%s)   ENOSPC %d\n", cur.Evictions, human(cur.EvictedBytes), cur.AdmissionFailures)
	if prev == nil {
		return b.String()
	}
	r := rateOf(*prev, cur)
	var rs []string
	for _, x := range []struct {
		name string
		v    *float64
	}{{"stores", r.stores}, {"loads", r.loads}, {"evictions", r.evictions}, {"ENOSPC", r.enospc}} {
		if x.v != nil {
			rs = append(rs, fmt.Sprintf("%s %.1f", x.name, *x.v))
		}
	}
	fmt.Fprintf(&b, "per sec   %s   evicted %s/s\n", strings.Join(rs, "   "), human(int64(*r.evictedBytes)))
	if r.hit != nil || totalHit(cur) != nil {
		fmt.Fprintf(&b, "hit ratio %s now   %s since mount\n", ratio(r.hit), ratio(totalHit(cur)))
	}
	return b.String()
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func ratio(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
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
