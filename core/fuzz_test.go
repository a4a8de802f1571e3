package core

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/ledger"
)

// FuzzCore drives one store through a sequence of operations read from
// the input, two bytes each: stores (finished at once, or left open to
// be finished, released or crashed later), rewrites in place (O_TRUNC)
// and appends left open the same way, readers held open, links,
// renames and unlinks across two directories, checkpoints, clean
// restarts, crashes, the clock past the grace and audits, on a cache a
// few objects fill, so evictions and refusals come often. A model
// follows every name from the results the core gave (and the drops it
// reported). After each operation:
//   - the ledger's invariants hold;
//   - every name the model has is served, as the same object as its
//     other names, with the bytes its writer wrote once finished; no
//     other name is served;
//   - with no handle open, used bytes == the charges of the objects
//     the names hold == the charges of the files the store holds.
//
// After a crash, what a writer still had open is gone with every name
// it had, unless no byte of it changed since a writer opened it
// complete (see untouched), and everything finished is served, bytes
// and all.
//
// `go test ./core` runs the seeds; `go test -fuzz FuzzCore ./core`
// searches (make test runs it for a count of inputs).
func FuzzCore(f *testing.F) {
	for _, seed := range fuzzCoreSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, ops []byte) { runFuzzCore(t, ops) })
}

// fuzzCoreSeeds: stores, links and renames across the directories, then
// a crash; a writer left open at a crash; a full cache evicting, with
// the clock past the grace; a link and a rename of a writer's name;
// a reader held across an unlink; a clean restart with a writer open;
// a crash after a writer's close, another writer of the object open.
var fuzzCoreSeeds = []string{
	"\x00\x01\x00\x02\x00\x03\x06\x00\x07\x11\x08\x02\x09\x01\x09\x02",
	"\x02\x00\x02\x03\x04\x01\x09\x02\x00\x05\x09\x01",
	"\x00\x70\x00\x71\x00\x72\x00\x73\x09\x03\x00\x74\x09\x00\x09\x02",
	"\x02\x01\x06\x09\x07\x21\x03\x00\x09\x00\x02\x04\x08\x04\x09\x02\x09\x04",
	"\x00\x00\x04\x00\x08\x00\x00\x00\x05\x00\x09\x01\x09\x02",
	"\x01\x0f\x01\x1f\x02\x2f\x09\x03\x01\x3f\x06\x05\x07\x13\x09\x00\x09\x02\x09\x04",
	"\x02\x10\x03\x08\x09\x02\x04\x10",
}

// TestFuzzCoreSeeds: the seeds do what they are for. A core that refused
// every store (ErrNoSpace is allowed anywhere) would pass each of them.
func TestFuzzCoreSeeds(t *testing.T) {
	var total fuzzCounts
	for _, seed := range fuzzCoreSeeds {
		total.add(runFuzzCore(t, []byte(seed)))
	}
	t.Logf("%+v", total)
	if total.finished == 0 || total.evicted == 0 || total.halfGone == 0 || total.kept == 0 || total.refused == 0 || total.keptClosed == 0 {
		t.Fatalf("the seeds exercise too little: %+v", total)
	}
}

// fuzzCounts is what a run did.
type fuzzCounts struct {
	finished int // stores finished
	evicted  int // objects the core evicted
	refused  int // operations refused for space
	halfGone int // writers open at a crash, whose names went
	// keptClosed: objects a writer had open at a crash, kept as another
	// writer's close left them (see Core.remark)
	keptClosed int
	kept       int // names served again after a restart
}

func (c *fuzzCounts) add(o fuzzCounts) {
	c.finished += o.finished
	c.evicted += o.evicted
	c.refused += o.refused
	c.halfGone += o.halfGone
	c.kept += o.kept
	c.keptClosed += o.keptClosed
}

