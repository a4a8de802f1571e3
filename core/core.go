// Package core is the one owner of kvfs's namespace and accounting. It
// performs every operation that changes names or charges (create, open
// for writing, unlink, link, rename, admission, eviction, reconciliation)
// on the store (package blob) and the ledger together, and reports the
// names it dropped through Config.Dropped, so the FUSE layer only
// translates requests and forwards drops to the kernel. It never imports
// FUSE.
//
// # Lock order
//
// Outermost first; a lock may be taken while holding those above it, never
// the reverse. No syscall is made under a lock held exclusively that
// covers the whole namespace (Core.mu, Core.tree but for a directory's
// rename, writersMu): see order.go for how changes of names are ordered.
//
//	fusefs remoteNode.installMu  a remote name's install, held across
//	                      Install (fusefs, outside this package)
//	fusefs object.mu      an open object's handles and backing file
//	                      (fusefs, outside this package)
//	fusefs, ramcache      the RAM tier's locks are leaves of their own,
//	                      taken with none of these held
//	fusefs Loading        the names and reads of a mount serving while
//	                      its index loads: leaves, and the core is called
//	                      (Lookup, Used) with none of them held
//	diskWatch.mu          the capacity the store's disk allows
//	                      (disk.go), held while it evicts; taken with
//	                      none of the locks below held
//	early.ops             the stores a Preview takes while the index
//	                      loads (early.go): shared by each, exclusive
//	                      for TakeEarly, which settles them in the index
//	early.mu              their names, held across their syscalls
//	EarlyFile.mu          the size a store so far charged to the budget
//	Core.dirs[i]          a directory's changes of names (a striped
//	                      table), held from plan to commit, syscalls
//	                      included; two are taken in stripe order
//	Core.tree             paths: shared by every change, exclusive for a
//	                      directory's rename
//	Core.markers[i]       one object's crash marker (a striped table by
//	                      ID), held across the marker's syscall
//	Handle.mu             a handle's stored file while the poller reads it
//	checkpointer.mu       one checkpoint at a time
//	Core.mu               the index and which objects the ledger holds:
//	                      shared by readers (lookup, list, open by name,
//	                      stat) while they read the index, not across
//	                      their syscalls (stored.go), exclusive only to
//	                      commit a change of names or an eviction's
//	                      drop, in memory. An
//	                      admission that fits in free space (the ledger's
//	                      ...Free methods) takes no namespace lock at all.
//	Core.writersMu        open writers: counts, sizes, the poller's list
//	Core.sizesMu          recently published sizes (reservation sizing)
//	installs.mu           the names being installed (Install)
//	Core.doomedMu         names dropped from the index, still stored
//	ledger.mu             inside the ledger; a leaf
//	lastUse.mu            the loads' notes waiting to be recorded; a
//	                      leaf, taken with none of these held
//	moves.mu              the renames under way (moves.go); a leaf
//	clients.mu            what kvfs learnt of its clients' processes
//	                      (clients.go); a leaf
//	mappings.mu           the objects kept pinned for a mapping
//	                      (mapped.go); a leaf
//	blob crowd.mu         the store's directories found full (blob,
//	                      crowded.go); a leaf, its report made after
//
// The race tests check this order (lockorder, -tags lockcheck).
//
// The ledger's pin operations (open and close of a handle) take only the
// ledger's lock: an object evicted between a lookup and an open is simply
// gone when the open pins it (ErrStale), which makes the kernel look the
// name up again. Nothing here calls out (Config.Dropped and
// Config.Published included) while holding Core.mu, and Install runs its
// FetchFunc (a download) with no lock held.
package core

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/internal/lockorder"
	"github.com/kvfs/kvfs/ledger"
	"go.uber.org/zap"
)

