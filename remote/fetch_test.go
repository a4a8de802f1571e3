package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kvfs/kvfs/internal/s3test"
)

// TestFetchByteIdentical: node A uploads an object, node B looks it up,
// fetches it byte for byte, and its metadata carries the checksum.
func TestFetchByteIdentical(t *testing.T) {
	srv := s3test.New(t)
	a := newNode(t, srv, "fleet", nodeOpts{})
	b := newNode(t, srv, "fleet", nodeOpts{})
	data := randBytes(t, 3<<20+17)
	a.write(t, "m@0x1@ab.data", data)
	if !a.Enqueue("m@0x1@ab.data") {
		t.Fatal("Enqueue refused a final name")
	}
	a.waitUploads(t)
	if st := a.Stats(); st.Uploads != 1 || st.UploadedBytes != int64(len(data)) {
		t.Fatalf("A's stats after one upload: %+v", st)
	}
	info, found, err := b.Lookup(context.Background(), "m@0x1@ab.data")
	if err != nil || !found || info.Size != int64(len(data)) {
		t.Fatalf("B's Lookup = %+v, %v, %v; want found, size %d", info, found, err, len(data))
	}
	got, f, err := b.fetch(t, "m@0x1@ab.data")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) || !f.Leader || f.Info != info {
		t.Fatalf("fetched %d bytes (equal: %v), leader %v, info %+v vs lookup's %+v",
			len(got), bytes.Equal(got, data), f.Leader, f.Info, info)
	}
	raw, oi := getRaw(t, srv.Client(), srv.Bucket, "fleet/m@0x1@ab.data")
	stored := storedCRC(t, srv.Client(), srv.Bucket, "fleet/m@0x1@ab.data")
	_, want, _ := checksumOf(bytes.NewReader(data))
	if !bytes.Equal(raw, data) || stored != info.Checksum || info.Checksum != checksumPrefix+formatCRC(want) ||
		oi.UserMetadata["Kvfs-Size"] != fmt.Sprint(len(data)) {
		t.Fatalf("stored object: equal %v, metadata %v, server's checksum %s, tier's %s, the data's %08x",
			bytes.Equal(raw, data), oi.UserMetadata, stored, info.Checksum, want)
	}
	if st := b.Stats(); st.Fetches != 1 || st.FetchedBytes != int64(len(data)) || st.Hits != 1 || st.Heads != 1 {
		t.Fatalf("B's stats: %+v", st)
	}
	if b.Enqueue("m@0x1@ab.data") {
		t.Fatal("B queued an upload of an object it fetched from the remote")
	}
}

// TestFetchOneDownload: callers that fetch one name at once share one
// GET, and each gets its own verified copy.
func TestFetchOneDownload(t *testing.T) {
	srv := s3test.New(t)
	n := newNode(t, srv, "p", nodeOpts{})
	data := randBytes(t, 1<<20)
	if err := n.Put(context.Background(), "k.data", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	const callers = 8
	dir := t.TempDir()
	inCreate, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	create := func(Info) (*os.File, error) {
		f, err := os.CreateTemp(dir, "f")
		once.Do(func() { close(inCreate); <-release }) // the leader waits for all
		return f, err
	}
	results := make([]Fetched, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	start := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = n.Fetch(context.Background(), "k.data", create)
		}()
	}
	start(0)
	<-inCreate
	for i := 1; i < callers; i++ {
		start(i)
	}
	waitCall(t, &n.fetches, "k.data", callers-1)
	close(release)
	wg.Wait()
	leaders := 0
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		got, err := os.ReadFile(r.File.Name())
		r.File.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("caller %d: %d bytes, equal %v, %v", i, len(got), bytes.Equal(got, data), err)
		}
		if r.Leader {
			leaders++
		}
	}
	if gets := n.reqs.count("GET"); gets != 1 || leaders != 1 {
		t.Fatalf("%d callers sent %d GETs with %d leaders; want 1 and 1", callers, gets, leaders)
	}
}

// waitCall waits until name's call in g has n followers.
func waitCall[T any](t *testing.T, g *flight[T], name string, n int) {
	t.Helper()
	followers := func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		c := g.calls[name]
		return c != nil && c.followers == n
	}
	if !poll(followers) {
		t.Fatalf("the call for %s never had %d followers", name, n)
	}
}

