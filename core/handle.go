package core

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/internal/lockorder"
	"github.com/kvfs/kvfs/ledger"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Handle is an open object: its stored file and its pin in the ledger,
// which lives exactly as long as the handle. A writer also holds a
// reservation from open to its release (not its first close: see Flush),
// and the object's crash marker while it may be writing.
type Handle struct {
	c     *Core
	id    blob.ID
	file  *os.File
	write bool
	// writing: h holds one of id's crash markers; GUARDED_BY(c.writersMu).
	writing bool
	// refused: what h's writer stored is not the object it meant (it
	// passed the capacity, or a close was refused): its close removes
	// it.
	refused atomic.Bool
	// gap is what writes through h refused for space left unwritten:
	// such a write stored nothing its writer counts on, and write(2)'s
	// ENOSPC lets it write again. The object goes at its close unless
	// later writes through h fill the range again, from its start (a
	// retry, in one piece or several, or a rewrite from the start). A
	// writer retrying the piece on the same descriptor once room came
	// free had every later write succeed and its close answer ENOSPC,
	// its object gone (an outside tester, 2 of 2); one that skips the
	// piece, or retries only part of it, leaves a hole and is refused
	// (a re-test: a retry of half a piece, cleared at first, published
	// 512 KiB of zeros). An appender that skips the piece cannot be told
	// from one that retries it: both write at the end.
	gap refusedRange
	// base: the size its object was admitted at when h began writing,
	// which a write through the daemon below it overwrites (see
	// Core.changedBelow); -1: none (a new object, or overwritten already).
	base atomic.Int64
	// unreserved: a writer that opened without room to write into (see
	// Unreserved): each of its writes is to be admitted before it lands.
	unreserved bool
	// want: the reservation an unreserved writer was to have
	// (wantGuess: none known at its create); its first write waits for it
	// whole (see Write). Taken (0) by that write.
	want atomic.Int64
	// waited: how long its admissions have waited for room so far, in
	// nanoseconds; the wait limit bounds them together (see admit).
	waited atomic.Int64
	// direct: the process that created the object stores under final
	// names; its grace ends at h's release (see clients.go).
	direct atomic.Bool
	// mayBeMapped: the kernel served h from its stored file, and h is
	// the last such handle of the object (see mappings); set before its
	// release.
	mayBeMapped bool
	// temp: the object was created under a name that looks like a temp
	// file's (tempName): it keeps its grace whoever made it.
	temp bool
	// by: the process that created the object (nil: not known).
	by *proc
	// closedAt: when a close (a FLUSH) of a descriptor of this writer
	// last settled it, unix nanoseconds; 0: none since the poller
	// showed what the close kept (see showKept).
	closedAt atomic.Int64
	// born: the attributes a created handle's file was made with, for
	// its first Attr (nothing can have been written through it yet).
	born atomic.Pointer[unix.Stat_t]
	// mu orders the poller's reads of file with its close (closed).
	mu     lockorder.Mutex
	closed bool
}

// ID is the object's ID.
func (h *Handle) ID() blob.ID { return h.id }

// File is the stored file; it stays open until Release.
func (h *Handle) File() *os.File { return h.file }

// Writable says whether h was opened for writing.
func (h *Handle) Writable() bool { return h.write }

// Unreserved says that h is a writer admitted no room to write into as
// it opened: the cache was full of objects it may not evict yet (their
// grace, readers' pins), or, for an existing object, no free room to
// grow (headroom). Its bytes are admitted as they come, waiting for
// room, so they must come through the core's Write, never straight to
// the stored file (FUSE passthrough): unadmitted there, four such writers
// of 8 MiB held a 48 MiB cache at 80 MiB (an outside tester).
func (h *Handle) Unreserved() bool { return h.unreserved }

// Create makes a new object named name in parent and opens it. A writer
// is admitted its reservation before the name exists, so an object that
// cannot be admitted never appears.
func (c *Core) Create(parent blob.ID, name string, mode uint32, who blob.Owner, write bool) (*Handle, error) {
	return c.create(0, parent, name, mode, who, write)
}

