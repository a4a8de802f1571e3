package remote

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvfs/kvfs/internal/s3test"
	"github.com/minio/minio-go/v7"
)

// TestDeleteTombstone: a Delete makes the name absent on this node at
// once, with the server down and across a restart (the journal keeps
// the tombstone), without a request; once the server is back the key
// leaves the bucket, so a node that never knew the name finds nothing.
func TestDeleteTombstone(t *testing.T) {
	srv := s3test.New(t)
	a := newNode(t, srv, "p", nodeOpts{})
	ctx := context.Background()
	if err := a.Put(ctx, "gone.data", strings.NewReader("a shared chunk gone bad")); err != nil {
		t.Fatal(err)
	}
	journal := t.TempDir()
	b := newNode(t, srv, "p", nodeOpts{journal: journal})
	if _, found, err := b.Lookup(ctx, "gone.data"); !found || err != nil {
		t.Fatalf("B's lookup before the rm: %v, %v", found, err)
	}
	srv.Stop()
	if !b.Delete("gone.data") {
		t.Fatal("Delete refused")
	}
	sent := b.reqs.total()
	if _, found, err := b.Lookup(ctx, "gone.data"); found || err != nil {
		t.Fatalf("B's lookup after the rm: %v, %v; want absent", found, err)
	}
	if _, err := b.Fetch(ctx, "gone.data", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("B's fetch after the rm: %v", err)
	}
	b.Close()
	b2 := newNode(t, srv, "p", nodeOpts{journal: journal})
	if _, found, err := b2.Lookup(ctx, "gone.data"); found || err != nil || b2.reqs.count("HEAD") != 0 {
		t.Fatalf("after a restart with the delete pending: %v, %v, %d HEADs; want absent, no HEAD", found, err, b2.reqs.count("HEAD"))
	}
	if b.reqs.total() > sent+1 {
		t.Fatalf("B sent %d requests answering the tombstone", b.reqs.total()-sent)
	}
	srv.Start()
	b2.drain(t)
	if st := b2.Stats(); st.Deletes != 1 || st.QueueDepth != 0 {
		t.Fatalf("B after the server came back: %+v", st)
	}
	if ents, _ := os.ReadDir(journal); len(ents) != 0 {
		t.Fatalf("the journal holds %d entries", len(ents))
	}
	c := newNode(t, srv, "p", nodeOpts{})
	if _, found, err := c.Lookup(ctx, "gone.data"); found || err != nil {
		t.Fatalf("a third node finds the deleted key: %v, %v", found, err)
	}
}

// TestDeleteThenStore: a store after an rm supersedes it: the key is
// deleted first, then the new bytes uploaded (journaled as one entry
// meanwhile), and the name is present again.
func TestDeleteThenStore(t *testing.T) {
	srv := s3test.New(t)
	n := newNode(t, srv, "p", nodeOpts{})
	ctx := context.Background()
	if err := n.Put(ctx, "k.data", strings.NewReader("old bytes")); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	n.Delete("k.data")
	fresh := randBytes(t, 100<<10)
	n.write(t, "k.data", fresh)
	if !n.Enqueue("k.data") {
		t.Fatal("Enqueue after Delete refused")
	}
	ents, _ := os.ReadDir(n.journal)
	if len(ents) != 1 {
		t.Fatalf("journal: %d entries, want 1", len(ents))
	}
	if b, _ := os.ReadFile(filepath.Join(n.journal, ents[0].Name())); !bytes.Equal(b, []byte("delete+upload\x00k.data")) {
		t.Fatalf("journal entry %q", b)
	}
	srv.Start()
	n.drain(t)
	if got, _ := getRaw(t, srv.Client(), srv.Bucket, "p/k.data"); !bytes.Equal(got, fresh) {
		t.Fatalf("the bucket holds %q, want the new store", got[:min(len(got), 16)])
	}
	if st := n.Stats(); st.Deletes != 1 || st.Uploads != 1 {
		t.Fatalf("%+v: want one delete, then one upload", st)
	}
	if _, found, err := n.Lookup(ctx, "k.data"); !found || err != nil {
		t.Fatalf("lookup after the new store: %v, %v", found, err)
	}
}