// Errors the FUSE layer maps to errnos; any syscall.Errno is passed on
// as it is.
var (
	// ErrNotFound: no such name (ENOENT).
	ErrNotFound = blob.ErrNotFound
	// ErrStale: the object the kernel named by its inode is gone (evicted,
	// or its last name removed); the kernel looks the name up again
	// (ESTALE).
	ErrStale = errors.New("object is gone")
	// ErrNoSpace: nothing evictable is left to make room (ENOSPC).
	ErrNoSpace = errors.New("no space left under the capacity")
	// ErrTooLarge: a size stated outright (truncate, fallocate) is past
	// the capacity, which no eviction can ever make room for (EFBIG): the
	// capacity is the largest file, as a file-size limit is.
	ErrTooLarge = errors.New("size larger than the capacity")
	// ErrExists: the name is taken (EEXIST). It is the errno itself, as
	// the store answers a taken name, so one test matches every path.
	ErrExists error = syscall.EEXIST
)

// Config tunes a Core; zero values pick the defaults noted.
type Config struct {
	// Capacity in bytes; zero asks CapacityFor with what the store holds.
	Capacity    int64
	CapacityFor func(held int64) (int64, error)
	// Grace protects a just-closed object from eviction, so the publish
	// step after close (link or rename) cannot lose it.
	Grace time.Duration
	// WaitLimit bounds how long an admission waits for space that recently
	// closed or read-pinned objects hold; zero answers ENOSPC at once.
	WaitLimit time.Duration
	// WriteReserve is the least reservation a writer is admitted when it
	// opens; the largest of the recently published objects raises it.
	WriteReserve int64
	// Passthrough: writers' bytes reach the store without the daemon
	// seeing them, so open writers are polled for their size every
	// PollInterval (default 2ms).
	Passthrough  bool
	PollInterval time.Duration
	// StrictCapacity: the daemon's writes never take bytes past the
	// capacity, not even unadmitted ones a writer's close would admit
	// (ledger.GrowWithin, where others' writes are ledger.Grow).
	StrictCapacity bool
	// AuditInterval is how often the store is walked for changes made
	// behind kvfs's back (zero: never).
	AuditInterval time.Duration
	// CheckpointInterval is how often, while the store changes, its
	// checkpoint is written (see checkpoint.go; zero: only at Close).
	CheckpointInterval time.Duration
	// Now and After are the clock (tests pass their own).
	Now    func() time.Time
	After  func(time.Duration) <-chan time.Time
	Logger *zap.Logger
	// Published, when set, is told the path (relative to the namespace's
	// root) of every name that now holds a complete object: a link or a
	// rename to it, or its writer's close. It is called without locks
	// held and must not call back into the Core. Install never calls it.
	Published func(path string)
	// Rewritten, when set, is told, just before Published, the paths of
	// an object that was complete when its first writer opened it and
	// that its writers changed (see endWriting): what a shared tier
	// holds under them is superseded. A writer that changed nothing (an
	// open with O_RDWR to read) is not a rewrite. Same rules as
	// Published.
	Rewritten func(path string)
	// Reshown, when set, is told of a file whose writer's reservation,
	// hidden at a close, is shown again (showKept): what stat(2) shows
	// of it changed with no request to the mount. Called without locks
	// held, from the poller; it must not call back into the Core.
	Reshown func(id blob.ID)
	// Held are the objects a predecessor's open handles hold (a
	// handover): each is pinned as soon as the start restores it, until
	// EndHandover. Non-nil, even empty, marks a handover's start, which
	// evicts to the capacity only when it starts (Open); so does Graced.
	Held map[blob.ID]bool
	// Graced are the objects a predecessor closed within its grace
	// period, with when (ledger.Closed): each keeps the rest of it.
	Graced map[blob.ID]int64
	// HeldInTree, when set, says whether process pid or a process it
	// forked holds object id open on the mount now, by a descriptor or a
	// mapping (what the daemon's guard asks of every process as the
	// daemon dies). See watchClosed.
	HeldInTree func(pid int, id blob.ID) bool
	// IdleWriters, when set, returns which of ids, objects whose one
	// writer process pid created and holds, no one can write while the
	// admissions in waits wait: pid and every process it forked that
	// holds them have one thread, which cannot write meanwhile: it
	// waits for room (waits, the asking thread included), or is in a
	// write into an object whose admission waits for room, behind it
	// (the kernel lets one write into a file at a time). See
	// loosenIdle.
	IdleWriters func(pid int, ids []blob.ID, waits Waits) []blob.ID
}

