package core

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/internal/procstat"
	"github.com/kvfs/kvfs/ledger"
	"go.uber.org/zap"
)

// stallWait is how long an admission that other writers keep from room
// waits with nothing in flight moving at all (ledger.Progress) before
// the youngest writer that waits gives way (ledger.GiveWay). A writer
// that writes shows it within the poll interval (2 ms) or its next
// write.
const stallWait = 300 * time.Millisecond

// victims is what a ledger admission evicted.
type victims = []ledger.Victim[blob.ID]

// admit runs a ledger admission of about need bytes under the namespace
// lock, so that its victims' names go in the same critical section, and
// while the space exists but recently closed or read-pinned objects hold
// it, waits for the ledger to free some (or the grace periods to run
// out) and tries again, up to the wait limit: backpressure, not failure.
// The limit bounds a store's waits together, not each: spent, where a
// writer's handle gives one, holds what its earlier admissions waited (an
// outside tester saw a store wait 26 s under a 5 s limit, one wait per
// write). It never runs where the kernel holds a directory's lock
// (reservations at create and open do not wait: see reserve). An ENOSPC
// it gives up with is counted as one answered to a client. It does not
// answer a FUSE interrupt with EINTR: the Go runtime interrupts its own
// threads all the time, and callers that do not retry close(2) would see
// EINTR for a wait the limit bounds anyway.
//
// What other writers have written can leave no room for id (WaitHint 0),
// and so can a strict capacity's budget (ErrPastBudget: free space only)
// while other writers are in flight. Where some of them are admitted
// whole (OthersFinishing), their objects will be done and evictable
// (published, or past their graces) before long: it waits for that. A
// burst of writers that wrote more at once than the cache holds had all
// but the oldest refused at once, though the first to finish made room
// for the rest (an outside tester: 16 threads storing 100 objects of
// 4 MiB by `os.replace` into 32 MiB, 0 to 49 refused, within 0.15 s).
// Where none is, every writer in the way waits to be admitted, and one
// of them must be refused to give its bytes back: the youngest
// (ledger.GiveWay) gives up at once and the others wait for what it frees,
// so that two stores that cannot both fit do not both fail, and a burst
// loses one store per refusal that frees room rather than all but the
// oldest. A wait that sees nothing in flight
// move for stallWait (ledger.Progress), while no object's grace is
// still to end (ledger.GraceEnding: room that comes free by itself; an
// outside tester's connectors in one process, whose cache was all
// objects in their grace, had the youngest of 13-15 waiting writers
// refused 0.30 s after its open), hands the refusal to the youngest
// writer that waits: writers that hold one file open while they write
// another (data, then its metadata) look finishing while they wait
// themselves, and stalled each other for the whole limit (an outside
// tester: 12 threads, 10 of 120 stores in 65 s). A writer that holds no
// room yet (its first write's reservation) does not try while an older
// writer that holds room waits for more (ledger.Behind): the room a
// publish or a refusal frees went to the newcomers first, and the older
// writers, starved, waited out the limit. Together: 64 threads storing
// 4 MiB through the daemon into 32 MiB had 49 to 67 of 200 refused, now
// 0 to 6.
func (c *Core) admit(id blob.ID, need int64, spent *atomic.Int64, intr Interrupt, op func() (victims, error)) error {
	return c.admitting(id, need, spent, intr, op, false)
}

// errStalledAlone: an admission of a whole reservation (admitWhole) was
// stalled with no other admission waiting: the reservation cannot come
// while what holds its room waits on nothing kvfs can see (see Write).
var errStalledAlone = errors.New("stalled alone")

// admitWhole is admit for a writer's whole reservation, which it may do
// without: stalled for stallWait with no other admission waiting, it
// returns errStalledAlone rather than waiting out the limit, and the
// writer's bytes are admitted alone. A thread that keeps a data file
// open while it writes its metadata file waited for the whole
// reservation the data file's unwritten reservation kept, and was
// refused at the limit, where evicting a small object would have made
// room for its 4 KiB (an outside tester: 4 of 4).
func (c *Core) admitWhole(id blob.ID, need int64, spent *atomic.Int64, intr Interrupt, op func() (victims, error)) error {
	return c.admitting(id, need, spent, intr, op, true)
}

