package remote

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/kvfs/kvfs/internal/s3test"
)

// TestNegativeTTL: lookups of an absent name within the negative TTL,
// in a row and at once, cost at most one HEAD; a remote publish is seen
// once the TTL has passed, not before.
func TestNegativeTTL(t *testing.T) {
	srv := s3test.New(t)
	a := newNode(t, srv, "p", nodeOpts{})
	b := newNode(t, srv, "p", nodeOpts{})
	ctx := context.Background()
	const name = "later.data"
	lookups := func(n int) {
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, found, err := a.Lookup(ctx, name); found || err != nil {
					t.Errorf("Lookup of an absent name = %v, %v", found, err)
				}
			}()
		}
		wg.Wait()
		for range n {
			a.Lookup(ctx, name)
		}
	}
	lookups(16)
	if h, logged := a.reqs.count("HEAD"), srv.Requests("HEAD", "p/"+name); h != 1 || logged != 1 {
		t.Fatalf("32 lookups of an absent name sent %d HEADs (the server logged %d), want 1", h, logged)
	}
	if err := b.Put(ctx, name, bytes.NewReader([]byte("published by b"))); err != nil {
		t.Fatal(err)
	}
	a.clock.Advance(DefaultNegativeTTL - 1)
	lookups(4)
	if h := a.reqs.count("HEAD"); h != 1 {
		t.Fatalf("lookups within the TTL sent %d HEADs in all, want still 1", h)
	}
	a.clock.Advance(1)
	info, found, err := a.Lookup(ctx, name)
	if !found || err != nil || info.Size != int64(len("published by b")) {
		t.Fatalf("Lookup once the TTL passed = %+v, %v, %v; want b's object", info, found, err)
	}
	if h := a.reqs.count("HEAD"); h != 2 {
		t.Fatalf("HEADs = %d, want 2", h)
	}
	if st := a.Stats(); st.Hits != 1 || st.Misses != 40 || st.Heads != 2 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestLookupConcurrentFirst: callers asking for one unknown name at once
// share one HEAD.
func TestLookupConcurrentFirst(t *testing.T) {
	srv := s3test.New(t)
	n := newNode(t, srv, "p", nodeOpts{})
	const callers = 8
	release := make(chan struct{})
	var once sync.Once
	// The first HEAD waits until every caller has joined its call.
	n.reqs.before = func(r *http.Request) {
		if r.Method == "HEAD" {
			once.Do(func() { <-release })
		}
	}
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.Lookup(context.Background(), "x.data")
		}()
	}
	waitCall(t, &n.lookups, "x.data", callers-1)
	close(release)
	wg.Wait()
	if h := n.reqs.count("HEAD"); h != 1 {
		t.Fatalf("%d concurrent lookups sent %d HEADs, want 1", callers, h)
	}
}

// TestExcludedNeverAsked: a temp name is answered "absent" without a
// request.
func TestExcludedNeverAsked(t *testing.T) {
	srv := s3test.New(t)
	n := newNode(t, srv, "p", nodeOpts{})
	for _, name := range []string{".lmcache-write.tmp.12.3", "d/.lmcache-write.tmp.1.1", "k.tmp"} {
		if _, found, err := n.Lookup(context.Background(), name); found || err != nil {
			t.Fatalf("Lookup(%s) = %v, %v", name, found, err)
		}
	}
	if n.reqs.total() != 0 {
		t.Fatalf("lookups of temp names sent %d requests", n.reqs.total())
	}
}