// TestFetchCorrupt: a damaged, a truncated and a foreign object (put
// with a plain client) fail with ErrCorrupt, counted, and are then
// remembered as absent.
func TestFetchCorrupt(t *testing.T) {
	srv := s3test.New(t)
	n := newNode(t, srv, "p", nodeOpts{})
	c := srv.Client()
	data := randBytes(t, 256<<10)
	if err := n.Put(context.Background(), "good.data", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	_, sum, _ := checksumOf(bytes.NewReader(data))
	meta := userMeta(int64(len(data)), sum) // kvfs's metadata, as older versions wrote it
	flipped := bytes.Clone(data)
	flipped[len(flipped)/2] ^= 0x40
	putRaw(t, c, srv.Bucket, "p/flipped.data", flipped, meta)
	putRaw(t, c, srv.Bucket, "p/short.data", data[:len(data)-4096], meta)
	putRaw(t, c, srv.Bucket, "p/foreign.data", data, nil)
	for i, name := range []string{"flipped.data", "short.data", "foreign.data"} {
		_, _, err := n.fetch(t, name)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("fetch of %s = %v, want ErrCorrupt", name, err)
		}
		if got := n.Stats().Corrupt; got != int64(i+1) {
			t.Fatalf("after %s remote_corrupt = %d, want %d", name, got, i+1)
		}
		heads := n.reqs.count("HEAD")
		if _, found, err := n.Lookup(context.Background(), name); found || err != nil || n.reqs.count("HEAD") != heads {
			t.Fatalf("Lookup of corrupt %s = found %v, %v, %d HEADs; want a remembered miss", name, found, err, n.reqs.count("HEAD")-heads)
		}
	}
	if got, _, err := n.fetch(t, "good.data"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the intact object: %v", err)
	}
}

// TestFetchDamagedOnServer: an object kvfs uploaded (its CRC32C kept by
// the server) whose stored bytes are then damaged, size unchanged, fails
// with ErrCorrupt: counted as corrupt, not as the server failing (with a
// breaker that opens at the first failure, it stays closed), and
// remembered as absent.
func TestFetchDamagedOnServer(t *testing.T) {
	srv := s3test.New(t)
	n := newNode(t, srv, "p", nodeOpts{cfg: func(c *Config) { c.BreakerFailures = 1 }})
	data := randBytes(t, 256<<10)
	if err := n.Put(context.Background(), "damaged.data", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	stored, err := os.OpenFile(filepath.Join(srv.Dir, srv.Bucket, "p", "damaged.data"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stored.WriteAt([]byte{data[1000] ^ 0x40}, 1000); err != nil {
		t.Fatal(err)
	}
	stored.Close()
	if _, _, err := n.fetch(t, "damaged.data"); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "crc32c") {
		t.Fatalf("fetch of a damaged object = %v, want ErrCorrupt for its CRC32C", err)
	}
	if st := n.Stats(); st.Corrupt != 1 || st.BreakerState != BreakerClosed {
		t.Fatalf("after the fetch: remote_corrupt %d, breaker %s; want 1, closed", st.Corrupt, st.BreakerState)
	}
	heads := n.reqs.count("HEAD")
	if _, found, err := n.Lookup(context.Background(), "damaged.data"); found || err != nil || n.reqs.count("HEAD") != heads {
		t.Fatalf("Lookup after the fetch = found %v, %v, %d HEADs; want a remembered miss", found, err, n.reqs.count("HEAD")-heads)
	}
}

// TestFetchDeletedAfterLookup: an object deleted remotely after a
// positive lookup gives ErrNotFound on fetch, and the entry is dropped.
func TestFetchDeletedAfterLookup(t *testing.T) {
	srv := s3test.New(t)
	n := newNode(t, srv, "p", nodeOpts{})
	ctx := context.Background()
	if err := n.Put(ctx, "gone.data", bytes.NewReader([]byte("kv"))); err != nil {
		t.Fatal(err)
	}
	n.Forget("gone.data") // as a fresh node would: nothing remembered
	if _, found, err := n.Lookup(ctx, "gone.data"); !found || err != nil {
		t.Fatalf("Lookup before delete = %v, %v", found, err)
	}
	if err := srv.Client().RemoveObject(ctx, srv.Bucket, "p/gone.data", minioRemove()); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := n.Lookup(ctx, "gone.data"); !found {
		t.Fatal("the positive entry was not remembered (the test needs it to be stale)")
	}
	created := false
	_, err := n.Fetch(ctx, "gone.data", func(Info) (*os.File, error) {
		created = true
		return os.CreateTemp(t.TempDir(), "x")
	})
	if !errors.Is(err, ErrNotFound) || created {
		t.Fatalf("Fetch of a deleted object = %v (file created: %v), want ErrNotFound and no file", err, created)
	}
	heads := n.reqs.count("HEAD")
	if _, found, err := n.Lookup(ctx, "gone.data"); found || err != nil || n.reqs.count("HEAD") != heads {
		t.Fatalf("Lookup after the 404 = found %v, %v; the positive entry must be gone", found, err)
	}
}

// TestFetchIntoFailingFile: the caller's file errors come back as they
// are, not as a remote failure.
func TestFetchIntoFailingFile(t *testing.T) {
	srv := s3test.New(t)
	n := newNode(t, srv, "p", nodeOpts{})
	if err := n.Put(context.Background(), "k.data", bytes.NewReader(randBytes(t, 4096))); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "ro")
	os.WriteFile(p, nil, 0o644)
	_, err := n.Fetch(context.Background(), "k.data", func(Info) (*os.File, error) { return os.Open(p) })
	if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Fetch into a read-only file = %v, want the file's own error", err)
	}
	if st := n.Stats(); st.BreakerState != BreakerClosed || st.Corrupt != 0 {
		t.Fatalf("a local error counted against the remote: %+v", st)
	}
}
