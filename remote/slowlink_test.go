package remote

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/s3test"
)

// slowLink is a TCP proxy to a server whose uploads (client to server)
// go at rate bytes a second, or not at all while paused; its socket from
// the client reads into a small buffer, so the client's acknowledgements
// follow what it forwards, as over a slow link.
type slowLink struct {
	ln     net.Listener
	rate   int
	paused atomic.Bool
	done   chan struct{} // closed at the test's end: forwarding stops, paused or not
	wg     sync.WaitGroup
}

func newSlowLink(t *testing.T, endpoint string, rate int) *slowLink {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &slowLink{ln: ln, rate: rate, done: make(chan struct{})}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.(*net.TCPConn).SetReadBuffer(64 << 10)
			up, err := net.Dial("tcp", u.Host)
			if err != nil {
				c.Close()
				continue
			}
			l.wg.Add(2)
			go func() { defer l.wg.Done(); l.forward(up, c); up.Close() }()
			go func() { defer l.wg.Done(); io.Copy(c, up); c.Close() }()
		}
	}()
	// A test that failed while the link was paused left its forwarders
	// waiting for the pause to end: the cleanup then hung the package
	// until its timeout (10 minutes).
	t.Cleanup(func() { ln.Close(); close(l.done); l.wg.Wait() })
	return l
}

// forward copies src to dst at l.rate, a tick's share every 10 ms.
func (l *slowLink) forward(dst io.Writer, src io.Reader) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	buf := make([]byte, max(l.rate/100, 1))
	for {
		select {
		case <-l.done:
			return
		case <-tick.C:
		}
		if l.paused.Load() {
			continue
		}
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (l *slowLink) endpoint() string { return "http://" + l.ln.Addr().String() }

// TestUploadOverASlowLink: an upload whose last bytes take longer than
// the timeout to leave the socket's buffers, over a link that keeps
// moving, completes; one whose link stops moving is cut after the
// timeout and opens the breaker at once (an outside tester: 8 MiB over
// 512 KiB/s was cut at every try, for good, each try resending it all;
// and a PUT cut for stalling counted one failure of five).
func TestUploadOverASlowLink(t *testing.T) {
	srv := s3test.New(t)
	link := newSlowLink(t, srv.Endpoint, 4<<20)
	n := newNode(t, srv, "p", nodeOpts{cfg: func(c *Config) { c.Endpoint = link.endpoint(); c.Timeout = 300 * time.Millisecond }})
	data := randBytes(t, 4<<20)
	n.write(t, "big.data", data)
	if !n.Enqueue("big.data") {
		t.Fatal("Enqueue refused")
	}
	n.drain(t)
	if got, _ := getRaw(t, srv.Client(), srv.Bucket, "p/big.data"); !bytes.Equal(got, data) {
		t.Fatalf("the bucket holds %d bytes, want the %d uploaded", len(got), len(data))
	}
	// (A machine too busy to forward for the whole timeout may cut a
	// try: the upload is done all the same, where it never was.)
	before := n.Stats()
	if before.Uploads != 1 {
		t.Fatalf("%+v: want one upload", before)
	}

	// The link stops: no byte acknowledged, no answer.
	link.paused.Store(true)
	n.write(t, "stalled.data", data)
	n.Enqueue("stalled.data")
	// The breaker opens as the stalled request is cut, a moment before
	// the upload counts its failure: both are waited for (a busy machine
	// read the stats in between).
	deadline := time.Now().Add(time.Minute)
	for st := n.Stats(); (st.BreakerState != BreakerOpen || st.UploadFailures == before.UploadFailures) && time.Now().Before(deadline); st = n.Stats() {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		n.WaitUploads(ctx)
		cancel()
	}
	if st := n.Stats(); st.BreakerState != BreakerOpen || st.UploadFailures != before.UploadFailures+1 {
		t.Fatalf("%+v: want the breaker open after the one stalled PUT", st)
	}
	link.paused.Store(false)
}