// create is Create by client thread t (0: not known), whose process's
// last objects size the reservation (reservationFor), and whose creates
// show whether it stores under final names (clients.go).
func (c *Core) create(t Client, parent blob.ID, name string, mode uint32, who blob.Owner, write bool) (*Handle, error) {
	if c.taken(parent, name) {
		return nil, ErrExists
	}
	id := c.store.NewID()
	c.ledger.Create(id, write)
	h := &Handle{c: c, id: id, write: write, temp: tempName(name)}
	if write {
		c.fitDiskSoon()
		n, borrowed, by := c.reservationFor(t)
		h.by = by
		if by != nil {
			c.ledger.Group(id, by.pid)
		}
		// Learnt before the admission, which may wait for the graces
		// that learning ends (clients.created).
		h.createdBy(t)
		got, want, err := c.reserve(id, n, borrowed)
		if err != nil {
			c.abandon(id, write)
			return nil, err
		}
		h.unreserved = !got
		h.want.Store(want)
	}
	f, st, err := c.createStored(parent, name, id, mode, who)
	if diskRefused(err) && c.fitDisk() {
		// The store's disk or its inodes were full: evicted for them,
		// outside the directory's lock (an eviction reaps names under
		// their directories' locks).
		f, st, err = c.createStored(parent, name, id, mode, who)
	}
	if diskRefused(err) {
		// A store refused for the disk's room or inodes counts as one
		// refused (an outside tester: 1,797 creates failed for inodes
		// with admission_failures at 0).
		c.ledger.Refused()
	}
	if err != nil {
		c.abandon(id, write)
		return nil, err
	}
	h.file = f
	h.born.Store(&st)
	if !write {
		// Born marked incomplete, but no writer will ever finish it: an
		// empty file created read-only is complete now.
		c.clearMarker(id)
		return h, nil
	}
	c.startWriting(h, true, false)
	return h, nil
}

// createStored makes the stored file of a new object and names it,
// under its directory's lock (see order.go), and returns its attributes.
// The reservation is admitted before, as it may evict.
func (c *Core) createStored(parent blob.ID, name string, id blob.ID, mode uint32, who blob.Owner) (*os.File, unix.Stat_t, error) {
	rel, unlock, err := c.takeFreeName(parent, name)
	if err != nil {
		return nil, unix.Stat_t{}, err
	}
	defer unlock()
	f, st, err := c.store.CreateAt(rel, id, mode, who)
	if errors.Is(err, ErrExists) && c.foreignGaveWay(rel, "create", false) {
		// It answered the create ESTALE until the audit (an outside
		// tester: with --allow-other, one user's file kept another's
		// name).
		f, st, err = c.store.CreateAt(rel, id, mode, who)
	}
	if err != nil {
		return nil, st, err
	}
	c.mu.Lock()
	err = c.store.AddFile(parent, name, id, st.Ino)
	c.mu.Unlock()
	if err != nil {
		// Cannot happen: the name and its directory are ours until the
		// lock goes.
		f.Close()
		c.unlinkStored(rel)
		c.clearMarker(id)
		return nil, st, err
	}
	return f, st, nil
}

// foreignGaveWay removes what the store holds at rel, a name the index
// lacks while its directory's lock is held, so that no change of it is
// under way: an entry put there behind kvfs's back, never served, that
// the audit has not adopted yet. A file gives way to op, and with dirs
// an empty directory too; it says whether one did.
func (c *Core) foreignGaveWay(rel, op string, dirs bool) bool {
	if !(dirs && c.store.RmdirAt(rel) == nil || c.store.UnlinkAt(rel) == nil) {
		return false
	}
	c.log.Warn("an entry put in the store behind kvfs's back was in the way of a "+op+"; removed", zap.String("path", rel))
	return true
}

// headroom reserves, for a writer of an existing object on a passthrough
// mount, room to grow past what the object holds (size; held: the ledger
// knows it) by one object of the usual size r, from free space only, so the open evicts
// nothing; it reports whether it could. Its reservation alone (at most
// what the object holds) admits no growth, and a passthrough writer's
// growth lands before it is admitted: one that found no room writes
// through the core instead (an outside tester: `cat x >> y` into a cache
// full of objects in their grace held it 2 MiB over the capacity). It
// leaves r free for the next stores: no one can take it back while the
// writer has it, and a read-write open or a shared writable mapping
// that wrote nothing held the last free room for as long as it lived,
// every other store waiting out the wait limit, then refused (an
// outside tester: a 12 MiB object held so in 16 MiB, 20 of 20 stores
// of 1-2 MiB refused after 5 s each).
func (c *Core) headroom(id blob.ID, r, size int64, held bool) bool {
	if !c.cfg.Passthrough {
		return true // every write is admitted before it lands
	}
	return held && r > 0 && c.ledger.ReserveFreeLeaving(id, size+r, r) == nil
}

// taken says whether a name exists, so a create that must fail does not
// first reserve (and evict) for nothing.
func (c *Core) taken(parent blob.ID, name string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, err := c.store.Lookup(parent, name)
	return err == nil
}

