package mount

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/fusefs"
	"github.com/kvfs/kvfs/internal/mountinfo"
	"github.com/kvfs/kvfs/internal/procstat"
	"github.com/kvfs/kvfs/ramcache"
	"github.com/kvfs/kvfs/remote"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// FSType is the mount's type in /proc/self/mountinfo.
const FSType = "fuse.kvfs"

// Mount is a live kvfs mount.
type Mount struct {
	Options
	Loaded core.LoadReport
	// DiskRoom is what the store's file system can hold, where the
	// capacity asked is more (warnSmallDisk); 0 otherwise.
	DiskRoom int64
	server   *fuse.Server
	fs       *fusefs.FS
	core     *core.Core
	ram      *ramcache.Cache // nil without --ram-cache
	tier     *remote.Tier    // nil without --remote
	log      *zap.Logger
	// quotaBytes is the store's project quota limit; 0: not capped.
	quotaBytes int64
	guard      *Guard // nil without Options.Guard
	// handover takes handover requests (handover.go); nil: none.
	handover *net.UnixListener
	// detachedConn is the FUSE connection of the mount a stop detached
	// while files were open (detached.go); nil while it is attached.
	detachedConn atomic.Pointer[string]
	// conn is the mount's FUSE connection as it began serving: what a
	// stop ends when someone else detached the mount (detached.go);
	// mountID, its ID in the mount table, which the descriptors of its
	// files name (fdinfo's mnt_id) even once it is detached, and its
	// device (major:minor), which its files have.
	conn, mountID, mountDev string
	// servedID is mountID for the core's writers (heldInTree); nil
	// until set.
	servedID atomic.Pointer[string]
	// ended: EndDetached ended that mount with its files still open;
	// served: the mount's server is done (Wait).
	ended, served atomic.Bool
	// held: the objects a predecessor's handles hold (a handover), and
	// graced: those it had just closed, with when.
	held   map[blob.ID]bool
	graced map[blob.ID]int64
	// TookOver is how long taking the mount over from a live daemon
	// took, from the request to serving; zero for a new mount.
	TookOver time.Duration
	// deadMount: a crashed daemon's mount was on the mount point at the
	// start, to be replaced by this one (newServer).
	deadMount bool
	// loading serves the mount while the index is built (loading.go);
	// nil for a start that loads first. loadDone is closed when the
	// load ends, with loadErr if it failed.
	loading  *fusefs.Loading
	loadDone chan struct{}
	loadErr  error
	// stopLoad stops the load under way (StopLoading); nil when none.
	stopLoad func()
}

// StopLoading stops the building of the index of a mount that serves
// while it loads, for a stop about to unmount it: the load ends at its
// next step (ErrLoadStopped), however soon after the unmount it goes on.
// A mount that is not loading ignores it.
func (m *Mount) StopLoading() {
	select {
	case <-m.loadDone:
		return // loaded, or never loading
	default:
	}
	if m.stopLoad != nil {
		m.stopLoad()
	}
}

// Start validates the options, loads the store (reclaiming what a crash
// left half-written), rebuilds the ledger and mounts. It changes nothing
// on disk before every check on the arguments has passed.
func Start(o Options) (*Mount, error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	// Modes come from the kernel with the caller's umask applied already.
	unix.Umask(0)
	fileLimit = raiseFileLimit()
	unlock, err := lockMountpoint(o.Mountpoint, o.Logger)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return start(o, false)
}

// fileLimit is the daemon's descriptor limit once Start raised it: at
// most as many files are open on the mount at once, by all users.
var fileLimit uint64

