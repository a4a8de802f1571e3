package core

import (
	"sync"
	"time"

	"github.com/kvfs/kvfs/blob"
	"go.uber.org/zap"
)

// checkpointer keeps the store's checkpoint (blob.CheckpointName) while
// kvfs runs, so that a start after a crash reads it and lists only the
// directories that changed since, instead of stat'ing every stored file.
type checkpointer struct {
	mu sync.Mutex // one checkpoint at a time
	// saved is the store's change count the last checkpoint saw;
	// GUARDED_BY(mu). stale: the checkpoint on disk is behind the store
	// whatever the count says (the start listed or stat'ed what it had
	// to, and the next start would again).
	saved uint64
	stale bool
}

// checkpointSpacing bounds the time spent writing checkpoints: the next
// waits at least this many times as long as the last one took.
const checkpointSpacing = 20

// startCheckpoints notes what the start found; Start then runs the loop.
func (c *Core) startCheckpoints(rep blob.LoadReport) {
	c.ckpt.saved = c.store.Changes()
	c.ckpt.stale = !rep.FromSnapshot || rep.DirsListed > 0 || rep.Stated > 0
}

// Checkpoint writes the store's checkpoint now, as the background loop
// does every Config.CheckpointInterval when the store changed.
func (c *Core) Checkpoint() error { return c.checkpoint(false) }

// checkpoint copies the index under the shared namespace lock (no name
// changes meanwhile, so each directory's change time matches the names
// copied), then checks and writes the copy without it. clean: the file
// system has stopped serving.
func (c *Core) checkpoint(clean bool) error {
	c.ckpt.mu.Lock()
	defer c.ckpt.mu.Unlock()
	start := time.Now()
	c.mu.RLock()
	changes := c.store.Changes()
	cp := c.store.CaptureCheckpoint(c.ledger.Each, c.writing, clean)
	c.mu.RUnlock()
	held := time.Since(start)
	if err := c.store.SaveCheckpoint(cp); err != nil {
		return err
	}
	c.ckpt.saved, c.ckpt.stale = changes, false
	c.log.Info("checkpoint saved", zap.Int("objects", cp.Objects), zap.Int("unsure", cp.Unsure),
		zap.Int("distrusted_dirs", cp.Distrusted), zap.Bool("clean", clean),
		zap.Duration("lock_held", held), zap.Duration("took", time.Since(start)))
	return nil
}

// writing says whether an object may be being written: its size is then
// left for the next start to read.
func (c *Core) writing(id blob.ID) bool { return c.ledger.Writers(id) > 0 }

// behind says whether the store changed since the last checkpoint.
func (c *Core) behind() bool {
	c.ckpt.mu.Lock()
	defer c.ckpt.mu.Unlock()
	return c.ckpt.stale || c.store.Changes() != c.ckpt.saved
}

// checkpointLoop writes a checkpoint every CheckpointInterval while the
// store changes, spacing them out when they take long, until the Core
// closes (which writes the last one).
func (c *Core) checkpointLoop() {
	defer c.wg.Done()
	wait := c.cfg.CheckpointInterval
	for {
		select {
		case <-c.done:
			return
		case <-time.After(wait):
		}
		if !c.behind() {
			continue
		}
		start := time.Now()
		if err := c.checkpoint(false); err != nil {
			c.log.Warn("no checkpoint saved", zap.Error(err))
		}
		wait = max(c.cfg.CheckpointInterval, checkpointSpacing*time.Since(start))
	}
}
