package core

import (
	"errors"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/internal/procstat"
	"github.com/kvfs/kvfs/ledger"
)

// Writers that store under final names.
//
// The grace period keeps a just-closed object from eviction until its
// publish step, the link or rename of a temp file (SPEC: Eviction). A
// connector that writes each object under its final name (LMCache's
// local_disk, any open(key, "wb")) has no publish step, so each of its
// objects kept the whole grace: a full cache of them turned over at
// capacity / grace, and its writers' bytes stayed over the capacity
// meanwhile (an outside tester, 4 MiB objects into 48 MiB: used over
// the capacity in 287 of 295 samples, 6 stores a second). Whether an
// object will be published cannot be known at its close; whether its
// process publishes can be learnt. A process that created directStreak
// objects since its last link or rename (or since it first stored)
// stores under final names: its later objects' grace ends at their
// writer's last release, and they are plain LRU from then on. One link
// or rename by the process, successful or not (LMCache learns from
// EEXIST that another writer published first), makes it a publisher
// again. The streak is long enough that a publisher's threads, each
// between its create and its link, never make one (64 stores under way
// at once in one process). FUSE names a request's thread; its process
// and that process's parent are read once from /proc.
//
// A bash loop (`head -c N > key`: bash opens a redirect in the child it
// forks; dash, in itself), or one of `cp` or `dd of=`, creates each
// object from a process of its own, which never makes a streak: its full
// cache turned over at capacity / grace all the same (1 MiB redirects
// into 24 MiB: one store in 24 waited out the 2 s grace, 28 s for 300
// stores where a large cache took 3). So the streak counts a parent's
// children too: a process that has never published stores under final
// names once its parent's children created directStreak objects since
// one of them (or the parent) last linked or renamed. A loop that
// publishes from another child (`cat > tmp; mv tmp key`) keeps its
// grace: the `mv` ends the children's streak, and from then on they are
// learnt by that count alone, not by what they leave (below): a loop
// that stores most objects under final names and publishes some by
// `cp tmp && mv tmp key` was learnt again four stores after each `mv`,
// and its next temp file, graceless, was evicted before its `mv` (an
// outside tester: 6 to 16 of 60 such publishes failed into 64 MiB).
//
// The streaks are long, and their first objects keep the whole grace:
// into a small cache a new process's first 64 stores ran at capacity /
// grace (an outside tester: a Python loop's first 100 objects of 1 MiB
// into 8 MiB took 16.2 s, each 100 after 0.07 s; a pool of 16 threads
// got 45 ENOSPC in 100 stores into 32 MiB). A create tells more than a
// count: a thread that creates an object while the last one it created
// is closed, unpublished and still there did not publish that one. A
// publisher's thread links before its next create; a thread that does
// not, leftStreak times, in a process that has never published, stores
// under final names, as does a process whose parent's other children
// left leftStreak such objects, in the order they were created. (A
// program that hands its temp files to another thread to publish would
// be taken for one until its first publish; its objects are plain LRU
// meanwhile, evicted only once every older object is.) A child's
// create that finds its own thread's last object left counts for its
// parent's children too: the workers of a pool store at once, so one
// rarely finds another's object closed, and each was learnt on its own,
// four graces apiece (an outside tester: 40 stores of 4 MiB from a pool
// of 4 into a full 16 MiB cache took 9.1 s, into an empty one 1.3 s).
// A child's create that finds its parent's main thread's last object
// left counts for the parent as the parent's own next create would, and
// a parent that never published is learnt with its children: a program
// that stores a few objects, then starts a pool for the rest, is one
// program. A create finds an object left once its descriptor was closed
// (leftBehind), before its RELEASE.
// At the create that makes a process (or its parent's children) learnt,
// the graces of the objects it (or they) created last, closed and
// unpublished, end at once, and those still being written end theirs at
// their last release; the create is learnt before its admission, which
// may wait for exactly those graces.

// Client is a request's thread as FUSE names it (0: unknown).
type Client uint32

const (
	directStreak = 64
	leftStreak   = 4
	// maxClients bounds the threads and processes remembered; past it
	// the memory starts again (every process a publisher until it shows
	// otherwise).
	maxClients = 1 << 12
)

