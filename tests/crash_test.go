package tests

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var crashKills = flag.Int("kills", 12, "how many times TestCrashLoop SIGKILLs the daemon")

// crashKey is one key of the crash loop and what completed operations
// (those whose last call returned) say about it.
type crashKey struct {
	kvKey
	locs []string        // its possible names, relative to the mount
	have map[string]bool // names it has, all one inode
	ino  uint64          // that inode's number in the current daemon; 0 unknown
	// uncertain: an operation on it was cut short by the kill, so its
	// names are whatever the restarted mount shows.
	uncertain bool
	// evicted: the last operation found it gone by an eviction (an
	// ENOENT for a name it had) since the last kill. The eviction drops
	// its names from the index first and unlinks the stored ones after:
	// a kill in between leaves them in the store, whole and unmarked,
	// and the next start serves the object again.
	evicted bool
	hist    []string // what happened to it lately, for failure messages
}

// crashDirs hold the second names (hard links) and moved names of keys.
var crashDirs = []string{"links", "moved"}

// TestCrashLoop SIGKILLs the daemon at random moments of a workload of
// fs_native stores, cross-directory hard links, renames, unlinks, loads
// and the evictions they cause, -kills times in a row (every fourth round
// without stores, so kills land in links, renames and unlinks too),
// remounting on the same mount point each time. At every kill, each object whose last
// operation had returned must be in the store under exactly its names and
// not marked incomplete, or gone with all its names by an eviction the
// daemon logged; after every remount it is served byte for byte under
// those names, nothing else is served, and the accounting is exact. A
// clean unmount at the end leaves a store fsck finds clean.
func TestCrashLoop(t *testing.T) { crashLoopTest(t, *crashKills, false) }

// TestCrashLoopWhileLoading is TestCrashLoop with each round's workload
// run on a start after a crash that serves while its index loads (held
// until a point in the work, or until the work stood still: links of
// stored names wait for the index): kills land while stores of new
// names, mkdirs, and deletes and moves of stored ones are taken before
// the index exists, and after the switch to it. After each kill a plain
// start checks the mount as TestCrashLoop does.
func TestCrashLoopWhileLoading(t *testing.T) { crashLoopTest(t, max(*crashKills/2, 1), true) }

func crashLoopTest(t *testing.T, kills int, loading bool) {
	dir := t.TempDir()
	mp, store := filepath.Join(dir, "mnt"), filepath.Join(dir, "store")
	capacity := "20MiB"
	if loading {
		// A disk of its own, and a larger capacity: stores while
		// loading take what the store's disk leaves of it, or an
		// eighth of it past it.
		store, _, _ = storesWhileLoadingFS(t)
		capacity = "48MiB"
	}
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--store", store, "--capacity", capacity, "--grace", "200ms", "--log-level", "debug",
		// Restarts from a checkpoint taken a few ms before the kill, and
		// kills that land while one is written.
		"--checkpoint-interval", "20ms"}
	t.Cleanup(func() { // runs last, after every daemon's own cleanup
		if m, ok := mountAt(mp); ok {
			t.Errorf("a mount was left at %s: %+v (%d stacked)", mp, m, len(mountsAt(mp)))
			detachAll(mp)
		}
	})
	d := startDaemon(t, mp, flags...)
	var open func()
	for _, dn := range crashDirs {
		if err := os.Mkdir(filepath.Join(mp, dn), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := &crashLoop{t: t, mp: mp, store: store, names: map[string]*crashKey{},
		ops: map[string]int{}, inflight: map[string]int{}}
	for _, k := range workloadKeys(32, MiB/2, 3*MiB) {
		final, _ := filepath.Rel(mp, finalPath(mp, k.key))
		base := filepath.Base(final)
		ck := &crashKey{kvKey: k, locs: []string{final, "links/" + base, "moved/" + base}, have: map[string]bool{}}
		c.keys = append(c.keys, ck)
		c.names[base] = ck
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill timing seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 31))
	killed := 0
	for killed < kills && !t.Failed() {
		after := int64(5 + r.IntN(100))
		c.run(d, after, killed%4 == 3, open, r.Int64N(2*after))
		killed++
		c.checkStore(d)
		d = startDaemon(t, mp, flags...)
		if n := len(mountsAt(mp)); n != 1 {
			t.Errorf("%d mounts stacked at %s after remounting over the dead one", n, mp)
		}
		c.checkMount(startEvicted(t, d))
		assertQuietEqual(t, d)
		if loading && killed < kills {
			// The next round's workload runs while the index loads,
			// after a crash (of this daemon, idle: the store is as
			// checked). A store the kills left empty loads before it
			// serves.
			d.kill9()
			d, open = startGated(t, dir, mp, append(flags, "--serve-while-loading", "1")...)
		}
	}
	if open != nil && t.Failed() {
		open() // a failed round left a daemon still held
		return
	}
	st := assertQuietEqual(t, d)
	requireCleanLog(t, d)
	d.stop()
	requireCleanFsck(t, store, st)
	t.Logf("survived %d kills (%d while the index loaded; %d objects evicted by a start to fit); operations the kills cut short (4 workers): %v",
		killed, c.whileLoading, c.startEvictions, c.inflight)
	t.Logf("operations completed: %v; %d evictions logged; %d names verified byte for byte after remounts, %d lost, %d finished temp files left by a kill",
		c.ops, c.evictions, c.verified, c.lost, c.tmpLeft)
	t.Logf("at the end: %d objects, %d bytes", st.Objects, st.UsedBytes)
}