// start is Start for validated options; again: a second try, after the
// store's daemon, starting, came to serve it (see below).
func start(o Options, again bool) (*Mount, error) {
	log := o.Logger
	conn, err := dialHandover(o)
	if err != nil {
		return nil, err
	}
	if conn != nil {
		// A live kvfs serves this store here: take its mount over.
		if err := keepsKernelOptions(o); err != nil {
			conn.Close()
			return nil, err
		}
		// The daemon asked: the store's holder now (a listening socket
		// passed on by handovers names the daemon that made it).
		old, _ := StoreHolder(o.Store)
		m, err := takeOver(o, conn)
		conn.Close()
		if !errors.Is(err, errPredecessorGone) {
			return m, err
		}
		// A daemon that died is still exiting for a moment; one that
		// handed the mount to another successor started at the same
		// time has that one hold the store (an outside tester: the
		// second of two successors said the daemon died, then exited
		// 2).
		pid, held := awaitHolder(o.Store, time.Now().Add(goneLimit), func(pid int) bool { return old != 0 && pid != old })
		if held && old != 0 && pid != old && alive(pid) && kvfsProcess(pid) {
			return nil, usagef("another kvfs daemon (pid %d) took the mount of %s at %s over first; run this one again to take the mount over from it", pid, o.Store, o.Mountpoint)
		}
		log.Warn("the daemon serving the mount died before it handed it over; mounting afresh, as after a crash", zap.Error(err))
		if held {
			awaitReleased(o.Store, time.Now().Add(goneLimit))
		}
	}
	if _, held := StoreHolder(o.Store); !held {
		// A held store's refusal says more (who holds it), and needs
		// no mount.
		if err := checkUnprivileged(o); err != nil {
			return nil, err
		}
	}
	releaseStuckOwner(o.Store, log)
	dead, err := checkMountpoint(o.Mountpoint, o.Store, log)
	if err != nil {
		return nil, err
	}
	store, err := blob.Open(o.Store)
	if errors.Is(err, blob.ErrLocked) && askToLetGo(o.Store, log) {
		// Asked whatever holds it: a daemon that serves a mount says no.
		log.Info("the store's daemon served a mount detached by a stop while files were open: it ends it now, and those files fail")
		awaitReleased(o.Store, time.Now().Add(stoppingLimit))
		store, err = blob.Open(o.Store)
	}
	if pid, held := lockedBy(err, o.Store); errors.Is(err, blob.ErrLocked) && !held {
		// Its holder let go between the open and the look at who holds
		// it: a daemon that ended its detached mount for this start, and
		// exited before its answer reached it (CI met this once).
		store, err = blob.Open(o.Store)
	} else if held && !kvfsProcess(pid) {
		// Not a daemon that is starting or stopping: waiting for it to
		// let go only kept the start waiting 30 s before it was named
		// as one (an outside tester's `flock STORE/kvfs.lock sleep`).
		return nil, usagef("store %s is locked (%s) by %s, which is not a kvfs daemon; end it, or give kvfs another --store", o.Store, blob.LockName, describeProcess(pid))
	} else if held && !mounting(pid, o.Store) {
		// Its daemon mounts it nowhere: it unmounted it and is still
		// writing its checkpoint (see holder.go), or it is starting (a
		// mount run a moment before this one) and mounts it soon.
		log.Info("waiting for the store's daemon, which mounts it nowhere yet or any more: it is starting or stopping", zap.Int("pid", pid))
		if holder, mounted := awaitReleasedOrMounted(o.Store, time.Now().Add(stoppingLimit)); mounted && !again {
			log.Info("the store's daemon was starting and serves it now", zap.Int("pid", holder))
			return start(o, true) // take its mount over, or be refused as by any live mount
		}
		if store, err = blob.Open(o.Store); errors.Is(err, blob.ErrLocked) {
			return nil, usagef("%v: its daemon (pid %d) mounts it nowhere here and did not let go of it in %v: it is still starting or stopping, or serves a mount detached with umount -l until its files close", err, pid, stoppingLimit)
		}
	}
	switch {
	case errors.Is(err, blob.ErrLocked):
		// Named with where it is served: an operator had to look for
		// the mount (an outside tester).
		if mp, live := LiveMount(o.Store); live {
			return nil, usagef("%v, at %s: unmount it there first (`kvfs unmount %s`), or give another --store", err, mp, mp)
		}
		return nil, usagef("%v", err)
	case errors.Is(err, blob.ErrNotStore):
		return nil, usagef("%v", err)
	case errors.Is(err, unix.EROFS):
		// What the store is on, not a failure of kvfs: bad paths are
		// exit 2 (were exit 1, an outside tester).
		return nil, usagef("store %s is on a read-only file system: kvfs keeps its objects there (%v)", o.Store, err)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return nil, usagef("store %s: no room on its file system to open it (%v); free some, or give another --store", o.Store, err)
	case errors.Is(err, unix.ENOTDIR):
		return nil, usagef("store %s: %v: `kvfs fsck --store %s` says what to move away", o.Store, err, o.Store)
	case err != nil:
		return nil, fmt.Errorf("opening store: %w", err)
	}
	if mp, live := LiveMount(o.Store); live {
		store.Close()
		return nil, usagef("%s is served at %s by a kvfs daemon that no longer holds its lock (was %s removed?): unmount it first",
			o.Store, mp, blob.LockName)
	}
	warnDeadMounts(o.Store, o.Mountpoint, log)
	if !o.AllowOther {
		// Only the mounter may enter the mount, so only the mounter
		// may enter the store (a store made before 2026-12-05 was
		// 0755 whatever the mount).
		if err := store.Confine(); err != nil {
			store.Close()
			return nil, fmt.Errorf("making the store its mounter's alone: %w", err)
		}
	}
	gate("KVFS_MOUNT_GATE") // tests: the store locked, nothing mounted yet
	warnVolatile(o.Store, log)
	watchDirs(store, o.Store, log)
	m := &Mount{Options: o, log: log, deadMount: dead}
	if o.Guard != "" {
		// Once the store is this daemon's (locked), so its death is the
		// guard's business, and before any client can reach the mount.
		if m.guard, err = startGuard(o.Guard, o); err != nil {
			log.Warn("no guard for the daemon: a kill -9 while it notifies the kernel can leave the mount hung until `kvfs unmount`, "+
				"and its passthrough writers write on into the store", zap.Error(err))
		}
	}
	m.distrustIfHeld(store)
	if big, n := o.loadsInBackground(store); big {
		if err := m.startLoading(store, n); err != nil {
			m.guard.Stop()
			return nil, err
		}
		return m, nil
	}
	if err := m.load(store); err != nil {
		m.guard.Stop()
		return nil, err
	}
	m.capStore()
	if err := m.mount(); err != nil {
		m.fs.Close()
		m.closeRemote()
		m.core.Close()
		m.ram.Close()
		m.guard.Stop()
		return nil, err
	}
	return m, nil
}

