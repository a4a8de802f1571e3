package core

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/internal/procstat"
	"golang.org/x/sys/unix"
)

// TestDirectWritersEndTheirGrace: a process that stores under final
// names (directStreak creates with no link or rename) has its objects'
// grace end at their release, so a full cache of them turns over at
// eviction's pace: here a 1-hour grace and no wait, where each store
// into the full cache failed with ENOSPC before. One link or rename by
// the process gives its next object its grace again, until its thread
// creates another without publishing it.
func TestDirectWritersEndTheirGrace(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	me := Client(unix.Gettid())
	tc := newTestCore(t, Config{Capacity: 4 * mib, Grace: time.Hour, WaitLimit: 0})
	store := func(by Client, name string, size int) error {
		h, err := tc.createBy(by, name)
		if err != nil {
			return err
		}
		if _, err := h.Write(Interrupt{}, make([]byte, size), 0); err != nil {
			h.Release()
			return err
		}
		err = h.Flush()
		h.Release()
		return err
	}
	// The learning: small objects, all within the capacity.
	for i := range directStreak {
		if err := store(me, fmt.Sprintf("s%d", i), 4096); err != nil {
			t.Fatal(err)
		}
	}
	// From now on its objects end their grace: 12 stores of 1 MiB
	// through a 4 MiB cache, each evicting the oldest.
	for i := range 12 {
		if err := store(me, fmt.Sprintf("d%d", i), mib); err != nil {
			t.Fatalf("direct store %d into the full cache: %v", i, err)
		}
	}
	if st := tc.Stats(); st.UsedBytes > st.CapacityBytes || st.Evictions < 8 {
		t.Fatalf("after the direct stores: %+v", st)
	}
	// A publish makes it a publisher: its next object keeps its grace
	// until its thread creates another without publishing it, which
	// shows it will not (clients.created). Another thread's stores
	// then evict all but the publisher's last object.
	tc.PublishedBy(me)
	for _, name := range []string{"p0", "p1"} {
		if err := store(me, name, mib); err != nil {
			t.Fatalf("the publisher's store %s: %v", name, err)
		}
	}
	them := otherThread(t)
	for i := range 6 {
		if err := store(them, fmt.Sprintf("q%d", i), mib); err != nil {
			t.Fatalf("another thread's store %d: %v", i, err)
		}
	}
	if tc.exists("p0") || !tc.exists("p1") {
		t.Fatalf("after another thread's stores: p0 present %v, p1 %v; want p0 evicted (left by its thread), p1 kept (its grace)", tc.exists("p0"), tc.exists("p1"))
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
	them := otherThread(t)
	for i := range directStreak {
		who := me
		if i%2 == 1 {
			who = them
		}
		if cl.createdDirect(who, 0, neverLeft) {
			t.Fatalf("direct after %d creates", i+1)
		}
	}
	if !cl.createdDirect(them, 0, neverLeft) {
		t.Fatal("not direct after the streak")
	}
	cl.published(me)
	if cl.createdDirect(them, 0, neverLeft) {
		t.Fatal("direct after another thread of the process published")
	}
	for range 2 * directStreak {
		if cl.createdDirect(Client(1<<30), 0, neverLeft) { // no such thread
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
	kids := children(t, directStreak+3)
	var cl clients
	publisher := kids[0]
	cl.published(publisher)
	for i, k := range kids[1 : directStreak+1] {
		if cl.createdDirect(k, 0, neverLeft) {
			t.Fatalf("direct after %d children's creates", i+1)
		}
	}
	if !cl.createdDirect(kids[directStreak+1], 0, neverLeft) {
		t.Fatal("a child is not direct after its siblings' streak")
	}
	if cl.createdDirect(publisher, 0, neverLeft) {
		t.Fatal("a child that published is direct after its siblings' streak")
	}
	cl.published(kids[1])
	if cl.createdDirect(kids[directStreak+2], 0, neverLeft) {
		t.Fatal("direct after a sibling published")
	}
}

// children starts n processes of the test's that live through it, and
// names their (only) threads.
func children(t *testing.T, n int) []Client {
	kids := make([]Client, n)
	for i := range kids {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		kids[i] = Client(cmd.Process.Pid)
	}
	return kids
}

// leaving returns a create by a client of cl of a new object that is
// left closed and unpublished (leave) or not when the next create asks,
// and whether cl takes the client's process to store under final names.
func leaving(cl *clients) func(who Client, leave bool) bool {
	left := map[blob.ID]bool{}
	unpublished := func(id blob.ID) bool { return left[id] }
	next := blob.ID(100)
	return func(who Client, leave bool) bool {
		next++
		left[next] = leave
		return cl.createdDirect(who, next, unpublished)
	}
}

// neverLeft is an unpublished check that finds every object published:
// the streaks alone decide.
func neverLeft(blob.ID) bool { return false }

// TestClientsLearnFromWhatIsLeft: a thread that creates while the last
// object it created is left unpublished, leftStreak times in a process
// that never published, stores under final names; so do the children of
// a parent that leave their objects so, in turn. A publish ends both,
// and a process that published, or whose children did, is never taken
// for one this way.
func TestClientsLearnFromWhatIsLeft(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	me := Client(unix.Gettid())
	var cl clients
	create := leaving(&cl)
	// A publisher: each object published before the next create.
	for i := range 2 * leftStreak {
		if create(me, false) {
			t.Fatalf("a publisher direct after %d creates", i+1)
		}
	}
	// Objects left: the first create finds a published one.
	for i := range leftStreak {
		if create(me, true) {
			t.Fatalf("direct after %d objects left", i)
		}
	}
	if !create(me, true) {
		t.Fatalf("not direct after %d objects left", leftStreak)
	}
	cl.published(me)
	// (The first create finds the object made before the publish left.)
	for i := range leftStreak - 1 {
		if create(me, true) {
			t.Fatalf("direct after a publish and %d objects left", i)
		}
	}
	// Its thread is learnt again by what it leaves (threadLearnt), but
	// a process that published is not learnt whole any more: another
	// of its threads is not taken for one.
	if !create(me, true) {
		t.Fatalf("not direct after a publish and %d objects left", leftStreak)
	}
	if create(otherThread(t), true) {
		t.Fatal("another thread of a process that published is direct")
	}

	// Children, each creating one object and leaving it.
	kids := children(t, 3*leftStreak+2)
	var kl clients
	create = leaving(&kl)
	for i, k := range kids[:leftStreak] {
		if create(k, true) {
			t.Fatalf("child %d direct", i)
		}
	}
	if !create(kids[leftStreak], true) {
		t.Fatalf("a child not direct after its siblings left %d objects", leftStreak)
	}
	kl.published(kids[0])
	if create(kids[leftStreak+1], true) {
		t.Fatal("a child direct after a sibling published")
	}
	// Nor later, however many they leave: a loop that publishes some of
	// its stores by `cp tmp && mv tmp key` was learnt again after each
	// `mv`, and its next temp file lost its grace (an outside tester).
	for i, k := range kids[leftStreak+2:] {
		if create(k, true) {
			t.Fatalf("a child direct after %d siblings left objects since a sibling published", i+1)
		}
	}
}

// TestReservationByProcess: a writer is reserved the largest of its own
// process's last objects, not of everyone's: a process storing small
// objects fast neither shrinks another's reservations nor has its own
// sized by another's large objects. A process with none yet goes by its
// parent's children, and one with no history at all by everyone's.
func TestReservationByProcess(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	me := Client(unix.Gettid())
	kids := children(t, 2)
	small, sibling := kids[0], kids[1]
	tc := newTestCore(t, Config{Capacity: 64 * mib, WaitLimit: time.Second})
	put := func(by Client, name string, size int) {
		t.Helper()
		h, err := tc.createBy(by, name)
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if _, err := h.Write(Interrupt{}, make([]byte, size), 0); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(); err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	reserved := func(by Client) int64 {
		t.Helper()
		h, err := tc.createBy(by, "probe")
		if err != nil {
			t.Fatal(err)
		}
		r := tc.Stats().ReservedBytes
		h.Release()
		if err := tc.Unlink(blob.RootID, "probe"); err != nil {
			t.Fatal(err)
		}
		return r
	}
	put(me, "large", 8*mib)
	for i := range 64 {
		put(small, fmt.Sprintf("s%d", i), 4096)
	}
	if r := tc.Reservation(); r != 4096 {
		t.Fatalf("everyone's reservation %d after 64 small stores, want 4096", r)
	}
	if r := reserved(me); r != 8*mib {
		t.Errorf("a writer of the process that stored 8 MiB is reserved %d, want 8 MiB", r)
	}
	if r := reserved(small); r != 4096 {
		t.Errorf("a writer of the process storing 4 KiB is reserved %d, want 4096", r)
	}
	// sibling stored nothing: its parent's children (the small process)
	// size it; a client with no process known, everyone's last 64.
	if r := reserved(sibling); r != 4096 {
		t.Errorf("a writer of a process with no stores whose sibling stored 4 KiB is reserved %d, want 4096", r)
	}
	if r := reserved(0); r != 4096 {
		t.Errorf("a writer of no known client is reserved %d, want 4096", r)
	}
}

// TestEmptyWritersReserveNothing: a process whose last objects were all
// empty (touch, lock and marker files) is reserved --write-reserve
// alone, not the largest of everyone's: each of its writers held a large
// object's room, evicting others' objects for bytes never written.
func TestEmptyWritersReserveNothing(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	me := Client(unix.Gettid())
	kids := children(t, 2)
	toucher, sibling := kids[0], kids[1]
	tc := newTestCore(t, Config{Capacity: 64 * mib, WaitLimit: time.Second})
	open := func(by Client, name string) *Handle {
		t.Helper()
		h, err := tc.createBy(by, name)
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return h
	}
	h := open(me, "large")
	if _, err := h.Write(Interrupt{}, make([]byte, 8*mib), 0); err != nil {
		t.Fatal(err)
	}
	h.Release()
	open(toucher, "marker0").Release()
	if r := tc.Reservation(); r != 8*mib {
		t.Fatalf("everyone's reservation %d, want 8 MiB", r)
	}
	// Ten markers held open at once by the process that stores empty
	// files, and ten by its sibling (sized by its parent's children).
	var held []*Handle
	for i := range 10 {
		held = append(held, open(toucher, fmt.Sprintf("marker%d", i+1)), open(sibling, fmt.Sprintf("lock%d", i)))
	}
	if r := tc.Stats().ReservedBytes; r != 0 {
		t.Errorf("20 empty writers of processes that store empty files hold %d reserved, want 0", r)
	}
	for _, h := range held {
		h.Release()
	}
	// One non-empty store sizes the process again.
	h = open(toucher, "data")
	if _, err := h.Write(Interrupt{}, make([]byte, mib), 0); err != nil {
		t.Fatal(err)
	}
	h.Release()
	h = open(toucher, "data2")
	if r := tc.Stats().ReservedBytes; r != mib {
		t.Errorf("a writer of the process that stored 1 MiB is reserved %d, want 1 MiB", r)
	}
	h.Release()
}

// TestClientsLearnPoolWorkers: the workers of a pool, each storing
// while the others write, count what their own threads left for their
// parent's children: four such creates across the pool make a new
// worker a writer under final names at its first create; a worker's
// publish starts the count again.
func TestClientsLearnPoolWorkers(t *testing.T) {
	workers := children(t, leftStreak+2)
	var cl clients
	create := leaving(&cl)
	// Each worker's first object is closed and left when it makes its
	// second, which is still being written when the next worker
	// creates: no worker ever finds another's object left.
	for i, w := range workers[:leftStreak-1] {
		if create(w, true) || create(w, false) {
			t.Fatalf("worker %d is direct after two creates of its own", i)
		}
	}
	if w := workers[leftStreak-1]; create(w, true) || !create(w, false) {
		t.Fatalf("the worker whose create found the pool's %dth object left is not direct", leftStreak)
	}
	if !create(workers[leftStreak], false) {
		t.Fatalf("a new worker is not direct after %d workers each left an object", leftStreak)
	}
	cl.published(workers[0])
	if create(workers[leftStreak+1], false) {
		t.Fatal("a new worker is direct after a sibling published")
	}
}

func (cl *clients) createdDirect(t Client, id blob.ID, unpublished func(blob.ID) bool) bool {
	direct, _ := cl.created(t, cl.process(t), obj{id: id}, func(o obj) bool { return unpublished(o.id) })
	return direct
}

// TestPoolLearntEndsEarlierGraces: a pool's workers are learnt to store
// under final names at their second creates; the objects of their first
// round, closed and unpublished, then lose their graces at once, as do
// the second round's, still being written, at their writers' release:
// a full cache turns over at eviction's pace, not at the grace's.
func TestPoolLearntEndsEarlierGraces(t *testing.T) {
	workers := children(t, leftStreak+1)
	pool, late := workers[:leftStreak], workers[leftStreak]
	tc := newTestCore(t, Config{Capacity: 8 * mib, Grace: time.Hour, WriteReserve: mib})
	n := 0
	create := func(by Client) *Handle {
		t.Helper()
		n++
		h, err := tc.createBy(by, fmt.Sprintf("o%d", n))
		if err != nil {
			t.Fatalf("create o%d: %v", n, err)
		}
		return h
	}
	fill := func(h *Handle) {
		t.Helper()
		if _, err := h.Write(Interrupt{}, make([]byte, mib), 0); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(); err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	// Two rounds, each worker's writer open while the others create, as
	// a pool's are: 8 MiB, all of it closed and unpublished.
	for range 2 {
		var round []*Handle
		for _, w := range pool {
			round = append(round, create(w))
		}
		for _, h := range round {
			fill(h)
		}
	}
	if used := tc.Stats().UsedBytes; used != 8*mib {
		t.Fatalf("used %d after two rounds, want 8 MiB", used)
	}
	// A new worker's stores fill the cache again only by evicting every
	// one of them, which only objects out of their graces can be (its
	// own, out of theirs, are evicted instead of any in grace).
	for i := range 2 * leftStreak {
		h, err := tc.createBy(late, fmt.Sprintf("late%d", i))
		if err != nil {
			t.Fatalf("store %d into the full cache: %v (the pool's objects kept their graces)", i+1, err)
		}
		fill(h)
	}
	for i := range 2 * leftStreak {
		if name := fmt.Sprintf("late%d", i); !tc.exists(name) {
			t.Errorf("%s was evicted while the pool's objects were kept in their graces", name)
		}
	}
}

// TestDirectWritersKeepTempGraces: a process learnt to store under final
// names keeps the grace of an object it creates under a temp-looking
// name until that object's publish: eviction takes a newer final-name
// object of its instead (an outside tester's loop publishing some
// stores by `cp SRC .t && mv .t KEY` lost the temp file before its mv).
func TestDirectWritersKeepTempGraces(t *testing.T) {
	for _, temp := range []string{".t", "key.partial", "key.part", "key.tmp.7"} {
		t.Run(temp, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			me := Client(unix.Gettid())
			tc := newTestCore(t, Config{Capacity: 2 * mib, Grace: time.Hour, WaitLimit: 0})
			store := func(name string, size int) error {
				h, err := tc.createBy(me, name)
				if err != nil {
					return err
				}
				defer h.Release()
				if _, err := h.Write(Interrupt{}, make([]byte, size), 0); err != nil {
					return err
				}
				return h.Flush()
			}
			for i := range directStreak + 1 {
				if err := store(fmt.Sprintf("e%d", i), 0); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range []string{temp, "d1", "d2"} {
				if err := store(name, mib); err != nil {
					t.Fatalf("store %s: %v", name, err)
				}
			}
			if !tc.exists(temp) || tc.exists("d1") || !tc.exists("d2") {
				t.Fatalf("%s present %v, d1 %v, d2 %v: want the temp file kept in its grace, d1 evicted for d2", temp, tc.exists(temp), tc.exists("d1"), tc.exists("d2"))
			}
			if err := tc.Rename(blob.RootID, temp, blob.RootID, "published", 0); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTempNames: the names a publish step is to follow, and final names
// that only look near them.
func TestTempNames(t *testing.T) {
	for name, want := range map[string]bool{
		".lmcache-write.tmp.12.3": true, ".x.AbC123": true, "tmpab12cd": true,
		"k.tmp": true, "k.tmp.1.2.uuid": true, "k.temp": true, "k.partial": true,
		"k.part": true, "k.incomplete": true, "k.inprogress": true,
		"llama@0x00000001@0@0000000000000001.data": false, "k.bin": false,
		"partial": false, "k.parts": false, "k.particle": false, "attempt": false,
	} {
		if got := tempName(name); got != want {
			t.Errorf("tempName(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestLearntBeforeRelease: a process storing one object after another
// under final names creates the next before the last one's RELEASE
// comes (it follows close(2) asynchronously); its closed descriptor
// (the FLUSH) is evidence enough, and it is learnt at its fifth store
// into a full cache, whose graces then end: here with a 1-hour grace
// and no wait, where its fifth and every later store were refused (an
// outside tester).
func TestLearntBeforeRelease(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	me := Client(unix.Gettid())
	tc := newTestCore(t, Config{Capacity: 16 * mib, Grace: time.Hour, WaitLimit: 0})
	var last *Handle
	for i := range 8 {
		h, err := tc.createBy(me, fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatalf("create k%d: %v", i, err)
		}
		if last != nil {
			last.Release() // after the next create, as RELEASE often comes
		}
		if _, err := h.Write(Interrupt{}, make([]byte, 4*mib), 0); err != nil {
			t.Fatalf("store k%d into the full cache: %v", i, err)
		}
		if err := h.Flush(); err != nil {
			t.Fatalf("close of k%d: %v", i, err)
		}
		last = h
	}
	last.Release()
	for i := range 8 {
		if kept := i >= 4; tc.exists(fmt.Sprintf("k%d", i)) != kept {
			t.Errorf("k%d present %v; want the last four kept, the first evicted", i, !kept)
		}
	}
}

// createBy creates name in the root for writing, as client by.
func (tc *testCore) createBy(by Client, name string) (*Handle, error) {
	h, _, err := tc.CreateOrOpenBy(by, blob.RootID, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644, blob.Owner{UID: -1, GID: -1})
	return h, err
}

// TestCloseByAnotherProcessSizesNothing: a close of a writer's
// descriptor by another process than the object's creator (a forked
// child closing what it inherited) admits the object but sizes no
// reservations; the creator's own close does.
func TestCloseByAnotherProcessSizesNothing(t *testing.T) {
	tc := passthroughCore(t, 64*mib, nil)
	h, err := tc.createBy(Client(os.Getpid()), "held")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	h.File().WriteAt(make([]byte, 12*mib), 0)
	if err := h.FlushBy(Interrupt{}, Client(1)); err != nil { // init: another process
		t.Fatal(err)
	}
	if r := tc.Reservation(); r != 0 {
		t.Fatalf("after another process's close: reservations are %d; want none sized by it", r)
	}
	if err := h.FlushBy(Interrupt{}, Client(os.Getpid())); err != nil {
		t.Fatal(err)
	}
	if r := tc.Reservation(); r != 12*mib {
		t.Fatalf("after the creator's close: reservations are %d, want the object's 12 MiB", r)
	}
}

// TestExecCloseShowsTheReservation: a close of a writer's descriptor by
// another process that is not exiting (a child's exec closing what it
// inherited close-on-exec, while the opener writes on) leaves the
// writer's reservation shown, as an open writer's; the close of a
// process that is gone (a child's exit) keeps it unshown for the moment
// its RELEASE takes, as the opener's close does. Before, every close
// hid it: a holder of idle writers that ran `df` or `kvfs stats` saw
// the cache empty while stores were refused (an outside tester, 4 of
// 4).
func TestExecCloseShowsTheReservation(t *testing.T) {
	// Processes that go on, a writer's opener or closer.
	alive := func() Client {
		p := exec.Command("sleep", "60")
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Process.Kill(); p.Wait() })
		return Client(p.Process.Pid)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name           string
		opener, closer Client
		shown          bool
	}{
		{"exec", alive(), alive(), true},
		{"exit", alive(), Client(gone.Process.Pid), false},
		{"opener", alive(), 0, false},
	} {
		if c.closer == 0 {
			c.closer = c.opener
		}
		// A core of its own: the writer is its first, reserved a
		// quarter of the cache.
		tc := passthroughCore(t, 64*mib, nil)
		h, err := tc.createBy(c.opener, c.name)
		if err != nil {
			t.Fatal(err)
		}
		res := tc.Stats().ReservedBytes
		if res == 0 {
			t.Fatalf("%s: the writer was reserved nothing", c.name)
		}
		if err := h.FlushBy(Interrupt{}, c.closer); err != nil {
			t.Fatal(err)
		}
		st := tc.Stats()
		if c.shown && (st.ReservedBytes != res || st.KeptBytes != 0) {
			t.Errorf("after a close by a process that goes on (%s): reserved %d, kept %d; want the reservation, %d, shown", c.name, st.ReservedBytes, st.KeptBytes, res)
		}
		if !c.shown && (st.ReservedBytes != 0 || st.KeptBytes != res) {
			t.Errorf("after a close by the %s: reserved %d, kept %d; want the reservation, %d, kept unshown", c.name, st.ReservedBytes, st.KeptBytes, res)
		}
		h.Release()
	}
	// A writer of an object it opened, not created: its opener is not
	// known, and its close hides the reservation as the opener's would
	// (a close of the test's own O_RDWR|O_DIRECT rewrite showed it, and
	// a fresh-clone CI run's st_blocks read the 16 MiB reservation).
	tc := passthroughCore(t, 64*mib, nil)
	id := tc.put("stored", mib)
	h, err := tc.Open(id, os.O_RDWR, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := tc.Stats().ReservedBytes
	if res == 0 {
		t.Fatal("the writer of an opened object was reserved nothing")
	}
	if err := h.FlushBy(Interrupt{}, Client(os.Getpid())); err != nil {
		t.Fatal(err)
	}
	if st := tc.Stats(); st.ReservedBytes != 0 || st.KeptBytes != res {
		t.Errorf("after the close of an opened object's writer: reserved %d, kept %d; want the reservation, %d, kept unshown", st.ReservedBytes, st.KeptBytes, res)
	}
	h.Release()
}

// TestClientsLearnThreadsOfAPublisher: in a process whose threads store
// both ways (fs_native's link from some, open(key, "wb") from others),
// a thread that leaves the objects it creates, leftStreak times in a
// row, stores under final names though the others publish all the
// while; the publishers' threads never are, and a thread's own publish
// starts its count again.
func TestClientsLearnThreadsOfAPublisher(t *testing.T) {
	var cl clients
	publisher, final := otherThread(t), otherThread(t)
	create := leaving(&cl)
	for i := range 3 * leftStreak {
		if create(publisher, false) {
			t.Fatalf("the publishing thread direct after %d creates", i+1)
		}
		cl.published(publisher)
		direct := create(final, true)
		if want := i >= leftStreak; direct != want {
			t.Fatalf("the final-name thread's create %d: direct %v, want %v", i+1, direct, want)
		}
	}
	cl.published(final)
	if create(final, true) {
		t.Fatal("the final-name thread direct right after its own publish")
	}
}

// otherThread is another OS thread of this process, alive until the
// test ends (a thread that exited is no client /proc can place).
func otherThread(t *testing.T) Client {
	ids, hold := make(chan Client), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ids <- Client(unix.Gettid())
		<-hold
	}()
	t.Cleanup(func() { close(hold) })
	return <-ids
}

// TestAlternatingThreadLeavesNoGrace: a thread that takes turns
// publishing a temp file by rename and storing under a final name (a
// pool shared by fs_native and local_disk) is never learnt, its count
// reset at each publish; but each final-name object it leaves loses its
// grace at the thread's next create, so a full cache of them turns over.
// Before, they kept their graces and the cache stayed full of them (an
// outside tester: 164 stores of 4 MiB in 10 s by 4 such threads into 64
// MiB; 7,208 with --grace 0s).
func TestAlternatingThreadLeavesNoGrace(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	me := Client(unix.Gettid())
	tc := newTestCore(t, Config{Capacity: 4 * mib, Grace: time.Hour, WaitLimit: 0})
	store := func(name string) {
		t.Helper()
		h, err := tc.createBy(me, name)
		if err == nil {
			if _, err = h.Write(Interrupt{}, make([]byte, mib), 0); err == nil {
				err = h.Flush()
			}
			h.Release()
		}
		if err != nil {
			t.Fatalf("store %s: %v (%+v)", name, err, tc.Stats())
		}
	}
	for i := range 12 {
		tmp := fmt.Sprintf(".tmp%d", i)
		store(tmp)
		if err := tc.Rename(blob.RootID, tmp, blob.RootID, fmt.Sprintf("k%d", i), 0); err != nil {
			t.Fatal(err)
		}
		tc.PublishedBy(me)
		store(fmt.Sprintf("f%d", i))
	}
	if st := tc.Stats(); st.UsedBytes > st.CapacityBytes || st.AdmissionFailures != 0 {
		t.Fatalf("after 24 stores: %+v", st)
	}
}

// TestProcStatus: a thread's status gives its process and parent, as
// clients.process reads them.
func TestProcStatus(t *testing.T) {
	b, err := procstat.Status(unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	if got := statusField(b, "Tgid"); got != int32(os.Getpid()) {
		t.Errorf("Tgid %d, want %d", got, os.Getpid())
	}
	if got := statusField(b, "PPid"); got != int32(os.Getppid()) {
		t.Errorf("PPid %d, want %d", got, os.Getppid())
	}
	if got := statusField(b, "NoSuchKey"); got != 0 {
		t.Errorf("a missing line reads %d, want 0", got)
	}
}
