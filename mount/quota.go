package mount

import (
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/kvfs/kvfs/internal/quota"
	"github.com/kvfs/kvfs/ledger"
	"go.uber.org/zap"
)

// A FUSE passthrough writer writes into the stored file through the
// kernel, and keeps doing so after the daemon is killed or its
// connection aborted (docs/operations.md, "A writer that outlives the
// daemon"): only something in the kernel can bound it then. Where the store's file system enforces
// project quotas, the store directory is given a project of its own
// whose block hard limit is the capacity plus QuotaSlack; past it every
// write into the store fails with EDQUOT, daemon or no daemon. The limit
// stays at unmount: it is what protects the store after a crash.

// MinQuotaSlack is the least QuotaSlack.
const MinQuotaSlack = 64 << 20

// QuotaSlack is how far past the capacity the store's project quota lets
// the store grow: what the ledger does not charge (kvfs's index and
// markers, directories' blocks) and what open writers write past their
// admission before the daemon refuses it at close. A sixteenth of the
// capacity, at least MinQuotaSlack.
func QuotaSlack(capacity int64) int64 {
	s := max(capacity/16, MinQuotaSlack)
	return (s + ledger.BlockSize - 1) / ledger.BlockSize * ledger.BlockSize
}

// QuotaLimit is the store's project quota limit for a capacity.
func QuotaLimit(capacity int64) int64 { return capacity + QuotaSlack(capacity) }

// quotaWanted: only a passthrough writer outlives the daemon, and only
// root may set a quota.
func (o *Options) quotaWanted() bool { return o.passthrough() }

// capStore sets the store's project quota, or says why it cannot.
func (m *Mount) capStore() {
	if !m.quotaWanted() {
		return
	}
	start := time.Now()
	limit := QuotaLimit(m.Capacity)
	st, err := quota.Apply(m.Store, limit)
	switch {
	case errors.Is(err, quota.ErrUnsupported):
		m.log.Warn("the store's file system enforces no project quota: a writer that has a file open "+
			"when the daemon dies keeps writing into the store, unbounded (see docs/operations.md)",
			zap.String("store", m.Store), zap.String("why", err.Error()))
		return
	case err != nil:
		m.log.Error("capping the store with a project quota failed: a writer that has a file open "+
			"when the daemon dies keeps writing into the store, unbounded", zap.String("store", m.Store), zap.Error(err))
		return
	}
	m.quotaBytes = st.LimitBytes
	m.log.Info("store capped by a project quota", zap.Uint32("project", st.Project),
		zap.Int64("limit_bytes", st.LimitBytes), zap.Int64("slack_bytes", st.LimitBytes-m.Capacity),
		zap.Int64("project_used_bytes", st.UsedBytes), zap.Int("tagged", st.Tagged),
		zap.Duration("took", time.Since(start)))
	if quota.HoldsResourceCap() {
		m.log.Warn("the daemon holds CAP_SYS_RESOURCE, which exempts passthrough writers from an ext4 quota " +
			"(XFS enforces it regardless)")
	}
}

// QuotaBytes is the project quota's block limit on the store, 0 if the
// store is not capped by one.
func (m *Mount) QuotaBytes() int64 { return m.quotaBytes }

// ShedQuotaExemption re-executes a root daemon without CAP_SYS_RESOURCE
// when its store's file system enforces project quotas, so that the
// quota binds its passthrough writers (see internal/quota's caps.go).
// It returns when there is nothing to do or the re-exec failed (logged);
// otherwise the process is replaced. Call it first thing, before
// anything holds state worth keeping.
func ShedQuotaExemption(o Options, log *zap.Logger) {
	if log == nil {
		log = zap.NewNop()
	}
	if o.validate() != nil || !o.quotaWanted() || !quota.CanShedResourceCap() {
		return
	}
	if quota.Enforced(existingAncestor(o.Store)) != nil {
		return
	}
	log.Debug("re-executing without CAP_SYS_RESOURCE, so the store's project quota binds passthrough writers")
	err := quota.ReexecWithoutResourceCap()
	log.Warn("could not shed CAP_SYS_RESOURCE: passthrough writers pass the store's quota on ext4", zap.Error(err))
}

// existingAncestor is p, or its nearest ancestor that exists.
func existingAncestor(p string) string {
	for {
		if _, err := os.Stat(p); err == nil || filepath.Dir(p) == p {
			return p
		}
		p = filepath.Dir(p)
	}
}