// abandon takes a created object that never got its name back out of the
// ledger. Its pin goes as a handle's does: the last writer's close may
// evict, and what it evicts loses its names too.
func (c *Core) abandon(id blob.ID, write bool) {
	c.ledger.Unlink(id)
	c.unpin(id, write)
}

// Open opens object id; flags are open(2)'s. via, when given, reopens
// the stored file of an inode that has no name left through one its
// open handles hold. A writer finds the object whole: a truncate comes
// after the open (the kernel's SETATTR), unless the open carries it
// (OpenTruncated).
func (c *Core) Open(id blob.ID, flags int, write bool, via func(flags int) (*os.File, error)) (*Handle, error) {
	c.appending(id, flags, write)
	return c.openWhole(id, c.storedFlags(flags), write, via, true)
}

// appending is what an open(2) for appending to an existing object
// waits for first. An appender writes through the daemon, unless
// another handle of the object is open by passthrough: the kernel keeps
// one I/O mode per object while any handle is open, and a passthrough
// appender's fcntl clearing O_APPEND does not take (see the adapter's
// object.go). A writer whose close came just before (`echo x > f; echo
// y >> f`) is such a handle until its RELEASE, which is in flight: the
// appender waits for it a moment, as a publish does (awaitRelease).
// (An outside tester's test, under load: the appender inherited
// passthrough, and its pwrite at 0 after clearing O_APPEND appended.)
func (c *Core) appending(id blob.ID, flags int, write bool) {
	if write && flags&unix.O_APPEND != 0 && c.cfg.Passthrough {
		c.awaitRelease(id)
	}
}

// OpenTruncated is Open for an open(2) with O_TRUNC: the object is cut
// to 0 bytes first, as CreateOrOpen cuts a name it finds taken, so a
// writer is reserved as a new store is, not as the object it replaces
// (reopenReservation). With the cut in a SETATTR after the open, a
// rewrite grew past twice its old size's reservation unadmitted (an
// outside tester: 1 MiB objects rewritten at 4 MiB held a full cache
// 2 MiB over its capacity, 6 of 6).
func (c *Core) OpenTruncated(id blob.ID, flags int, write bool, via func(flags int) (*os.File, error)) (*Handle, error) {
	c.appending(id, flags, write)
	f, err := c.openStored(id, unix.O_WRONLY, via)
	if err != nil {
		return nil, err
	}
	err = c.Truncate(Interrupt{}, id, f, 0)
	f.Close()
	if err != nil {
		return nil, err
	}
	h, err := c.openWhole(id, c.storedFlags(flags), write, via, false)
	if err == nil && write {
		c.cutAtOpen(id)
	}
	return h, err
}

// openWhole is Open; whole says that a writer finds the object as it
// was published, not cut (see startWriting).
func (c *Core) openWhole(id blob.ID, flags int, write bool, via func(flags int) (*os.File, error), whole bool) (*Handle, error) {
	h, err := c.open(id, flags, write, via, whole)
	if err == nil && !write {
		c.counters.loads.Add(1)
		c.used(h)
	}
	return h, err
}

func (c *Core) open(id blob.ID, flags int, write bool, via func(flags int) (*os.File, error), whole bool) (*Handle, error) {
	if err := c.ledger.Open(id, write); err != nil {
		return nil, ledgerErr(err)
	}
	h := &Handle{c: c, id: id, write: write}
	if write {
		r := c.Reservation()
		size, _, held := c.ledger.Size(id)
		got, _, err := c.reserve(id, reopenReservation(r, size, held), true)
		if err != nil {
			h.unpin()
			return nil, err
		}
		h.unreserved = !got || !c.headroom(id, r, size, held)
	}
	f, err := c.openStored(id, flags, via)
	if errors.Is(err, syscall.EROFS) && !write && flags&unix.O_ACCMODE == unix.O_RDWR {
		// Passthrough opens every stored file read-write (storedFlags);
		// on a store whose file system went read-only a reader still
		// reads.
		f, err = c.openStored(id, flags&^unix.O_ACCMODE|unix.O_RDONLY, via)
	}
	h.file = f
	if err == nil && write {
		// An existing object only: a create's stored file is made with
		// none.
		err = blob.DropSetID(f)
	}
	if err == nil && write {
		err = c.startWriting(h, false, whole)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		h.unpin()
		return nil, err
	}
	return h, nil
}