// passthrough says whether handles are to use FUSE passthrough: asked
// for, not strict, and root (registering a backing file takes
// CAP_SYS_ADMIN).
func (o *Options) passthrough() bool {
	return o.Passthrough && !o.StrictCapacity && os.Geteuid() == 0
}

// distrustIfHeld has a start (not a handover, whose old daemon lives)
// reclaim intact objects too while a process holds a file of the store's
// dead mount (see blob.Store.DistrustIntact).
func (m *Mount) distrustIfHeld(store *blob.Store) {
	if pid, ok := deadMountHeld(m.Store); ok {
		m.log.Warn("a process still holds a file of the dead mount of this store (pid: it, or the dead daemon's guard, which stays while one does): objects open for writing at the crash are reclaimed, changed or not",
			zap.Int("pid", pid))
		store.DistrustIntact()
	}
}

// load rebuilds the index and the ledger from the store and builds the
// file system over them.
func (m *Mount) load(store *blob.Store) error {
	store.ReportTo(m.Progress)
	return m.build(store, func(cfg core.Config) (*core.Core, core.LoadReport, error) { return core.Open(store, cfg) })
}

// build makes the mount's parts around the core open makes from
// store.
func (m *Mount) build(store *blob.Store, open func(core.Config) (*core.Core, core.LoadReport, error)) error {
	// Start-up builds a few hundred bytes of index per object and frees
	// little: collecting garbage while it runs is wasted work.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	c, rep, err := open(core.Config{
		Capacity:           m.Capacity,
		CapacityFor:        func(held int64) (int64, error) { return capacityFor(m.Store, held) },
		Grace:              m.Grace,
		WaitLimit:          m.WaitLimit,
		WriteReserve:       m.WriteReserve,
		Passthrough:        m.passthrough(),
		StrictCapacity:     m.StrictCapacity,
		PollInterval:       m.PollInterval,
		AuditInterval:      m.AuditInterval,
		CheckpointInterval: m.CheckpointInterval,
		Now:                m.Now,
		Logger:             m.log.Named("core"),
		Published:          m.publishHook(),
		Rewritten:          m.rewriteHook(),
		Reshown:            m.reshown,
		Held:               m.held,
		Graced:             m.graced,
		HeldInTree:         m.heldInTree,
		IdleWriters:        m.idleWriters,
	})
	if err != nil {
		if !errors.Is(err, blob.ErrStopped) {
			// A load stopped by the mount's end leaves the store open:
			// a mount that stops while loading serves the files still
			// open in it until they close (the Preview reads the
			// store), and its stored directories closed under it
			// answered EBADF (an outside tester). The process's exit
			// closes it.
			store.Close()
		}
		return err
	}
	asked := m.Capacity // 0: the default, a share of the disk's room
	m.core, m.Loaded, m.Capacity = c, rep, c.Capacity()
	m.log.Info("store loaded", zap.String("store", m.Store), zap.Int64("objects", rep.Objects),
		zap.Int64("bytes", rep.Bytes), zap.Int64("incomplete_reclaimed", rep.Incomplete), zap.Int64("nameless_reclaimed", rep.Nameless),
		zap.Int64("foreign_removed", rep.Foreign), zap.Int64("too_deep_removed", rep.TooDeep), zap.Int("evicted_to_fit", rep.Evicted),
		zap.Bool("from_snapshot", rep.FromSnapshot), zap.String("snapshot_unused", rep.SnapshotUnused),
		zap.Int64("dirs_listed", rep.DirsListed), zap.Int64("stated", rep.Stated),
		zap.Int64("gone", rep.Gone), zap.Duration("took", rep.Took))
	var removed int64 // names clients removed or moved while the index loaded
	if m.loading != nil {
		removed = int64(m.loading.Removed())
	}
	switch {
	case rep.Gone > 0 && removed > 0:
		// The load finds gone what clients removed or moved through the
		// mount meanwhile, and cannot tell those from changes behind
		// kvfs's back (an outside tester read the warning below for its
		// own rm and mv while loading); the start-up audit warns of
		// those it finds.
		m.log.Info("objects the checkpoint listed are gone from the store: removed or moved by clients while the index loaded, or since the checkpoint was written",
			zap.String("store", m.Store), zap.Int64("gone", rep.Gone), zap.Int64("names_removed_while_loading", removed))
	case rep.Gone > 0 && rep.SnapshotClean:
		// A daemon that started from that checkpoint and crashed before
		// writing one of its own leaves it too: its own deletes are
		// among these (an outside tester read them as changes behind
		// kvfs's back).
		m.log.Warn("objects the clean stop's checkpoint listed are gone from the store: removed, replaced or renamed behind kvfs's back (a store copied file by file has every object replaced), or by a daemon that started from that checkpoint and crashed before writing its own",
			zap.String("store", m.Store), zap.Int64("gone", rep.Gone))
	case rep.Gone > 0:
		m.log.Info("objects the last checkpoint listed are gone from the store: removed, replaced or renamed since it was written, by kvfs before it stopped or behind its back",
			zap.String("store", m.Store), zap.Int64("gone", rep.Gone))
	}
	if asked > 0 {
		// (A successor preloading a handover has no capacity yet:
		// the one asked for is what it will have.)
		m.DiskRoom = warnSmallDisk(m.Store, asked, rep.Bytes, m.log)
	}
	if rep.Mounted > 0 {
		m.log.Warn("another file system is mounted on stored directories (a user's FUSE server?): kvfs does not enter them; they show empty and nothing can be made in them until it is unmounted (findmnt lists them)",
			zap.String("store", m.Store), zap.Int64("dirs", rep.Mounted), zap.String("one", rep.MountedOne))
	}
	if rep.TooDeep > 0 {
		m.log.Warn("the store held paths past PATH_MAX (4,095 bytes under data/), which kvfs cannot serve: removed, with everything beneath them",
			zap.String("store", m.Store), zap.Int64("entries", rep.TooDeep))
	}
	if m.RAMCache > 0 {
		if m.ram, err = ramcache.New(m.RAMCache); err != nil {
			c.Close()
			return err
		}
	}
	if err := m.startRemote(); err != nil {
		m.ram.Close()
		c.Close()
		return err
	}
	m.fs = fusefs.New(c, fusefs.Config{Passthrough: m.passthrough(), CacheTimeout: m.CacheTimeout, RAM: m.ram, Logger: m.log.Named("fusefs"),
		Remote: m.tier, Stats: m.statsJSON})
	return nil
}