type crashLoop struct {
	t         *testing.T
	mp, store string
	keys      []*crashKey
	names     map[string]*crashKey // by file name
	mu        sync.Mutex           // guards the counters below while workers run
	ops       map[string]int       // completed operations by kind
	inflight  map[string]int       // operations cut short by a kill, by kind
	evictions int
	verified  int
	lost      int
	tmpLeft   int
	seq       atomic.Int64 // temp file names, unique across workers and kills
	// whileLoading counts the kills that came before the index was
	// built (TestCrashLoopWhileLoading); held: the load is held, and
	// the workers only load, delete and move stored names.
	whileLoading int
	held         atomic.Bool
	// startEvictions: completed objects a start evicted to fit.
	startEvictions int
	bufs           [4][]byte // the workers' O_DIRECT buffers
}

// run drives the workload, four workers each owning every fourth key,
// and SIGKILLs the daemon once they have completed `after` operations
// between them (or all stopped): a point in the work, not in time. A
// daemon serving while it loads (open, its gate) is let build its index
// after openAt operations, or once the workers all wait (on a change
// that waits for the index): loadStall after the work last moved.
func (c *crashLoop) run(d *daemon, after int64, namespace bool, open func(), openAt int64) {
	var killed atomic.Bool
	var wg sync.WaitGroup
	done := &progress{}
	for w := range 4 {
		if c.bufs[w] == nil {
			c.bufs[w] = alignedBuffer(c.t, 3*MiB)
		}
		cw := &crashWorker{c: c, id: w, killed: &killed, namespace: namespace, done: done,
			cl: &fsNative{base: c.mp, direct: w%2 == 1, whole: w >= 2, seq: &c.seq},
			r:  rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w))), buf: c.bufs[w]}
		for i := w; i < len(c.keys); i += 4 {
			cw.keys = append(cw.keys, c.keys[i])
		}
		wg.Go(cw.loop)
	}
	go func() { wg.Wait(); done.end() }()
	if open != nil {
		c.held.Store(true)
		go c.letLoad(done, open, openAt)
	}
	done.await(after)
	killed.Store(true)
	if open != nil && !strings.Contains(d.outSoFar(), "objects restored") {
		c.whileLoading++
	}
	d.kill9()
	wg.Wait()
}

// loadStall is how long the work may stand still, with a request waiting
// in the daemon, before a held load is let go: every worker may be
// waiting for the index (a link of a stored name), which no
// worker can say from inside its call. It schedules; nothing is asserted
// on it.
const loadStall = 20 * pollEvery

// letLoad lets a held load go after openAt operations, or once the work
// stood still for loadStall with a request in the daemon.
func (c *crashLoop) letLoad(done *progress, open func(), openAt int64) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	last, still := int64(-1), 0
	for n := done.Load(); n < openAt && still < int(loadStall/pollEvery); n = done.Load() {
		switch {
		case n != last:
			last, still = n, 0
		case inFuseRequest():
			still++ // not workers short of a CPU: one waits in the daemon
		}
		<-tick.C
	}
	c.held.Store(false)
	open()
}

