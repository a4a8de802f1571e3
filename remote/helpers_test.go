package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/s3test"
	"github.com/minio/minio-go/v7"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// fakeClock is a Clock the test moves by hand.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{c.now.Add(d), ch})
	return ch
}

// Advance moves the clock and fires the timers that came due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if c.now.Before(w.at) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

// counter is an http.RoundTripper that counts the requests it passes on,
// by method and by method and path: how the tests prove "at most one
// HEAD" and "nothing sent".
type counter struct {
	base http.RoundTripper
	// before, if set, runs before a request goes out.
	before func(*http.Request)

	mu sync.Mutex
	n  map[string]int
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	if c.n == nil {
		c.n = make(map[string]int)
	}
	c.n[r.Method]++
	c.n[r.Method+" "+r.URL.Path]++
	before := c.before
	c.mu.Unlock()
	if before != nil {
		before(r)
	}
	return c.base.RoundTrip(r)
}

// count is the requests of method (and path, if given: "/BUCKET/KEY").
func (c *counter) count(method string, path ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(path) > 0 {
		return c.n[method+" "+path[0]]
	}
	return c.n[method]
}

func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range []string{"GET", "HEAD", "PUT", "POST", "DELETE"} {
		n += c.n[m]
	}
	return n
}

// node is one tier with its own local store and journal, as one kvfs
// daemon would have.
type node struct {
	*Tier
	store   string
	journal string
	reqs    *counter
	clock   *fakeClock
	// busy (nil: never) says whether a writer has a local object open;
	// wrap (nil: none) wraps each Source opened; opened counts opens.
	busy   func(name string) bool
	wrap   func(name string, s Source) Source
	opened atomic.Int64
}

// nodeOpts adjusts a node's config or deps before New.
type nodeOpts struct {
	cfg     func(*Config)
	journal string // reuse a journal directory
	store   string // reuse a store directory
	before  func(*http.Request)
	log     *zap.Logger // the tier's logger; default: the test's
}

func newNode(t *testing.T, srv *s3test.Server, prefix string, o nodeOpts) *node {
	t.Helper()
	n := &node{store: o.store, journal: o.journal, reqs: &counter{before: o.before}, clock: newFakeClock()}
	if n.store == "" {
		n.store = t.TempDir()
	}
	if n.journal == "" {
		n.journal = t.TempDir()
	}
	cfg := Config{URL: srv.URL(prefix), Endpoint: srv.Endpoint, AccessKey: s3test.AccessKey,
		SecretKey: s3test.SecretKey, Region: s3test.Region}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	if err := cfg.Finish(func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	log := o.log
	if log == nil {
		log = zaptest.NewLogger(t)
	}
	tier, err := New(cfg, Deps{
		JournalDir: n.journal, Open: n.open, Logger: log, Clock: n.clock,
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper { n.reqs.base = rt; return n.reqs },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tier.Close() })
	n.Tier = tier
	return n
}

// open is the node's Opener: the file under its store; busy, when set,
// says whether a writer has it.
func (n *node) open(name string) (Source, error) {
	f, err := os.Open(filepath.Join(n.store, filepath.FromSlash(name)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	var busy func() bool
	if n.busy != nil {
		busy = func() bool { return n.busy(name) }
	}
	src, err := NewFileSource(f, busy, nil)
	if err != nil {
		f.Close()
		return nil, err
	}
	n.opened.Add(1)
	if n.wrap != nil {
		return n.wrap(name, src), nil
	}
	return src, nil
}

// write stores data locally under name.
func (n *node) write(t *testing.T, name string, data []byte) {
	t.Helper()
	p := filepath.Join(n.store, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fetch fetches name into a new temp file and returns its bytes.
func (n *node) fetch(t *testing.T, name string) ([]byte, Fetched, error) {
	t.Helper()
	dir := t.TempDir()
	f, err := n.Fetch(context.Background(), name, func(Info) (*os.File, error) {
		return os.CreateTemp(dir, "fetch")
	})
	if f.File != nil {
		defer f.File.Close()
	}
	if err != nil {
		return nil, f, err
	}
	b, rerr := os.ReadFile(f.File.Name())
	if rerr != nil {
		t.Fatal(rerr)
	}
	return b, f, nil
}

// waitUploads waits for the node's queue to empty.
func (n *node) waitUploads(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.WaitUploads(ctx); err != nil {
		t.Fatalf("uploads still pending (%+v): %v", n.Stats(), err)
	}
}

func randBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// getRaw reads a key with a plain client.
func getRaw(t *testing.T, c *minio.Client, bucket, key string) ([]byte, minio.ObjectInfo) {
	t.Helper()
	o, err := c.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	st, _ := o.Stat()
	return b, st
}

// putRaw writes a key with a plain client, with the given metadata.
func putRaw(t *testing.T, c *minio.Client, bucket, key string, data []byte, meta map[string]string) {
	t.Helper()
	_, err := c.PutObject(context.Background(), bucket, key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{UserMetadata: meta, DisableMultipart: true})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// hangGuard bounds the waits of these tests: a wait that runs into it
// is waiting for something that is not coming, however slow the machine.
const hangGuard = time.Minute

// poll reports whether cond came to hold before hangGuard passed, looking
// every millisecond: for states of goroutines that nothing announces.
func poll(cond func() bool) bool {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	guard := time.After(hangGuard)
	for !cond() {
		select {
		case <-tick.C:
		case <-guard:
			return cond()
		}
	}
	return true
}

func minioRemove() minio.RemoveObjectOptions { return minio.RemoveObjectOptions{} }

// storedCRC is the CRC32C the server keeps with key, as Info.Checksum
// spells it; "" without one.
func storedCRC(t *testing.T, c *minio.Client, bucket, key string) string {
	t.Helper()
	oi, err := c.StatObject(context.Background(), bucket, key, minio.StatObjectOptions{Checksum: true})
	if err != nil {
		t.Fatalf("stat %s: %v", key, err)
	}
	sum, ok := serverCRC(oi)
	if !ok {
		return ""
	}
	return checksumPrefix + formatCRC(sum)
}

// drain moves the node's clock (backoffs, breaker cool-down) until no
// work is pending, a minute of real time at most: a worker may start
// its backoff after any one move.
func (n *node) drain(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		n.clock.Advance(maxBackoff)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := n.WaitUploads(ctx)
		cancel()
		if err == nil {
			return
		}
	}
	t.Fatalf("work still pending: %+v", n.Stats())
}

// advanceUntil moves the node's clock by minBackoff at each look until
// cond holds.
func (n *node) advanceUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !poll(func() bool {
		if cond() {
			return true
		}
		n.clock.Advance(minBackoff)
		return false
	}) {
		t.Fatalf("%s: still not after %v: %+v", what, hangGuard, n.Stats())
	}
}