func (m *Mount) mount() error {
	m.start()
	if err := m.serve(m.fs.Instrument(m.requestTimer())); err != nil {
		return err
	}
	m.serving("mounted")
	return nil
}

// start starts the core, and takes the capacity in force from it: a
// start fits the capacity to the store's disk (and a preloaded core to
// the one asked for), and the start's message and systemd's STATUS= say
// the capacity it serves with, not the one asked for (an outside tester:
// `--capacity 1T` on a 64 GB disk said 1 TB, where stats and df said 64).
func (m *Mount) start() {
	m.core.Start(m.dropped)
	m.Capacity = m.core.Capacity()
}

// serve mounts fs and serves it.
func (m *Mount) serve(fs fuse.RawFileSystem) error {
	server, err := m.newServer(fs)
	if err != nil {
		return fmt.Errorf("mounting %s: %w", m.Mountpoint, err)
	}
	// Before serving: a request may come as soon as the mount exists
	// (`kvfs stats` read the root's stats attribute, which asks the
	// server whether the kernel took passthrough, and got EIO from a nil
	// server).
	m.server = server
	if err := m.guard.mounted(m.Mountpoint); err != nil {
		m.log.Warn("the guard cannot watch the mount", zap.Error(err))
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		return fmt.Errorf("mounting %s: %w", m.Mountpoint, err)
	}
	if err := requestTimeoutOffered(m.RequestTimeout, server.KernelSettings().Flags64()); err != nil {
		m.unmountRefused(server)
		return err
	}
	logRequestTimeout(m.RequestTimeout, m.log)
	m.widenReadahead(maxRead)
	return nil
}

