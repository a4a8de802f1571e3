package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvfs/kvfs/internal/s3test"
	"github.com/minio/minio-go/v7"
)

// waitStats polls the node's stats until cond holds; the uploads run in
// their own goroutines.
func (n *node) waitStats(t *testing.T, what string, cond func(Stats) bool) Stats {
	t.Helper()
	var st Stats
	if !poll(func() bool { st = n.Stats(); return cond(st) }) {
		t.Fatalf("%s: still %+v", what, st)
	}
	return st
}

// changingSource appends to its file after its first read, while its
// upload is under way, until stop is set.
type changingSource struct {
	Source
	path string
	stop *atomic.Bool
	done bool
}

func (c *changingSource) Read(p []byte) (int, error) {
	n, err := c.Source.Read(p)
	if !c.done && !c.stop.Load() {
		c.done = true
		f, ferr := os.OpenFile(c.path, os.O_WRONLY|os.O_APPEND, 0)
		if ferr == nil {
			f.Write([]byte("a writer's late bytes"))
			f.Close()
		}
	}
	return n, err
}

// TestUploadChangedUnderIt: a local object that changes while its upload
// reads it is not uploaded as read (no object in the bucket, counted as
// changed); the retry uploads what is stored then, verified, with one
// read per attempt.
func TestUploadChangedUnderIt(t *testing.T) {
	srv := s3test.New(t)
	var stop atomic.Bool
	n := newNode(t, srv, "p", nodeOpts{})
	n.wrap = func(name string, s Source) Source {
		return &changingSource{Source: s, path: filepath.Join(n.store, name), stop: &stop}
	}
	first := randBytes(t, 3<<20)
	n.write(t, "k.data", first)
	n.Enqueue("k.data")
	n.waitStats(t, "the first attempt", func(st Stats) bool { return st.UploadChanged == 1 })
	if st := n.Stats(); st.Uploads != 0 || st.QueueDepth != 1 {
		t.Fatalf("after a change under the upload: %+v", st)
	}
	if _, err := srv.Client().StatObject(context.Background(), srv.Bucket, "p/k.data", minio.StatObjectOptions{}); minio.ToErrorResponse(err).StatusCode != http.StatusNotFound {
		t.Fatalf("the bucket has an object cut by a change (%v)", err)
	}
	stop.Store(true)
	n.drain(t)
	final, err := os.ReadFile(filepath.Join(n.store, "k.data"))
	if err != nil || len(final) == len(first) {
		t.Fatalf("the writer did not change the file (%v)", err)
	}
	got, _ := getRaw(t, srv.Client(), srv.Bucket, "p/k.data")
	_, sum, _ := checksumOf(bytes.NewReader(final))
	if !bytes.Equal(got, final) || storedCRC(t, srv.Client(), srv.Bucket, "p/k.data") != checksumPrefix+formatCRC(sum) {
		t.Fatalf("the bucket holds %d bytes (equal: %v), want the %d stored last, with their CRC", len(got), bytes.Equal(got, final), len(final))
	}
	st := n.Stats()
	if st.Uploads != 1 || st.UploadReads != 2 || n.opened.Load() != 2 || n.reqs.count("PUT") != 2 {
		t.Fatalf("%+v, %d opens, %d PUTs: want two attempts of one read each, one upload", st, n.opened.Load(), n.reqs.count("PUT"))
	}
}

// TestUploadWaitsForWriter: an object a writer has open is not read; its
// upload goes once the writer is gone.
func TestUploadWaitsForWriter(t *testing.T) {
	srv := s3test.New(t)
	var writing atomic.Bool
	writing.Store(true)
	n := newNode(t, srv, "p", nodeOpts{})
	n.busy = func(string) bool { return writing.Load() }
	data := randBytes(t, 64<<10)
	n.write(t, "w.data", data)
	n.Enqueue("w.data")
	n.advanceUntil(t, "a retry", func() bool { return n.reqs.count("HEAD") >= 2 })
	if st := n.Stats(); st.UploadReads != 0 || n.reqs.count("PUT") != 0 || st.QueueDepth != 1 || st.UploadFailures != 0 {
		t.Fatalf("while written: %+v, %d PUTs; want no read, no PUT, still queued", st, n.reqs.count("PUT"))
	}
	writing.Store(false)
	n.drain(t)
	if got, _ := getRaw(t, srv.Client(), srv.Bucket, "p/w.data"); !bytes.Equal(got, data) {
		t.Fatal("the bucket's bytes differ")
	}
	if st := n.Stats(); st.Uploads != 1 || st.UploadReads != 1 {
		t.Fatalf("%+v: want one upload, one read", st)
	}
}

// TestUploadOneRead: each upload reads its object once; a key already in
// the bucket is found by the HEAD and not read at all.
func TestUploadOneRead(t *testing.T) {
	srv := s3test.New(t)
	a := newNode(t, srv, "p", nodeOpts{})
	b := newNode(t, srv, "p", nodeOpts{})
	for i := range 4 {
		name := fmt.Sprintf("o%d.data", i)
		a.write(t, name, randBytes(t, 1<<20+i))
		b.write(t, name, randBytes(t, 1<<20+i))
		a.Enqueue(name)
	}
	a.waitUploads(t)
	if st := a.Stats(); st.Uploads != 4 || st.UploadReads != 4 || a.opened.Load() != 4 {
		t.Fatalf("A: %+v, %d opens; want 4 uploads of one read each", st, a.opened.Load())
	}
	for i := range 4 {
		b.Enqueue(fmt.Sprintf("o%d.data", i))
	}
	b.waitUploads(t)
	if st := b.Stats(); st.AlreadyPresent != 4 || st.UploadReads != 0 || b.opened.Load() != 0 || b.reqs.count("PUT") != 0 {
		t.Fatalf("B: %+v, %d opens, %d PUTs; want 4 found by HEAD, nothing read", st, b.opened.Load(), b.reqs.count("PUT"))
	}
}

