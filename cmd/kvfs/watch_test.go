package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func parseSample(t *testing.T, js string, at time.Time) sample {
	t.Helper()
	s := sample{at: at}
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestViewOptionalCounters: stores, loads and lookups are shown, as
// rates and the share of lookups that found an object, only when the daemon reports them.
func TestViewOptionalCounters(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	base := `"capacity_bytes":4096000,"used_bytes":1024000,"objects":3,"evictions":10,"evicted_bytes":40960,"admission_failures":1`
	oldS := parseSample(t, `{`+base+`}`, t0)
	newS := parseSample(t, `{"capacity_bytes":4096000,"used_bytes":2048000,"objects":5,"evictions":14,"evicted_bytes":81920,"admission_failures":3}`, t0.Add(2*time.Second))
	line := viewLine(&oldS, newS)
	for _, want := range []string{"used=2048000", "used%=50.0", "objects=5", "evictions/s=2.0", "enospc/s=1.0"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
	for _, absent := range []string{"stores", "loads", "hit"} {
		if strings.Contains(line, absent) {
			t.Errorf("line %q shows %q, which the daemon did not report", line, absent)
		}
	}
	withOld := parseSample(t, `{`+base+`,"stores":10,"loads":20,"lookups_hit":30,"lookups_miss":10}`, t0)
	withNew := parseSample(t, `{`+base+`,"stores":14,"loads":40,"lookups_hit":39,"lookups_miss":11}`, t0.Add(2*time.Second))
	line = viewLine(&withOld, withNew)
	for _, want := range []string{"stores=14", "loads=40", "stores/s=2.0", "loads/s=10.0", "lookups_found%=90.0", "lookups_found_total%=78.0"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
	block := viewBlock(&withOld, withNew, time.Second)
	for _, want := range []string{"[#######", "25.0%", "1000.0 KiB / 3.9 MiB", "stores 2.0", "loads 10.0", "lookups   90.0% found now   78.0% since mount"} {
		if !strings.Contains(block, want) {
			t.Errorf("view lacks %q:\n%s", want, block)
		}
	}
	// A view of a fixed count of readings does not say Ctrl-C (an
	// outside tester); one that runs until interrupted does.
	if h := watchHeader("/mnt", t0, time.Second, 1, 3); !strings.Contains(h, "(reading 2 of 3)") || strings.Contains(h, "Ctrl-C") {
		t.Errorf("header of reading 2 of 3: %q", h)
	}
	if h := watchHeader("/mnt", t0, time.Second, 1, 0); !strings.Contains(h, "Ctrl-C to quit") {
		t.Errorf("header of an endless watch: %q", h)
	}
	if first := viewLine(nil, oldS); strings.Contains(first, "/s=") {
		t.Errorf("first line has rates without a previous reading: %q", first)
	}
}