// serving logs what the mount serves with, and warns of what it lacks.
func (m *Mount) serving(how string) {
	m.log.Info(how, zap.String("mountpoint", m.Mountpoint), zap.Int64("capacity", m.Capacity),
		zap.Bool("passthrough", m.PassthroughActive()), zap.Bool("strict_capacity", m.StrictCapacity),
		zap.Int64("ram_cache", m.RAMCache), zap.Uint64("open_files_at_most", fileLimit))
	if m.passthrough() && !m.PassthroughActive() {
		m.log.Warn("the kernel refused FUSE passthrough; every byte goes through the daemon")
	}
	if m.ram != nil && m.PassthroughActive() {
		m.log.Warn("the RAM tier only serves plain reads, and passthrough serves them all here; " +
			"mount with --no-passthrough or --strict-capacity to use it")
	}
	if m.WaitLimit > 0 && m.WaitLimit < m.Grace {
		// Legal (a fast ENOSPC may be wanted), but it surprised an outside
		// tester: a 28 MiB store into 32 MiB holding 8 MiB just closed
		// failed at its close, the room free a second later.
		m.log.Warn("--wait-limit is shorter than --grace: a store that needs the room of just-closed objects is refused (ENOSPC) before their grace ends",
			zap.Duration("wait_limit", m.WaitLimit), zap.Duration("grace", m.Grace))
	}
	if m.handover == nil { // a mount that served while loading listens already
		m.listenHandover()
	}
	if e, ok := m.ownEntry(); ok {
		m.conn, _ = connectionOf(e)
		m.mountID = strconv.Itoa(e.ID)
		m.mountDev = e.Dev
		id := m.mountID
		m.servedID.Store(&id)
	}
}

// heldInTree is the core's HeldInTree, on this mount (false until its
// ID is known).
func (m *Mount) heldInTree(pid int, id blob.ID) bool {
	mnt := m.servedID.Load()
	return mnt != nil && heldInTree(*mnt, pid, id)
}

// idleWriters is the core's IdleWriters, on this mount (none until its
// ID is known).
func (m *Mount) idleWriters(pid int, ids []blob.ID, waits core.Waits) []blob.ID {
	mnt := m.servedID.Load()
	if mnt == nil {
		return nil
	}
	return idleWriters(*mnt, pid, ids, waits)
}

// mountOptions are the server's options, for a new mount and for one
// taken over.
func (m *Mount) mountOptions() *fuse.MountOptions {
	return &fuse.MountOptions{
		Name:       "kvfs",
		FsName:     m.Store,
		AllowOther: m.AllowOther,
		Options:    m.kernelOptions(),
		MaxWrite:   maxRead,
		// go-fuse tries to splice every read reply through a pipe,
		// which cannot hold a 1 MiB reply plus its header (pipe-max-
		// size is 1 MiB): each such reply failed, fell back to a
		// copy, and logged a line. Copying outright measured the
		// same (no-passthrough warm reads 6.6 against 6.8 GB/s).
		DisableSplice:        true,
		MaxBackground:        64,
		DirectMount:          os.Geteuid() == 0,
		IgnoreSecurityLabels: true,
		// HANDLE_KILLPRIV_V2: the kernel stops asking for
		// security.capability before every passthrough write (it
		// sets SB_NOSEC); kvfs keeps no set-user-ID bits to kill.
		// ATOMIC_O_TRUNC: open(2)'s O_TRUNC comes in the OPEN, not as a
		// SETATTR after it, so a rewrite is reserved as a new store
		// is (core.OpenTruncated), one request fewer.
		ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP | fuse.CAP_HANDLE_KILLPRIV_V2 | fuse.CAP_ATOMIC_O_TRUNC,
		PanicHandler:      m.panicked,
		// Sent in the INIT reply: this connection's, no one else's.
		RequestTimeout: m.RequestTimeout,
		Debug:          m.DebugFUSE,
		Logger:         zap.NewStdLog(m.log.Named("fuse")),
	}
}

