// Package progress shows how far a long walk has got (start-up's walk of
// a large store, fsck's): a bar redrawn in place on a terminal, a line
// with the count and the rate every so often anywhere else (a log, a
// pipe, the journal). It satisfies blob.Progress.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// DefaultEvery is the time between progress lines the commands use.
const DefaultEvery = 5 * time.Second

// barEvery is the time between redraws of the bar; a walk shorter than
// it draws none.
const barEvery = 100 * time.Millisecond

// Config says what is being done and where progress goes.
type Config struct {
	// What is being done, like "loading store".
	What string
	// Out gets the bar when it is a terminal, and the lines otherwise
	// unless Log is set.
	Out io.Writer
	// Log, when set, gets the lines as log entries (the bar still goes
	// to a terminal Out).
	Log *zap.Logger
	// Every is the time between lines; 0 writes one at every report.
	Every time.Duration
	// Now is the clock (tests pass their own).
	Now func() time.Time
}

// Reporter is one walk's progress. Its methods are safe for concurrent
// use; Found is cheap when no output is due.
type Reporter struct {
	cfg    Config
	bar    bool
	every  time.Duration
	start  time.Time
	count  atomic.Int64
	expect atomic.Int64
	// last is when output was last due, in nanoseconds since start.
	last atomic.Int64

	mu sync.Mutex // GUARDED_BY: writing output, drawn
	// drawn: the bar is on the screen and must be cleared.
	drawn bool
}

// New starts a walk's progress now.
func New(cfg Config) *Reporter {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	r := &Reporter{cfg: cfg, bar: IsTerminal(cfg.Out), every: cfg.Every, start: cfg.Now()}
	if r.bar {
		r.every = barEvery
	}
	return r
}

// Expect sets how many objects the walk expects (0: unknown).
func (r *Reporter) Expect(n int64) { r.expect.Store(n) }

// Found counts n more, and writes a line or redraws the bar when one is
// due. Concurrent callers never wait for each other: one writes, the
// others go on.
func (r *Reporter) Found(n int64) {
	count := r.count.Add(n)
	since := r.cfg.Now().Sub(r.start)
	if since-time.Duration(r.last.Load()) < r.every || !r.mu.TryLock() {
		return
	}
	defer r.mu.Unlock()
	if since-time.Duration(r.last.Load()) < r.every {
		return
	}
	r.last.Store(int64(since))
	r.show(count, since)
}

// Done clears the bar, if one was drawn; the caller reports the outcome.
func (r *Reporter) Done() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.drawn {
		fmt.Fprint(r.cfg.Out, "\r\x1b[K")
		r.drawn = false
	}
}

// Count is how many were found so far.
func (r *Reporter) Count() int64 { return r.count.Load() }

func (r *Reporter) show(count int64, since time.Duration) {
	rate := 0.0
	if since > 0 {
		rate = float64(count) / since.Seconds()
	}
	expect := r.expect.Load()
	switch {
	case r.bar:
		fmt.Fprintf(r.cfg.Out, "\r%s: %s\x1b[K", r.cfg.What, barText(count, expect, rate))
		r.drawn = true
	case r.cfg.Log != nil:
		r.cfg.Log.Info(r.cfg.What, zap.Int64("objects", count), zap.Int64("expected", expect),
			zap.Int64("per_second", int64(rate)), zap.Duration("elapsed", since.Round(time.Millisecond)))
	default:
		fmt.Fprintf(r.cfg.Out, "%s: %d objects%s, %.0f/s\n", r.cfg.What, count, ofExpected(count, expect), rate)
	}
}

// ofExpected says how far along count is, when the walk expected a number.
func ofExpected(count, expect int64) string {
	if expect <= 0 {
		return ""
	}
	return fmt.Sprintf(" of about %d (%d%%)", expect, min(100, count*100/expect))
}

// barText is the bar's line: a bar when the total is known, the count
// and the rate always.
func barText(count, expect int64, rate float64) string {
	const width = 30
	if expect <= 0 {
		return fmt.Sprintf("%d objects, %.0f/s", count, rate)
	}
	filled := int(min(width, count*width/expect))
	return fmt.Sprintf("[%s%s] %3d%% %d/%d objects, %.0f/s", strings.Repeat("=", filled),
		strings.Repeat(" ", width-filled), min(100, count*100/expect), count, expect, rate)
}

// IsTerminal says whether w is a terminal (what go-isatty does on Linux).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