func (c *Core) admitting(id blob.ID, need int64, spent *atomic.Int64, intr Interrupt, op func() (victims, error), whole bool) error {
	began := c.cfg.Now()
	deadline := began.Add(c.cfg.WaitLimit)
	if spent != nil {
		deadline = deadline.Add(-time.Duration(spent.Load()))
		defer func() { spent.Add(int64(c.cfg.Now().Sub(began))) }()
	}
	// stalledFrom is when a stalled wait last saw anything in flight move
	// (stalledAt, ledger.Progress): a wake that moved nothing (a reader's
	// close of an object it had opened again first) does not start the
	// stall's wait again.
	var stalledFrom time.Time
	var stalledAt uint64
	// waiting: id's writer counts as one that waits for room (ledger's
	// Waiting, the waiting_for_room figure) from its first wait until
	// the admission ends, its tries in between too: counted only while
	// it slept, a writer that woke and tried again was not among the
	// stuck, and an older one that looked then gave way in its place (a
	// race test, 4 of 150 runs).
	waiting := false
	defer func() {
		if waiting {
			c.ledger.Waiting(id, false)
			c.counters.waiting.Add(-1)
			c.clients.waiting(intr.By, id, -1)
		}
	}()
	// stalledYields: nothing moved since stalledAt, no grace ends, id's
	// writer is the youngest that waits, and another admission than this
	// one waits too. It gives way then (ledger.GiveWay notes it in the
	// same step). Alone, what it would give back lets no one on: the
	// room is held by readers, or by writers that neither write nor wait
	// (an idle writer of a stored object), whose close frees it; it
	// waits for that up to the limit (or, waiting for a whole
	// reservation, does without it: admitWhole). It gave way after
	// stallWait where writers held the room (an outside tester: a 2 GiB
	// fallocate beside a 5 GiB object held open for writing by another
	// process, refused after 0.3 s, 10 of 10).
	othersWait := func() bool {
		self := int64(0)
		if waiting {
			self = 1
		}
		return c.counters.waiting.Load() > self
	}
	stalled := func() bool { return c.ledger.Progress() == stalledAt && !c.ledger.GraceEnding() }
	stalledYields := func() bool { return stalled() && othersWait() && c.ledger.GiveWay(id, true) }
	// stalledAlone: stalled, and no other admission waits, or id's
	// writer would free nothing by giving way (ledger.Inert), which it
	// then does not (a stopped writer's wait beside it had it refused).
	stalledAlone := func() bool { return whole && stalled() && (!othersWait() || c.ledger.Inert(id)) }
	// loosenedAt: when this admission last asked whether its process's
	// other writers are idle (loosenIdle): at its first wait, and again
	// each stallWait while it waits, as a child that held them may have
	// closed them or exited meanwhile (an outside tester: asked once,
	// while a child held them, a write waited out the limit though the
	// child exited a second in, 6 of 6).
	var loosenedAt time.Time
	for {
		changed := c.ledger.Changed()
		behind := c.ledger.Behind(id)
		err := error(ledger.ErrNoSpace)
		if !behind {
			err = c.locked(op)
		}
		pastBudget := errors.Is(err, ledger.ErrPastBudget) && c.ledger.Writing() > 1
		if !errors.Is(err, ledger.ErrNoSpace) && !pastBudget {
			if errors.Is(err, ledger.ErrTooLarge) || errors.Is(err, ledger.ErrPastBudget) {
				c.ledger.Refused()
			}
			return ledgerErr(err)
		}
		if t := c.cfg.Now(); loosenedAt.IsZero() || t.Sub(loosenedAt) >= stallWait {
			loosenedAt = t
			if c.loosenIdle(id, intr.By) {
				continue
			}
		}
		wait := c.ledger.WaitHint(need)
		now := c.cfg.Now()
		left := deadline.Sub(now)
		stalling, pinned := false, false
		switch {
		case behind:
			stalling = true
		case pastBudget || wait == 0:
			if !c.ledger.OthersFinishing(id) && c.ledger.GiveWay(id, false) {
				return c.gaveWay()
			}
			stalling = true
		case !c.ledger.GraceEnding():
			// The room is there, held, and not by objects in their
			// grace, whose end frees it by itself: by readers' pins,
			// which readers that open an object again before they close
			// it never end (a RELEASE comes after close(2) returns), by
			// writers that neither write nor wait, or by writers that
			// look finishing (OthersFinishing) but whose threads wait
			// here themselves (a data file held open while its metadata
			// file waits), which nothing in flight moving shows. Stalled
			// as well where another writer waits too: one of them giving
			// way lets the others on (an outside tester: 8 writers and
			// two such readers in 16 MiB all waited out the wait limit,
			// then 3-5 were refused at once; another's 2-8 threads each
			// holding a data file open while its metadata waited, beside
			// an idle writer, all refused at the limit where 2 fit).
			stalling, pinned = true, true
		}
		if left <= 0 {
			c.ledger.Refused()
			return ErrNoSpace
		}
		until := time.Duration(-1)
		if stalling {
			if p := c.ledger.Progress(); stalledFrom.IsZero() || p != stalledAt {
				stalledFrom, stalledAt = now, p
			}
			until = stalledFrom.Add(stallWait).Sub(now)
			if until <= 0 {
				// Stalled for stallWait, and this try, made after the
				// last wake, failed as well.
				if stalledYields() {
					return c.gaveWay()
				}
				if stalledAlone() {
					return errStalledAlone
				}
				until = stallWait
			}
			if !pinned || until < wait {
				wait = until
			}
		}
		wait = min(wait, left)
		// atStall: the wait ends where the stall's does (a wait for
		// readers' pins may end sooner, at the hint, and the wait limit
		// sooner still).
		atStall := stalling && wait == until
		if !waiting {
			waiting = true
			c.counters.waiting.Add(1)
			c.ledger.Waiting(id, true)
			c.clients.waiting(intr.By, id, 1)
		}
		closing, gaveWay, alone, gone := false, false, false, false
		timer := c.cfg.After(wait)
	waiting:
		for {
			select {
			case <-changed:
			case <-timer:
				// (The change is looked at after the grace: a publish
				// between the two ends the grace and signals a change.)
				gaveWay = atStall && !closed(changed) && stalledYields()
				alone = atStall && !gaveWay && !closed(changed) && stalledAlone()
			case <-c.done:
				closing = true
			case <-intr.Done:
				if gone = intr.look(c.cfg.After); !gone {
					continue
				}
			case <-intr.check:
				if gone = intr.look(c.cfg.After); !gone {
					continue
				}
			}
			break waiting
		}
		switch {
		case gaveWay:
			return c.gaveWay()
		case alone:
			return errStalledAlone
		case closing:
			c.ledger.Refused()
			return ErrNoSpace
		case gone:
			// Its caller was killed while its request waited: no one
			// waits for the answer, and its wait no longer holds its
			// place among the waiting writers.
			return syscall.EINTR
		}
	}
}