// panicked answers a request whose handler panicked.
func (m *Mount) panicked(r any) fuse.Status {
	if m.loading != nil {
		return m.loading.Panic(r)
	}
	return m.fs.Panic(r)
}

// unmountRefused takes back a mount whose INIT settled on something kvfs
// refuses, before any client can have used it.
func (m *Mount) unmountRefused(server *fuse.Server) {
	if err := server.Unmount(); err != nil {
		m.log.Warn("unmount busy; detaching lazily", zap.Error(err))
		detach(m.Mountpoint)
	}
	server.Wait()
}

// kernelOptions are the mount options for the kernel. With other users
// let in (--allow-other), the kernel checks their permissions against the
// modes kvfs reports (default_permissions). Without, only the mounter can
// enter the mount at all, and the store's own permission checks apply to
// every stored file the daemon opens for it: the kernel's checks would
// add nothing but a GETATTR of the directory after each change in it
// (the next permission check needs its attributes, and the change made
// them stale), a round trip in every store and every unlink.
func (m *Mount) kernelOptions() []string {
	if m.AllowOther {
		return []string{"default_permissions"}
	}
	return nil
}

// keepsKernelOptions refuses a handover that would change what the
// kernel fixed when the mount was made and a successor cannot change:
// whether users other than the mounter get in (--allow-other: the
// allow_other and default_permissions options). A successor that took
// the mount over with another setting would run as if it applied.
func keepsKernelOptions(o Options) error {
	e, ok := mountinfo.At(o.Mountpoint)
	if !ok {
		return nil // gone meanwhile: the handover finds out
	}
	live := slices.Contains(strings.Split(e.SuperOptions, ","), "allow_other")
	switch {
	case live && !o.AllowOther:
		return usagef("the mount at %s lets other users in (it was mounted with --allow-other), and a handover cannot change that: "+
			"give --allow-other to keep it, or unmount and mount again without it", o.Mountpoint)
	case !live && o.AllowOther:
		return usagef("the mount at %s lets only its mounter in (it was mounted without --allow-other), and a handover cannot change that: "+
			"leave out --allow-other to keep it, or unmount and mount again with it", o.Mountpoint)
	}
	return nil
}

// maxRead is the largest READ and WRITE request, and the readahead
// window kvfs asks for: the kernel's limit (256 pages).
const maxRead = 1 << 20

// widenReadahead raises the mount's readahead window from the kernel's
// 128 KiB to n bytes, so that loads that do not use passthrough reach
// the daemon in 1 MiB requests rather than 128 KiB ones: a whole-object
// load from the RAM tier or a cold store runs about twice as fast (1.6
// against 3.3 GB/s from RAM here). Only root may; others keep 128 KiB.
func (m *Mount) widenReadahead(n int) {
	e, ok := mountinfo.At(m.Mountpoint)
	if !ok || e.FSType != FSType {
		return
	}
	bdi := "/sys/class/bdi/" + e.Dev + "/read_ahead_kb"
	if err := os.WriteFile(bdi, []byte(strconv.Itoa(n>>10)), 0); err != nil {
		m.log.Debug("readahead left at the kernel's default", zap.String("bdi", bdi), zap.Error(err))
	}
}

// PassthroughActive says whether handles use FUSE passthrough: asked
// for, and accepted by the kernel.
func (m *Mount) PassthroughActive() bool {
	return m.passthrough() && m.server.KernelSettings().Flags64()&fuse.CAP_PASSTHROUGH != 0
}

// RAMWait waits until the RAM tier has applied the copies offered to
// it; tests use it.
func (m *Mount) RAMWait() { m.ram.Wait() }

// Wait serves until the file system is unmounted, then saves the
// snapshot and releases the store.
func (m *Mount) Wait() {
	m.server.Wait()
	m.served.Store(true)
	failed := m.WaitLoaded() != nil // nothing more was built
	if m.handover != nil {
		m.handover.Close()
		os.Remove(socketPath(m.Store))
	}
	if failed {
		m.guard.Stop()
		return
	}
	m.releaseLeft()
	m.fs.Close()
	m.ram.Close()
	m.closeRemote()
	m.core.Close()
	if m.ended.Load() {
		// Files of the mount may still be open (a passthrough handle
		// reads and writes its stored file with no daemon): the guard
		// sees this daemon go as after a crash and caps what it left
		// marked, and the next start distrusts what they held.
		return
	}
	m.guard.Stop()
}