// pick is a random key of the worker's own; in a namespace round, one
// that has a name (nil when none has: no stores in such a round).
func (w *crashWorker) pick() *crashKey {
	if !w.namespace {
		return w.keys[w.r.IntN(len(w.keys))]
	}
	var named []*crashKey
	for _, k := range w.keys {
		if len(k.have) > 0 {
			named = append(named, k)
		}
	}
	if len(named) == 0 {
		return nil
	}
	return named[w.r.IntN(len(named))]
}

type crashWorker struct {
	c         *crashLoop
	id        int
	namespace bool // no stores this round
	keys      []*crashKey
	cl        *fsNative
	r         *rand.Rand
	buf       []byte
	killed    *atomic.Bool
	done      *progress // operations completed by all workers
}

// loop runs operations until one fails, as all do once the daemon is
// dead (one that returned completed before the kill). In a namespace
// round only objects already stored are linked, renamed, loaded and
// unlinked (down to their last name), so kills land in those calls
// rather than in the long stores.
func (w *crashWorker) loop() {
	for !w.c.t.Failed() {
		k := w.pick()
		op := "store"
		switch {
		case k == nil:
			return // nothing of its own left to work on
		case len(k.have) > 0 && w.c.held.Load():
			// While the index loads a stored name may go (and be
			// stored again), or move while it is its file's one; other
			// changes of it wait for the index.
			op = []string{"load", "load", "unlink", "rename"}[w.r.IntN(4)]
			if op == "rename" && len(k.have) > 1 {
				op = "load"
			}
		case len(k.have) > 0 && w.namespace && len(k.have) == 1:
			op = []string{"link", "rename", "load"}[w.r.IntN(3)]
		case len(k.have) > 0:
			op = []string{"link", "rename", "rename", "unlink", "load", "load"}[w.r.IntN(6)]
		}
		before, held := len(k.have), w.c.held.Load()
		err := w.do(k, op)
		k.note("%s %v -> %v %v", op, before, err, k.have)
		if err == nil {
			if held && op != "store" {
				w.c.count(w.c.ops, op+" begun while loading")
			}
			w.c.count(w.c.ops, op)
			w.done.Add(1)
			continue
		}
		if w.killed.Load() {
			k.uncertain = true
			w.c.count(w.c.inflight, op)
		} else {
			w.c.t.Errorf("worker %d: %s %s: %v; history %q", w.id, op, k.key, err, k.hist)
		}
		return
	}
}

func (k *crashKey) note(format string, args ...any) {
	k.hist = append(k.hist, fmt.Sprintf(format, args...))
	if len(k.hist) > 8 {
		k.hist = k.hist[1:]
	}
}

func (c *crashLoop) count(m map[string]int, op string) {
	c.mu.Lock()
	m[op]++
	c.mu.Unlock()
}

// evicted records what an ENOENT for a name the key had says: the object
// was evicted, and eviction takes every name.
func (w *crashWorker) evicted(k *crashKey) error {
	k.have = map[string]bool{}
	k.ino = 0
	k.evicted = true
	return nil
}

func (w *crashWorker) do(k *crashKey, op string) error {
	switch op {
	case "store":
		return w.store(k)
	case "load":
		data, err := os.ReadFile(filepath.Join(w.c.mp, w.some(k)))
		if errors.Is(err, fs.ErrNotExist) {
			return w.evicted(k)
		}
		if err == nil {
			err = checkObject(data, k.key, k.size)
		}
		return err
	case "unlink":
		name := w.some(k)
		err := unix.Unlink(filepath.Join(w.c.mp, name))
		if err == unix.ENOENT {
			return w.evicted(k)
		}
		if err == nil {
			delete(k.have, name)
		}
		return err
	}
	free := w.free(k)
	if len(free) == 0 {
		return nil
	}
	src, dst := w.some(k), free[w.r.IntN(len(free))]
	os.MkdirAll(filepath.Dir(filepath.Join(w.c.mp, dst)), 0o755)
	call := unix.Link
	if op == "rename" {
		call = unix.Rename
	}
	err := call(filepath.Join(w.c.mp, src), filepath.Join(w.c.mp, dst))
	if err == unix.ENOENT {
		return w.evicted(k)
	}
	if err == nil {
		k.have[dst] = true
		if op == "rename" {
			delete(k.have, src)
		}
	}
	return err
}