// idleLookWait bounds loosenIdle's look at /proc: a process of the
// caller's tree in execve holds its exec lock, which a read of its
// mappings waits for, while it closes descriptors of the mount.
const idleLookWait = 20 * time.Millisecond

// loosenIdle, as id's admission by client thread t waits for room (at
// its first wait, then each stallWait), makes loose (ledger.Loosen)
// what the other writers of id's maker's process (t's, or its parent's)
// reserved and have not written, where nothing can write to them while
// t waits: that process, and every process it forked that holds them,
// has one thread, which waits for room or writes behind a write that
// does (Config.IdleWriters; clients counts the threads that wait). With
// passthrough a
// writer's reservation is firm, never taken back for another (its
// writes reach the store unasked); but a process of one thread that
// opened more files than the cache could reserve before writing any (8
// files into an empty 256 MiB cache, each first writer reserved a
// quarter) had its fifth file's first write wait for the room its own
// first four held, and refused at the wait limit, each later file the
// same (a re-check of an outside tester's report: 4 of 8 refused, 20 s).
// It says whether anything came loose.
func (c *Core) loosenIdle(id blob.ID, t Client) bool {
	if !c.cfg.Passthrough || c.cfg.IdleWriters == nil || t == 0 {
		return false
	}
	p := c.clients.process(t)
	if p.pid == 0 {
		return false
	}
	// The writers of the process that made the object waited for: t's
	// own, or, where t's process did not make it (a child writing into
	// its parent's file), its maker's, which may itself be blocked
	// behind t (a parent whose write into the same file came second
	// waits for the file's lock, not in kvfs: an outside tester's 16
	// MiB writes, 4 of 4 waited out the limit).
	owner := p.pid
	var ids []blob.ID
	c.writersMu.Lock()
	for h := range c.watched {
		if h.id == id && h.write && h.by != nil {
			owner = h.by.pid
			break
		}
	}
	for h := range c.watched {
		if h.id != id && h.write && h.by != nil && h.by.pid == owner {
			ids = append(ids, h.id)
		}
	}
	c.writersMu.Unlock()
	if len(ids) == 0 {
		return false
	}
	got := make(chan []blob.ID, 1)
	waits := c.clients.waitsNow()
	waits[int(t)] = id // from its first wait on, before it counts as waiting
	go func() { got <- c.cfg.IdleWriters(int(owner), ids, waits) }()
	var idle []blob.ID
	select {
	case idle = <-got:
	case <-c.cfg.After(idleLookWait):
		return false
	case <-c.done:
		return false
	}
	loose := int64(0)
	for _, x := range idle {
		loose += c.ledger.Loosen(x)
	}
	if loose > 0 {
		c.log.Debug("a waiting writer's process holds reservations it cannot write meanwhile: loose", zap.Uint64("id", uint64(id)), zap.Int32("pid", owner), zap.Int("writers", len(idle)), zap.Int64("bytes", loose))
	}
	return loose > 0
}