// clients is what kvfs learnt of its clients' processes.
type clients struct {
	mu    sync.Mutex
	procs map[Client]proc // GUARDED_BY(mu): thread -> its process
	last  map[Client]obj  // GUARDED_BY(mu): thread -> the object it created last
	// left: thread -> the objects it left, in a row (see threadLearnt);
	// GUARDED_BY(mu).
	left  map[Client]*leftRun
	learn map[int32]*learning // GUARDED_BY(mu): process -> what its creates, and its children's, showed
	// waits: thread -> the object its admission waits for room to
	// write now, and how many of them (see loosenIdle); GUARDED_BY(mu).
	waits map[Client]waitFor
}

// waitFor is what a thread's admissions wait for: room for object id.
type waitFor struct {
	id blob.ID
	n  int
}

// waiting notes that an admission of object id by thread t began (d 1)
// or ended (d -1) a wait for room.
func (cl *clients) waiting(t Client, id blob.ID, d int) {
	if t == 0 {
		return
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.waits == nil {
		cl.waits = map[Client]waitFor{}
	}
	w := cl.waits[t]
	if w.id, w.n = id, w.n+d; w.n <= 0 {
		delete(cl.waits, t)
	} else {
		cl.waits[t] = w
	}
}

// waitsNow is which threads' admissions wait for room now, and for which
// objects.
func (cl *clients) waitsNow() Waits {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	w := make(Waits, len(cl.waits))
	for t, f := range cl.waits {
		w[int(t)] = f.id
	}
	return w
}

// learning is what one process's creates, and its children's, showed.
type learning struct {
	since int // objects it created since its last publish
	left  int // of those, creates that found its thread's last object left (see leftStreak)
	kids  int // objects its children created since one of them published
	// kidsLeft: of those, creates that found another child's last
	// object left, or their own thread's.
	kidsLeft  int
	lastKid   kidObj // the object one of its children created last
	published bool   // it linked or renamed
	// kidsPublished: one of its children linked or renamed; its
	// children are then learnt by their count alone (directStreak), as
	// a process that published is by its own.
	kidsPublished bool
	// learnt, kidsLearnt: it, or its children, were learnt to store
	// under final names since the last publish; recent and kidRecent
	// are the objects it, and they, created last, whose graces end at
	// that moment (see created).
	learnt, kidsLearnt bool
	recent, kidRecent  lastIDs
	// counted: its last object a child's create counted as left (see
	// created), so that its other children do not count it again.
	counted blob.ID
	// sizes: of the objects it stored last, and kidSizes its
	// children's; its next writer is reserved for the largest (see
	// Core.reservationFor).
	sizes, kidSizes lastSizes
}

// lastSizes are the sizes of a process's last objects stored.
type lastSizes struct {
	s [32]int64
	n int
}

func (l *lastSizes) add(size int64) {
	l.s[l.n%len(l.s)] = size
	l.n++
}

func (l *lastSizes) largest() int64 {
	biggest := int64(0)
	for _, s := range l.s {
		biggest = max(biggest, s)
	}
	return biggest
}

// lastIDs are the objects a process created last.
type lastIDs struct {
	s [32]blob.ID
	n int
}

func (l *lastIDs) add(id blob.ID) {
	l.s[l.n%len(l.s)] = id
	l.n++
}

func (l *lastIDs) all() []blob.ID { return append([]blob.ID(nil), l.s[:min(l.n, len(l.s))]...) }

// obj is an object a thread created, with its writer (nil: none known).
type obj struct {
	id blob.ID
	h  *Handle
}

// kidObj is an object a child process created (pid 0: none).
type kidObj struct {
	obj
	pid int32
}

// proc is a thread's process and that process's parent (0: unknown).
type proc struct{ pid, parent int32 }

// process is the process (thread group) of thread t and its parent;
// zeros when /proc does not say.
func (cl *clients) process(t Client) proc {
	cl.mu.Lock()
	p, ok := cl.procs[t]
	cl.mu.Unlock()
	if ok {
		return p
	}
	b, _ := procstat.Status(int(t))
	p = proc{pid: statusField(b, "Tgid"), parent: statusField(b, "PPid")}
	cl.mu.Lock()
	if cl.procs == nil || len(cl.procs) >= maxClients {
		cl.procs = map[Client]proc{}
	}
	cl.procs[t] = p
	cl.mu.Unlock()
	return p
}

// exitingWait bounds exitState's read of /proc/TID/stat.
const exitingWait = 2 * time.Millisecond

// exitState says whether client thread t is exiting, or gone, and the
// signal that ended it where one did (see procstat.ExitSignal: a writer
// killed while it wrote). Exiting, its close of a descriptor is its
// exit's, not a close it made (a child that execs closes what it
// inherited close-on-exec, and goes on). False where /proc does not
// say, or not within exitingWait: a task in execve holds its exec lock
// while it closes those descriptors, and a read of its stat waits for
// that lock, so a FLUSH that waited for the read never ended, nor the
// exec, nor the read (an outside tester's children of a writer hung for
// good, and the daemon's thread with them). The read that gave up ends
// once the exec goes on.
func exitState(t Client) (exiting bool, signal int) {
	if inExec.recent(t) {
		return false, 0
	}
	answer := make(chan exitRead, 1)
	go func() { answer <- readExiting(t) }()
	select {
	case e := <-answer:
		return e.exiting, e.signal
	case <-time.After(exitingWait):
		inExec.note(t)
		return false, 0
	}
}

// exitRead is what readExiting read.
type exitRead struct {
	exiting bool
	signal  int
}

// inExec remembers the threads whose stat a read waited on (see
// exiting): the next closes of an exec come from the same thread, one
// a descriptor, and each waited exitingWait (an outside tester: an exec
// beside 8 writers took 20 ms, against 1-4 ms).
var inExec execing

// execing is a few threads seen in execve lately, with when.
type execing struct {
	mu sync.Mutex
	at map[Client]time.Time
}

// execRecent is how long a thread seen in execve is taken to be in it.
const execRecent = 100 * time.Millisecond

func (e *execing) recent(t Client) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	at, ok := e.at[t]
	return ok && time.Since(at) < execRecent
}

