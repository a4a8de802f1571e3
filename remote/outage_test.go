package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/s3test"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestServerDown: with the server stopped, lookups fail (as misses)
// until the breaker opens, then answer at once without a request;
// uploads queue up to the bound and the rest are dropped; once the
// server is back and the cool-down over, the breaker closes and the
// queued uploads go. The log says when the breaker opens and closes,
// and once that uploads are being dropped.
func TestServerDown(t *testing.T) {
	srv := s3test.New(t)
	const failures, bound = 3, 4
	seen, logs := observer.New(zap.InfoLevel)
	n := newNode(t, srv, "p", nodeOpts{cfg: func(c *Config) {
		c.BreakerFailures, c.QueueMax = failures, bound
	}, log: zap.New(seen)})
	said := func(snippet string) int { return logs.FilterMessageSnippet(snippet).Len() }
	ctx := context.Background()
	srv.Stop()
	for i := range failures {
		_, found, err := n.Lookup(ctx, fmt.Sprintf("absent%d.data", i))
		if found || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("lookup %d with the server down = %v, %v; want ErrUnavailable", i, found, err)
		}
	}
	sent := n.reqs.total()
	if st := n.Stats(); st.BreakerState != BreakerOpen || sent != failures {
		t.Fatalf("after %d failures: breaker %s, %d requests", failures, st.BreakerState, sent)
	}
	if _, found, err := n.Lookup(ctx, "absent9.data"); found || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("lookup with the breaker open = %v, %v", found, err)
	}
	for i := range bound + 2 {
		name := fmt.Sprintf("obj%d.data", i)
		n.write(t, name, randBytes(t, 8192))
		if queued := n.Enqueue(name); queued != (i < bound) {
			t.Fatalf("Enqueue #%d = %v with bound %d", i, queued, bound)
		}
	}
	if st := n.Stats(); st.QueueDepth != bound || st.UploadDropped != 2 || n.reqs.total() != sent {
		t.Fatalf("with the breaker open: %+v, %d requests sent (want %d)", st, n.reqs.total(), sent)
	}
	if said("circuit breaker open") != 1 || said("upload queue is full") != 1 {
		t.Errorf("log with the server down: %v; want the breaker's opening and the drops said once each", logs.All())
	}
	srv.Start()
	n.clock.Advance(DefaultBreakerCoolDown)
	n.waitUploads(t)
	st := n.Stats()
	if st.Uploads != bound || st.QueueDepth != 0 || st.BreakerState != BreakerClosed {
		t.Fatalf("after the server came back: %+v", st)
	}
	if said("circuit breaker closed") != 1 {
		t.Errorf("log after the server came back: %v; want the breaker's closing said", logs.All())
	}
	for i := range bound {
		if _, found, err := n.Lookup(ctx, fmt.Sprintf("obj%d.data", i)); !found || err != nil {
			t.Fatalf("obj%d not on the remote: %v", i, err)
		}
	}
}

// TestServerHung: a server that accepts and never answers costs a fetch
// or a lookup one request and the timeout, not more, a fetch that fails
// so forgets that its name is there, and the first such timeout opens
// the breaker, which then answers at once (callers queue
// behind a lookup: waiting for several timeouts cost a store several);
// after the cool-down one probe goes, with the same bound, and a good
// probe closes it. The bound is read, not timed: the probe's one request
// carries a deadline of Timeout from when the call began (after the call
// began, before the request went out, plus Timeout), so no retry and no
// longer wait can hide behind it.
func TestServerHung(t *testing.T) {
	const timeout = 100 * time.Millisecond
	srv := s3test.New(t)
	var mu sync.Mutex
	type sentReq struct{ at, deadline time.Time } // deadline zero if none
	var sent []sentReq
	n := newNode(t, srv, "p", nodeOpts{
		cfg: func(c *Config) { c.BreakerFailures, c.Timeout = 3, timeout },
		before: func(r *http.Request) {
			d, _ := r.Context().Deadline()
			mu.Lock()
			defer mu.Unlock()
			sent = append(sent, sentReq{time.Now(), d})
		},
	})
	if err := n.Put(context.Background(), "k.data", strings.NewReader("kv")); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	before := n.reqs.total()
	created := false
	_, err := n.Fetch(context.Background(), "k.data", func(Info) (*os.File, error) {
		created = true
		return nil, errors.New("create called")
	})
	if !errors.Is(err, ErrUnavailable) || created {
		t.Fatalf("Fetch from a hung server = %v (create called: %v), want ErrUnavailable", err, created)
	}
	if got := n.reqs.total() - before; got != 1 {
		t.Fatalf("a fetch from a hung server sent %d requests, want 1", got)
	}
	if st := n.Stats(); st.BreakerState != BreakerOpen {
		t.Fatalf("breaker %s after one timeout (of %d failures that open it otherwise); want open", st.BreakerState, 3)
	}
	// The failed fetch forgot that k.data was there: the open breaker
	// answers its lookup absent, not the memory present.
	if _, found, err := n.Lookup(context.Background(), "k.data"); found || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("lookup of the name whose fetch failed = %v, %v; want the open breaker's answer", found, err)
	}
	before = n.reqs.total()
	if _, _, err := n.Lookup(context.Background(), "h0.data"); !errors.Is(err, ErrUnavailable) || n.reqs.total() != before {
		t.Fatalf("a lookup after the timeout: %v, %d new requests; want the open breaker's answer", err, n.reqs.total()-before)
	}
	n.clock.Advance(DefaultBreakerCoolDown)
	// The probe, the server still hung.
	mu.Lock()
	first := len(sent)
	mu.Unlock()
	start := time.Now()
	_, found, err := n.Lookup(context.Background(), "h1.data")
	if found || !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lookup of a hung server = %v, %v; want ErrUnavailable from the timeout", found, err)
	}
	mu.Lock()
	now := sent[first:]
	mu.Unlock()
	if len(now) != 1 {
		t.Fatalf("a lookup of a hung server sent %d requests, want 1", len(now))
	}
	if r := now[0]; r.deadline.Before(start.Add(timeout)) || r.deadline.After(r.at.Add(timeout)) {
		t.Fatalf("a lookup's request went out %v after the call began with a deadline %v after it; want %v",
			r.at.Sub(start), r.deadline.Sub(start), timeout)
	}
	before = n.reqs.total()
	if _, _, err := n.Lookup(context.Background(), "h9.data"); !errors.Is(err, ErrUnavailable) || n.reqs.total() != before {
		t.Fatalf("with the breaker open: %v, %d new requests", err, n.reqs.total()-before)
	}
	srv.Resume()
	n.clock.Advance(DefaultBreakerCoolDown)
	if _, found, err := n.Lookup(context.Background(), "h9.data"); found || err != nil {
		t.Fatalf("the half-open probe = %v, %v; want an answered miss", found, err)
	}
	if st := n.Stats(); st.BreakerState != BreakerClosed {
		t.Fatalf("breaker %s after a good probe", st.BreakerState)
	}
}
