package fusefs

import (
	"testing"
	"testing/synctest"

	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/remote"
)

// TestHandleTableNumbers: numbers start at 1 (0 is no handle for the
// kernel), a released number is given out again, and numbers no open
// handle has are found by nothing.
func TestHandleTableNumbers(t *testing.T) {
	var tab handleTable[string]
	a, b := tab.add("a"), tab.add("b")
	if a == 0 || b == 0 || a == b {
		t.Fatalf("numbers %d and %d", a, b)
	}
	if v, put, ok := tab.get(b); !ok || v != "b" {
		t.Fatalf("get(%d) = %q, %v", b, v, ok)
	} else {
		put()
	}
	if v, ok := tab.take(a); !ok || v != "a" {
		t.Fatalf("take(%d) = %q, %v", a, v, ok)
	}
	for _, fh := range []uint64{0, a, b + 1, 1 << 40} {
		if _, _, ok := tab.get(fh); ok {
			t.Errorf("get(%d) found a handle", fh)
		}
		if _, ok := tab.take(fh); ok {
			t.Errorf("take(%d) took a handle", fh)
		}
	}
	if c := tab.add("c"); c != a {
		t.Errorf("a new handle got %d, not the released %d", c, a)
	}
}

// TestHandleTableTakeWaitsForRequests: a RELEASE does not get its
// handle (and close its stored file) while a request still holds it,
// and no request finds it meanwhile.
func TestHandleTableTakeWaitsForRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tab handleTable[int]
		fh := tab.add(7)
		_, put, ok := tab.get(fh)
		if !ok {
			t.Fatal("the handle is not found")
		}
		taken := make(chan int)
		go func() {
			v, _ := tab.take(fh)
			taken <- v
		}()
		synctest.Wait()
		select {
		case <-taken:
			t.Fatal("take returned while a request held the handle")
		default:
		}
		if _, _, ok := tab.get(fh); ok {
			t.Fatal("a handle being released is found by a new request")
		}
		put()
		if v := <-taken; v != 7 {
			t.Fatalf("take got %d", v)
		}
	})
}

// TestPlaceholdersLiveAsLongAsLookups: a remote name's placeholder is
// found again by later lookups of the same object, goes with the
// kernel's last forget of it, and a newer placeholder for the name is not
// dropped by the forget of an older one.
func TestPlaceholdersLiveAsLongAsLookups(t *testing.T) {
	var p placeholders
	p.init()
	next := core.ID(100)
	mk := func(info remote.Info) func() *remoteNode {
		return func() *remoteNode {
			next++
			return &remoteNode{id: next, parent: 1, name: "k", info: info}
		}
	}
	v1 := remote.Info{Size: 10, Checksum: "one"}
	k := nameKey{1, "k"}
	of := func(info remote.Info) func(*remoteNode) bool {
		return func(r *remoteNode) bool { return r.placeholderOf(info) }
	}
	a := p.lookedUp(k, of(v1), mk(v1))
	if b := p.lookedUp(k, of(v1), mk(v1)); b != a {
		t.Fatalf("a second lookup of the same object made a new placeholder %d (first %d)", b.id, a.id)
	}
	p.forget(a.id, 1)
	if p.get(a.id) != a {
		t.Fatal("forgotten after one of two lookups")
	}
	// The bucket's object changed: a new placeholder, by name too.
	v2 := remote.Info{Size: 20, Checksum: "two"}
	c := p.lookedUp(k, of(v2), mk(v2))
	if c == a {
		t.Fatal("a changed object reused the old placeholder")
	}
	p.forget(a.id, 1)
	if p.get(a.id) != nil {
		t.Fatal("kept after the kernel forgot every lookup")
	}
	if d := p.lookedUp(k, of(v2), mk(v2)); d != c {
		t.Fatal("the forget of the old placeholder dropped the new one's name")
	}
	p.forget(c.id, 2)
	if p.get(c.id) != nil || p.n.Load() != 0 || len(p.byName) != 0 {
		t.Fatalf("left %d placeholders, %d names", p.n.Load(), len(p.byName))
	}
}
