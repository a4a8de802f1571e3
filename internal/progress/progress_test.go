package progress

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// clock is a test's clock: it moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestLinesAtEveryStep: with no interval, each report is a line with the
// count so far, the expected total and the rate.
func TestLinesAtEveryStep(t *testing.T) {
	var out bytes.Buffer
	c := &clock{now: time.Unix(1000, 0)}
	r := New(Config{What: "loading store", Out: &out, Now: c.Now})
	r.Expect(3000)
	for range 3 {
		c.advance(time.Second)
		r.Found(1000)
	}
	r.Done()
	want := "loading store: 1000 objects of about 3000 (33%), 1000/s\n" +
		"loading store: 2000 objects of about 3000 (66%), 1000/s\n" +
		"loading store: 3000 objects of about 3000 (100%), 1000/s\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}

// TestLinesAtInterval: reports in between lines only count.
func TestLinesAtInterval(t *testing.T) {
	var out bytes.Buffer
	c := &clock{now: time.Unix(1000, 0)}
	r := New(Config{What: "w", Out: &out, Every: 5 * time.Second, Now: c.Now})
	for range 4 {
		c.advance(time.Second)
		r.Found(10)
	}
	if out.Len() != 0 {
		t.Fatalf("a line before the interval passed: %q", out.String())
	}
	c.advance(time.Second)
	r.Found(10)
	c.advance(time.Second)
	r.Found(10)
	if want := "w: 50 objects, 10/s\n"; out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
	if r.Count() != 60 {
		t.Fatalf("count %d, want 60", r.Count())
	}
}

// TestLogLines: with a logger the lines are log entries with fields.
func TestLogLines(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	c := &clock{now: time.Unix(1000, 0)}
	r := New(Config{What: "loading store", Log: zap.New(core), Now: c.Now})
	r.Expect(100)
	c.advance(2 * time.Second)
	r.Found(40)
	entries := logs.AllUntimed()
	if len(entries) != 1 {
		t.Fatalf("%d log entries, want 1", len(entries))
	}
	f := entries[0].ContextMap()
	if entries[0].Message != "loading store" || f["objects"] != int64(40) || f["expected"] != int64(100) || f["per_second"] != int64(20) {
		t.Fatalf("entry %q %v", entries[0].Message, f)
	}
}

// TestBar: on a terminal the bar is redrawn in place and cleared at the
// end; nothing is drawn before the first redraw interval.
func TestBar(t *testing.T) {
	var out bytes.Buffer
	c := &clock{now: time.Unix(1000, 0)}
	r := New(Config{What: "loading store", Out: &out, Every: time.Hour, Now: c.Now})
	r.bar, r.every = true, barEvery // what New does for a terminal
	r.Expect(1000)
	r.Found(100)
	if out.Len() != 0 {
		t.Fatalf("bar drawn at once: %q", out.String())
	}
	c.advance(time.Second)
	r.Found(400)
	c.advance(time.Second)
	r.Found(500)
	r.Done()
	s := out.String()
	if strings.Contains(s, "\n") || strings.Count(s, "\r") != 3 || !strings.HasSuffix(s, "\r\x1b[K") {
		t.Fatalf("not two redraws and a clear: %q", s)
	}
	if !strings.Contains(s, "[===============               ]  50% 500/1000 objects, 500/s") ||
		!strings.Contains(s, "100% 1000/1000 objects") {
		t.Fatalf("bar: %q", s)
	}
}

// TestNotATerminal: a buffer or a pipe gets lines, never a bar.
func TestNotATerminal(t *testing.T) {
	if IsTerminal(&bytes.Buffer{}) {
		t.Fatal("a buffer taken for a terminal")
	}
}
