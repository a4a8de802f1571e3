package blob

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// listAll pages through a directory, max names a page, checking that
// cookies rise.
func listAll(s *Store, parent ID, max int) ([]DirEntry, error) {
	var all []DirEntry
	after := uint64(0)
	for {
		page, more, err := s.ListPage(parent, after, max)
		if err != nil {
			return nil, err
		}
		for _, e := range page {
			if e.Cookie <= after && after != 0 {
				return nil, fmt.Errorf("cookie %d after %d", e.Cookie, after)
			}
			after = e.Cookie
		}
		all = append(all, page...)
		if !more {
			return all, nil
		}
	}
}

// TestKidsPages checks the paged order under changes: pages of a bounded
// size, every name present for the whole listing listed exactly once,
// while names come and go between pages and buckets split.
func TestKidsPages(t *testing.T) {
	k := newKids(0)
	rng := rand.New(rand.NewPCG(1, 2))
	const stable = 5000
	for i := range stable {
		k.set(fmt.Sprintf("stable-%d", i), ID(i+1))
	}
	seen := map[string]int{}
	var after uint64
	for pages := 0; ; pages++ {
		page, more := k.page(nil, after, 100)
		if len(page) > 100+bucketMax {
			t.Fatalf("page of %d names", len(page))
		}
		for _, e := range page {
			if e.cookie <= after || e.cookie != hashName(e.name)+1 {
				t.Fatalf("cookie %d of %q after %d", e.cookie, e.name, after)
			}
			after = e.cookie
			seen[e.name]++
		}
		for range 50 {
			name := fmt.Sprintf("churn-%d", rng.IntN(20000))
			if rng.IntN(2) == 0 {
				k.set(name, 1)
			} else {
				k.del(name)
			}
		}
		if !more {
			break
		}
	}
	for i := range stable {
		if n := seen[fmt.Sprintf("stable-%d", i)]; n != 1 {
			t.Fatalf("stable-%d listed %d times", i, n)
		}
	}
	for name, n := range seen {
		if n != 1 {
			t.Fatalf("%s listed %d times", name, n)
		}
	}
	checkKids(t, k)
}

// TestKidsResumeAnywhere: a listing resumed after any name's cookie
// (a reader's buffer that ended there, a seekdir to it) goes on at the
// next name, in a table whose buckets have different depths (a bucket
// then spans slots, and the cookie can fall in any of them). A resume
// in a bucket's second slot or later skipped the whole bucket: 1,790
// names of 70,000 were missing from listings with 64-byte getdents
// buffers (an outside tester's finding).
func TestKidsResumeAnywhere(t *testing.T) {
	k := newKids(0)
	const n = 30000 // buckets of two depths (20,000 and 40,000 give one)
	for i := range n {
		k.set(fmt.Sprintf("f%06d", i), ID(i+1))
	}
	depths := map[uint8]bool{}
	for _, b := range k.slots {
		depths[b.depth] = true
	}
	if len(depths) < 2 {
		t.Fatalf("every bucket has the same depth (%v): nothing spans slots", depths)
	}
	full, more := k.page(nil, 0, n+1)
	if more || len(full) != n {
		t.Fatalf("a whole listing: %d names (more %v), want %d", len(full), more, n)
	}
	for i, e := range full[:n-1] {
		page, _ := k.page(nil, e.cookie, 1)
		if len(page) == 0 || page[0].name != full[i+1].name {
			got := "nothing"
			if len(page) > 0 {
				got = page[0].name
			}
			t.Fatalf("resumed after %s (cookie %d): %s next, want %s", e.name, e.cookie, got, full[i+1].name)
		}
	}
}

// checkKids recomputes the count and each name's bucket.
func checkKids(t *testing.T, k *kids) {
	t.Helper()
	n := 0
	for name, id := range k.all() {
		n++
		if got, ok := k.lookup(name); !ok || got != id {
			t.Fatalf("%q not found in its bucket", name)
		}
	}
	if n != k.len() {
		t.Fatalf("len %d, counted %d", k.len(), n)
	}
	for i, b := range k.slots {
		if span := 1 << (k.depth - b.depth); (i/span)*span != i && k.slots[i-1] != b {
			t.Fatalf("slot %d: bucket not aligned", i)
		}
	}
}

func TestKidsSized(t *testing.T) {
	k := newKids(10 * bucketMax)
	for i := range 20 * bucketMax {
		k.set(fmt.Sprint(i), ID(i))
	}
	for i := 0; i < 20*bucketMax; i += 2 {
		k.del(fmt.Sprint(i))
	}
	checkKids(t, k)
	if k.len() != 10*bucketMax {
		t.Fatalf("len %d", k.len())
	}
}
