// Package fusefs is the go-fuse node tree of kvfs: a thin adapter that
// turns FUSE operations into calls on the store (names and bytes) and the
// ledger (charges, pins, eviction). It holds no accounting of its own.
package fusefs

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/ledger"
	"github.com/kvfs/kvfs/ramcache"
	"go.uber.org/zap"
)

// Config tunes the adapter; the zero value of each field picks a default.
type Config struct {
	// WaitLimit bounds how long a write that needs space waits for
	// recently closed or read-pinned objects to become evictable
	// before it fails with ENOSPC.
	WaitLimit time.Duration
	// Passthrough lets read-only handles of complete objects be served
	// by the kernel straight from the store (FUSE passthrough).
	Passthrough bool
	// AuditInterval is how often the store is walked for changes made
	// behind kvfs's back; zero never.
	AuditInterval time.Duration
	// AuditAtStart audits once right away, in the background.
	AuditAtStart bool
	// RAM, when set, keeps copies of objects that plain (not
	// passthrough) readers load, and serves later loads from memory.
	// Its owner closes it after the server stops.
	RAM    *ramcache.Cache
	Logger *zap.Logger
}

// FS is one mounted kvfs: the store, the ledger, and the kernel-facing
// bookkeeping that ties go-fuse inodes to them.
type FS struct {
	store  *blob.Store
	ledger *ledger.Ledger
	cfg    Config
	log    *zap.Logger
	ram    *ramcache.Cache // nil: no RAM tier

	// dirs maps directory IDs to the go-fuse inodes the kernel knows,
	// so eviction can invalidate names in them.
	dirs sync.Map // ledger.ID -> *fs.Inode

	notices chan notice
	done    chan struct{}
	wg      sync.WaitGroup
}

// notice is a kernel cache invalidation, sent from a goroutine of its own
// because sending it from inside a handler can deadlock against the lock
// the kernel holds on the directory being operated on.
type notice struct {
	parent ledger.ID
	name   string
	inode  *fs.Inode // when set: drop the inode's cached data instead
}

// New builds the file system over a loaded store and its ledger.
func New(store *blob.Store, l *ledger.Ledger, cfg Config) *FS {
	if cfg.WaitLimit == 0 {
		cfg.WaitLimit = 3 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if os.Geteuid() != 0 {
		// Registering a backing file takes CAP_SYS_ADMIN; without it
		// go-fuse serves every handle plainly, and a reader counted as
		// passthrough would only hold writers off (see mayJoin).
		cfg.Passthrough = false
	}
	f := &FS{
		store:   store,
		ledger:  l,
		cfg:     cfg,
		log:     cfg.Logger,
		ram:     cfg.RAM,
		notices: make(chan notice, 4096),
		done:    make(chan struct{}),
	}
	f.wg.Add(1)
	go f.notifyLoop()
	if cfg.AuditInterval > 0 || cfg.AuditAtStart {
		f.wg.Add(1)
		go f.auditLoop(cfg.AuditInterval, cfg.AuditAtStart)
	}
	return f
}

// Root is the root directory node, to hand to fs.Mount.
func (f *FS) Root() fs.InodeEmbedder { return &dirNode{fs: f, id: blob.RootID} }

// Close stops the notifier. Call it after the server has stopped.
func (f *FS) Close() {
	close(f.done)
	f.wg.Wait()
}

// Stats is what `kvfs stats` reports: the ledger's snapshot, and the RAM
// tier's counters when there is one.
type Stats struct {
	ledger.Stats
	RAMCache *ramcache.Stats `json:"ram_cache,omitempty"`
}

// Stats is a snapshot of the ledger and the RAM tier.
func (f *FS) Stats() Stats {
	st := Stats{Stats: f.ledger.Stats()}
	if f.ram != nil {
		r := f.ram.Stats()
		st.RAMCache = &r
	}
	return st
}

func (f *FS) notifyLoop() {
	defer f.wg.Done()
	for {
		select {
		case <-f.done:
			return
		case n := <-f.notices:
			f.deliver(n)
		}
	}
}

func (f *FS) deliver(n notice) {
	if n.inode != nil {
		n.inode.NotifyContent(0, 0)
		return
	}
	if v, ok := f.dirs.Load(n.parent); ok {
		v.(*fs.Inode).NotifyEntry(n.name)
	}
}

func (f *FS) queue(n notice) {
	select {
	case f.notices <- n:
	default:
		// The queue is full: deliver from a goroutine of its own
		// rather than block the handler that queued it.
		go f.deliver(n)
	}
}

// evict removes victims' names and bytes and tells the kernel. The ledger
// has already released their charges.
func (f *FS) evict(victims []ledger.Victim) {
	for _, v := range victims {
		f.ram.Drop(uint64(v.ID))
		names := f.store.Drop(v.ID)
		f.log.Debug("evicted", zap.Uint64("id", uint64(v.ID)), zap.Int64("bytes", v.Charge), zap.Int("names", len(names)))
		for _, n := range names {
			f.queue(notice{parent: n.Parent, name: n.Name})
		}
	}
}

// vanished reconciles an object whose bytes disappeared from the store
// behind kvfs's back.
func (f *FS) vanished(id ledger.ID, why error) {
	if f.ledger.Forget(id) {
		f.log.Warn("object vanished from the store; dropped from the ledger",
			zap.Uint64("id", uint64(id)), zap.Error(why))
	}
	f.ram.Drop(uint64(id))
	for _, n := range f.store.Drop(id) {
		f.queue(notice{parent: n.Parent, name: n.Name})
	}
}

// admit changes id's charge with resize (Grow or SetSize), evicting as
// needed and waiting a bounded time when the space exists but is held by
// inodes that will soon be evictable: backpressure, not failure.
func (f *FS) admit(ctx context.Context, id ledger.ID, resize func() ([]ledger.Victim, error), need int64) error {
	deadline := time.Now().Add(f.cfg.WaitLimit)
	for {
		victims, err := resize()
		f.evict(victims)
		if !errors.Is(err, ledger.ErrNoSpace) {
			return err
		}
		wait := f.ledger.WaitHint(need)
		if wait == 0 || time.Now().Add(wait).After(deadline) {
			return err
		}
		f.ledger.Retried()
		select {
		case <-ctx.Done():
			return syscall.EINTR
		case <-time.After(wait):
		}
	}
}

// grow admits a write ending at end.
func (f *FS) grow(ctx context.Context, id ledger.ID, end int64) error {
	_, charge, _ := f.ledger.Size(id)
	return f.admit(ctx, id, func() ([]ledger.Victim, error) { return f.ledger.Grow(id, end) }, ledger.Charge(end)-charge)
}

// setSize admits a truncate to size.
func (f *FS) setSize(ctx context.Context, id ledger.ID, size int64) error {
	_, charge, _ := f.ledger.Size(id)
	return f.admit(ctx, id, func() ([]ledger.Victim, error) { return f.ledger.SetSize(id, size) }, ledger.Charge(size)-charge)
}

// CheckInvariants checks the ledger's invariants; tests call it.
func (f *FS) CheckInvariants() error { return f.ledger.CheckInvariants() }