// Waits is a moment's view of the admissions that wait for room: by
// client thread, the object its admission waits for room to write.
type Waits map[int]blob.ID

// Why says why an object's names were dropped.
type Why int

const (
	Evicted  Why = iota // the ledger chose it to make room
	Vanished            // its bytes disappeared from the store, or grew past the capacity, behind kvfs's back
	Refused             // its writer's close could not be admitted: removed, never published
	Removed             // a client removed its last name (unlink, or a rename over it); no Names
)

func (w Why) String() string {
	switch w {
	case Evicted:
		return "evicted"
	case Vanished:
		return "vanished"
	case Removed:
		return "removed"
	}
	return "refused"
}

// Drop is an object whose names kvfs dropped.
type Drop struct {
	ID    blob.ID
	Names []blob.Name
	Why   Why
	// Idle is how long it had not been used, for evictions. For an
	// object not used since the start restored it, the stored file's
	// times say (the later of atime and mtime: see lastuse.go), read as
	// it is reaped.
	Idle time.Duration
}

// idleUnknown is a Drop's Idle until reap reads it from the stored file.
const idleUnknown time.Duration = -1

// Core is one mounted store: its namespace and its ledger.
type Core struct {
	cfg    Config
	log    *zap.Logger
	store  *blob.Store
	ledger *ledger.Ledger[blob.ID]
	// passedWarn paces the warning of writers past the capacity.
	passedWarn logLimit
	// dropped receives every object whose names kvfs dropped (see Start).
	dropped func(Drop)
	// began is when this core was made: no restored object was used
	// since by this core before it.
	began time.Time
	// startDrops are the objects the start evicted to fit the capacity,
	// reported at Start (without names: the kernel never saw them).
	startDrops []Drop
	// fitted is how many objects a handover's Core evicted at Start to
	// fit its capacity (fitCapacity); written by Start only.
	fitted int
	// disk keeps room free on the store's file system (disk.go).
	disk diskWatch

	// Locks: see the lock order above and order.go.
	dirs    dirLocks
	tree    lockorder.RWMutex
	markers [markerStripes]lockorder.Mutex
	// stilled: the core is stopped or frozen (see still).
	stilled atomic.Bool
	mu      lockorder.RWMutex

	doomedMu lockorder.Mutex
	// GUARDED_BY(doomedMu): names dropped from the index whose stored
	// names are still to be unlinked, and their objects.
	doomed map[blob.Name]blob.ID

	clients clients
	// mapped: objects kept pinned for a mapping that outlived its handle
	// (mapped.go).
	mapped mappings

	writersMu lockorder.Mutex
	// GUARDED_BY(writersMu). INVARIANT: marked[id] counts id's handles
	// that are writing, and the store's crash marker of id exists while
	// it is above zero.
	marked map[blob.ID]int
	// GUARDED_BY(writersMu). INVARIANT: base has an entry exactly for the
	// IDs in marked: see baseSize.
	base map[blob.ID]int64
	// GUARDED_BY(writersMu). INVARIANT: intact has an entry only for IDs
	// in marked whose marker is intact: the mtime it records (see
	// startWriting and remark).
	intact map[blob.ID]blob.Mark
	// GUARDED_BY(writersMu). INVARIANT: rewriting holds the IDs in
	// marked whose first writer opened them complete (see Rewritten),
	// each with the mtime it had then (0: not known, so changed).
	rewriting map[blob.ID]int64
	// GUARDED_BY(writersMu). INVARIANT: unseen holds IDs in marked only:
	// objects a writer may have written into where the daemon does not
	// see (Handle.WritesBypass), so that where its bytes went is not
	// known (see baseSize).
	unseen map[blob.ID]bool
	// GUARDED_BY(writersMu). INVARIANT: killed holds IDs in marked only:
	// objects a process closed as a signal ended it (the signal's
	// number), while it held them for writing (see killedWriting).
	killed map[blob.ID]int
	// GUARDED_BY(writersMu): for IDs in marked, the size the last close
	// settled (settled), and what publishes wait on for the last
	// release (released, closed then): see awaitRelease.
	settled  map[blob.ID]int64
	released map[blob.ID]chan struct{}
	// GUARDED_BY(writersMu): truncates under way, by object, and the
	// count of every truncate that ended: a settle commits a size only
	// if none of its object began or ended since it read it (see
	// sizeEpoch).
	truncating map[blob.ID]*truncation
	truncEnds  uint64
	// GUARDED_BY(writersMu): passthrough writers the poller watches, with
	// the poller's round when each was added (round).
	watched map[*Handle]uint64
	round   uint64
	wake    chan struct{}
	// handedWriters: what a predecessor kept of its objects being
	// written, while their handles are adopted (a handover);
	// GUARDED_BY(writersMu).
	handedWriters map[blob.ID]WriterState

	sizesMu lockorder.Mutex
	// GUARDED_BY(sizesMu): the sizes of the last published objects.
	sizes [64]int64
	next  int

	installing installs
	lastUse    lastUse // see lastuse.go
	moves      moves   // renames under way (moves.go)

	counters counters
	// auditAtStart: the index came from a snapshot, which cannot see a
	// stored file changed in place while kvfs was down: audit at once.
	auditAtStart bool
	ckpt         checkpointer
	// usesRecorded counts the uses recordUses wrote: a checkpoint is
	// behind the LRU order when it has not seen them all.
	usesRecorded atomic.Uint64
	// heldPins: the pins Config.Held made (see holdForHandover).
	heldPins []blob.ID
	// basis: what the handover checkpoint a successor is loading said
	// (PrepareHandover), until Freeze sends what changed since.
	basis *blob.Basis
	// graceSeen: objects a round before the last saw in their grace
	// period; the last asks for them again (GUARDED_BY(mu)).
	graceSeen []blob.ID
	// fitting: a handover's Core (Preload, or Open with Config.Held)
	// restored everything under an unbounded capacity and fits
	// Config.Capacity when it starts; until then reservations are sized
	// from that.
	fitting atomic.Bool
	// earlyTaken: closed once TakeEarly has settled the stores a
	// Preview took while the index loaded (nil: none to wait for); see
	// AwaitEarly.
	earlyTaken chan struct{}
	earlyOnce  sync.Once
	done       chan struct{}
	wg         sync.WaitGroup
}

