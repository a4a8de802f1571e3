package lockorder

import "testing"

// TestOrder: locks taken in rank order pass; the reverse panics in the
// checking build.
func TestOrder(t *testing.T) {
	var a, b Mutex
	a.SetRank(1)
	b.SetRank(2)
	a.Lock()
	b.Lock()
	b.Unlock()
	a.Unlock()
	var s0, s1 Mutex
	s0.SetStripe(1, 0)
	s1.SetStripe(1, 1)
	s0.Lock()
	s1.Lock()
	s1.Unlock()
	s0.Unlock()
	if !Enabled {
		t.Skip("built without -tags lockcheck: order not checked (make unit runs it)")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("taking rank 1 while holding rank 2 did not panic")
		}
		b.Unlock()
	}()
	b.Lock()
	a.Lock()
}
