package fusefs

import (
	"errors"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/ledger"
	"go.uber.org/zap"
)

// AuditReport counts what an audit reconciled.
type AuditReport struct {
	Vanished, Resized, Adopted, Linked int
}

// Audit brings the ledger back in line with a store that changed behind
// kvfs's back (files deleted, truncated, grown or added directly in the
// store while mounted), then evicts if that put it over capacity.
func (f *FS) Audit() (AuditReport, error) {
	a, err := f.store.AuditUntil(f.done)
	if err != nil {
		return AuditReport{}, err
	}
	var r AuditReport
	for _, n := range a.Dropped {
		f.queue(notice{parent: n.Parent, name: n.Name})
	}
	for _, id := range a.Vanished {
		if f.ledger.Forget(id) {
			r.Vanished++
		}
	}
	for _, id := range a.Linked {
		if f.ledger.Link(id) == nil {
			r.Linked++
		}
	}
	for id, size := range a.Sizes {
		if f.resized(id, size) {
			r.Resized++
		}
	}
	for _, o := range a.Adopted {
		victims, err := f.ledger.Adopt(o.ID, o.Size, o.Links)
		if err == nil {
			r.Adopted++
		}
		f.evict(victims)
	}
	f.evict(f.ledger.Trim())
	if r != (AuditReport{}) {
		f.log.Warn("store changed behind kvfs; ledger reconciled",
			zap.Int("vanished", r.Vanished), zap.Int("resized", r.Resized),
			zap.Int("adopted", r.Adopted), zap.Int("linked", r.Linked))
	}
	return r, nil
}

// resized reconciles one file whose walked size differs from the ledger,
// after checking again: a write through the mount may have landed since.
func (f *FS) resized(id ledger.ID, walked int64) bool {
	size, _, ok := f.ledger.Size(id)
	if !ok || size == walked || f.ledger.Writers(id) > 0 {
		return false
	}
	st, err := f.store.Stat(id)
	if err != nil || st.Size == size || f.ledger.Writers(id) > 0 {
		return false
	}
	f.ram.Drop(uint64(id))
	return f.ledger.Reconcile(id, st.Size)
}

// auditLoop audits at once if now is set, then every interval (if
// any) until the file system closes.
func (f *FS) auditLoop(every time.Duration, now bool) {
	defer f.wg.Done()
	if now {
		start := time.Now()
		r, err := f.Audit()
		switch {
		case errors.Is(err, blob.ErrAuditStopped):
			return
		case err != nil:
			f.log.Error("audit", zap.Error(err))
		}
		f.log.Info("start-up audit done", zap.Int("vanished", r.Vanished), zap.Int("resized", r.Resized),
			zap.Int("adopted", r.Adopted), zap.Int("linked", r.Linked), zap.Duration("took", time.Since(start)))
	}
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-f.done:
			return
		case <-t.C:
			if _, err := f.Audit(); err != nil && !errors.Is(err, blob.ErrAuditStopped) {
				f.log.Error("audit", zap.Error(err))
			}
		}
	}
}
