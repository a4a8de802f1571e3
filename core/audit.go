package core

import (
	"errors"
	"maps"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/ledger"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// AuditReport counts what an audit reconciled.
type AuditReport struct {
	Vanished, Resized, Adopted, Linked int
}

// Audit brings the ledger back in line with a store that changed behind
// kvfs's back (files deleted, truncated, grown or added directly in the
// store while mounted), then evicts if that put it over capacity. It
// walks the store one directory at a time without a lock (so what it
// holds is bounded by a batch of a directory's names, not the store),
// compares each batch, and then the directory's indexed names, with the
// index under Core.mu shared, then checks each difference again and
// settles it one at a time, under the lock of the directory it is in (so
// a change through the mount in flight there is never mistaken for one
// behind kvfs's back), with Core.mu exclusive only to commit, in memory.
// Files the index has no name for are settled after the walk, when every
// directory's inodes are known (one of them may be a new name of an
// indexed file).
func (c *Core) Audit() (AuditReport, error) {
	var r AuditReport
	var seen blob.Seen
	unknown := map[string]blob.WalkedFile{}
	err := c.store.WalkDirs(c.done, func(rel string, names []blob.WalkedName) {
		p := blob.NewAuditPlan()
		c.mu.RLock()
		c.store.AuditNames(rel, names, &seen, &p)
		c.mu.RUnlock()
		if len(p.Inos) > 0 {
			c.relinked(&p, unknown, &r)
			c.mu.Lock()
			c.store.ApplyInos(p.Inos)
			c.mu.Unlock()
		}
		c.auditSizes(p.Sizes, &r)
		maps.Copy(unknown, p.Unknown)
	}, func(rel string) {
		for after, more := uint64(0), true; more; {
			p := blob.NewAuditPlan()
			c.mu.RLock()
			after, more = c.store.AuditMissing(rel, &seen, after, &p)
			c.mu.RUnlock()
			for _, n := range p.Missing {
				c.auditName(n, p.Sizes, &r)
			}
			for _, id := range p.MissingDirs {
				c.auditDir(id, &r)
			}
			c.auditSizes(p.Sizes, &r)
		}
		seen.Reset()
	})
	if err != nil {
		return r, err
	}
	inos := map[uint64]bool{}
	for _, st := range unknown {
		inos[st.Ino] = true
	}
	c.mu.RLock()
	known := c.store.IndexedInos(inos)
	c.mu.RUnlock()
	for rel, st := range unknown {
		c.auditFound(rel, st, known, &r)
	}
	c.locked(func() (victims, error) { return c.ledger.Trim(), nil })
	if r != (AuditReport{}) {
		c.behindBack("store changed behind kvfs; ledger reconciled",
			zap.Int("vanished", r.Vanished), zap.Int("resized", r.Resized),
			zap.Int("adopted", r.Adopted), zap.Int("linked", r.Linked))
	}
	return r, nil
}

// relinked settles the names of p.Inos whose stored file is now another
// indexed object's (a hard link made behind kvfs's back in place of the
// name): the name leaves its object (which vanishes if it has no name
// left) and is found after the walk as a new name of the other, so one
// inode is charged once. Any other inode at a name stays its object's.
func (c *Core) relinked(p *blob.AuditPlan, unknown map[string]blob.WalkedFile, r *AuditReport) {
	inos := map[uint64]bool{}
	for _, ino := range p.Inos {
		inos[ino] = true
	}
	c.mu.RLock()
	known := c.store.IndexedInos(inos)
	c.mu.RUnlock()
	for id, ino := range p.Inos {
		if other, ok := known[ino]; !ok || other == id {
			continue
		}
		at := p.InoAt[id]
		delete(p.Inos, id)
		delete(p.Sizes, id)
		c.dropStaleName(at.Name, r, func(kid blob.ID) bool {
			st, _, present := c.store.RecheckName(at.Name)
			return kid == id && present && st.Ino == ino
		})
		unknown[at.Path] = at.WalkedFile
	}
}

// auditSizes reconciles the objects whose walked size differs from the
// ledger's, if no writer has them open.
func (c *Core) auditSizes(sizes map[blob.ID]int64, r *AuditReport) {
	for id, size := range sizes {
		if known, _, ok := c.ledger.Size(id); ok && known != size && c.ledger.Writers(id) == 0 {
			if c.reconcile(id) {
				r.Resized++
			}
		}
	}
}

// auditName settles an indexed name the walk did not see.
func (c *Core) auditName(n blob.Name, sizes map[blob.ID]int64, r *AuditReport) {
	c.dropStaleName(n, r, func(id blob.ID) bool {
		st, _, present := c.store.RecheckName(n)
		if present {
			sizes[id] = st.Size
		}
		return !present
	})
}

// dropStaleName drops the name n from the index if stale, asked with
// Core.mu held shared, says what it names is not what the store holds
// there; a file left with no name vanishes from the ledger.
func (c *Core) dropStaleName(n blob.Name, r *AuditReport, stale func(blob.ID) bool) {
	unlock := c.lockDirs(n.Parent, 0)
	defer unlock()
	c.tree.RLock()
	defer c.tree.RUnlock()
	c.mu.RLock()
	id := c.store.Kid(n.Parent, n.Name)
	drop := id != 0 && stale(id)
	c.mu.RUnlock()
	if !drop {
		return
	}
	var a blob.Audit
	c.mu.Lock()
	c.store.ApplyVanishedName(n, id, &a)
	c.settleVanishedLocked(a, r)
	c.mu.Unlock()
	c.deliver([]Drop{{ID: id, Names: a.Dropped, Why: Vanished}})
}

// settleVanishedLocked has the ledger forget the files an audit found
// with no name left; mu held.
func (c *Core) settleVanishedLocked(a blob.Audit, r *AuditReport) {
	for _, id := range a.Vanished {
		if c.ledger.Forget(id) {
			r.Vanished++
		}
	}
}

// auditDir settles an indexed directory the walk did not see.
func (c *Core) auditDir(id blob.ID, r *AuditReport) {
	c.mu.RLock()
	at, ok := c.store.DirName(id)
	c.mu.RUnlock()
	if !ok {
		return
	}
	unlock := c.lockDirs(at.Parent, id)
	defer unlock()
	c.tree.RLock()
	defer c.tree.RUnlock()
	c.mu.RLock()
	still := c.store.RecheckDir(id)
	c.mu.RUnlock()
	if still {
		return
	}
	var a blob.Audit
	c.mu.Lock()
	c.store.ApplyVanishedDir(id, &a)
	c.settleVanishedLocked(a, r)
	c.mu.Unlock()
	c.deliver([]Drop{{Names: a.Dropped, Why: Vanished}})
}

// auditFound settles a file the walk found that the index has no name
// for: adopted (charged), or a new name of an indexed file.
func (c *Core) auditFound(rel string, walked blob.WalkedFile, known map[uint64]blob.ID, r *AuditReport) {
	// What adopting evicts is reaped with no directory's lock held.
	drops := c.adoptFound(rel, walked, known, r)
	c.reap(drops)
	c.deliver(drops)
}

func (c *Core) adoptFound(rel string, walked blob.WalkedFile, known map[uint64]blob.ID, r *AuditReport) []Drop {
	c.mu.RLock()
	above := c.store.IndexedAbove(rel)
	c.mu.RUnlock()
	unlock := c.lockDirs(above, 0)
	defer unlock()
	c.tree.RLock()
	defer c.tree.RUnlock()
	c.mu.RLock()
	f, ok := c.store.RecheckUnknown(rel, walked)
	c.mu.RUnlock()
	if !ok {
		return nil
	}
	var a blob.Audit
	c.mu.Lock()
	c.store.ApplyFound(f, known, nil, &a)
	for _, id := range a.Linked {
		if c.ledger.Link(id) == nil {
			r.Linked++
		}
	}
	var drops []Drop
	for _, o := range a.Adopted {
		v, err := c.ledger.Adopt(o.ID, o.Size, o.Links)
		if err == nil {
			r.Adopted++
		}
		if len(v) > 0 && v[0].ID == o.ID {
			// Larger than the whole capacity: it goes at once, and only
			// this line says so (it was never served).
			c.log.Warn("a file put in the store behind kvfs's back is larger than the capacity; removed",
				zap.String("path", rel), zap.Int64("size", o.Size), zap.Int64("capacity", c.ledger.Capacity()))
		}
		drops = append(drops, c.dropLocked(v, Evicted)...)
	}
	c.mu.Unlock()
	return drops
}

// reconcile follows the store for one object whose stored file vanished
// or changed size behind kvfs's back, and evicts if that put the ledger
// over capacity; it says whether the ledger changed its size. The store
// is read under Core.mu shared; the ledger follows only if nothing
// changed the object in between.
func (c *Core) reconcile(id blob.ID) bool {
	before, _, _ := c.ledger.Size(id)
	var st unix.Stat_t
	var replaced bool
	err, proven := c.retryMoved(func() (err error) {
		c.mu.RLock()
		defer c.mu.RUnlock()
		st, err = c.store.Stat(id)
		replaced = err == nil && c.replacedLocked(id, st.Ino)
		return err
	})
	var drops []Drop
	resized := false
	c.mu.Lock()
	switch now, _, ok := c.ledger.Size(id); {
	case !ok || now != before:
	case errors.Is(err, unix.ENOENT) && !proven:
		// Renames kept moving paths: left to the next look, or the audit.
	case errors.Is(err, unix.ENOENT):
		drops = c.vanishedLocked(id, err)
	case err != nil:
	case replaced:
		// Its name holds another file: a rename over it under way (the
		// commit follows), or a replacement behind kvfs's back, which
		// the audit finds by inode. Its size says nothing of id's.
	case c.ledger.Writers(id) != 0:
	case ledger.Charge(st.Size) > c.ledger.Capacity():
		// Grown past the whole capacity: it alone goes, as a file put
		// in the store that large does (Adopt). Evicting toward its
		// size took every other object first, then it (an outside
		// tester: a 40 MB append to one object's stored file emptied a
		// 32 MiB cache, 5 of 5; any user with --allow-other may write
		// the stored file of an object of theirs).
		resized = true
		drops = c.forgetLocked(id, "an object grown behind kvfs's back past the capacity; removed",
			zap.Int64("size", st.Size), zap.Int64("capacity", c.ledger.Capacity()))
	default:
		if c.ledger.Reconcile(id, st.Size) {
			resized = true
			// (After a crash, a rewrite through kvfs since the
			// checkpoint the start came from is one too.)
			name, _ := c.store.Path(id)
			c.behindBack("object size changed behind kvfs, or since the checkpoint a start came from; ledger reconciled",
				zap.Uint64("id", uint64(id)), zap.String("name", name), zap.Int64("ledger", before), zap.Int64("store", st.Size))
			drops = c.dropLocked(c.ledger.Trim(), Evicted)
		}
	}
	c.mu.Unlock()
	c.reap(drops)
	c.deliver(drops)
	return resized
}

// behindBack logs a change of the store kvfs followed: a warning, but
// while TakeEarly settles the stores taken while loading, whose changes
// are kvfs's own, at debug.
func (c *Core) behindBack(msg string, fields ...zap.Field) {
	if c.ledger.Owning() {
		c.log.Debug(msg, fields...)
		return
	}
	c.log.Warn(msg, fields...)
}

// vanished reconciles an object whose stored bytes disappeared.
func (c *Core) vanished(id blob.ID, why error) {
	c.mu.Lock()
	drops := c.vanishedLocked(id, why)
	c.mu.Unlock()
	c.reap(drops)
	c.deliver(drops)
}

func (c *Core) vanishedLocked(id blob.ID, why error) []Drop {
	return c.forgetLocked(id, "object vanished from the store; dropped from the ledger", zap.Error(why))
}

// forgetLocked drops object id, changed behind kvfs's back, from the
// ledger and the index, and dooms its stored names; msg says why (see
// behindBack), if the ledger held it. mu held.
func (c *Core) forgetLocked(id blob.ID, msg string, fields ...zap.Field) []Drop {
	if c.ledger.Forget(id) {
		c.behindBack(msg, append([]zap.Field{zap.Uint64("id", uint64(id))}, fields...)...)
	}
	names := c.store.Forget(id)
	c.doomLocked(id, names)
	return []Drop{{ID: id, Names: names, Why: Vanished}}
}

// auditSpacing bounds the time spent on periodic audits: the next one
// waits at least this many times as long as the last took. A walk of
// ten million stored files takes minutes (a stat of each); every
// AuditInterval (10 min) it would walk 40% of the time.
const auditSpacing = 20

// auditWait is how long the loop waits after an audit that took took.
func (c *Core) auditWait(took time.Duration) time.Duration {
	return max(c.cfg.AuditInterval, auditSpacing*took)
}

// auditLoop audits at once if asked, then every AuditInterval (if any),
// spaced out when audits take long, until the Core closes.
func (c *Core) auditLoop() {
	defer c.wg.Done()
	if c.earlyTaken != nil {
		select {
		case <-c.earlyTaken:
		case <-c.done:
			return
		}
	}
	wait := c.cfg.AuditInterval
	if c.auditAtStart {
		start := c.cfg.Now()
		r, err := c.Audit()
		switch {
		case errors.Is(err, blob.ErrAuditStopped):
			return
		case err != nil:
			c.log.Error("audit", zap.Error(err))
		}
		took := c.cfg.Now().Sub(start)
		c.log.Info("start-up audit done", zap.Int("vanished", r.Vanished), zap.Int("resized", r.Resized),
			zap.Int("adopted", r.Adopted), zap.Int("linked", r.Linked), zap.Duration("took", took))
		wait = c.auditWait(took)
	}
	if c.cfg.AuditInterval <= 0 {
		return
	}
	for {
		select {
		case <-c.done:
			return
		case <-c.cfg.After(wait):
		}
		start := c.cfg.Now()
		if _, err := c.Audit(); err != nil && !errors.Is(err, blob.ErrAuditStopped) {
			c.log.Error("audit", zap.Error(err))
		}
		wait = c.auditWait(c.cfg.Now().Sub(start))
	}
}

// Fsck checks an unmounted store (see blob.Fsck), counting bytes as the
// ledger charges them, and reporting its walk's progress to p (nil: to
// nobody).
func Fsck(dir string, repair bool, p blob.Progress) (blob.FsckReport, error) {
	return blob.FsckWith(dir, repair, ledger.Charge, p)
}