// releaseLeft releases the handles the kernel never sent a RELEASE for,
// once the mount is gone and no process holds a file of it. The kernel
// sends RELEASE in the background and drops those it has not handed the
// daemon yet when the mount goes: a detached mount goes as its last file
// closes, so that file's RELEASE, a writer's too, was lost nearly every
// time (an outside tester: the writer's close answered success, and the
// next start reclaimed its object, still marked as being written). Not
// after an abort with files open (EndDetached, or someone else's): a
// passthrough writer writes on with no daemon, and its marker must stay.
func (m *Mount) releaseLeft() {
	if m.ended.Load() || m.mountID == "" {
		return
	}
	if pid, held := heldOnMounts(map[string]string{m.mountID: m.mountDev}); held {
		m.log.Info("a process still holds a file of the mount, whose connection ended: its handles stay unreleased", zap.Int("pid", pid))
		return
	}
	if n := m.fs.ReleaseLeft(); n > 0 {
		m.log.Info("released handles whose RELEASE the kernel dropped as the mount went", zap.Int("handles", n))
	}
}

// Reservation is what a writer opening now is admitted.
func (m *Mount) Reservation() int64 { return m.core.Reservation() }

// Poll has the core read its passthrough writers' sizes once; tests use
// it instead of waiting for the poller.
func (m *Mount) Poll() { m.core.Poll() }

// Releasing is how many handles' releases are under way (see
// core.Core.Releasing); tests wait for none.
func (m *Mount) Releasing() int64 { return m.core.Releasing() }

// Unmount asks the kernel to unmount, retrying while files are busy and
// detaching lazily in the end so the daemon can always exit (see
// detached.go).
func (m *Mount) Unmount() error {
	var err error
	for i := 0; i < 10; i++ {
		if err = m.server.Unmount(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return m.detachLazily(err)
}

// warnSmallDisk warns of a capacity the store's file system cannot
// hold, with held bytes of objects on it: stores past its room fail
// with ENOSPC from the disk while the cache has room to spare, before
// anything is evicted. (df of the mount shows the disk's room then.)
// It returns that room, or 0 when the capacity fits.
func warnSmallDisk(store string, capacity, held int64, log *zap.Logger) int64 {
	if room, err := diskRoom(store, held); err == nil && capacity > room {
		log.Warn("the capacity is more than the store's file system can hold: kvfs lowers the capacity to what the disk can hold, evicting, and follows the disk from then on (README, Known limits); give a smaller --capacity",
			zap.String("store", store), zap.Int64("capacity", capacity), zap.Int64("room", room))
		return room
	}
	return 0
}

// warnVolatile says so when the store lives in memory: it works, but the
// cache is gone at reboot and its bytes compete with the page cache.
func warnVolatile(store string, log *zap.Logger) {
	var sf unix.Statfs_t
	if unix.Statfs(store, &sf) == nil && sf.Type == unix.TMPFS_MAGIC {
		log.Warn("store is on tmpfs: objects do not survive a reboot", zap.String("store", store))
	}
}

// detach lazily unmounts, as root or through fusermount3.
func detach(mp string) error {
	if err := unix.Unmount(mp, unix.MNT_DETACH); err == nil || !errors.Is(err, unix.EPERM) {
		return err
	}
	out, err := exec.Command("fusermount3", "-u", "-z", mp).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s", strings.TrimSpace(string(out)))
	}
	return nil
}

// mountedAt reports whether mp is a mount point, and its type.
func mountedAt(mp string) (bool, string) {
	e, ok := mountinfo.At(mp)
	return ok, e.FSType
}

// releaseStuckOwner frees a store whose daemon was killed but cannot
// finish exiting. A daemon SIGKILLed while one of its threads tells the
// kernel to drop a name waits for the directory's lock, which a client
// holds while waiting for an answer that only the dead daemon could give:
// the process stays a zombie holding the store's lock, and its mount
// hangs every caller. If the pid in the store's lock file stays dying
// (see dying) as long as its guard waits before it acts, the FUSE
// connection of every kvfs mount of the store is aborted, which lets
// both finish; then the lock is waited for.
func releaseStuckOwner(store string, log *zap.Logger) {
	b, err := os.ReadFile(filepath.Join(store, blob.LockName))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return
	}
	for range stuckFor {
		if !dying(pid) {
			return // alive, or through its exit
		}
		time.Sleep(guardPoll)
	}
	mounts := mountsOfStore(mountinfo.Read(), store)
	for _, e := range mounts {
		log.Warn("the store's daemon was killed but is stuck exiting; aborting its FUSE connection",
			zap.Int("pid", pid), zap.String("mountpoint", e.Point))
		// Through fusectl where it is mounted: the mount stays, dead,
		// for newServer to replace, and its point never shows the
		// directory under it (umount2 with MNT_FORCE also unmounts).
		abortConnection(e.Point, e)
	}
	for i := 0; i < 100 && len(mounts) > 0 && dying(pid); i++ {
		time.Sleep(100 * time.Millisecond)
	}
}