// Interrupt is what a request's wait for room hears of its caller: Done
// is closed when the kernel interrupts the request (the caller got a
// signal), and By is the caller's thread. The wait ends early only once
// the caller is gone (a fatal signal; a stopped or traced one is not):
// the kernel hands the caller whatever kvfs answers, EINTR included,
// even under a handler set with SA_RESTART, so an answer to every
// interrupt failed the writes of programs that handle a signal, and of
// any program stopped and continued or attached by strace, where a
// write to a regular file never fails so (an outside tester: a C
// program's 4 MiB write, Ctrl-Z then fg). A killed caller's wait
// waited out --wait-limit before, holding its place among the waiting
// writers. The zero Interrupt never ends a wait.
type Interrupt struct {
	Done  <-chan struct{}
	By    Client
	check <-chan time.Time
}

// goneEvery is how often a wait whose request was interrupted looks
// whether its caller is gone.
const goneEvery = 20 * time.Millisecond

// look is a wait's look at its interrupted caller, at the interrupt and
// then every goneEvery while the store waits (after: the core's
// timers): whether it is gone.
func (i *Interrupt) look(after func(time.Duration) <-chan time.Time) bool {
	i.Done = nil
	if i.gone() {
		return true
	}
	i.check = after(goneEvery)
	return false
}

// gone says whether the caller is gone or going: its thread has
// exited (not in /proc, a zombie, dead), or has SIGKILL pending, which
// the kernel sets for every fatal signal. A killed caller whose request
// kvfs holds cannot exit until it is answered: the kernel waits for the
// answer once the daemon read the request, killed or not.
func (i Interrupt) gone() bool {
	if i.By == 0 {
		return false
	}
	b, err := procstat.Status(int(i.By))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	state := procstat.StatusState(b)
	return state == 'Z' || state == 'X' || procstat.KillPending(b)
}

// closed says whether ch is closed: the ledger changed since a wait
// took it (a stalled wait's timer and the change can come at once; the
// change, a publish say, may have made room).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// gaveWay refuses a writer as the one of several stuck writers that
// gives way (ledger.GiveWay noted it).
func (c *Core) gaveWay() error {
	c.ledger.Refused()
	return ErrNoSpace
}

