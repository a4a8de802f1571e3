package mount

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/fusefs"
	"github.com/kvfs/kvfs/internal/stats"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// DefaultServeWhileLoading is the store size, in objects, from which a
// start serves before its index is built: loading a million objects
// takes 3-6 s here, ten million a minute (docs/restart.md).
const DefaultServeWhileLoading = 1_000_000

// loadsInBackground says whether this start serves while it loads:
// the store is expected to hold at least ServeWhileLoading objects.
func (o *Options) loadsInBackground(store *blob.Store) (bool, int64) {
	if o.ServeWhileLoading < 0 {
		return false, 0
	}
	n := store.ExpectedObjects()
	return n >= o.ServeWhileLoading, n
}

// startLoading mounts before the store's index is built: the mount
// serves lookups, attributes, listings and reads from the store's files
// as they lie (fusefs.Loading), and every other request waits for the
// index, which finishLoading builds behind it.
func (m *Mount) startLoading(store *blob.Store, expected int64) error {
	pre, err := core.NewPreview(store)
	if err != nil {
		store.Close()
		return fmt.Errorf("reading the store: %w", err)
	}
	// The capacity as given (0: derived from the free space once
	// loaded); the load sets m.Capacity meanwhile.
	began, capacity := time.Now(), m.Capacity
	budget, err := m.earlyBudget()
	if err != nil {
		m.log.Warn("stores wait for the index: the store's disk's figures", zap.Error(err))
	}
	pre.AllowStores(budget)
	if m.Remote != nil {
		pre.KeepStoredNames() // the FS deletes a removed name from the bucket too
	}
	m.loading = fusefs.NewLoading(pre, fusefs.LoadingConfig{Passthrough: m.passthrough(), Logger: m.log.Named("fusefs"),
		Stats: func() ([]byte, error) { return json.Marshal(stats.NewLoading(expected, capacity, began)) }})
	m.loadDone, m.stopLoad = make(chan struct{}), store.StopLoad
	if err := m.serve(m.loading.Instrument(m.requestTimer())); err != nil {
		store.Close()
		return err
	}
	m.log.Info("serving reads while the store loads", zap.String("mountpoint", m.Mountpoint),
		zap.Int64("expected_objects", expected), zap.Int64("store_budget_bytes", budget))
	// A successor asking now is told why it must wait, not left to take
	// the mount for a foreign one.
	m.listenHandover()
	go func() {
		// Once the mount is gone (SIGTERM, `kvfs unmount`, umount), a
		// load still under way stops: its index would serve no one, and
		// the daemon would hold the store from the next one for as long
		// as it took (a minute at ten million objects).
		m.server.Wait()
		store.StopLoad()
	}()
	go m.finishLoading(store)
	return nil
}

// earlyBudget is what stores may take while the index loads (see
// core/early.go). The load charges at most what the store's file system
// holds, so the capacity less that is room no eviction is needed for
// (with the capacity derived from the free space, as if those bytes
// were all the store's: the least capacity it can derive). A full cache
// has none, and a cache is full in its steady state; so, but for
// --strict-capacity, the stores may go past the capacity by up to an
// eighth of it, into at most half the disk's free space, for as long as
// the load takes: once the index is built, it evicts the least recently
// used objects back down to the capacity.
func (m *Mount) earlyBudget() (int64, error) {
	var sf unix.Statfs_t
	if err := unix.Statfs(m.Store, &sf); err != nil {
		return 0, err
	}
	used, free := int64(sf.Blocks-sf.Bfree)*sf.Bsize, int64(sf.Bavail)*sf.Bsize
	capacity := m.Capacity
	if capacity == 0 {
		var err error
		if capacity, err = capacityFor(m.Store, used); err != nil {
			return 0, err
		}
	}
	room := capacity - used
	if !m.StrictCapacity {
		room = max(room, min(free/2, capacity/8))
	}
	return max(room, 0), nil
}

// ErrLoadStopped: the mount was gone before its index was built, and the
// load stopped (blob.ErrStopped). The store is as a crash would have
// left it, for the next start.
var ErrLoadStopped = blob.ErrStopped

// finishLoading builds the index behind a mount that serves, then hands
// the mount to the file system over it. A load that fails unmounts.
func (m *Mount) finishLoading(store *blob.Store) {
	defer close(m.loadDone)
	gate("KVFS_LOAD_GATE") // tests: serving, the index not built yet
	if err := m.load(store); errors.Is(err, blob.ErrStopped) {
		m.loadErr = ErrLoadStopped
		m.log.Info("the mount was gone before its index was built; the load stopped, and the next start loads the store")
		m.loading.Fail()
		return
	} else if err != nil {
		m.loadErr = fmt.Errorf("loading the store: %w", err)
		m.log.Error("loading the store failed; unmounting", zap.Error(err))
		m.loading.Fail()
		if err := m.Unmount(); err != nil {
			m.log.Error("unmount", zap.Error(err))
		}
		return
	}
	m.capStore()
	m.core.AwaitEarly() // Ready has the core take the Preview's stores
	m.start()
	m.loading.Ready(m.fs)
	m.serving("loaded")
}

// WaitLoaded returns once the index is built and every request is
// served, or the load failed (its error).
func (m *Mount) WaitLoaded() error {
	if m.loadDone == nil {
		return nil
	}
	<-m.loadDone
	return m.loadErr
}

// Loading says whether the mount serves while its index is built.
func (m *Mount) Loading() bool {
	if m.loadDone == nil {
		return false
	}
	select {
	case <-m.loadDone:
		return false
	default:
		return true
	}
}

// errStillLoading refuses a handover until the index is built.
var errStillLoading = errors.New("the daemon is still building its index (it serves loads meanwhile); " +
	"run this again once it serves every request (its \"kvfs: serving\" line, or kvfs stats answering)")

// errLoadsHeld refuses a handover while the kernel holds names or
// handles of the load's, which the successor would not know.
var errLoadsHeld = errors.New("names looked up while the store loaded are still in use")

// loadHeld is errLoadsHeld while there are any.
func (m *Mount) loadHeld() error {
	if m.loading == nil {
		return nil
	}
	if names, handles := m.loading.Held(); names+handles > 0 {
		return fmt.Errorf("%w (%d names, %d open handles; names: %s)", errLoadsHeld, names, handles, strings.Join(m.loading.HeldNames(3), ", "))
	}
	return nil
}

// gate holds the daemon until a writer opens the FIFO named by $env,
// for tests of what happens meanwhile (an open of a FIFO for reading
// waits for a writer): KVFS_LOAD_GATE holds a load that serves
// meanwhile, KVFS_MOUNT_GATE a start that holds the store's lock and
// has mounted nothing yet.
func gate(env string) {
	if p := os.Getenv(env); p != "" {
		if f, err := os.Open(p); err == nil {
			f.Close()
		}
	}
}
