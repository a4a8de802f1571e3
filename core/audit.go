package core

import (
	"errors"
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
// walks the store without the lock, then settles each difference under
// it, after checking it again.
func (c *Core) Audit() (AuditReport, error) {
	walked, err := c.store.Walk(c.done)
	if err != nil {
		return AuditReport{}, err
	}
	var r AuditReport
	c.mu.Lock()
	a := c.store.Audit(walked)
	drops := []Drop{{Names: a.Dropped, Why: Vanished}}
	for _, id := range a.Vanished {
		if c.ledger.Forget(id) {
			r.Vanished++
		}
	}
	for _, id := range a.Linked {
		if c.ledger.Link(id) == nil {
			r.Linked++
		}
	}
	for id, size := range a.Sizes {
		if c.resizedLocked(id, size) {
			r.Resized++
		}
	}
	for _, o := range a.Adopted {
		v, err := c.ledger.Adopt(o.ID, o.Size, o.Links)
		if err == nil {
			r.Adopted++
		}
		drops = append(drops, c.dropLocked(v, Evicted)...)
	}
	drops = append(drops, c.dropLocked(c.ledger.Trim(), Evicted)...)
	c.mu.Unlock()
	c.reap(drops)
	c.deliver(drops)
	if r != (AuditReport{}) {
		c.log.Warn("store changed behind kvfs; ledger reconciled",
			zap.Int("vanished", r.Vanished), zap.Int("resized", r.Resized),
			zap.Int("adopted", r.Adopted), zap.Int("linked", r.Linked))
	}
	return r, nil
}

// resizedLocked reconciles one file whose walked size differs from the
// ledger, after reading it again: a write through the mount may have
// landed since. mu held.
func (c *Core) resizedLocked(id blob.ID, walked int64) bool {
	size, _, ok := c.ledger.Size(id)
	if !ok || size == walked || c.ledger.Writers(id) > 0 {
		return false
	}
	st, err := c.store.Stat(id)
	return err == nil && st.Size != size && c.ledger.Reconcile(id, st.Size)
}

// reconcile follows the store for one object whose stored file vanished
// or changed size behind kvfs's back, and evicts if that put the ledger
// over capacity.
func (c *Core) reconcile(id blob.ID) {
	c.mu.Lock()
	st, err := c.store.Stat(id)
	var drops []Drop
	switch {
	case errors.Is(err, unix.ENOENT):
		drops = c.vanishedLocked(id, err)
	case err != nil:
	default:
		size, _, _ := c.ledger.Size(id)
		if c.ledger.Reconcile(id, st.Size) {
			c.log.Warn("object size changed behind kvfs; ledger reconciled",
				zap.Uint64("id", uint64(id)), zap.Int64("ledger", size), zap.Int64("store", st.Size))
			drops = c.dropLocked(c.ledger.Trim(), Evicted)
		}
	}
	c.mu.Unlock()
	c.reap(drops)
	c.deliver(drops)
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
	if c.ledger.Forget(id) {
		c.log.Warn("object vanished from the store; dropped from the ledger",
			zap.Uint64("id", uint64(id)), zap.Error(why))
	}
	names := c.store.Forget(id)
	c.doomLocked(id, names)
	return []Drop{{ID: id, Names: names, Why: Vanished}}
}

// auditLoop audits at once if asked, then every AuditInterval (if any)
// until the Core closes.
func (c *Core) auditLoop() {
	defer c.wg.Done()
	if c.auditAtStart {
		start := time.Now()
		r, err := c.Audit()
		switch {
		case errors.Is(err, blob.ErrAuditStopped):
			return
		case err != nil:
			c.log.Error("audit", zap.Error(err))
		}
		c.log.Info("start-up audit done", zap.Int("vanished", r.Vanished), zap.Int("resized", r.Resized),
			zap.Int("adopted", r.Adopted), zap.Int("linked", r.Linked), zap.Duration("took", time.Since(start)))
	}
	if c.cfg.AuditInterval <= 0 {
		return
	}
	t := time.NewTicker(c.cfg.AuditInterval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			if _, err := c.Audit(); err != nil && !errors.Is(err, blob.ErrAuditStopped) {
				c.log.Error("audit", zap.Error(err))
			}
		}
	}
}

// Fsck checks an unmounted store (see blob.Fsck), counting bytes as the
// ledger charges them, and reporting its walk's progress to p (nil: to
// nobody).
func Fsck(dir string, repair bool, p blob.Progress) (blob.FsckReport, error) {
	return blob.FsckWith(dir, repair, ledger.Charge, p)
}