// admitFirstFree runs free, an admission that takes free space only and
// so needs no namespace lock, and only if that would have to evict runs
// admit with op, the same admission, under the lock.
func (c *Core) admitFirstFree(id blob.ID, free func() error, need int64, spent *atomic.Int64, intr Interrupt, op func() (victims, error)) error {
	err := free()
	switch {
	case errors.Is(err, ledger.ErrBusy):
		return c.admit(id, need, spent, intr, op)
	case errors.Is(err, ledger.ErrTooLarge):
		c.ledger.Refused()
	}
	return ledgerErr(err)
}

// locked runs a ledger operation that may evict under the namespace
// lock, drops its victims' names there, and reports them after.
func (c *Core) locked(op func() (victims, error)) error {
	c.mu.Lock()
	v, err := op()
	drops := c.dropLocked(v, Evicted)
	c.mu.Unlock()
	if testHookReaping != nil && len(drops) > 0 {
		testHookReaping()
	}
	c.reap(drops)
	c.deliver(drops)
	return err
}

// testHookReaping, when set, runs after an eviction dropped its victims'
// names from the index and before their stored names are reaped.
var testHookReaping func()

// testHookDropping, when set, runs inside an eviction's critical section
// before the victims' names go; tests use it to race other operations
// against that moment.
var testHookDropping func()

// dropLocked takes the names of objects the ledger has let go out of the
// index, and dooms their stored names (reap unlinks them after); mu
// held.
func (c *Core) dropLocked(v victims, why Why) []Drop {
	if len(v) == 0 {
		return nil
	}
	if testHookDropping != nil {
		testHookDropping()
	}
	now := c.cfg.Now().UnixNano()
	drops := make([]Drop, len(v))
	for i, x := range v {
		names := c.store.Forget(x.ID)
		c.doomLocked(x.ID, names)
		idle := time.Duration(now - x.LastUse)
		if x.LastUse == 0 {
			idle = idleUnknown
		}
		drops[i] = Drop{ID: x.ID, Names: names, Why: why, Idle: idle}
	}
	return drops
}

// deliver reports drops; no lock held.
func (c *Core) deliver(drops []Drop) {
	for _, d := range drops {
		if d.Idle == idleUnknown {
			// Restored and never used, and reap read no stored
			// file (a create in its name's place unlinked it
			// first): the start bounds the idle time.
			d.Idle = c.cfg.Now().Sub(c.began)
		}
		c.log.Debug(d.Why.String(), zap.Uint64("id", uint64(d.ID)), zap.Int("names", len(d.Names)), zap.Duration("idle", d.Idle))
		c.dropped(d)
	}
}

// ledgerErr turns the ledger's errors into the core's.
func ledgerErr(err error) error {
	switch {
	case errors.Is(err, ledger.ErrNoSpace), errors.Is(err, ledger.ErrTooLarge), errors.Is(err, ledger.ErrPastBudget):
		return ErrNoSpace
	case errors.Is(err, ledger.ErrGone):
		return ErrStale
	}
	return err
}

// Reservation is what a writer opening now is admitted: the largest of
// the objects published lately (KV chunks of one model are all one size),
// at least Config.WriteReserve, at most a quarter of the capacity.
func (c *Core) Reservation() int64 {
	c.sizesMu.Lock()
	biggest := int64(0)
	for _, s := range c.sizes {
		biggest = max(biggest, s)
	}
	c.sizesMu.Unlock()
	return ledger.Charge(min(max(c.cfg.WriteReserve, biggest), c.targetCapacity()/4))
}

// targetCapacity is the capacity reservations are sized from: the
// ledger's, or, while a handover's Core has yet to fit its own (fitting),
// the configured one.
func (c *Core) targetCapacity() int64 {
	if c.fitting.Load() && c.cfg.Capacity > 0 {
		return c.cfg.Capacity
	}
	return c.ledger.Capacity()
}

// reopenReservation is the reservation of a writer opening an object
// that exists and holds size bytes (held: the ledger knows it), r being
// the usual one (Reservation): an object that holds bytes is reserved no
// more than it holds, so the open evicts nothing. A rewrite ends about
// where it began, and a truncate or an overwrite frees room rather than
// needing it (an outside tester: `truncate -s 0` of a 1 MiB object in a
// full cache, whose reservation was a quarter of the capacity, evicted
// three others). Its growth is admitted as it comes, evicting up to
// twice that.
func reopenReservation(r, size int64, held bool) int64 {
	if held && size > 0 {
		return min(r, ledger.Charge(size))
	}
	return r
}