func (e *execing) note(t Client) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.at == nil || len(e.at) >= 64 {
		e.at = map[Client]time.Time{}
	}
	e.at[t] = time.Now()
}

// readExiting reads whether thread t is exiting, or gone (a zombie
// too), and the signal that ended it.
func readExiting(t Client) exitRead {
	line, err := procstat.Read(int(t))
	if err != nil {
		return exitRead{exiting: errors.Is(err, fs.ErrNotExist)}
	}
	e := procstat.Exiting(line) || procstat.State(line) == 'Z'
	if !e {
		return exitRead{}
	}
	return exitRead{exiting: true, signal: procstat.ExitSignal(line)}
}

// statusField is the number in the line "key:" of a /proc status file;
// 0 when there is none.
func statusField(status []byte, key string) int32 {
	n, _ := strconv.ParseInt(procstat.StatusLine(status, key), 10, 32)
	return int32(n)
}

// created notes object made created by thread t of process p, and says
// whether p stores under final names. unpublished says whether an object
// is closed, unpublished and still there; it is asked with no lock of
// the clients' held. At the create that makes it so, its process's (or
// its parent's children's) last objects are returned too (before): their
// graces are to end now. A pool's workers are learnt at their second
// creates, when the first round's objects are closed and wait out their
// graces; the next round's writers waited for them (an outside tester:
// 40 stores of 4 MiB from a pool of 4 into a full 16 MiB cache took
// 8.4-12.3 s, with waits of whole graces; into an empty one 0.3 s).
func (cl *clients) created(t Client, p proc, made obj, unpublished func(obj) bool) (direct bool, before []blob.ID) {
	if p.pid == 0 {
		return false, nil
	}
	id := made.id
	cl.mu.Lock()
	cl.bound()
	mine, ok := cl.last[t]
	cl.last[t] = made
	fresh, kidsFresh := !cl.of(p.pid).published, true
	var kid kidObj
	var parentsLast obj // its parent's main thread's last object, not yet counted
	if p.parent != 0 {
		parent := cl.of(p.parent)
		kid, kidsFresh = parent.lastKid, !parent.published && !parent.kidsPublished
		parent.lastKid = kidObj{obj: made, pid: p.pid}
		if o, ok := cl.last[Client(p.parent)]; ok && !parent.published && o.id != parent.counted {
			parentsLast = o
		}
	}
	cl.mu.Unlock()
	left := ok && unpublished(mine)
	if left && mine.h != nil && !mine.h.temp {
		// Its thread did not publish it before this create, so it will
		// not: it needs no grace, whatever its thread or process is
		// learnt to be. A thread that takes turns storing by a link and
		// under a final name (a pool shared by fs_native and
		// local_disk) has its count reset at each link, and its
		// final-name objects kept their graces: 164 stores of 4 MiB in
		// 10 s by 4 such threads into 64 MiB, 7,208 with --grace 0s (an
		// outside tester). Its grace ends now (before), or at its last
		// release if that is still to come.
		mine.h.direct.Store(true)
		defer func() { before = append(before, mine.id) }()
	}
	mineLeft := fresh && left
	// A direct writer's object, its grace ended at its release, looks
	// published; its thread left it all the same.
	threadLeft := left || ok && mine.h != nil && mine.h.direct.Load()
	kidLeft := fresh && kidsFresh && kid.pid != 0 && kid.pid != p.pid && unpublished(kid.obj)
	parentLeft := parentsLast.id != 0 && unpublished(parentsLast)

	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.bound()
	thread, before := cl.threadLearnt(t, threadLeft, mine.id)
	if parentLeft {
		// A child's create, as the parent's own next create would,
		// finds the parent's last object left: a program that stored
		// a few objects under final names, then started a pool to store
		// the rest, is learnt whole (an outside tester: a Pool(4)
		// into a 16 MiB cache its parent had just filled with four
		// open(key, "wb"), with --grace 1h, had every store refused).
		parent := cl.of(p.parent)
		if parent.counted != parentsLast.id && !parent.published {
			parent.counted = parentsLast.id
			if parent.left++; parent.left >= leftStreak && !parent.learnt {
				parent.learnt = true
				before = parent.recent.all()
			}
		}
	}
	me := cl.of(p.pid)
	if mineLeft {
		me.left++
	}
	me.since++
	if me.since > directStreak || me.left >= leftStreak {
		if !me.learnt {
			me.learnt = true
			before = append(before, me.recent.all()...)
		}
		me.recent.add(id)
		return true, before
	}
	me.recent.add(id)
	if p.parent == 0 {
		return thread, before
	}
	parent := cl.of(p.parent)
	if kidLeft || mineLeft && kidsFresh {
		parent.kidsLeft++
	}
	parent.kids++
	parent.kidRecent.add(id)
	if (parent.kids > directStreak || parent.kidsLeft >= leftStreak) && !me.published {
		if !parent.kidsLearnt {
			parent.kidsLearnt = true
			before = append(before, parent.kidRecent.all()...)
			if !parent.published && !parent.learnt && parent.recent.n > 0 {
				// A parent that stored too, and never published, is
				// the same program: its objects go with its
				// children's.
				parent.learnt = true
				before = append(before, parent.recent.all()...)
			}
		}
		return true, before
	}
	return thread, before
}