// TestReplaceSupersedes: a name this node uploaded and then rewrote is
// published again: Enqueue alone finds it known remote and skips it
// (the fleet's first upload wins), Replace deletes the old key and
// uploads the new bytes, once, so the bucket and a node that never had
// the name get them.
func TestReplaceSupersedes(t *testing.T) {
	srv := s3test.New(t)
	n := newNode(t, srv, "p", nodeOpts{})
	old := randBytes(t, 64<<10)
	n.write(t, "k.data", old)
	n.Enqueue("k.data")
	n.drain(t)
	fresh := randBytes(t, 100<<10)
	n.write(t, "k.data", fresh)
	if n.Enqueue("k.data") {
		t.Fatal("a publish of a name known remote was queued: the first upload no longer wins")
	}
	if !n.Replace("k.data") {
		t.Fatal("Replace refused")
	}
	n.drain(t)
	if got, _ := getRaw(t, srv.Client(), srv.Bucket, "p/k.data"); !bytes.Equal(got, fresh) {
		t.Fatalf("the bucket holds %d bytes, want the %d rewritten", len(got), len(fresh))
	}
	// Settled by the upload that followed its delete, not run again to
	// find its own PUT "already present" (an outside tester: 730 of 751
	// rewrites counted so).
	if st := n.Stats(); st.Deletes != 1 || st.Uploads != 2 || st.AlreadyPresent != 0 {
		t.Fatalf("%+v: want the first upload, one delete, then the second upload, none already present", st)
	}
	c := newNode(t, srv, "p", nodeOpts{})
	if got, _, err := c.fetch(t, "k.data"); err != nil || !bytes.Equal(got, fresh) {
		t.Fatalf("another node fetches %d bytes (%v), want the %d rewritten", len(got), err, len(fresh))
	}
	// An upload still pending when the name is replaced does not
	// settle it: the journal says delete, then upload.
	srv.Stop()
	n.write(t, "p.data", old)
	n.Enqueue("p.data")
	n.Replace("p.data")
	if b, _ := os.ReadFile(filepath.Join(n.journal, journalName("p.data"))); !bytes.Equal(b, []byte("delete+upload\x00p.data")) {
		t.Fatalf("journal entry %q after a replace of a pending upload", b)
	}
}

// TestReplaceWithTheBytesTheBucketHolds: a replacement whose local
// object has the bytes the key holds already (a temp name renamed over
// a name the fleet stored, with the same content) leaves the key alone:
// no DELETE, no PUT, so no other node ever misses it. It waits for the
// local object's writer first. Bytes that differ, even at the same
// size, still replace the key's.
func TestReplaceWithTheBytesTheBucketHolds(t *testing.T) {
	srv := s3test.New(t)
	a := newNode(t, srv, "p", nodeOpts{})
	same := randBytes(t, 256<<10)
	a.write(t, "k.data", same)
	a.Enqueue("k.data")
	a.drain(t)
	var writing atomic.Bool
	writing.Store(true)
	b := newNode(t, srv, "p", nodeOpts{})
	b.busy = func(string) bool { return writing.Load() }
	b.write(t, "k.data", same)
	if !b.Replace("k.data") {
		t.Fatal("Replace refused")
	}
	b.advanceUntil(t, "the look at the key", func() bool { return b.reqs.count("HEAD") >= 1 })
	for range 3 {
		b.clock.Advance(maxBackoff)
	}
	if n := b.reqs.count("DELETE") + b.reqs.count("PUT"); n != 0 || b.Stats().QueueDepth != 1 {
		t.Fatalf("with the writer open: %d DELETE or PUT sent, %+v; want none, the replacement pending", n, b.Stats())
	}
	writing.Store(false)
	b.drain(t)
	if st := b.Stats(); b.reqs.count("DELETE") != 0 || b.reqs.count("PUT") != 0 || st.Deletes != 0 || st.Uploads != 0 || st.AlreadyPresent != 1 {
		t.Fatalf("%d DELETE, %d PUT, %+v: want the key left alone, counted already present", b.reqs.count("DELETE"), b.reqs.count("PUT"), st)
	}
	if info, found, err := b.Lookup(context.Background(), "k.data"); !found || err != nil || info.Size != int64(len(same)) {
		t.Fatalf("B's lookup after the replacement: %+v, %v, %v", info, found, err)
	}
	other := bytes.Clone(same)
	other[len(other)/2] ^= 1
	b.write(t, "k.data", other)
	b.Replace("k.data")
	b.drain(t)
	if got, _ := getRaw(t, srv.Client(), srv.Bucket, "p/k.data"); !bytes.Equal(got, other) {
		t.Fatalf("after a replacement with other bytes of the same size the bucket holds %d bytes, not them", len(got))
	}
	if st := b.Stats(); st.Deletes != 1 || st.Uploads != 1 {
		t.Fatalf("%+v: want one delete and one upload for the bytes that differ", st)
	}
}