// openStored opens an object's stored file by its name, or via one held.
func (c *Core) openStored(id blob.ID, flags int, via func(int) (*os.File, error)) (*os.File, error) {
	var f *os.File
	err, proven := c.retryMoved(func() (err error) {
		f, err = c.openPath(id, flags)
		return err
	})
	switch {
	case errors.Is(err, ErrNotFound) && via != nil:
		f, err = via(flags)
	case errors.Is(err, syscall.ENOENT) && proven:
		c.vanished(id, err)
	}
	if errors.Is(err, ErrNotFound) || errors.Is(err, syscall.ENOENT) {
		// The kernel reached the inode by a path that no longer names it:
		// it looks the name up again.
		return nil, ErrStale
	}
	return f, err
}

// wantGuess is the want of a writer created with no size to go by.
const wantGuess = 1

// Write writes through the daemon (no passthrough, or strict capacity):
// admitted before a byte reaches the store (see Config.StrictCapacity).
func (h *Handle) Write(intr Interrupt, data []byte, off int64) (int, error) {
	c, end := h.c, off+int64(len(data))
	c.fitDiskSoon()
	var err error
	want, guess := h.want.Swap(0), false
	if want == wantGuess {
		// No size was known at its create; one may be by now.
		if want = c.Reservation(); want == 0 {
			want, guess = c.guessReservation(h.id), true
		}
	}
	if want > 0 {
		// A writer created without its reservation (no room at its
		// create, where it cannot wait) waits for it whole here, before
		// its first byte: admitted piece by piece, writers that together
		// wrote more than the cache holds each held part of it, none
		// could finish, and all but the oldest were refused (an outside
		// tester's burst of 64 threads storing 4 MiB into 32 MiB). A
		// guess is made again at each try: the room the other writers
		// leave changes as they come and go, and once a store's size
		// is known meanwhile, it is that (a burst's first writers,
		// waiting, each evicted a quarter of the capacity for objects
		// of an eighth: two objects for one, and the cache ended an
		// object short, 2 to 4 runs in 25 of TestBurstLargerThanTheCache).
		err = c.admitWhole(h.id, want, &h.waited, intr, func() (victims, error) {
			if guess {
				if want = c.Reservation(); want == 0 {
					want = c.guessReservation(h.id)
				}
			}
			return c.ledger.Reserve(h.id, want)
		})
		if errors.Is(err, errStalledAlone) {
			// The whole reservation cannot come, and no other writer
			// waits for room: its bytes are admitted alone, as they
			// come (admitWhole).
			err = nil
		}
	}
	_, charge, _ := c.ledger.Size(h.id)
	grow, growFree := c.ledger.Grow, c.ledger.GrowFree
	if c.cfg.StrictCapacity {
		grow, growFree = c.ledger.GrowWithin, c.ledger.GrowWithinFree
	}
	if err == nil {
		err = c.admitFirstFree(h.id, func() error { return growFree(h.id, end) },
			ledger.Charge(end)-charge, &h.waited, intr, func() (victims, error) { return grow(h.id, end) })
	}
	if errors.Is(err, ErrNoSpace) {
		h.gap.refused(off, end)
		if c.cfg.StrictCapacity && ledger.Charge(end) <= c.ledger.Capacity() {
			// Refused past twice its reservation, or with no room:
			// objects are at least this large now. The next writer is
			// reserved for twice it (up to a quarter of the capacity):
			// a connector's next store of the size fits, where the
			// size reached alone took a try for each doubling (an
			// outside tester: 3 tries for 8 MiB, 4 for 16).
			c.published(2 * end)
			c.storedBy(h, 2*end)
		}
	}
	if err == nil {
		err = c.startWriting(h, false, false)
	}
	if err != nil {
		return 0, err
	}
	if off < h.base.Load() {
		// Before the bytes land: a refusal meanwhile must not give the
		// object back as it was.
		c.changedBelow(h.id, off)
		h.base.Store(-1)
	}
	n, err := h.file.WriteAt(data, off)
	if err != nil {
		c.settleShort(h.id, h.file)
	}
	switch {
	case errors.Is(err, unix.ENOSPC):
		// The store's disk, fuller than the ledger: the same answer
		// to the client, admission_failures counts it alike, and the
		// object goes at its close as a refused one does (it stayed,
		// a prefix under its final name, charged: an outside tester).
		c.ledger.Refused()
		h.gap.refused(off, end)
	case err == nil:
		h.gap.wrote(off, end)
	}
	return n, err
}

// refusedRange is the range [lo, hi) of a handle's writes refused for
// space not yet written again (see Handle.gap).
type refusedRange struct {
	open   atomic.Bool // a range is left; read without mu on every write
	mu     sync.Mutex  // a leaf
	lo, hi int64       // GUARDED_BY(mu)
}

