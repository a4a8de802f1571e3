package core

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/kvfs/kvfs/blob"
	"golang.org/x/sys/unix"
)

// TestDirectWritersEndTheirGrace: a process that stores under final
// names (directStreak creates with no link or rename) has its objects'
// grace end at their release, so a full cache of them turns over at
// eviction's pace: here a 1-hour grace and no wait, where each store
// into the full cache failed with ENOSPC before. One link or rename by
// the process gives its next objects their grace again.
func TestDirectWritersEndTheirGrace(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	me := Client(unix.Gettid())
	tc := newTestCore(t, Config{Capacity: 4 * mib, Grace: time.Hour, WaitLimit: 0})
	owner := blob.Owner{UID: -1, GID: -1}
	store := func(name string, size int) error {
		h, err := tc.Create(blob.RootID, name, 0o644, owner, true)
		if err != nil {
			return err
		}
		h.CreatedBy(me)
		if _, err := h.Write(make([]byte, size), 0); err != nil {
			h.Release()
			return err
		}
		err = h.Flush()
		h.Release()
		return err
	}
	// The learning: small objects, all within the capacity.
	for i := range directStreak {
		if err := store(fmt.Sprintf("s%d", i), 4096); err != nil {
			t.Fatal(err)
		}
	}
	// From now on its objects end their grace: 12 stores of 1 MiB
	// through a 4 MiB cache, each evicting the oldest.
	for i := range 12 {
		if err := store(fmt.Sprintf("d%d", i), mib); err != nil {
			t.Fatalf("direct store %d into the full cache: %v", i, err)
		}
	}
	if st := tc.Stats(); st.UsedBytes > st.CapacityBytes || st.Evictions < 8 {
		t.Fatalf("after the direct stores: %+v", st)
	}
	// A publish makes it a publisher: its next objects keep their
	// grace. Three replace the direct ones; a fourth finds nothing out
	// of grace to evict (the learning's small objects are in grace too).
	tc.PublishedBy(me)
	for i := range 3 {
		if err := store(fmt.Sprintf("p%d", i), mib); err != nil {
			t.Fatalf("the publisher's store %d: %v", i, err)
		}
	}
	err := store("p3", mib)
	if !errors.Is(err, ErrNoSpace) || !tc.exists("p0") || !tc.exists("p2") {
		t.Fatalf("a store that needs the publisher's graced objects: %v, p0 present %v, p2 %v; want ENOSPC and both kept", err, tc.exists("p0"), tc.exists("p2"))
	}
	if err := tc.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestClientsLearnByProcess: the streak counts a process's creates, from
// any of its threads, and a publish from any thread resets it; threads
// /proc cannot place (0) learn nothing.
func TestClientsLearnByProcess(t *testing.T) {
	var cl clients
	runtime.LockOSThread()
	me := Client(unix.Gettid())
	runtime.UnlockOSThread()
	other := make(chan Client)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		other <- Client(unix.Gettid())
		<-other
	}()
	them := <-other
	defer close(other)
	for i := range directStreak {
		who := me
		if i%2 == 1 {
			who = them
		}
		if cl.created(who) {
			t.Fatalf("direct after %d creates", i+1)
		}
	}
	if !cl.created(them) {
		t.Fatal("not direct after the streak")
	}
	cl.published(me)
	if cl.created(them) {
		t.Fatal("direct after another thread of the process published")
	}
	for range 2 * directStreak {
		if cl.created(Client(1 << 30)) { // no such thread
			t.Fatal("a thread /proc does not know made a process direct")
		}
	}
}

// TestClientsLearnByParent: processes that each create one object (a
// shell loop's redirects) make a streak of their parent's: once its
// children created directStreak objects with no publish, its next child
// stores under final names. A child that published stays a publisher,
// and a publish by any child (a loop's `mv`) ends the streak.
func TestClientsLearnByParent(t *testing.T) {
	kids := make([]Client, directStreak+3)
	for i := range kids {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		kids[i] = Client(cmd.Process.Pid)
	}
	var cl clients
	publisher := kids[0]
	cl.published(publisher)
	for i, k := range kids[1 : directStreak+1] {
		if cl.created(k) {
			t.Fatalf("direct after %d children's creates", i+1)
		}
	}
	if !cl.created(kids[directStreak+1]) {
		t.Fatal("a child is not direct after its siblings' streak")
	}
	if cl.created(publisher) {
		t.Fatal("a child that published is direct after its siblings' streak")
	}
	cl.published(kids[1])
	if cl.created(kids[directStreak+2]) {
		t.Fatal("direct after a sibling published")
	}
}