func (w *crashWorker) store(k *crashKey) error {
	data := w.buf[:k.size]
	fillObject(data, k.key)
	wrote, err := w.cl.store(k.key, data)
	final := filepath.Join(w.c.mp, k.locs[0])
	if err == nil && !wrote && (w.c.goneFromStore(k.locs[0]) || !w.c.listed(k.locs[0])) {
		// The kernel still had the name of an object evicted a moment
		// ago: an eviction drops the name from the daemon's index at
		// once, and then, each on its own time, invalidates the kernel's
		// entry and unlinks the stored name (a doomed name, reaped
		// later). So the stored file may still be there too; the index
		// (a listing) says the name is gone all the same.
		if !waitFor(func() bool { return unix.Stat(final, new(unix.Stat_t)) == unix.ENOENT }) {
			return fmt.Errorf("%s still served %v after its object left the store", k.locs[0], hangGuard)
		}
		w.c.count(w.c.ops, "store-saw-stale-entry")
		wrote, err = w.cl.store(k.key, data)
	}
	switch {
	case errors.Is(err, unix.ENOSPC):
		w.c.count(w.c.ops, "store-enospc")
		return nil
	case errors.Is(err, errLostPublish):
		w.c.count(w.c.ops, "store-temp-evicted")
		return nil
	case err != nil:
		return err
	case !wrote:
		_, err := os.Lstat(filepath.Join(w.c.store, "data", k.locs[0]))
		return fmt.Errorf("the store found %s present, which no completed operation left (in the store: %v)", k.locs[0], err)
	}
	k.have = map[string]bool{k.locs[0]: true}
	var st unix.Stat_t
	if unix.Stat(final, &st) == nil {
		k.ino = st.Ino
	}
	return nil
}

// listed reports whether the daemon's index has rel: a listing through
// the mount, which the daemon answers from its index, where a stat may
// be answered from the kernel's entry cache. A listing that fails says
// nothing, and counts as listed.
func (c *crashLoop) listed(rel string) bool {
	ents, err := os.ReadDir(filepath.Join(c.mp, filepath.Dir(rel)))
	if err != nil {
		return true
	}
	for _, e := range ents {
		if e.Name() == filepath.Base(rel) {
			return true
		}
	}
	return false
}

// goneFromStore reports whether the store holds no file at rel.
func (c *crashLoop) goneFromStore(rel string) bool {
	_, err := os.Lstat(filepath.Join(c.store, "data", rel))
	return errors.Is(err, fs.ErrNotExist)
}

func (w *crashWorker) some(k *crashKey) string {
	var names []string
	for n := range k.have {
		names = append(names, n)
	}
	sort.Strings(names)
	return names[w.r.IntN(len(names))]
}

func (w *crashWorker) free(k *crashKey) []string {
	var out []string
	for _, l := range k.locs {
		if !k.have[l] {
			out = append(out, l)
		}
	}
	return out
}

// evictedLine is the daemon's debug line of an eviction, said before its
// names go ("dropping") and after ("evicted"): a kill between the two,
// in an admission that evicted several objects at once, left up to six
// of them unexplained by the "evicted" lines alone (a fresh-clone CI run).
var evictedLine = regexp.MustCompile(`\t(?:evicted\t|dropping\t\{"why": "evicted", )\{?"id": (\d+)`)