// threadLearnt notes whether thread t's create found the object t
// created last left (closed, unpublished, still there), and says
// whether t stores under final names: leftStreak such creates in a row
// since t last linked or renamed, whatever the other threads of its
// process do. A process learns by its own creates only while it has
// never published, so one that publishes from some threads and stores
// under final names from others (LMCache's fs_native and local_disk,
// or HiCache, in one worker) kept the grace for every object: its full
// cache turned over at capacity / grace, and all its writers waited for
// it (an outside tester: 295-358 stores of 4 MiB in 20 s into 64 MiB,
// against 6,104-12,725 with the same threads in two processes). A
// publisher's thread links before its next create, so it is never
// learnt; its temp names keep their grace in any case (tempName). At
// the create that makes it so, the graces of the objects it left end
// (before), as a process's do (created). mu held.
func (cl *clients) threadLearnt(t Client, left bool, mine blob.ID) (learnt bool, before []blob.ID) {
	if !left {
		delete(cl.left, t)
		return false, nil
	}
	r := cl.left[t]
	if r == nil {
		r = &leftRun{}
		cl.left[t] = r
	}
	if r.n < leftStreak {
		r.ids[r.n] = mine
	}
	if r.n++; r.n == leftStreak {
		return true, r.ids[:]
	}
	return r.n > leftStreak, nil
}

