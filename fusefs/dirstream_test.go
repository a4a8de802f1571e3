package fusefs_test

import (
	"fmt"
	"io"
	"os"
	"testing"
)

// TestReaddirPaged lists a directory of several pages in small getdents
// batches while names are made and removed, and after a rewind: every
// name present throughout is listed exactly once each time.
func TestReaddirPaged(t *testing.T) {
	k := mountKVFS(t)
	const n = 2*1024 + 100 // three pages of the stream (fusefs.dirPage)
	for i := range n {
		mustWrite(t, k.path(fmt.Sprintf("f%05d", i)), nil)
	}
	d, err := os.Open(k.Mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for round := range 2 {
		seen := map[string]int{}
		for i := 0; ; i++ {
			ents, err := d.ReadDir(7)
			for _, e := range ents {
				seen[e.Name()]++
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if i%50 == 0 {
				churn := k.path(fmt.Sprintf("churn%d-%d", round, i))
				mustWrite(t, churn, nil)
				os.Remove(churn)
			}
		}
		for i := range n {
			if c := seen[fmt.Sprintf("f%05d", i)]; c != 1 {
				t.Fatalf("round %d: f%05d listed %d times", round, i, c)
			}
		}
		if _, err := d.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
	}
}

// TestListingIsNoLookup: the entries a READDIRPLUS gives are not
// lookups a connector made, so listing a directory leaves the lookup
// hits and misses as they were (each `ls` of a directory of a million
// objects counted a million hits before: an outside tester's finding).
func TestListingIsNoLookup(t *testing.T) {
	k := mountKVFS(t)
	for i := range 50 {
		mustWrite(t, k.path(fmt.Sprintf("f%02d", i)), []byte("x"))
	}
	before := k.M.Stats()
	for range 3 {
		ents, err := os.ReadDir(k.Mnt)
		if err != nil || len(ents) != 50 {
			t.Fatalf("listing: %d names, %v", len(ents), err)
		}
	}
	after := k.M.Stats()
	if after.FuseRequests["READDIRPLUS"] == before.FuseRequests["READDIRPLUS"] {
		t.Fatal("no READDIRPLUS reached the daemon: the listing gave no entries")
	}
	if after.LookupHits != before.LookupHits || after.LookupMisses != before.LookupMisses {
		t.Fatalf("listings counted as lookups: hits %d -> %d, misses %d -> %d",
			before.LookupHits, after.LookupHits, before.LookupMisses, after.LookupMisses)
	}
}