// refused notes a write of [off, end) refused for space: the range left
// unwritten spans it and any left before.
func (g *refusedRange) refused(off, end int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open.Load() {
		g.lo, g.hi = off, end
	}
	g.lo, g.hi = min(g.lo, off), max(g.hi, end)
	g.open.Store(true)
}

// wrote notes a write of [off, end) that succeeded: one that covers the
// range's start fills the range up to its end.
func (g *refusedRange) wrote(off, end int64) {
	if !g.open.Load() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if off <= g.lo && end > g.lo {
		g.lo = end
		g.open.Store(g.lo < g.hi)
	}
}

// doomed says whether h's object goes at its close: refused, or a range
// of refused writes not written again (see gap).
func (h *Handle) doomed() bool { return h.refused.Load() || h.gap.open.Load() }

// Truncate sets an object's size, admitted first; f is a writer's stored
// file, or nil to open one. The object is pinned as written meanwhile, so
// it is neither evicted nor reconciled half-way.
func (c *Core) Truncate(intr Interrupt, id blob.ID, f *os.File, size int64) error {
	if err := c.fits(size); err != nil {
		return err
	}
	if err := c.ledger.Open(id, true); err != nil {
		return ledgerErr(err)
	}
	defer c.closeWrite(id)
	defer c.beginTruncate(id)()
	if f == nil {
		var err error
		if f, err = c.openStored(id, unix.O_WRONLY, nil); err != nil {
			return err
		}
		defer f.Close()
	}
	if err := blob.DropSetID(f); err != nil {
		return err
	}
	_, charge, _ := c.ledger.Size(id)
	err := c.admitFirstFree(id, func() error { return c.ledger.SetSizeFree(id, size) },
		ledger.Charge(size)-charge, nil, intr, func() (victims, error) { return c.ledger.SetSize(id, size) })
	if err != nil {
		return err
	}
	c.changedBelow(id, size)
	if err := f.Truncate(size); err != nil {
		c.settleShort(id, f)
		return err
	}
	return nil
}

// fits refuses a size stated outright that is past the whole capacity,
// before the file is opened or anything is admitted or counted: no
// eviction could make room, so it is EFBIG, never ENOSPC ("not now").
// Writes keep ENOSPC: a passthrough writer learns of its excess only at
// close, which can only answer ENOSPC, and a write through the daemon
// answers the same, so a connector sees one errno for an object too
// large to store, however it was written.
func (c *Core) fits(size int64) error {
	if ledger.Charge(size) > c.ledger.Capacity() {
		return c.tooLarge(ledger.Charge(size))
	}
	return nil
}

// Allocate supports plain preallocation, charged like a write, hole
// punching, and preallocation that keeps the size within the blocks
// already charged.
func (h *Handle) Allocate(intr Interrupt, off, size int64, mode uint32) error {
	c := h.c
	// A passthrough writer's bytes may not have been seen yet.
	c.observe(h)
	switch mode {
	case 0:
		if err := c.fits(off + size); err != nil {
			return err
		}
		_, charge, _ := c.ledger.Size(h.id)
		err := c.admitFirstFree(h.id, func() error { return c.ledger.ExtendFree(h.id, off+size) },
			ledger.Charge(off+size)-charge, &h.waited, intr, func() (victims, error) { return c.ledger.Extend(h.id, off+size) })
		if err != nil {
			return err
		}
	case unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE:
		if off < h.base.Load() {
			c.changedBelow(h.id, off) // its bytes there are zeros now
			h.base.Store(-1)
		}
	case unix.FALLOC_FL_KEEP_SIZE:
		// Blocks within the charge (the size rounded up to a block) are
		// paid for already; past it they would be store bytes that no
		// charge covers.
		if size0, _, _ := c.ledger.Size(h.id); ledger.Charge(off+size) > ledger.Charge(size0) {
			return syscall.EOPNOTSUPP
		}
	default:
		return syscall.EOPNOTSUPP
	}
	if err := unix.Fallocate(int(h.file.Fd()), mode, off, size); err != nil {
		c.settleShort(h.id, h.file)
		return err
	}
	return nil
}

// observe has the ledger see what a writer's stored file holds now.
func (c *Core) observe(h *Handle) {
	if size, err := h.size(); err == nil {
		c.observed(h.id, size)
	}
}

// observed has the ledger see a writer's stored size. Only growth that
// must evict takes the namespace lock; a report older than a truncate is
// corrected when the writer settles.
func (c *Core) observed(id blob.ID, size int64) {
	if known, _, ok := c.ledger.Size(id); ok && size > known {
		if errors.Is(c.ledger.ObserveFree(id, size), ledger.ErrBusy) {
			c.locked(func() (victims, error) { return c.ledger.Observe(id, size) })
		}
	}
}