// counters are the figures the ledger does not keep.
type counters struct {
	lookupHits, lookupMisses, stores, loads atomic.Int64
	// releasing counts releases begun and not yet ended: a handle's pin
	// is dropped before its object is published (Handle.Release).
	releasing atomic.Int64
	// readsRedone counts reads of the store made again under the lock
	// (readStored).
	readsRedone atomic.Int64
	// waiting counts admissions waiting for room now (admit).
	waiting atomic.Int64
}

// LoadReport is what start-up found, with the bytes it charged.
type LoadReport struct {
	blob.LoadReport
	Bytes   int64         `json:"bytes"`
	Evicted int           `json:"evicted"` // to fit the capacity
	Took    time.Duration `json:"took"`
}

// Open loads store (reclaiming what a crash left half-written), rebuilds
// the ledger from it, coldest first so that LRU order survives as well as
// access times recorded it, and evicts what does not fit. The Core owns
// store from here on; Start it before serving.
func Open(store *blob.Store, cfg Config) (*Core, LoadReport, error) {
	start := time.Now()
	objects, brep, err := store.Load()
	if err != nil {
		return nil, LoadReport{}, fmt.Errorf("loading store: %w", err)
	}
	rep := LoadReport{LoadReport: brep}
	for _, o := range objects {
		rep.Bytes += ledger.Charge(o.Size)
	}
	if cfg.Capacity == 0 {
		if cfg.Capacity, err = cfg.CapacityFor(rep.Bytes); err != nil {
			return nil, rep, fmt.Errorf("sizing capacity: %w", err)
		}
	}
	// A handover's start (Held set) restores every object, held or
	// not, and evicts to its capacity only once it starts, when the old
	// daemon is gone: evicting as it restored unlinked stored files while
	// a handover could still fail and the old daemon serve on without
	// them, and it failed when what the old daemon's clients held was
	// more than the capacity (an outside tester, with a remote tier,
	// whose handovers take this one phase: an object neither uploaded
	// nor kept).
	handover := cfg.Held != nil || cfg.Graced != nil
	target := cfg.Capacity
	if handover {
		cfg.Capacity = math.MaxInt64
	}
	c := newCore(store, cfg, len(objects))
	c.cfg.Capacity = target
	c.auditAtStart = brep.FromSnapshot
	if err := c.restore(objects, &rep); err != nil {
		return nil, rep, err
	}
	c.fitting.Store(handover)
	c.startCheckpoints(rep)
	rep.Took = time.Since(start)
	return c, rep, nil
}