// runFuzzCore runs ops (see FuzzCore), then a crash, checking after
// each.
func runFuzzCore(t *testing.T, ops []byte) fuzzCounts {
	if len(ops) > 128 {
		ops = ops[:128]
	}
	m := newFuzzCore(t)
	defer m.stop()
	for i := 0; i+1 < len(ops); i += 2 {
		what := m.step(ops[i], ops[i+1])
		t.Logf("op %d: %s", i/2, what)
		if err := m.check(); err != nil {
			t.Fatalf("after op %d (%s): %v", i/2, what, err)
		}
	}
	m.restart(false)
	if err := m.check(); err != nil {
		t.Fatalf("after the last crash: %v", err)
	}
	return m.counts
}

const (
	fuzzUnit     = 8 * kib
	fuzzCapacity = 16 * fuzzUnit // a few objects of up to 8 units
	fuzzGrace    = time.Second
)

// fuzzCore is a core under test and the model of what it serves.
type fuzzCore struct {
	t     *testing.T
	dir   string
	clock *testClock
	c     *Core
	dirs  []blob.ID // the root and "d"
	// names: every name the core serves, and its object.
	names map[blob.Name]blob.ID
	// objs: every object a name or a handle holds.
	objs   map[blob.ID]*fuzzObj
	open   []*fuzzHandle
	fills  byte
	counts fuzzCounts
}

// fuzzClient is the client thread of the model's closes, and of some
// of its creates: this process.
var fuzzClient = Client(os.Getpid())

// fuzzObj is what an object holds: size bytes of fill.
type fuzzObj struct {
	size     int
	fill     byte
	finished bool // its writers released it
	writers  int  // writers open
	// base is the size a refused writer leaves it at: what it held when
	// its first writer opened it, or -1 if a writer made or truncated it
	// (a refusal then removes it).
	base int
	// touched: a write reached it since its first writer opened it.
	touched bool
	// asClosed: a writer's close admitted it as it is, not empty, and
	// nothing wrote it since (see Core.remark).
	asClosed bool
}

type fuzzHandle struct {
	h      *Handle
	writer bool
	byMe   bool // created by fuzzClient, whose close records (Core.remark)
}

var fuzzFiles = []string{"a", "b", "c"}