// settleShort sets the ledger to what the store holds after a failed
// write, truncate or fallocate left less than was admitted. The setting
// can evict (a cache over a capacity the disk lowered meanwhile is
// trimmed as any admission trims it), so it runs as admissions do: its
// victims' names go with them. Their names were left behind, listed and
// answering ESTALE for good, objects the ledger no longer held (a 10 MiB
// store through the daemon that the disk refused half-way, on a store
// disk of 12 MiB: 5 of 12 names).
func (c *Core) settleShort(id blob.ID, f *os.File) {
	var st unix.Stat_t
	if size, _, _ := c.ledger.Size(id); unix.Fstat(int(f.Fd()), &st) == nil && st.Size < size {
		c.locked(func() (victims, error) { return c.ledger.SetSize(id, st.Size) })
	}
}

// Flush is a close(2) of a descriptor of the handle. Descriptors are
// duplicated (dup, fork, a shell's redirect, a child's stdout), so a
// close is not the end of writing: that is the handle's Release. Flush
// admits what the object holds so far (evicting or waiting for room) and
// answers ENOSPC, removing the object, when it cannot fit: nothing over
// the capacity is ever published. The object stays marked and watched,
// and keeps its reservation, which its release gives back (see
// ledger.Settle): unshown for the moment the release takes, shown again
// by the poller once that passed (showKept). A close by the process
// that opened the handle records in its marker the state it left the
// object in (remark): a crash before the release, with nothing written
// since, keeps the object.
func (h *Handle) Flush() error { return h.FlushBy(Interrupt{}, 0) }

// FlushBy is Flush for a close(2) by client thread t (0: not known). A
// close by another process than the one that created the object (a
// child closing the descriptor it inherited, as Python's subprocess
// does at every fork) admits the object as any close does, but its
// size is no store's: it sized no reservations. A 28 MiB object held
// open, whose size a forked `echo` thus published, had every later
// store wait for a quarter of the capacity, which the held object
// never left, and all were refused (an outside tester).
func (h *Handle) FlushBy(intr Interrupt, t Client) error {
	if !h.write {
		return nil
	}
	same, known := h.c.sameProcess(h, t)
	exitingNow, signal := false, 0
	if known && !same || t != 0 && h.c.cfg.Published != nil {
		exitingNow, signal = exitState(t)
	}
	// Another process's close that is not its exit's: a child's exec
	// closing what it inherited, while its parent writes on. Its
	// writing does not look ended (see ledger.Show): hidden, the
	// parent's idle writers' room was gone from used_bytes and df for a
	// child's `df` or `kvfs stats`, and the cache looked empty while
	// stores were refused (an outside tester, 4 of 4). Where the opener
	// is not known (a writer of an object it opened rather than
	// created), its close is taken as the opener's.
	goesOn := known && !same && !exitingNow
	st, err := h.c.settle(h, false, same || !known, !goesOn, intr)
	if err != nil {
		return err
	}
	if signal != 0 {
		h.c.killedWriting(h, signal)
	}
	if goesOn {
		return nil
	}
	h.closedAt.Store(h.c.cfg.Now().UnixNano())
	if !h.c.cfg.Passthrough {
		h.c.showKeptLater(h)
	}
	// Only a close known to be by the opener's process records its
	// object as complete at a crash (see remark): a close by another
	// process may be a child's of a descriptor it inherited (its exit,
	// or a fork's close-on-exec) while the opener writes on, and a
	// shell's loop of children (`for ...; do head ...; done > f`)
	// closes after each; killed with the daemon, the prefix at a
	// child's close was served as complete (TestCrashDupWriter).
	if same && known && h.c.remark(h, &st) {
		h.c.watchClosed(h)
	}
	return nil
}

// size is what a writer's stored file holds now.
func (h *Handle) size() (int64, error) {
	st, err := h.stat()
	return st.Size, err
}

// stat is a writer's stored file's attributes now.
func (h *Handle) stat() (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstat(int(h.file.Fd()), &st)
	return st, err
}