// leftRun is a thread's run of objects left: how many, and the first
// leftStreak of them.
type leftRun struct {
	n   int
	ids [leftStreak]blob.ID
}

// direct says whether process p was learnt to store under final names
// (by its own creates or its siblings'), without noting a create: a
// writer that opened before its process was learnt ends its grace at
// its last release all the same.
func (cl *clients) direct(p proc) bool {
	if p.pid == 0 {
		return false
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	me := cl.learn[p.pid]
	if me != nil && me.learnt {
		return true
	}
	if parent := cl.learn[p.parent]; p.parent != 0 && parent != nil {
		return parent.kidsLearnt && (me == nil || !me.published)
	}
	return false
}

// published notes a link or rename by thread t: its process, and its
// parent's children, start their streaks again.
func (cl *clients) published(t Client) {
	p := cl.process(t)
	if p.pid == 0 {
		return
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.bound()
	delete(cl.left, t)
	me := cl.of(p.pid)
	me.since, me.left, me.kids, me.kidsLeft, me.published = 0, 0, 0, 0, true
	me.learnt, me.kidsLearnt = false, false
	if p.parent != 0 {
		parent := cl.of(p.parent)
		parent.kids, parent.kidsLeft, parent.kidsLearnt = 0, 0, false
		parent.kidsPublished = true
	}
}

// stored notes an object of size stored by process p (see
// Core.reservationFor).
func (cl *clients) stored(p proc, size int64) {
	if p.pid == 0 {
		return
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.bound()
	cl.of(p.pid).sizes.add(size)
	if p.parent != 0 {
		cl.of(p.parent).kidSizes.add(size)
	}
}

// largest is the largest of the last objects process p stored, or, if
// it stored none yet, of those its parent's children stored; known
// false: none stored.
func (cl *clients) largest(p proc) (size int64, own, known bool) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if l := cl.learn[p.pid]; p.pid != 0 && l != nil && l.sizes.n > 0 {
		return l.sizes.largest(), true, true
	}
	if l := cl.learn[p.parent]; p.parent != 0 && l != nil && l.kidSizes.n > 0 {
		return l.kidSizes.largest(), false, true
	}
	return 0, false, false
}

// of is what was learnt of process pid, made if need be; mu held.
func (cl *clients) of(pid int32) *learning {
	l := cl.learn[pid]
	if l == nil {
		l = &learning{}
		cl.learn[pid] = l
	}
	return l
}

// bound makes the tables, and starts them again once one of them holds
// maxClients threads or processes; mu held.
func (cl *clients) bound() {
	if cl.learn == nil || len(cl.learn) >= maxClients || len(cl.last) >= maxClients {
		cl.last, cl.learn, cl.left = map[Client]obj{}, map[int32]*learning{}, map[Client]*leftRun{}
	}
}

// createdBy notes which client thread created h's object (its process,
// h.by, resolved by reservationFor): an object of a process that stores
// under final names gets no grace once its writing ends.
func (h *Handle) createdBy(t Client) {
	if !h.write || h.by == nil {
		return
	}
	direct, before := h.c.clients.created(t, *h.by, obj{id: h.id, h: h}, h.c.leftBehind)
	h.direct.Store(direct && !h.temp)
	for _, id := range before {
		if id != h.id && h.c.ledger.Unpublished(id) && !h.c.tempObject(id) {
			h.c.ledger.EndGrace(id)
		}
	}
}

// leftBehind says whether object o, which a thread created before its
// next create, was left unpublished: closed by every writer (its
// RELEASE came) without a publish step since, or closed by its writer's
// descriptor (a FLUSH came after its writes) with its RELEASE still to
// come. The RELEASE follows close(2) asynchronously, and a process
// storing one object after another under final names creates the next
// before it comes: only the first kind counted, and such a process was
// learnt late or never (an outside tester: one process storing 4 MiB
// objects with open(key, "wb") into a 16 MiB cache with --grace 1h had
// its fifth and every later store refused).
func (c *Core) leftBehind(o obj) bool {
	if c.ledger.Unpublished(o.id) {
		return true
	}
	return o.h != nil && o.h.closedAt.Load() != 0 && c.ledger.Unfinished(o.id)
}

// tempName says whether a name looks like a temp file's, one a publish
// step (link, rename) is to follow: a dot file (rsync's `.NAME.XXXXXX`,
// LMCache's `.lmcache-write.tmp.*`, a script's `.tmp1`), `*.tmp` and
// `*.tmp.*`, Python's mkstemp's `tmpXXXXXXXX`, and a download's or a
// writer's partial file (`KEY.partial`, `KEY.part`, `KEY.temp`,
// `KEY.incomplete`, `KEY.inprogress`). A process learnt to store under
// final names keeps the grace of such an object until its publish: a
// loop that publishes some stores by `cp SRC .t && mv .t KEY` among its
// final-name ones lost the temp file to eviction before its `mv`, and a
// learnt thread that wrote every fifth object as `KEY.partial`, then
// renamed it, found 54 of 1,898 gone (outside testers).
func tempName(name string) bool {
	if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "tmp") || strings.Contains(name, ".tmp.") {
		return true
	}
	return slices.ContainsFunc(tempSuffixes, func(s string) bool { return strings.HasSuffix(name, s) })
}

var tempSuffixes = []string{".tmp", ".temp", ".partial", ".part", ".incomplete", ".inprogress"}

// tempObject says whether object id's first name looks like a temp
// file's (tempName).
func (c *Core) tempObject(id blob.ID) bool {
	c.mu.RLock()
	p, ok := c.store.Path(id)
	c.mu.RUnlock()
	return ok && tempName(path.Base(p))
}

// reservationFor is what a writer that thread t creates is reserved
// (Reservation): the largest of the last objects t's process stored (or
// its parent's children, for a process that stored none yet), else of
// the last 64 any process stored; and t's process (by) for storedBy. A
// process storing small objects fast made the last 64 small for every
// process: a connector's large writers beside it were reserved small,
// outgrew their reservations while nothing could be evicted, and went
// over the capacity; its small writers were refused for the large
// objects of others (an outside tester: a 4 KiB stream beside
// connectors storing up to 24 MiB held a 64 MiB cache 37-51 MB over,
// and refused 63% of the small stores). A process whose last objects
// were all empty (`touch`, lock and marker files) is reserved
// --write-reserve alone: sized by everyone's, each of its writers held
// a large object's room in a full cache, evicting others' objects for
// bytes it never wrote. borrowed says n is sized by others' objects (its
// siblings' too), not its process's own (see reserve).
func (c *Core) reservationFor(t Client) (n int64, borrowed bool, by *proc) {
	if t != 0 {
		p := c.clients.process(t)
		if p.pid != 0 {
			by = &p
		}
		if size, own, known := c.clients.largest(p); known {
			capacity := c.targetCapacity()
			n := ledger.Charge(min(max(c.cfg.WriteReserve, size), capacity/4))
			if n == 0 {
				return reserveNothing, false, by
			}
			return n, !own, by
		}
	}
	// A process that stored nothing yet is sized by everyone's last
	// objects, a guess; a writer of no known client (the core's own
	// callers) by the same, as before sizes were per process.
	return c.Reservation(), t != 0, by
}

// storedBy notes the size h's writer stored, for its process's next
// writers (reservationFor).
func (c *Core) storedBy(h *Handle, size int64) {
	if h.by != nil {
		c.clients.stored(*h.by, size)
	}
}

// sameProcess says whether client thread t is of the process that
// opened h, where both are known.
func (c *Core) sameProcess(h *Handle, t Client) (same, known bool) {
	if t == 0 || h.by == nil {
		return false, false
	}
	p := c.clients.process(t)
	return p.pid == h.by.pid, p.pid != 0
}

// PublishedBy tells the core a client thread linked or renamed an
// object (whether it succeeded or not).
func (c *Core) PublishedBy(t Client) {
	if t != 0 {
		c.clients.published(t)
	}
}

// endDirectGrace ends the grace of a direct writer's object once its
// writing ended.
func (c *Core) endDirectGrace(h *Handle) {
	if h.doomed() || h.temp {
		return
	}
	if h.direct.Load() || h.by != nil && c.clients.direct(*h.by) {
		c.ledger.EndGrace(h.id)
	}
}
