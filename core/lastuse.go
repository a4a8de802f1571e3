package core

import (
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Last use. The ledger keeps the LRU order in memory, and a clean stop's
// checkpoint keeps it exactly; after a crash, a load recovers it from the
// stored files' times (the later of atime and mtime, see blob.Object). A
// writer's bytes set mtime; a reader's open is recorded here, once, in
// the stored file's atime, on the core's clock. Each record costs the
// store's file system a journalled inode update, so an object is
// recorded at most once a second: the resolution of the order a restart
// after a crash recovers.

// lastUse is which objects were recorded in the current second. It takes
// no lock of the lock order: one sync.Map per second, replaced with a
// compare-and-swap when the second changes.
type lastUse struct {
	now atomic.Pointer[useSecond]
}

type useSecond struct {
	sec  int64
	seen sync.Map // ID -> struct{}
}

// used records that a reader opened h's object.
func (c *Core) used(h *Handle) {
	now := c.cfg.Now()
	if !c.lastUse.first(h.id, now.Unix()) {
		return
	}
	ts := []unix.Timespec{unix.NsecToTimespec(now.UnixNano()), {Nsec: unix.UTIME_OMIT}}
	if err := unix.UtimesNanoAt(int(h.file.Fd()), "", ts, unix.AT_EMPTY_PATH); err != nil {
		// Only the order a crash leaves is the worse for it.
		c.log.Debug("recording a use", zap.Uint64("id", uint64(h.id)), zap.Error(err))
	}
}

// first says whether id is not recorded in second sec yet, and counts it
// recorded. Two callers in different seconds may replace each other's
// second: that costs a record more, never one less.
func (u *lastUse) first(id ID, sec int64) bool {
	cur := u.now.Load()
	for cur == nil || cur.sec != sec {
		next := &useSecond{sec: sec}
		if u.now.CompareAndSwap(cur, next) {
			cur = next
			break
		}
		cur = u.now.Load()
	}
	_, seen := cur.seen.LoadOrStore(id, struct{}{})
	return !seen
}
