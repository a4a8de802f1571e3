package core

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvfs/kvfs/blob"
	"go.uber.org/zap"
)

// Last use. The ledger keeps the LRU order in memory, and a clean stop's
// checkpoint keeps it exactly; after a crash, a start from the running
// checkpoint puts the objects read since it after its order, and a start
// that walks the store orders the objects by their stored files' times
// (the later of atime and mtime, see blob.Object), both with the reads
// the journal of uses holds (blob.UsesName). A writer's bytes set mtime;
// a reader's open is noted here, once a second an object, with the
// core's clock, and recordLoop appends the notes of each second that has
// ended to the journal, off the load's path. A crash loses at most the
// last second or two of notes: the order it leaves is that much older.
// The notes are never written into the stored files' atimes: that moved
// each read file's ctime a second later, which a local file system's
// reads never do (git called read files changed, `tar
// --listed-incremental` saved them again: an outside tester), and cost
// the store's file system a journalled inode update a read (on ext4,
// open, read and close of a small file ran 130,000 a second without,
// 72,000 with). The atime a client sees is the store's file system's
// own, by its mount's atime policy (relatime: the first read after a
// write, and then one a day).

// lastUse holds the notes of the current second and those of seconds
// that ended and are not recorded yet. Noting takes no lock of the lock
// order: one sync.Map per second, replaced with a compare-and-swap when
// the second changes; the ended ones wait on a list (mu, a leaf).
type lastUse struct {
	now   atomic.Pointer[useSecond]
	mu    sync.Mutex
	ended []*useSecond
}

type useSecond struct {
	sec  int64
	seen sync.Map // ID -> int64: the first use's time, in ns
}

// used notes that a reader opened h's object.
func (c *Core) used(h *Handle) { c.lastUse.first(h.id, c.cfg.Now()) }

// first notes a use of id at now unless one is noted in its second
// already, and says whether it was the first. Two callers in different
// seconds may replace each other's second: that costs a record more. A
// note added to a second the loop has recorded already (by a caller that
// read the clock a second before) is lost: only the order after a crash
// could show it.
func (u *lastUse) first(id ID, now time.Time) bool {
	sec := now.Unix()
	cur := u.now.Load()
	for cur == nil || cur.sec != sec {
		next := &useSecond{sec: sec}
		if u.now.CompareAndSwap(cur, next) {
			u.end(cur)
			cur = next
			break
		}
		cur = u.now.Load()
	}
	_, seen := cur.seen.LoadOrStore(id, now.UnixNano())
	return !seen
}

// end queues a second's notes for recording.
func (u *lastUse) end(s *useSecond) {
	if s == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ended = append(u.ended, s)
}

// take returns the notes of every second before sec; the current one is
// taken too once it is over, even if no use came after it.
func (u *lastUse) take(sec int64) []*useSecond {
	if cur := u.now.Load(); cur != nil && cur.sec < sec && u.now.CompareAndSwap(cur, nil) {
		u.end(cur)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	out := u.ended
	u.ended = nil
	return out
}

// recordLoop records the ended seconds' notes once a second, unpins
// the objects kept for mappings now gone, and trims a cache left over
// its capacity.
func (c *Core) recordLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case <-c.cfg.After(time.Second):
		}
		c.recordUses()
		c.unmapped()
		c.trimIfOver()
		c.fitDisk()
	}
}

// trimIfOver evicts toward the capacity when the cache is past it: a
// smaller capacity (a handover's, a restart's) or bytes a writer left
// unadmitted, whose trim at the time could not take everything (objects
// in their grace period or held open). Each second it takes what has
// come free since, coldest first.
func (c *Core) trimIfOver() {
	if c.ledger.Over() {
		c.locked(func() (victims, error) { return c.ledger.Trim(), nil })
	}
}

// recordUses journals the notes of every second that has ended (see
// blob.UsesName), by the stored inode each object has. A stop ends it at
// once: the clean stop's checkpoint keeps the order exactly.
func (c *Core) recordUses() {
	var journal []blob.Use
	for _, s := range c.lastUse.take(c.cfg.Now().Unix()) {
		s.seen.Range(func(k, v any) bool {
			select {
			case <-c.done:
				return false
			default:
			}
			id, ns := k.(ID), v.(int64)
			c.mu.RLock()
			ino := c.store.Ino(id)
			c.mu.RUnlock()
			if ino == 0 {
				return true
			}
			journal = append(journal, blob.Use{Ino: ino, At: ns})
			c.usesRecorded.Add(1)
			return true
		})
	}
	if err := c.store.NoteUses(journal); err != nil {
		c.log.Debug("journaling uses", zap.Error(err))
	}
}

// UsedPath is Used for the object the index holds at rel, a path under
// the root; the index alone answers (nothing is stat'ed or counted as a
// lookup), and a directory or a path it does not hold is no use.
func (c *Core) UsedPath(rel string) {
	if e, err := c.resolve(rel); err == nil && !e.Dir {
		c.Used(e.ID)
	}
}

// Used notes a read of id that the mount served before the index was
// built (fusefs.Loading): as a read's open and release would, it moves id
// to the back of the LRU order and notes the use for a crash's order.
func (c *Core) Used(id ID) {
	if c.ledger.Open(id, false) != nil {
		return // gone since
	}
	c.lastUse.first(id, c.cfg.Now())
	c.ledger.Close(id, false)
}
