package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/kvfs/kvfs/internal/s3test"
)

// TestUploadRace: two nodes store the same names with different bytes
// and upload them at once. No error; every stored object passes its
// checksum on a third node and equals one of the two; each name was
// stored once, and the other upload counted as already present.
func TestUploadRace(t *testing.T) {
	srv := s3test.New(t)
	a := newNode(t, srv, "race", nodeOpts{})
	b := newNode(t, srv, "race", nodeOpts{})
	c := newNode(t, srv, "race", nodeOpts{})
	const names = 24
	versions := map[string][2][]byte{}
	for i := range names {
		name := fmt.Sprintf("m@0x0@%02x.data", i)
		va, vb := randBytes(t, 64<<10+i), randBytes(t, 64<<10+i)
		a.write(t, name, va)
		b.write(t, name, vb)
		versions[name] = [2][]byte{va, vb}
	}
	var wg sync.WaitGroup
	for _, n := range []*node{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range versions {
				n.Enqueue(name)
			}
			n.waitUploads(t)
		}()
	}
	wg.Wait()
	sa, sb := a.Stats(), b.Stats()
	if sa.UploadFailures+sb.UploadFailures != 0 || sa.UploadDropped+sb.UploadDropped != 0 {
		t.Fatalf("failures in a race: A %+v, B %+v", sa, sb)
	}
	if sa.Uploads+sb.Uploads != names || sa.AlreadyPresent+sb.AlreadyPresent != names {
		t.Fatalf("uploads %d+%d, already present %d+%d; want %d and %d",
			sa.Uploads, sb.Uploads, sa.AlreadyPresent, sb.AlreadyPresent, names, names)
	}
	for name, v := range versions {
		got, _, err := c.fetch(t, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, v[0]) && !bytes.Equal(got, v[1]) {
			t.Fatalf("%s holds neither writer's bytes", name)
		}
	}
	puts := a.reqs.count("PUT") + b.reqs.count("PUT")
	t.Logf("A stored %d, B stored %d of %d; %d PUTs refused with 412, %d uploads stopped by the HEAD",
		sa.Uploads, sb.Uploads, names, puts-names, 2*names-puts)
}

// TestUploadLosesAtPut: the key appears between the check and the PUT
// (another node won the race there): the conditional PUT is refused with
// 412, which counts as already present, and the first object stays.
func TestUploadLosesAtPut(t *testing.T) {
	srv := s3test.New(t)
	a := newNode(t, srv, "p", nodeOpts{})
	winner := []byte("the first writer's bytes")
	var once sync.Once
	b := newNode(t, srv, "p", nodeOpts{before: func(r *http.Request) {
		if r.Method == http.MethodPut {
			once.Do(func() {
				if err := a.Put(context.Background(), "k.data", bytes.NewReader(winner)); err != nil {
					t.Errorf("A's put: %v", err)
				}
			})
		}
	}})
	b.write(t, "k.data", []byte("the loser's bytes, longer than the winner's"))
	b.Enqueue("k.data")
	b.waitUploads(t)
	if st := b.Stats(); st.AlreadyPresent != 1 || st.Uploads != 0 || st.UploadFailures != 0 || b.reqs.count("PUT") != 1 {
		t.Fatalf("B's stats %+v, PUTs %d: want one refused PUT counted as already present", st, b.reqs.count("PUT"))
	}
	got, _ := getRaw(t, srv.Client(), srv.Bucket, "p/k.data")
	if !bytes.Equal(got, winner) {
		t.Fatalf("stored %q, want the first writer's %q", got, winner)
	}
	if err := b.Put(context.Background(), "k.data", bytes.NewReader([]byte("again"))); !errors.Is(err, ErrExists) {
		t.Fatalf("Put over an existing key = %v, want ErrExists", err)
	}
}

// TestUploadSkips: temp names are never queued nor sent; a name whose
// local object is gone when its turn comes is dropped without a PUT.
func TestUploadSkips(t *testing.T) {
	srv := s3test.New(t)
	n := newNode(t, srv, "p", nodeOpts{cfg: func(c *Config) {
		c.Exclude = append(DefaultExclude, "tmpdir/")
	}})
	temps := []string{".lmcache-write.tmp.77.1", "sub/.lmcache-write.tmp.1.2", "k.tmp", "tmpdir/k.data", "a/tmpdir/b/k.data"}
	for _, name := range temps {
		n.write(t, name, []byte("temp"))
		if n.Enqueue(name) {
			t.Fatalf("Enqueue(%q) queued a temp name", name)
		}
	}
	if !n.Enqueue("vanished.data") { // never written locally
		t.Fatal("Enqueue refused a final name")
	}
	n.waitUploads(t)
	st := n.Stats()
	if st.UploadSkipped != int64(len(temps))+1 || st.Uploads != 0 || n.reqs.count("PUT") != 0 {
		t.Fatalf("stats %+v, PUTs %d: want every name skipped, nothing sent", st, n.reqs.count("PUT"))
	}
	if ents, _ := os.ReadDir(n.journal); len(ents) != 0 {
		t.Fatalf("journal holds %d entries after the skips", len(ents))
	}
}