// settle admits a writer's object at the size its stored file has now,
// and returns the file's attributes it read; last: its last writer's
// release, which admits it whole (see ledger.SettleLast); hide: a close
// that may end the writing, which keeps the reservation unshown for a
// moment (see ledger.Settle and SettleShown).
func (c *Core) settle(h *Handle, last, sizes, hide bool, intr Interrupt) (unix.Stat_t, error) {
	if h.gap.open.Load() && !h.refused.Load() && !last && !sizes {
		// A write refused, not yet written again, and a close by
		// another process than the writer's (sizes: by the creator,
		// or not known): it answers ENOSPC (the object lacks a piece),
		// but the writer may still write it again, so the object
		// stays until the last release decides. Made final here, a
		// forked child's close of the inherited descriptor (exec
		// closes it) refused the writer for good before its retry (a
		// test's own `kvfs stats`). The writer's own close makes it
		// final at once: its name is gone when close(2) returns
		// ENOSPC.
		return unix.Stat_t{}, ErrNoSpace
	}
	if h.doomed() {
		h.refused.Store(true)
		c.ledger.Refused()
		c.refuse(h)
		return unix.Stat_t{}, ErrNoSpace
	}
	var st unix.Stat_t
	var size int64
	var err error
	for {
		epoch := c.sizeEpoch(h.id)
		if st, err = h.stat(); err != nil {
			return st, err
		}
		size = st.Size
		if testHookSettling != nil {
			testHookSettling()
		}
		// What a passthrough writer wrote since the last poll is on disk:
		// the ledger sees it first (and the overshoot, if it is one).
		c.observed(h.id, size)
		known, _, _ := c.ledger.Size(h.id)
		free, settle := c.ledger.SettleFree, c.ledger.Settle
		switch {
		case last:
			free, settle = c.ledger.SettleLastFree, c.ledger.SettleLast
		case !hide:
			free, settle = c.ledger.SettleShownFree, c.ledger.SettleShown
		}
		err = c.admitFirstFree(h.id, func() error { return free(h.id, size) },
			ledger.Charge(size)-ledger.Charge(known), &h.waited, intr, func() (victims, error) { return settle(h.id, size) })
		if err != nil || c.sizeStable(h.id, epoch) {
			break
		}
		// A truncate overlapped: its size may be what was just
		// overwritten, and the file holds it now.
	}
	switch {
	case err == nil:
		c.settledAt(h.id, size)
		if sizes && c.ledger.Unadmitted(h.id) == 0 && (size > 0 || last) {
			// Sizes the next writers' reservations (not at a close by
			// another process than the creator: see FlushBy); not a size whose
			// growth waits, unadmitted, for the last release (see
			// ledger.Settle): a doomed store written through
			// descriptors closed as it grew left each next writer
			// reserved a quarter of the capacity, evicting half the
			// cache (an outside tester). Nor an empty object's before
			// its last release: a shell's redirect (open, dup2, close)
			// closes its first descriptor before a byte is written,
			// and that 0, the only size a refused store left, sized
			// the next store of the shell's children as one of empty
			// objects, reserved nothing (an outside tester: each next
			// doomed `cat > big` emptied the cache). An empty object
			// is one at its release (a lock or marker file).
			c.published(size)
			c.storedBy(h, size)
		}
	case errors.Is(err, ErrNoSpace):
		h.refused.Store(true)
		c.refuse(h)
	}
	return st, err
}

// refuse undoes what a writer did to an object that cannot be admitted.
// An object it created, or whose bytes it truncated or overwrote (or
// may have: see baseSize), loses every name and its bytes (the writer's
// handle keeps the inode, empty, until it is released); an object that
// was complete before the writer opened it, and that its writers only
// appended to, keeps its names and goes back to the size it had, so a
// refused appender never takes a published object down with it. It
// says whether the object was kept.
func (c *Core) refuse(h *Handle) (kept bool) {
	c.mu.Lock()
	base := c.baseSize(h.id, h.file)
	kept = base >= 0
	var names []blob.Name
	if base < 0 {
		names = c.store.Forget(h.id)
		for range names {
			c.ledger.Unlink(h.id)
		}
		c.doomLocked(h.id, names)
		base = 0
	}
	c.mu.Unlock()
	drops := []Drop{{ID: h.id, Names: names, Why: Refused}}
	c.reap(drops)
	// Only what the writer added is cut: a truncate sets the mtime even
	// to the same size, and an object no write reached keeps its intact
	// marker's mtime, so a crash keeps it (see blob.MarkIntact).
	// (Stat, not Fstat of its Fd: the poller may refuse a writer whose
	// release is closing the file.)
	if fi, err := h.file.Stat(); err != nil || fi.Size() != base {
		if err := h.file.Truncate(base); err != nil && !errors.Is(err, os.ErrClosed) {
			// (Closed: the poller cut a writer its release had just ended.)
			c.log.Warn("truncating a refused object", zap.Uint64("id", uint64(h.id)), zap.Error(err))
		}
	}
	c.ledger.Cut(h.id, base)
	if len(names) > 0 {
		c.deliver(drops)
	}
	return kept
}

