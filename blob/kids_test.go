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