// checkStore looks at the store the killed daemon left: every object
// whose operations completed is there under exactly its names, complete
// and not marked as being written, or gone by an eviction (or marked by
// one under way).
func (c *crashLoop) checkStore(d *daemon) {
	t := c.t
	files := storeFiles(t, c.store)
	marks := writingMarks(t, c.store)
	logged := map[uint64]bool{}
	for _, m := range evictedLine.FindAllStringSubmatch(d.out.String(), -1) {
		id, _ := strconv.ParseUint(m[1], 10, 64)
		logged[id] = true
	}
	c.evictions += len(logged)
	unlogged := 0
	for _, k := range c.keys {
		if k.uncertain {
			continue
		}
		var present, absent, revived []string
		evicting := false
		for _, l := range k.locs {
			st, ok := files[l]
			switch {
			case ok && len(k.have) == 0 && k.evicted && st.Size == int64(k.size) && !marks[st.Ino]:
				// The kill cut its eviction short between the drop
				// from the index and the unlinks: it comes back.
				revived = append(revived, l)
			case ok && len(k.have) == 0 && k.evicted && marks[st.Ino]:
				// Likewise, but marked (more than one name): the
				// next start deletes it.
			case ok && k.have[l] && len(k.have) > 1 && marks[st.Ino]:
				// An eviction marks an object with more than one
				// name before it unlinks them one by one: the kill
				// fell in between, and the next start deletes it
				// whole. (The daemon's guard may have emptied it
				// meanwhile, as it empties every marked file once
				// the daemon is dead.)
				evicting = true
			case ok && !k.have[l]:
				t.Errorf("after kill: %s is in the store, but its last operation removed it or never made it (have %v)", l, k.have)
			case ok && (st.Size != int64(k.size) || marks[st.Ino]):
				t.Errorf("after kill: completed object %s has %d bytes (want %d), marked incomplete %v; history %q", l, st.Size, k.size, marks[st.Ino], k.hist)
			case ok:
				present = append(present, l)
			case k.have[l]:
				absent = append(absent, l)
			}
		}
		if len(revived) > 0 {
			unlogged++
			k.have = map[string]bool{}
			for _, l := range revived {
				k.have[l] = true
			}
			k.note("eviction cut short by the kill: %v", revived)
		}
		k.evicted = false
		if len(present) > 0 && len(absent) > 0 {
			t.Errorf("after kill: %s has names %v in the store but lost %v; history %q", k.key, present, absent, k.hist)
		}
		if len(present) == 0 && (len(absent) > 0 || evicting) {
			// Evicted while the daemon ran: eviction removes the
			// stored names, then logs the ID; a kill can fall in
			// between for one victim per writer in flight.
			if k.ino != 0 && !logged[k.ino] {
				unlogged++
			}
			k.have = map[string]bool{}
			k.note("evicted before the kill")
		}
	}
	if unlogged > 4 {
		c.lost += unlogged
		t.Errorf("after kill: %d completed objects vanished from the store without an eviction logged", unlogged)
	}
}

// checkMount reads the remounted store: each object whose operations
// completed is served under exactly the names checkStore found, byte for
// byte; objects an interrupted operation touched are whatever is served,
// but exact; finished temp files a kill left before their link are
// exact too, and deleted as LMCache's next store would.
func (c *crashLoop) checkMount(evicted int) {
	t := c.t
	seen := map[*crashKey]map[string]uint64{}
	err := filepath.WalkDir(c.mp, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(c.mp, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			key, size, ok := objectKey(data)
			if !ok || checkObject(data, key, size) != nil {
				t.Errorf("after remount: temp file %s is served incomplete (%d bytes)", rel, len(data))
			}
			c.tmpLeft++
			return os.Remove(p)
		}
		k, ok := c.names[e.Name()]
		if !ok || !contains(k.locs, rel) {
			t.Errorf("after remount: unexpected file %s", rel)
			return nil
		}
		if err := checkObject(data, k.key, k.size); err != nil {
			t.Errorf("after remount: %s: %v", rel, err)
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return err
		}
		if seen[k] == nil {
			seen[k] = map[string]uint64{}
		}
		seen[k][rel] = st.Ino
		return nil
	})
	if err != nil {
		t.Fatalf("walking the remounted store: %v", err)
	}
	for _, k := range c.keys {
		got := seen[k]
		if !k.uncertain && len(got) == 0 && len(k.have) > 0 && evicted > 0 {
			// The start evicted it to fit: a kill while the index
			// loaded can leave the store past the capacity (stores
			// while loading may go past it until the index evicts).
			evicted--
			c.startEvictions++
			k.note("evicted at the start")
		} else if !k.uncertain {
			for l := range k.have {
				if _, ok := got[l]; !ok {
					t.Errorf("after remount: completed object %s is missing", l)
					c.lost++
				}
			}
			for l := range got {
				if !k.have[l] {
					t.Errorf("after remount: %s is served, but no completed operation left it", l)
				}
			}
		}
		k.note("remount: %v", got)
		k.uncertain, k.have, k.ino = false, map[string]bool{}, 0
		for l, ino := range got {
			if k.ino != 0 && ino != k.ino {
				t.Errorf("after remount: the names of %s are different inodes: %v", k.key, got)
			}
			k.have[l], k.ino = true, ino
			c.verified++
		}
	}
}

var startEvictedLine = regexp.MustCompile(`store loaded.*"evicted_to_fit": (\d+)`)

// startEvicted is how many objects daemon d's start evicted to fit the
// capacity ("evicted_to_fit" of its "store loaded" line).
func startEvicted(t *testing.T, d *daemon) int {
	m := startEvictedLine.FindStringSubmatch(d.outSoFar())
	if m == nil {
		t.Fatalf("no \"store loaded\" line with evicted_to_fit in the daemon's output:\n%s", d.outSoFar())
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