// published remembers the size a writer's close admitted an object at.
func (c *Core) published(size int64) {
	if size <= 0 {
		return
	}
	c.sizesMu.Lock()
	defer c.sizesMu.Unlock()
	c.sizes[c.next%len(c.sizes)] = size
	c.next++
}

// guessReservation is the reservation of id's writer with no size to go
// by: the most any writer is reserved, a quarter of the capacity, but no
// more than the room the other writers' bytes leave, where they leave
// some. A guess past that room could never be had while they are open:
// a new mount's 16 threads storing 4 MiB beside a writer holding 28 MiB
// open in 32 MiB waited for 8 MiB each, and every store was refused.
func (c *Core) guessReservation(id blob.ID) int64 {
	guess := ledger.Charge(c.targetCapacity() / 4)
	if room := c.ledger.Room(id); room > 0 {
		guess = min(guess, ledger.Charge(room))
	}
	return guess
}

// reserveNothing is the reservation of a writer that is to be reserved
// no room at all (see reservationFor); 0 is one with no size to go by.
const reserveNothing = -1

// shareLeast is the least free space a writer takes instead of evicting
// for its guess n (see reserve): 1 MiB, or --write-reserve where that is
// more, or n where that is less.
func (c *Core) shareLeast(n int64) int64 { return min(n, max(c.cfg.WriteReserve, 1<<20)) }

// reserve admits a writer's reservation of n bytes as it opens, without
// waiting: open and create run while the kernel holds the directory's
// lock, and a wait there would stall every link and create in that
// directory. When what open writers have already written leaves no room
// for one more object, the writer gets no reservation and waits for them
// at its writes, behind the older ones (ledger.Behind), where a stalled
// wait refuses the youngest (see admit). Otherwise it gets its
// reservation if the room can be had now (got), and none if not: its
// bytes are then admitted as they come (Unreserved), its first write
// waiting for want whole (see Write), and at its close, where waiting
// is harmless. A writer with no size to go by (no
// --write-reserve, and nothing published since the start) is reserved
// the most any writer is, a quarter of the capacity, from free space
// only: a guess evicts nothing, and one that finds no free room for it
// gets none. A writer whose process stored only empty objects lately (n
// reserveNothing) gets none. A writer whose n is borrowed, sized by
// what other processes stored, not its own, takes the free space there
// is instead of evicting for n, half of it where that is at least 1 MiB
// (or n) (ledger.ReserveFreeShare); where it is not, it evicts for n
// only objects that free at most twice n, and else goes without: its
// size is a guess too, and a shell's `echo hi > f` in a cache with 4-12
// MiB free evicted the 60 MiB object another process had stored last,
// or, that object held open, waited the wait limit and failed with
// ENOSPC (an outside tester). Its bytes past that are admitted as they
// come, as any writer's past its reservation are, with no want where
// only a far larger object could go (waiting for a guess whole evicted
// it all the same), and a share's want where nothing can go now (see
// reserveBorrowed). An own n whose room would evict a far larger object
// takes a share of the free room, or goes without. A cache full of
// objects of about the guess's size still turns over by passthrough: a
// shell's `cp` loop into a full cache of 1 MiB objects ran 15-20%
// slower through the daemon.
func (c *Core) reserve(id blob.ID, n int64, borrowed bool) (got bool, want int64, err error) {
	if n == reserveNothing {
		// Its growth evicts for at most a quarter of the capacity, as
		// the growth of a writer reserved the least does (ledger.Budget):
		// with no budget it evicted without bound, and a shell's doomed
		// `cat > big` emptied the cache (an outside tester, 28 of 28
		// objects).
		c.ledger.Budget(id, 1)
		return false, 0, nil
	}
	if c.ledger.Behind(id) {
		// Older writers that hold room wait for more: what comes free
		// is theirs first, as at a write (admit). Taken by the
		// reservations of the stores that came next (a refused
		// writer's thread storing again), the room each refusal freed
		// went to a newcomer, which waited in turn, and the older
		// writers waited out the limit (an outside tester: 8 threads
		// into 16 MiB, one refusal every 0.3 s and 16 of 120 refused).
		if n == 0 {
			return false, wantGuess, nil
		}
		return false, n, nil
	}
	if n == 0 {
		guess := c.guessReservation(id)
		if guess > 0 && c.ledger.ReserveFree(id, guess) == nil {
			return true, 0, nil
		}
		return false, wantGuess, nil
	}
	if c.ledger.Overloaded(id, n) {
		// Writers in flight fill the cache: this one goes without a
		// reservation, its bytes through the core, each write admitted
		// once the others are done or have given way. Refused here
		// (when none of those writers was yet admitted whole), a burst
		// of more than the cache holds lost stores that would have fit
		// a moment later: 16 threads storing 4 then 8 MiB objects by
		// os.replace into 32 MiB through the daemon had 26 to 36 of 100
		// refused, now 12 to 19; 64 threads storing 200 of 4 MiB, 5 to
		// 133, now 1 to 9.
		return false, n, nil
	}
	err = c.ledger.ReserveFree(id, n)
	if errors.Is(err, ledger.ErrBusy) && borrowed {
		return c.reserveBorrowed(id, n)
	}
	if errors.Is(err, ledger.ErrBusy) {
		err = c.reserveNear(id, n)
	}
	if errors.Is(err, ledger.ErrBusy) {
		// Only a far larger object could go for it: the free room
		// there is does, where that is some, its growth past it
		// admitted as it comes (an outside tester: a process that
		// stored 8 MiB, storing 4 KiB beside 4 MiB of free room,
		// evicted a 52 MiB object, 7 of 7 runs); with less, it goes
		// without, its bytes admitted as they come, evicting that
		// object only once they need it (the same with 1 MiB free: a
		// re-check).
		return c.reserveShare(id, n), 0, nil
	}
	switch {
	case err == nil:
		return true, 0, nil
	case errors.Is(err, ledger.ErrNoSpace):
		return false, n, nil
	}
	return false, 0, ledgerErr(err)
}