func newFuzzCore(t *testing.T) *fuzzCore {
	m := &fuzzCore{t: t, dir: t.TempDir(), clock: &testClock{}, names: map[blob.Name]blob.ID{}, objs: map[blob.ID]*fuzzObj{}}
	m.start()
	d, _, err := m.c.Mkdir(blob.RootID, "d", 0o755, blob.Owner{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	m.dirs = []blob.ID{blob.RootID, d}
	return m
}

// start opens the core over the store, audits it as a start from a
// checkpoint does (here, before any operation: the same result as the
// background audit's, in an order the input decides alone), and says
// how many objects the start evicted to fit the capacity.
//
// Those can be more than needed after a crash: an object rewritten in
// place since the checkpoint is restored at the size the checkpoint
// gave it (its directory did not change) until the audit reads the new
// one, and the start evicts by the sizes it has.
func (m *fuzzCore) start() (evicted int) {
	store, err := blob.Open(m.dir)
	if err != nil {
		m.t.Fatal(err)
	}
	c, rep, err := Open(store, Config{Capacity: fuzzCapacity, Grace: fuzzGrace, Now: m.clock.Now, After: fuzzAfter})
	if err != nil {
		m.t.Fatal(err)
	}
	m.counts.evicted += rep.Evicted
	audit := c.auditAtStart
	c.auditAtStart = false
	m.c = c
	c.Start(m.dropped)
	if audit {
		if _, err := c.Audit(); err != nil {
			m.t.Fatal(err)
		}
	}
	return rep.Evicted
}

// dropped takes the names of an object the core dropped out of the
// model.
func (m *fuzzCore) dropped(d Drop) {
	if d.Why == Evicted {
		m.counts.evicted++
	}
	for _, n := range d.Names {
		if m.names[n] == d.ID {
			delete(m.names, n)
		}
	}
}

func (m *fuzzCore) stop() {
	if m.c == nil {
		return
	}
	for _, fh := range m.open {
		m.release(fh.h, fh.byMe)
	}
	m.open = nil
	m.c.Close()
	m.c = nil
}

// name is the name arg picks: one of three in one of two directories.
func (m *fuzzCore) name(arg byte) blob.Name {
	return blob.Name{Parent: m.dirs[arg%2], Name: fuzzFiles[int(arg/2)%len(fuzzFiles)]}
}

// step runs the operation op picks, with arg, and says what it was.
func (m *fuzzCore) step(op, arg byte) string {
	switch op % 12 {
	case 11:
		n := m.name(arg)
		id, ok := m.names[n]
		h, err := m.c.Open(id, os.O_WRONLY|os.O_APPEND, true, nil)
		if m.allowed("open for writing", err, ok, ErrStale) {
			if o := m.objs[id]; o.writers == 0 {
				o.base, o.finished, o.touched, o.asClosed = o.size, false, false, false
			}
			m.objs[id].writers++
			m.write(h, 1+int(arg>>4)%4)
			m.open = append(m.open, &fuzzHandle{h: h, writer: true})
		}
		return fmt.Sprintf("append to %v, left open", n)
	case 10:
		// As the kernel does it: an open, then a truncate through it.
		n := m.name(arg)
		id, ok := m.names[n]
		h, err := m.c.Open(id, os.O_WRONLY|os.O_TRUNC, true, nil)
		if m.allowed("open for writing", err, ok, ErrStale) {
			if err := m.c.Truncate(Interrupt{}, id, h.File(), 0); err != nil {
				m.t.Fatalf("truncate %v through its writer: %v", n, err)
			}
			o := m.objs[id]
			m.fills++
			o.size, o.fill, o.finished, o.base, o.asClosed = 0, m.fills, false, -1, false
			o.writers++
			m.write(h, 1+int(arg>>4)%4)
			m.open = append(m.open, &fuzzHandle{h: h, writer: true})
		}
		return fmt.Sprintf("rewrite %v, left open", n)
	case 0, 1:
		// Op 1's by this process, whose close records the object
		// complete in its crash marker (see Core.remark); op 0's by a
		// client not known.
		n := m.name(arg)
		h := m.create(n, 1+int(arg>>4)%8, Client(op%12)*fuzzClient)
		if h != nil {
			m.release(h, op%12 == 1)
		}
		return fmt.Sprintf("store %v", n)
	case 2:
		n := m.name(arg)
		if h := m.create(n, 1+int(arg>>4)%4, fuzzClient); h != nil {
			m.open = append(m.open, &fuzzHandle{h: h, writer: true, byMe: true})
		}
		return fmt.Sprintf("store %v, left open", n)
	case 3:
		if len(m.open) > 0 {
			fh := m.open[int(arg)%len(m.open)]
			switch {
			case !fh.writer:
			case arg&8 != 0:
				// A close of a duplicate of its descriptor: the handle
				// stays open.
				m.flush(fh.h, fh.byMe)
				return "close a duplicate of an open writer"
			default:
				m.write(fh.h, 1+int(arg>>4)%4)
			}
		}
		return "write more to an open writer"
	case 4:
		n := m.name(arg)
		id, ok := m.names[n]
		h, err := m.c.Open(id, os.O_RDONLY, false, nil)
		if m.allowed("open", err, ok, ErrStale) {
			m.open = append(m.open, &fuzzHandle{h: h})
		}
		return fmt.Sprintf("open %v", n)
	case 5:
		if len(m.open) > 0 {
			i := int(arg) % len(m.open)
			fh := m.open[i]
			m.open = slices.Delete(m.open, i, i+1)
			m.release(fh.h, fh.byMe)
		}
		return "release a handle"
	case 6:
		from, to := m.name(arg), m.name(arg>>3)
		id, ok := m.names[from]
		_, err := m.c.Link(id, to.Parent, to.Name)
		if m.allowed("link", err, ok, ErrExists, ErrStale) {
			m.names[to] = id
		}
		return fmt.Sprintf("link %v to %v", from, to)
	case 7:
		from, to := m.name(arg), m.name(arg>>3)
		id, ok := m.names[from]
		err := m.c.Rename(from.Parent, from.Name, to.Parent, to.Name, 0)
		// Two names of one object: rename(2) leaves both.
		if m.allowed("rename", err, ok) && m.names[to] != id {
			delete(m.names, from)
			m.names[to] = id
		}
		return fmt.Sprintf("rename %v to %v", from, to)
	case 8:
		// A name already gone is what an unlink wants: no error.
		n := m.name(arg)
		if err := m.c.Unlink(n.Parent, n.Name); err != nil {
			m.t.Fatalf("unlink %v: %v", n, err)
		}
		delete(m.names, n)
		return fmt.Sprintf("unlink %v", n)
	}
	switch arg % 5 {
	case 0:
		if err := m.c.Checkpoint(); err != nil {
			m.t.Fatalf("checkpoint: %v", err)
		}
		return "checkpoint"
	case 1:
		m.restart(true)
		return "clean restart"
	case 2:
		m.restart(false)
		return "crash"
	case 3:
		m.clock.Skip(2 * fuzzGrace)
		return "the clock past the grace"
	}
	if _, err := m.c.Audit(); err != nil {
		m.t.Fatalf("audit: %v", err)
	}
	return "audit"
}

// allowed says whether err is nil, else fails the test unless it is
// one the contract allows: ErrNotFound where the model has no such name
// (named false), ErrNoSpace, or one of also.
func (m *fuzzCore) allowed(op string, err error, named bool, also ...error) bool {
	switch {
	case err == nil:
		if !named {
			m.t.Fatalf("%s of a name the model does not have succeeded", op)
		}
		return true
	case errors.Is(err, ErrNotFound) && !named:
		return false
	case errors.Is(err, ErrNoSpace):
		m.counts.refused++
		return false
	}
	for _, e := range also {
		if errors.Is(err, e) {
			return false
		}
	}
	m.t.Fatalf("%s: %v", op, err)
	return false
}

// create makes n with units of bytes written, its writer left open (nil
// if refused), by client thread by (0: not known).
func (m *fuzzCore) create(n blob.Name, units int, by Client) *Handle {
	_, taken := m.names[n]
	h, err := m.c.create(by, n.Parent, n.Name, 0o644, blob.Owner{UID: -1, GID: -1}, true)
	switch {
	case errors.Is(err, ErrExists) && taken:
		return nil
	case err != nil && taken:
		m.t.Fatalf("create of a taken name %v: %v, want ErrExists", n, err)
	case !m.allowed("create", err, true):
		return nil
	}
	m.fills++
	m.objs[h.ID()] = &fuzzObj{fill: m.fills, writers: 1, base: -1}
	m.names[n] = h.ID()
	m.write(h, units)
	return h
}

// write appends units of the object's fill (stopping at a refusal).
func (m *fuzzCore) write(h *Handle, units int) {
	o := m.objs[h.ID()]
	buf := make([]byte, fuzzUnit)
	for i := range buf {
		buf[i] = o.fill
	}
	for range units {
		n, err := h.Write(Interrupt{}, buf, int64(o.size))
		o.size += n
		o.touched = o.touched || n > 0
		o.asClosed = o.asClosed && n == 0
		if !m.allowed("write", err, true) {
			return
		}
	}
}

// release closes h's last descriptor (flush) and releases it; a
// writer's object is finished with its last.
func (m *fuzzCore) release(h *Handle, byMe bool) {
	if h.Writable() {
		o := m.objs[h.ID()]
		m.flush(h, byMe)
		if o.writers--; o.writers == 0 {
			o.finished = true
			m.counts.finished++
		}
	}
	h.Release()
}

// flush is a close(2) of a descriptor of writer h, by fuzzClient. A
// refused one takes its object back to its base size, or (reported as a
// drop) takes its names. One by h's creator, the object's one writer,
// records the object as it is in its crash marker (see Core.remark).
func (m *fuzzCore) flush(h *Handle, byMe bool) {
	o := m.objs[h.ID()]
	switch {
	case !m.allowed("flush", h.FlushBy(Interrupt{}, fuzzClient), true):
		if o.base >= 0 {
			o.size = o.base
		}
		o.asClosed = false
	case byMe && o.writers == 1 && o.size > 0:
		o.asClosed = true
	}
}

// restart stops the core, cleanly (every handle released first, as a
// clean unmount waits for) or as a crash does (the handles abandoned,
// no checkpoint), and opens it again. The objects keep their names but
// may get new IDs.
func (m *fuzzCore) restart(clean bool) {
	if clean {
		m.stop()
	} else {
		for _, fh := range m.open {
			if fh.writer && m.untouched(fh.h.ID()) {
				o := m.objs[fh.h.ID()]
				if o.asClosed {
					m.counts.keptClosed++
				}
				o.writers, o.finished = 0, true
				continue
			}
			if fh.writer {
				for n, id := range m.names {
					if id == fh.h.ID() {
						delete(m.names, n) // half-written: gone
						m.counts.halfGone++
					}
				}
			}
		}
		m.open = nil
		close(m.c.done)
		m.c.wg.Wait()
		m.c.store.Close()
		m.c = nil
		// The dead daemon's guard: its writers died with it.
		blob.VetClosed(filepath.Join(m.dir, blob.WritingName), func(blob.ID) bool { return false }, 0)
	}
	evicted := m.start()
	// A start that walks the store numbers its directories afresh.
	d, _, err := m.c.Lookup(blob.RootID, "d")
	if err != nil || !d.Dir {
		m.t.Fatalf("after a restart (clean %v): directory d: %v", clean, err)
	}
	names := map[blob.Name]blob.ID{}
	for n, id := range m.names {
		if n.Parent == m.dirs[1] {
			n.Parent = d.ID
		}
		names[n] = id
	}
	m.names, m.dirs[1] = names, d.ID
	// Re-key the model by what each name now resolves to; names of one
	// object must still be one object, and one the start evicted has
	// none.
	objs, renamed, lost := map[blob.ID]*fuzzObj{}, map[blob.ID]blob.ID{}, map[blob.ID]bool{}
	for _, n := range slices.SortedFunc(maps.Keys(m.names), func(a, b blob.Name) int {
		return int(a.Parent-b.Parent)*8 + int(a.Name[0]) - int(b.Name[0])
	}) {
		old := m.names[n]
		e, _, err := m.c.Lookup(n.Parent, n.Name)
		switch {
		case errors.Is(err, ErrNotFound) && evicted > 0:
			lost[old] = true
			delete(m.names, n)
			continue
		case err != nil:
			m.t.Fatalf("after a restart (clean %v): %v (%s) is not served: %v", clean, n, m.describe(old), err)
		}
		if was, ok := renamed[old]; ok && was != e.ID {
			m.t.Fatalf("after a restart: two names of one object are two objects (%d, %d)", was, e.ID)
		}
		renamed[old], objs[e.ID], m.names[n] = e.ID, m.objs[old], e.ID
		m.counts.kept++
	}
	for id := range lost {
		if _, ok := renamed[id]; ok {
			m.t.Fatalf("after a restart: object %d (%s) lost some of its names", id, m.describe(id))
		}
	}
	if len(lost) > evicted {
		m.t.Fatalf("after a restart: %d objects are gone, the start evicted %d", len(lost), evicted)
	}
	m.objs = objs
}

// untouched says whether object id, open for writing, is complete as
// it was when its first writer opened it, or as a writer's close left
// it: it was complete then (no O_TRUNC), or the close admitted it, no
// write has reached it since (each was refused before it did), and its
// crash marker is intact (it records the mtime, which a start finds
// unchanged). A crash keeps it, with its names and its bytes.
func (m *fuzzCore) untouched(id blob.ID) bool {
	o := m.objs[id]
	m.c.writersMu.Lock()
	defer m.c.writersMu.Unlock()
	switch mark := m.c.intact[id]; {
	case mark.Mtime == 0:
		return false
	case mark.Closed:
		return o.asClosed
	}
	return o.base >= 0 && !o.touched
}

func (m *fuzzCore) describe(id blob.ID) string {
	if o := m.objs[id]; o != nil {
		return fmt.Sprintf("%d bytes of %d, finished %v", o.size, o.fill, o.finished)
	}
	return "unknown"
}

// check compares the core with the model (see FuzzCore).
func (m *fuzzCore) check() error {
	if err := m.c.CheckInvariants(); err != nil {
		return err
	}
	charges := map[blob.ID]int64{}
	for _, dir := range m.dirs {
		for _, f := range fuzzFiles {
			n := blob.Name{Parent: dir, Name: f}
			want, named := m.names[n]
			e, a, err := m.c.Lookup(dir, f)
			switch {
			case !named && err == nil:
				return fmt.Errorf("%v is served (object %d, %d bytes), the model has no such name", n, e.ID, a.Size)
			case !named && errors.Is(err, ErrNotFound):
				continue
			case err != nil:
				return fmt.Errorf("%v (%s): %v", n, m.describe(want), err)
			case e.ID != want:
				return fmt.Errorf("%v is object %d, want %d", n, e.ID, want)
			}
			o := m.objs[want]
			if o.finished {
				if a.Size != int64(o.size) {
					return fmt.Errorf("%v: %d bytes, its writer wrote %d", n, a.Size, o.size)
				}
				if err := m.readBack(n, e.ID, o); err != nil {
					return err
				}
			}
			charges[e.ID] = ledger.Charge(a.Size)
		}
	}
	if len(m.open) > 0 {
		return nil
	}
	var held int64
	for _, c := range charges {
		held += c
	}
	st := m.c.Stats()
	if st.UsedBytes != held || st.Objects != int64(len(charges)) || st.PinnedObjects != 0 {
		return fmt.Errorf("at rest: %d objects, %d bytes used, %d pinned; the names hold %d objects of %d bytes",
			st.Objects, st.UsedBytes, st.PinnedObjects, len(charges), held)
	}
	onDisk, err := storeCharges(m.c.store)
	if err != nil {
		return err
	}
	if onDisk != held {
		return fmt.Errorf("at rest: the store holds %d bytes, the names %d", onDisk, held)
	}
	return nil
}

// readBack reads a finished object through a handle of its own and
// compares it with what its writer wrote.
func (m *fuzzCore) readBack(n blob.Name, id blob.ID, o *fuzzObj) error {
	h, err := m.c.Open(id, os.O_RDONLY, false, nil)
	if err != nil {
		return fmt.Errorf("open %v to read it back: %v", n, err)
	}
	defer h.Release()
	got := make([]byte, o.size+1)
	k, _ := h.File().ReadAt(got, 0)
	if k != o.size {
		return fmt.Errorf("%v: read %d bytes, its writer wrote %d", n, k, o.size)
	}
	for i, b := range got[:k] {
		if b != o.fill {
			return fmt.Errorf("%v: byte %d is %d, its writer wrote %d", n, i, b, o.fill)
		}
	}
	return nil
}

// fuzzAfter is the fuzzed cores' clock for waits: a publish's or an
// appender's wait for a writer's release (releaseWait) is over at once,
// since no release comes while an operation runs (the operations are
// sequential); every other wait (background loops) is the wall clock's.
func fuzzAfter(d time.Duration) <-chan time.Time {
	if d == releaseWait {
		fired := make(chan time.Time, 1)
		fired <- time.Time{}
		return fired
	}
	return time.After(d)
}
