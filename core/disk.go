package core

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/kvfs/kvfs/internal/lockorder"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The store's own file system may hold less than the capacity leaves
// room for: a capacity set past the disk, other files written to the
// same disk (another store, logs), a file system of few inodes. The
// disk then refused stores with ENOSPC while the cache held cold objects
// it could have evicted, and nothing was evicted for them (an outside
// tester: 200 MB written beside a 128 MiB store's 60 MiB of objects
// failed 60 of 60 stores, 0 evictions; 1,050 of 3,000 creates failed
// on an ext4 of 2,000 inodes). So kvfs keeps a floor of the disk free:
// where the disk's free space falls below it, the capacity is lowered to
// what is used less the shortfall, which evicts the coldest objects and
// makes admissions evict ahead of the stores from then on; where the
// disk has room again, the capacity goes back up, at most to the one
// asked for. Inodes are shed the same way, by count. The disk is looked
// at each second, at once when it refuses a create, and at each new
// writer, write through the daemon and round of the passthrough poller
// that saw a writer grow (at most every diskLookEvery while the disk is
// far from its floor): looked at each second only, a disk filled behind
// kvfs's back failed every store for up to that second (an outside
// tester: 550-732 of them).

const (
	// The floor of free bytes is a fiftieth of the disk, within these;
	// on a disk of less than 8 MiB, half of it.
	diskFloorLeast = 4 << 20
	diskFloorMost  = 1 << 30
	// The floor of free inodes is a hundredth of them, at least this.
	inodeFloorLeast = 64
	// diskLookEvery: the most often stores and writes look at the disk.
	diskLookEvery = 10 * time.Millisecond
)

// DiskFloor is the free space kvfs keeps on a store's file system of
// size bytes. A floor of 4 MiB on a disk of 4 MiB left a capacity of 0
// on an empty disk, every store refused (an outside tester's tmpfs): a
// disk under 8 MiB keeps half of itself. Not less: the floor is what
// writes under way land in before the capacity follows the disk (a
// write through the daemon is up to 1 MiB; with 1 MiB of an 8 MiB disk
// kept, a store of 1 MB got ENOSPC from the disk itself).
func DiskFloor(size int64) int64 {
	return min(max(size/50, min(diskFloorLeast, size/2)), diskFloorMost)
}

// inodeFloor is the free inodes kvfs keeps on a store's file system of
// files inodes.
func inodeFloor(files uint64) int64 { return max(int64(files)/100, inodeFloorLeast) }

// diskWatch is the capacity asked for and whether the disk lowered it.
type diskWatch struct {
	mu lockorder.Mutex
	// asked is the capacity before the disk lowered it (Start sets it);
	// lowered: the capacity is below it for the disk's sake. Written
	// under mu, read anywhere (fits).
	asked   atomic.Int64
	lowered atomic.Bool
	// short: objects were shed for inodes since the disk last had
	// enough.
	short bool
	// looked is when fitDisk last ran (Unix ns), for fitDiskSoon;
	// near: the disk's free space was within a few floors of the floor
	// then, or the capacity lowered.
	looked atomic.Int64
	near   atomic.Bool
}

// fitDiskSoon is fitDisk, unless it ran within diskLookEvery and found
// the disk far from its floor: near it, a store or a write between two
// looks could take what the floor keeps (a 1 MiB store takes a
// millisecond).
func (c *Core) fitDiskSoon() {
	now := c.cfg.Now().UnixNano()
	if c.disk.near.Load() {
		c.fitDisk()
		return
	}
	if last := c.disk.looked.Load(); now-last >= int64(diskLookEvery) && c.disk.looked.CompareAndSwap(last, now) {
		c.fitDisk()
	}
}

// fitDisk lowers the capacity, or raises it back, to keep the floors of
// the store's file system free, and sheds objects for its inodes; it
// says whether it evicted anything.
func (c *Core) fitDisk() bool {
	c.disk.looked.Store(c.cfg.Now().UnixNano())
	var sf unix.Statfs_t
	if err := unix.Statfs(c.store.Dir(), &sf); err != nil || sf.Blocks == 0 {
		return false
	}
	c.disk.mu.Lock()
	defer c.disk.mu.Unlock()
	asked := c.disk.asked.Load()
	if asked == 0 {
		return false // not started
	}
	evicted := 0
	evict := func(v victims, err error) (victims, error) { evicted += len(v); return v, err }
	bsize := int64(sf.Bsize)
	floor := DiskFloor(int64(sf.Blocks) * bsize)
	avail := int64(sf.Bavail) * bsize
	c.disk.near.Store(avail < 4*floor || c.disk.lowered.Load())
	capacity := c.ledger.Capacity()
	// limit is what the disk can hold of the cache: the bytes kvfs has
	// on it and its free space, less the floor. Not the reservations
	// writers have yet to write, which the disk does not hold: counted
	// as if it did, the capacity in force passed the whole disk, and
	// stores of passthrough writers met the disk's own ENOSPC while the
	// cache held objects it could evict (an outside tester: 8 threads
	// storing 5-6 MB objects with a capacity of 1 GiB on a 128 MiB
	// disk, 17-52 of 300 failed, none counted, the capacity never
	// lowered). So the capacity follows the disk wherever the disk holds
	// less, not only once its free space is below the floor, by a step
	// of a quarter of the floor: bytes written and not yet seen make the
	// limit dip for a moment.
	st := c.ledger.Stats()
	limit := min(max(st.UsedBytes-st.ReservedBytes+avail-floor, 0)/BlockSize*BlockSize, asked)
	step := floor / 4
	lower := limit < capacity && (avail < floor || limit < capacity-step)
	raise := !lower && c.disk.lowered.Load() && (limit >= asked || limit > capacity+step)
	switch {
	case lower && !c.disk.lowered.Swap(true):
		c.log.Warn("the store's file system holds less than the capacity: the capacity is lowered to what it can hold, keeping room free on it, evicting",
			zap.Int64("capacity", limit), zap.Int64("asked", asked),
			zap.Int64("disk_free", avail), zap.Int64("kept_free", floor))
	case raise && limit >= asked:
		c.disk.lowered.Store(false)
		c.log.Info("the store's file system has room again: the capacity is back", zap.Int64("capacity", limit))
	}
	if lower || raise {
		c.locked(func() (victims, error) { return evict(c.ledger.SetCapacity(limit), nil) })
	}
	if sf.Files > 0 {
		ifloor := inodeFloor(sf.Files)
		if short := ifloor - int64(sf.Ffree); short > 0 {
			if !c.disk.short {
				c.log.Warn("the store's file system is short of inodes: evicting objects to keep some free",
					zap.Uint64("inodes_free", sf.Ffree), zap.Int64("kept_free", ifloor))
			}
			c.disk.short = true
			c.locked(func() (victims, error) { return evict(c.ledger.Shed(int(short)), nil) })
		} else if c.disk.short && int64(sf.Ffree) > 2*ifloor {
			c.disk.short = false
			c.log.Info("the store's file system has inodes free again", zap.Uint64("inodes_free", sf.Ffree))
		}
	}
	return evicted > 0
}

// tooLarge is the error of a size stated outright past the capacity:
// EFBIG, or ENOSPC where only the disk's lowering of the capacity keeps
// it out (the disk lacks the room, not the cache).
func (c *Core) tooLarge(charge int64) error {
	if c.disk.lowered.Load() && charge <= c.disk.asked.Load() {
		return ErrNoSpace
	}
	return ErrTooLarge
}

// diskRefused says whether err is the store's file system refusing a
// change for room (ENOSPC, EDQUOT), which fitDisk may make.
func diskRefused(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}