// released says whether h's RELEASE came.
func (h *Handle) released() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// Fsync makes the stored bytes durable.
func (h *Handle) Fsync(dataOnly bool) error {
	if dataOnly {
		return unix.Fdatasync(int(h.file.Fd()))
	}
	return h.file.Sync()
}

// Attr reads the object's attributes through the handle; a writer's
// bytes are seen first, so fstat(2) shows their charge.
func (h *Handle) Attr() (Attr, error) {
	if st := h.born.Swap(nil); st != nil {
		_, charge, writing, _ := h.c.ledger.Shown(h.id)
		return Attr{Stat_t: *st, Charge: charge, Links: 1, Writing: writing}, nil
	}
	if h.write {
		h.c.observe(h)
	}
	return h.c.Getattr(h.id, h.file)
}

// Release drops the handle: its last descriptor and mapping are gone,
// so for a writer this is the end of writing. What the object holds is
// admitted once more (the kernel ignores release's result: an object
// that cannot be admitted is removed without a word, as its last close
// was told), and when no other writer is left its crash marker goes and
// it is published. Then the stored file is closed and the pin dropped, so
// an unlinked inode's bytes are gone from the store before its charge is.
func (h *Handle) Release() {
	c := h.c
	c.counters.releasing.Add(1)
	defer c.counters.releasing.Add(-1)
	var pub []string
	var rewrote bool
	if h.write {
		c.unwatch(h)
		pub, rewrote = c.endWrite(h)
	}
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	mapped := c.mayBeMapped(h)
	if !mapped {
		h.file.Close()
	}
	h.unpin()
	c.endDirectGrace(h)
	// Published once its write pin is gone, so an upload that reads it
	// at once finds it complete; a rewrite's names first supersede what
	// a shared tier holds under them.
	if rewrote && c.cfg.Rewritten != nil {
		for _, p := range pub {
			c.cfg.Rewritten(p)
		}
	}
	c.publish(pub)
	if mapped {
		c.keepMapped(h)
	}
}

// endWrite ends a writer's writing: a last settle, then, for the last
// writer of a complete object, its marker cleared; it returns the names
// to publish, and whether they publish a rewrite (see endWriting).
func (c *Core) endWrite(h *Handle) (pub []string, rewrote bool) {
	if !h.isWriting() {
		return nil, false
	}
	var err error
	refused := h.doomed()
	kept := false
	if refused {
		// Its client was told at a close; what was written since goes too.
		// An object complete before it is kept, and published by the last
		// writer's release, whichever that is (a first writer's release
		// that came while this one wrote left it to this one).
		kept = c.refuse(h)
	} else if _, err = c.settle(h, true, true, false, Interrupt{}); err != nil {
		c.log.Warn("a writer's object could not be admitted at its release", zap.Uint64("id", uint64(h.id)), zap.Error(err))
	}
	// The names to publish are taken as the last writer ends, under the
	// namespace lock: a link racing this release publishes its name
	// itself or leaves it to this list, never both (see publish.go).
	killed := c.killedBy(h.id)
	last, pub, rewrote, merr := c.endWriting(h, func() []string {
		if err != nil || (refused && !kept) || killed != 0 {
			return nil
		}
		return c.pathsLocked(h.id)
	})
	if last && killed != 0 && c.cfg.Published != nil && !refused && err == nil {
		c.log.Info("a process holding an object for writing was ended by a signal: the object is kept here and not published to the shared tier",
			zap.Uint64("id", uint64(h.id)), zap.Int("signal", killed))
	}
	if merr != nil {
		c.log.Warn("clearing a writing marker", zap.Uint64("id", uint64(h.id)), zap.Error(merr))
	}
	if err != nil || refused {
		return pub, rewrote
	}
	c.counters.stores.Add(1)
	return pub, rewrote
}

// unpin drops the ledger's pin.
func (h *Handle) unpin() { h.c.unpin(h.id, h.write) }

// unpin drops one pin of id, a writer's or a reader's.
func (c *Core) unpin(id blob.ID, write bool) {
	if !write {
		c.ledger.Close(id, false)
		return
	}
	c.closeWrite(id)
}

// closeWrite drops a write pin; the last writer's close admits what its
// writers left unadmitted, so it may evict, and only then takes the
// namespace lock.
func (c *Core) closeWrite(id blob.ID) {
	if _, err := c.ledger.CloseFree(id, true); errors.Is(err, ledger.ErrBusy) {
		c.locked(func() (victims, error) { _, v := c.ledger.Close(id, true); return v, nil })
	}
}
