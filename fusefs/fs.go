// Package fusefs is the go-fuse node tree of kvfs: a thin adapter that
// turns FUSE requests into calls on the core (package core, which owns
// the namespace and the accounting), and the core's dropped names into
// kernel notices. It keeps only what is the kernel's business: which
// inodes the kernel knows, their open handles, whether plain readers may
// have cached pages, and the RAM tier's copies that plain readers use.
package fusefs

import (
	"context"
	"runtime/debug"
	"sync"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/ramcache"
	"github.com/kvfs/kvfs/remote"
	"go.uber.org/zap"
)

// Config tunes the adapter.
type Config struct {
	// Passthrough: every handle is served by the kernel straight from
	// the stored file (FUSE passthrough), reads and writes; the daemon
	// sees neither. Otherwise every byte passes through the daemon.
	Passthrough bool
	// RAM, when set, keeps copies of objects that plain (not
	// passthrough) readers load, and serves later loads from memory.
	// Its owner closes it after the server stops.
	RAM    *ramcache.Cache
	Logger *zap.Logger
	// Remote, when set, is the shared remote tier: names the store
	// misses are looked up there and installed at open (see remoteNode).
	// Its owner closes it after the server stops.
	Remote *remote.Tier
	// Stats is what the root's StatsXattr holds: the mount's figures as
	// JSON, gathered where the parts are wired (package mount); nil: the
	// root has no such attribute.
	Stats func() ([]byte, error)
}

// FS is one mounted kvfs: the core, and the kernel-facing bookkeeping
// that ties go-fuse inodes to it.
type FS struct {
	core *core.Core
	cfg  Config
	log  *zap.Logger
	ram  *ramcache.Cache // nil: no RAM tier
	// remote is the remote tier; nil: none. Its requests are bound to
	// life, which ends at Close, not to the FUSE request that needed
	// them (see lookupRemote).
	remote  *remote.Tier
	life    context.Context
	endLife context.CancelFunc

	// dirs maps directory IDs to the go-fuse inodes the kernel knows,
	// so dropped names can be invalidated in them.
	dirs sync.Map // core.ID -> *fs.Inode

	reqs requests // counted by Instrument's wrapper

	notices chan notice
	done    chan struct{}
	wg      sync.WaitGroup
}

// notice is a kernel cache invalidation, sent from a goroutine of its own
// because sending it from inside a handler can deadlock against the lock
// the kernel holds on the directory being operated on.
type notice struct {
	parent core.ID
	name   string
	inode  *fs.Inode // when set: drop the inode's cached data instead
}

// New builds the file system over a loaded core. Start the core with
// Dropped before serving.
func New(c *core.Core, cfg Config) *FS {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	f := &FS{
		core:    c,
		cfg:     cfg,
		log:     cfg.Logger,
		ram:     cfg.RAM,
		remote:  cfg.Remote,
		notices: make(chan notice, 4096),
		done:    make(chan struct{}),
	}
	f.life, f.endLife = context.WithCancel(context.Background())
	f.wg.Add(1)
	go f.notifyLoop()
	return f
}

// Root is the root directory node, to hand to fs.Mount.
func (f *FS) Root() fs.InodeEmbedder { return &dirNode{fs: f, id: core.RootID} }

// Close stops the notifier. Call it after the server has stopped.
func (f *FS) Close() {
	f.endLife()
	close(f.done)
	f.wg.Wait()
}

// Requests counts the requests answered so far by type (see
// Instrument; a request still being answered is not in it).
func (f *FS) Requests() map[string]int64 { return f.reqs.counts() }

// Dropped tells the kernel and the RAM tier about an object whose names
// the core dropped. The core calls it without locks held.
func (f *FS) Dropped(d core.Drop) {
	f.ram.Drop(uint64(d.ID))
	for _, n := range d.Names {
		f.queue(notice{parent: n.Parent, name: n.Name})
	}
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
		// rather than block the caller.
		go f.deliver(n)
	}
}

// Panic is go-fuse's PanicHandler: one bad request answers EIO, with its
// stack logged, and the mount keeps serving.
func (f *FS) Panic(r any) fuse.Status {
	f.log.Error("panic in handler", zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
	return fuse.EIO
}