func newCore(store *blob.Store, cfg Config, hint int) *Core {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 2 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.After == nil {
		cfg.After = time.After
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	c := &Core{
		cfg:        cfg,
		log:        cfg.Logger,
		store:      store,
		dropped:    func(Drop) {},
		began:      cfg.Now(),
		ledger:     ledger.New[blob.ID](ledger.Config{Capacity: cfg.Capacity, Grace: cfg.Grace, Now: cfg.Now, SizeHint: hint, FirmReservations: cfg.Passthrough}),
		marked:     map[blob.ID]int{},
		base:       map[blob.ID]int64{},
		intact:     map[blob.ID]blob.Mark{},
		rewriting:  map[blob.ID]int64{},
		unseen:     map[blob.ID]bool{},
		killed:     map[blob.ID]int{},
		settled:    map[blob.ID]int64{},
		released:   map[blob.ID]chan struct{}{},
		truncating: map[blob.ID]*truncation{},
		watched:    map[*Handle]uint64{},
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		doomed:     map[blob.Name]blob.ID{},
	}
	c.dirs.init()
	c.tree.SetRank(rankTree)
	for i := range c.markers {
		c.markers[i].SetStripe(rankMarker, i)
	}
	c.mu.SetRank(rankCore)
	c.doomedMu.SetRank(rankDoomed)
	c.writersMu.SetRank(rankWriters)
	c.sizesMu.SetRank(rankSizes)
	c.installing.mu.SetRank(rankInstalls)
	c.ckpt.mu.SetRank(rankCheckpoint)
	c.disk.mu.SetRank(rankDisk)
	return c
}

// restore charges the loaded objects, least recently used first, and
// remembers the sizes of the most recent ones for reservations.
func (c *Core) restore(objects []blob.Object, rep *LoadReport) error {
	sort.Slice(objects, func(i, j int) bool { return objects[i].Atime < objects[j].Atime })
	evicted := func(v victims, err error) error {
		for _, victim := range v {
			c.startDrops = append(c.startDrops, Drop{ID: victim.ID, Why: Evicted, Idle: c.storedIdle(victim.ID)})
			names := c.store.Drop(victim.ID)
			// Each, as an eviction while serving says it (an outside
			// tester could not tell these from losses by the count).
			if ce := c.log.Check(zap.DebugLevel, "evicted to fit the capacity at the start"); ce != nil {
				base := make([]string, len(names))
				for i, n := range names {
					base[i] = n.Name
				}
				ce.Write(zap.Uint64("id", uint64(victim.ID)), zap.Strings("names", base))
			}
		}
		rep.Evicted += len(v)
		if err != nil {
			return fmt.Errorf("restoring ledger: %w", err)
		}
		return nil
	}
	if len(c.cfg.Held) == 0 && len(c.cfg.Graced) == 0 {
		// Nothing of a predecessor's to pin or grace as each object is
		// restored (holdForHandover): all of them at once.
		if err := evicted(c.ledger.RestoreAll(len(objects), func(i int) (blob.ID, int64, int) {
			return objects[i].ID, objects[i].Size, objects[i].Links
		})); err != nil {
			return err
		}
	} else {
		for _, o := range objects {
			if err := evicted(c.ledger.Restore(o.ID, o.Size, o.Links)); err != nil {
				return err
			}
			c.holdForHandover(o.ID)
		}
	}
	for _, o := range objects[max(len(objects)-len(c.sizes), 0):] {
		c.published(o.Size)
	}
	return nil
}

// storedIdle is how long ago object id was last used by its stored
// file's times (the later of atime and mtime; see lastuse.go), or
// idleUnknown if it has no stored name to read them through.
func (c *Core) storedIdle(id blob.ID) time.Duration {
	for _, n := range c.store.Names(id) {
		if rel, ok := c.store.NamePath(n.Parent, n.Name); ok {
			if idle := c.idleAt(rel); idle != idleUnknown {
				return idle
			}
		}
	}
	return idleUnknown
}

// idleAt is how long ago the stored file at rel was last used, by its
// times (the later of atime and mtime), or idleUnknown if it cannot be
// read.
func (c *Core) idleAt(rel string) time.Duration {
	st, err := c.store.StatPath(rel)
	if err != nil {
		return idleUnknown
	}
	return max(c.cfg.Now().Sub(time.Unix(0, max(st.Atim.Nano(), st.Mtim.Nano()))), 0)
}

// Start runs the background work (the passthrough writers' poller, the
// audits, the checkpoints, the record of loads) and from then on reports
// every object whose names kvfs drops (evicted, removed for not fitting,
// gone from the store) and every one whose last name a client removed
// to dropped, without the Core's mutex held; dropped must not call back
// into the Core.
func (c *Core) Start(dropped func(Drop)) {
	c.dropped = dropped
	c.deliver(c.startDrops)
	c.startDrops = nil
	if c.fitting.Load() {
		c.fitCapacity()
		c.fitting.Store(false)
	}
	c.disk.asked.Store(c.ledger.Capacity())
	c.fitDisk()
	if c.cfg.Passthrough {
		c.wg.Add(1)
		go c.pollLoop()
	}
	if c.cfg.AuditInterval > 0 || c.auditAtStart {
		c.wg.Add(1)
		go c.auditLoop()
	}
	if c.cfg.CheckpointInterval > 0 {
		c.wg.Add(1)
		go c.checkpointLoop()
	}
	c.wg.Add(1)
	go c.recordLoop()
}

// Close stops the background work (Start must have run), writes the
// checkpoint of a quiescent store (call it after the file system has
// stopped serving) and releases the store.
func (c *Core) Close() error {
	close(c.done)
	c.wg.Wait()
	c.still()
	c.dropMapped()
	err := c.checkpoint(true)
	if err != nil {
		c.log.Warn("no checkpoint saved at the stop", zap.Error(err))
	}
	c.store.Close()
	return err
}

// WaitingForRoom says whether an admission waits for room now: a
// handover's pause waits for none (see fusefs.FS.Quiesce).
func (c *Core) WaitingForRoom() bool { return c.counters.waiting.Load() > 0 }

// Capacity is the ledger's limit in bytes.
func (c *Core) Capacity() int64 { return c.ledger.Capacity() }

// Stats is what `kvfs stats` reports of the core.
type Stats struct {
	ledger.Stats
	// LookupHits and LookupMisses are lookups of names in directories
	// that found an object, or found nothing: the cache's hit ratio as
	// connectors see it.
	LookupHits   int64 `json:"lookups_hit"`
	LookupMisses int64 `json:"lookups_miss"`
	// Stores are writers that stored: each handle opened for writing
	// and admitted, counted once at its release, bytes written or not;
	// Loads are opens for reading.
	Stores int64 `json:"stores"`
	Loads  int64 `json:"loads"`
	// WaitingForRoom counts the admissions waiting for room now.
	WaitingForRoom int64 `json:"waiting_for_room"`
}

// Stats is a snapshot of the ledger and the core's counters.
func (c *Core) Stats() Stats {
	return Stats{
		Stats:          c.ledger.Stats(),
		LookupHits:     c.counters.lookupHits.Load(),
		LookupMisses:   c.counters.lookupMisses.Load(),
		Stores:         c.counters.stores.Load(),
		Loads:          c.counters.loads.Load(),
		WaitingForRoom: c.counters.waiting.Load(),
	}
}

// Releasing is how many handles' releases are under way. Zero pins
// and zero releasing: every object whose last handle was released has
// been published; tests wait for that before they look at the remote.
func (c *Core) Releasing() int64 { return c.counters.releasing.Load() }

// CheckInvariants checks the ledger's invariants; tests call it.
func (c *Core) CheckInvariants() error { return c.ledger.CheckInvariants() }