// TestUploadBadNamesDoNotWedge: two names that are not UTF-8 are refused
// at once, without a request (counted, dropped, not journaled), and a
// good object stored after them is uploaded; the breaker stays closed.
func TestUploadBadNamesDoNotWedge(t *testing.T) {
	srv := s3test.New(t)
	n := newNode(t, srv, "p", nodeOpts{})
	bad := []string{"bad-\xff\xfe.data", "d/also-\xc3\x28.data"}
	for _, name := range bad {
		n.write(t, name, []byte("bytes"))
		if n.Enqueue(name) {
			t.Fatalf("Enqueue(%q) queued a name that cannot be a key", name)
		}
		if n.Enqueue(name) { // published again: refused again
			t.Fatalf("Enqueue(%q) queued it the second time", name)
		}
		if _, found, err := n.Lookup(context.Background(), name); found || !errors.Is(err, ErrBadName) {
			t.Fatalf("Lookup(%q) = %v, %v; want ErrBadName", name, found, err)
		}
	}
	if n.reqs.total() != 0 {
		t.Fatalf("%d requests sent for names that cannot be keys", n.reqs.total())
	}
	good := randBytes(t, 256<<10)
	n.write(t, "good.data", good)
	n.Enqueue("good.data")
	n.waitUploads(t)
	st := n.Stats()
	if st.Rejected != 4 || st.Uploads != 1 || st.UploadFailures != 0 || st.BreakerState != BreakerClosed {
		t.Fatalf("%+v: want 4 refusals, the good object uploaded", st)
	}
	if ents, _ := os.ReadDir(n.journal); len(ents) != 0 {
		t.Fatalf("the journal holds %d entries", len(ents))
	}
}

// TestPermanentErrors: which answers drop an upload for good.
func TestPermanentErrors(t *testing.T) {
	resp := func(status int, code string) error {
		return fmt.Errorf("wrapped: %w", minio.ErrorResponse{StatusCode: status, Code: code, Message: "m"})
	}
	for err, want := range map[error]bool{
		resp(400, "InvalidArgument"): true, resp(400, "KeyTooLongError"): true,
		resp(403, "AccessDenied"): true, resp(400, "InvalidObjectName"): true,
		fmt.Errorf("x: %w", ErrBadName): true, resp(400, "SomethingNew"): true,
		resp(400, "RequestTimeout"): false, resp(400, "ExpiredToken"): false,
		resp(403, "SignatureDoesNotMatch"): false, resp(403, "InvalidAccessKeyId"): false,
		resp(404, "NoSuchBucket"): false, resp(409, "Conflict"): false, resp(429, "SlowDown"): false,
		resp(500, "InternalError"): false, resp(503, "SlowDown"): false,
		fmt.Errorf("%w: refused", ErrUnavailable): false, errSourceChanged: false,
	} {
		if got := permanent(err); got != want {
			t.Errorf("permanent(%v) = %v, want %v", err, got, want)
		}
	}
}

// TestUploadRefusedByServer: a key the server refuses for good (here
// versitygw's posix store, which cannot hold "x/sub.data" beside an
// object "x") is dropped at its PUT's answer, counted, logged once and
// out of the journal; a good object queued after it goes.
func TestUploadRefusedByServer(t *testing.T) {
	srv := s3test.New(t)
	n := newNode(t, srv, "p", nodeOpts{})
	if err := n.Put(context.Background(), "x", strings.NewReader("another node's file x")); err != nil {
		t.Fatal(err)
	}
	n.write(t, "x/sub.data", []byte("under a local directory x"))
	n.write(t, "good.data", []byte("good"))
	n.Enqueue("x/sub.data")
	n.Enqueue("good.data")
	n.waitUploads(t)
	st := n.Stats()
	if st.Uploads != 1 || st.Rejected != 1 || st.UploadFailures != 0 || n.reqs.count("PUT") != 3 {
		t.Fatalf("%+v, %d PUTs: want x/sub.data refused once, good.data uploaded", st, n.reqs.count("PUT"))
	}
	if ents, _ := os.ReadDir(n.journal); len(ents) != 0 {
		t.Fatalf("the journal holds %d entries", len(ents))
	}
}

// TestUploadWithoutTrailer: where the server takes no checksum trailer
// (GCS), an upload checksums first and puts the CRC32C in user metadata:
// two reads, and another node verifies the object by it.
func TestUploadWithoutTrailer(t *testing.T) {
	srv := s3test.New(t)
	a := newNode(t, srv, "p", nodeOpts{})
	a.noTrailer = true // before any upload: the workers read it after the Enqueue
	b := newNode(t, srv, "p", nodeOpts{})
	data := randBytes(t, 512<<10)
	a.write(t, "g.data", data)
	a.Enqueue("g.data")
	a.waitUploads(t)
	if st := a.Stats(); st.Uploads != 1 || st.UploadReads != 2 {
		t.Fatalf("%+v: want one upload of two reads", st)
	}
	_, oi := getRaw(t, srv.Client(), srv.Bucket, "p/g.data")
	_, sum, _ := checksumOf(bytes.NewReader(data))
	if oi.UserMetadata["Kvfs-Crc32c"] != formatCRC(sum) {
		t.Fatalf("user metadata %v, want kvfs-crc32c %08x", oi.UserMetadata, sum)
	}
	if got, _, err := b.fetch(t, "g.data"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("B's fetch: %v", err)
	}
}