// TestDeletesPastAFullQueue: with the queue full of uploads (the server
// down), an rm and a rewrite of names already in the bucket are still
// journaled, answered absent meanwhile, and done once the server is
// back: the keys go, and the rewrite's new bytes replace the old (an
// outside tester: both were dropped with the uploads, the rm's key was
// found again by every node, and the rewrite's old bytes were served for
// good). New uploads past the bound are still dropped.
func TestDeletesPastAFullQueue(t *testing.T) {
	srv := s3test.New(t)
	n := newNode(t, srv, "p", nodeOpts{cfg: func(c *Config) { c.QueueMax = 2; c.Uploaders = 1 }})
	ctx := context.Background()
	for _, name := range []string{"gone.data", "rewritten.data"} {
		if err := n.Put(ctx, name, strings.NewReader("old bytes of "+name)); err != nil {
			t.Fatal(err)
		}
	}
	srv.Stop()
	for _, name := range []string{"u1.data", "u2.data", "u3.data"} {
		n.write(t, name, randBytes(t, 4<<10))
	}
	if !n.Enqueue("u1.data") || !n.Enqueue("u2.data") {
		t.Fatal("uploads within the bound refused")
	}
	if n.Enqueue("u3.data") {
		t.Fatal("an upload past the bound was queued")
	}
	if !n.Delete("gone.data") {
		t.Fatal("an rm past the bound was dropped")
	}
	fresh := randBytes(t, 64<<10)
	n.write(t, "rewritten.data", fresh)
	if !n.Replace("rewritten.data") {
		t.Fatal("a rewrite past the bound was dropped")
	}
	for _, name := range []string{"gone.data", "rewritten.data"} {
		if _, found, err := n.Lookup(ctx, name); found || err != nil {
			t.Fatalf("%s looked up with its change pending: %v, %v; want absent", name, found, err)
		}
	}
	if st := n.Stats(); st.UploadDropped != 1 || st.QueueDepth != 4 {
		t.Fatalf("%+v: want one upload dropped, four pending", st)
	}
	srv.Start()
	n.drain(t)
	if _, err := srv.Client().StatObject(ctx, srv.Bucket, "p/gone.data", minio.StatObjectOptions{}); minio.ToErrorResponse(err).StatusCode != http.StatusNotFound {
		t.Errorf("the rm's key after the server came back: %v; want it gone", err)
	}
	if got, _ := getRaw(t, srv.Client(), srv.Bucket, "p/rewritten.data"); !bytes.Equal(got, fresh) {
		t.Errorf("the bucket holds %d bytes for the rewrite, want its %d new ones", len(got), len(fresh))
	}
	c := newNode(t, srv, "p", nodeOpts{})
	if _, found, err := c.Lookup(ctx, "gone.data"); found || err != nil {
		t.Errorf("another node finds the deleted key: %v, %v", found, err)
	}
}

// TestReplaceComparesTheETagToo: where the server's ETag is the
// object's MD5, a replacement whose local object has the key's size and
// CRC32C but other bytes (a CRC can be made to collide: an outside
// tester changed 6 bytes of 8 KiB and kept it) still replaces the key.
// Here the key's recorded CRC32C is the local object's, its bytes not.
func TestReplaceComparesTheETagToo(t *testing.T) {
	srv := s3test.New(t)
	b := newNode(t, srv, "p", nodeOpts{})
	local := randBytes(t, 8<<10)
	other := bytes.Clone(local)
	other[100] ^= 1
	_, sum, err := checksumOf(bytes.NewReader(local))
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, srv.Client(), srv.Bucket, "p/k.data", other, userMeta(int64(len(local)), sum))
	if oi, err := srv.Client().StatObject(context.Background(), srv.Bucket, "p/k.data", minio.StatObjectOptions{}); err != nil {
		t.Fatal(err)
	} else if _, ok := plainMD5(oi.ETag); !ok {
		t.Fatalf("the test server's ETag %q is no MD5: the test needs one", oi.ETag)
	}
	b.write(t, "k.data", local)
	b.Replace("k.data")
	b.drain(t)
	if got, _ := getRaw(t, srv.Client(), srv.Bucket, "p/k.data"); !bytes.Equal(got, local) {
		t.Fatal("the key kept other bytes with the same size and CRC32C")
	}
	if st := b.Stats(); st.Deletes != 1 || st.Uploads != 1 || st.AlreadyPresent != 0 {
		t.Fatalf("%+v: want the key replaced", st)
	}
}