// exiting: pid is in the kernel's exit (its flags have PF_EXITING) but
// not through it: a daemon killed while it held a file of its own mount
// open stops there, closing that file, whose FLUSH only it could answer
// (seen in a CI run: one thread left, in D, in fuse_flush under
// do_exit). Its guard's pipe stays open until then, so only this tells
// the guard.
func exiting(pid int) bool {
	line, err := procstat.Read(pid)
	return err == nil && procstat.Exiting(line)
}

// zombie: pid's thread group leader has exited while other threads of
// it have not. A process all of whose threads exited is a zombie too
// until its parent waits for it, which a PID 1 that reaps nothing never
// does; it holds no lock and no connection, so it is not one of these
// (treating it as stuck aborted, and with umount2's MNT_FORCE unmounted,
// a dead mount that the next start would have replaced beneath).
func zombie(pid int) bool {
	st, _ := procState(pid)
	return st == 'Z' && threadsLeft(pid)
}

// procState reads process pid's state (R, S, D, Z, ...) from
// /proc/PID/stat; ok is false where it cannot be read (gone), and the
// state 0 where the line cannot be parsed.
func procState(pid int) (state byte, ok bool) {
	line, err := procstat.Read(pid)
	if err != nil {
		return 0, false
	}
	return procstat.State(line), true
}

// threadsLeft: a zombie pid's leader has threads still running.
func threadsLeft(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	return err == nil && len(tasks) > 1
}

// killed: pid has a SIGKILL pending and has not exited: a thread of it
// sleeps in the kernel, unable to take the signal, before it ever began
// to exit (no PF_EXITING). A leader thread that waits so, for the
// directory's lock in an eviction notice or for an answer from its own
// mount, keeps the process neither a zombie nor exiting (measured: a
// SIGKILLed stat(1) waiting for a request its FUSE daemon had read:
// state D, flags 0x400000, SigPnd and ShdPnd 0x100).
func killed(pid int) bool {
	b, err := procstat.Status(pid)
	return err == nil && procstat.StatusState(b) != 'Z' && procstat.KillPending(b)
}

// dying: pid was killed, or began to exit, and has not finished: one of
// zombie, exiting and killed. Every killed daemon is so for a moment; one
// that stays so is stuck.
func dying(pid int) bool { return zombie(pid) || exiting(pid) || killed(pid) }

// mountsOfStore lists the kvfs mounts among mounts whose source (the
// store kvfs names as FsName) is store.
func mountsOfStore(mounts []mountinfo.Entry, store string) []mountinfo.Entry {
	var out []mountinfo.Entry
	for _, e := range mounts {
		if ofStore(e, store) {
			out = append(out, e)
		}
	}
	return out
}

// ofStore says whether e is a kvfs mount of store (an absolute path):
// by name, or by the directory's identity where the names differ (a
// bind mount of the store, or the same store named through another
// one: a start through one waited 30 s on the live daemon serving the
// other, then named it "starting or stopping", an outside tester).
func ofStore(e mountinfo.Entry, store string) bool {
	if e.FSType != FSType {
		return false
	}
	if e.Source == store {
		return true
	}
	a, err := os.Stat(e.Source)
	if err != nil {
		return false
	}
	b, err := os.Stat(store)
	return err == nil && os.SameFile(a, b)
}

// ownEntry is the mount at the mount point, if it is a kvfs mount of
// this store: not once someone detached it.
func (m *Mount) ownEntry() (mountinfo.Entry, bool) {
	e, ok := mountinfo.At(m.Mountpoint)
	return e, ok && ofStore(e, m.Store)
}

// CheckInvariants checks the ledger's invariants; tests call it.
func (m *Mount) CheckInvariants() error { return m.core.CheckInvariants() }