// reserveShare reserves for a guess n a share of the free room there is
// (ledger.ReserveFreeShare, at least shareLeast), evicting nothing, and
// says whether it got one. Either way the writer's growth may evict as
// a writer reserved n's does, for at most twice n (ledger.Budget):
// with no budget it evicted without bound.
func (c *Core) reserveShare(id blob.ID, n int64) bool {
	c.ledger.Budget(id, n)
	return c.ledger.ReserveFreeShare(id, n, c.shareLeast(n)) == nil
}

// reserveNear reserves n by evicting only objects that free at most
// twice n (ledger.ReserveEvictingAtMost): ErrBusy where a far larger
// object would go.
func (c *Core) reserveNear(id blob.ID, n int64) error {
	return c.locked(func() (victims, error) { return c.ledger.ReserveEvictingAtMost(id, n, 2*ledger.Charge(n)) })
}

// reserveBorrowed is reserve for a borrowed n that free space alone
// cannot cover. Where an own n evicts objects of about its size first,
// and takes the free room only where a far larger object would go, a
// borrowed one takes the free room first: it is the weaker guess.
func (c *Core) reserveBorrowed(id blob.ID, n int64) (got bool, want int64, err error) {
	if c.reserveShare(id, n) {
		return true, 0, nil
	}
	err = c.reserveNear(id, n)
	switch {
	case err == nil:
		return true, 0, nil
	case errors.Is(err, ledger.ErrBusy):
		return false, 0, nil
	case errors.Is(err, ledger.ErrNoSpace):
		// Nothing can go now (objects in their grace, held open): its
		// first write waits for a share whole (shareLeast: n, up to 1
		// MiB), not piece by piece, where writers that each held part
		// of the room stalled and were refused (an outside tester:
		// `xargs -P 8 cp` of 1 MiB files beside a held 60 MiB object
		// in 64 MiB, 22-38 of 40 refused, 4-7 before); not for n
		// whole, a guess that may never fit: 4 KiB stores beside that
		// object, guessing 16 MiB, waited out the wait limit and were
		// refused, 3-6 of 8 at once (a re-check).
		return false, c.shareLeast(n), nil
	}
	return false, 0, ledgerErr(err)
}
