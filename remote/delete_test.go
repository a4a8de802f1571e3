package remote

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/internal/s3test"
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
