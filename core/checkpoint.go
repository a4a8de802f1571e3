package core

import (
	"errors"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/internal/lockorder"
	"go.uber.org/zap"
)

// checkpointer keeps the store's checkpoint (blob.CheckpointName) while
// kvfs runs, so that a start after a crash reads it and lists only the
// directories that changed since, instead of stat'ing every stored file.
type checkpointer struct {
	mu lockorder.Mutex // one checkpoint at a time
	// saved is the store's change count the last checkpoint saw;
	// GUARDED_BY(mu). stale: the checkpoint on disk is behind the store
	// whatever the count says (the start listed or stat'ed what it had
	// to, and the next start would again).
	saved uint64
	stale bool
	// uses is the count of uses recorded (Core.usesRecorded) the last
	// checkpoint saw: reads alone change the LRU order a crash keeps,
	// so they call for a checkpoint too (at most every
	// CheckpointInterval, and spaced out as any); GUARDED_BY(mu).
	uses uint64
}

// errHandingOver: no running checkpoint while a handover is prepared.
var errHandingOver = errors.New("a handover is being prepared")

// checkpointSpacing bounds the time spent writing checkpoints: the next
// waits at least this many times as long as the last one took.
const checkpointSpacing = 20

// startCheckpoints notes whether the start left the checkpoint behind
// (it walked, listed or stat'ed what the next start would again, or
// deleted or evicted something); Start then runs the loop.
func (c *Core) startCheckpoints(rep LoadReport) {
	c.ckpt.saved = c.store.Changes()
	c.ckpt.stale = !rep.FromSnapshot || rep.DirsListed > 0 || rep.Stated > 0 ||
		rep.Incomplete > 0 || rep.Foreign > 0 || rep.Evicted > 0
}

// Checkpoint writes the store's checkpoint now, as the background loop
// does every Config.CheckpointInterval when the store changed.
func (c *Core) Checkpoint() error { return c.checkpoint(false) }

// checkpoint copies the index in short steps under the shared namespace
// lock, writing each between them without it (see blob.WriteCheckpoint). clean: the file system has stopped serving. The change
// count is read first: a change during the copy leaves the checkpoint
// behind, and the next one is written.
func (c *Core) checkpoint(clean bool) error {
	_, err := c.checkpointTaken(clean)
	return err
}

// checkpointTaken is checkpoint, and says when the checkpoint was taken
// (unix nanoseconds).
func (c *Core) checkpointTaken(clean bool) (int64, error) {
	c.ckpt.mu.Lock()
	defer c.ckpt.mu.Unlock()
	// Not while a handover is prepared (asked under the checkpoints' own
	// lock, which PrepareHandover takes after it starts noting): the
	// freeze would wait for it, seconds at a million objects, with every
	// request stopped, and the successor writes its own.
	if !clean && c.handingOver() {
		return 0, errHandingOver
	}
	start := time.Now()
	changes, uses := c.store.Changes(), c.usesRecorded.Load()
	writing := c.writingNow()
	var held time.Duration // the longest step under the lock
	shared := func(step func()) {
		c.mu.RLock()
		defer c.mu.RUnlock()
		t := time.Now()
		step()
		held = max(held, time.Since(t))
	}
	// Every use journaled by now is in the order the walk reads.
	mark := c.store.UsesMark()
	walk := c.ledger.Walk()
	defer walk.Close()
	cp, err := c.store.WriteCheckpoint(shared, walk.Next, func(id blob.ID) bool { return writing[id] }, clean)
	if err != nil {
		return 0, err
	}
	if err := c.store.TrimUses(mark); err != nil {
		c.log.Debug("trimming the journal of uses", zap.Error(err))
	}
	c.ckpt.saved, c.ckpt.stale, c.ckpt.uses = changes, false, uses
	c.log.Info("checkpoint saved", zap.Int("objects", cp.Objects), zap.Int64("bytes", cp.Size), zap.Int("unsure", cp.Unsure),
		zap.Int("distrusted_dirs", cp.Distrusted), zap.Int("listed_dirs", cp.Listed), zap.Bool("clean", clean),
		zap.Int("steps", cp.Steps), zap.Duration("longest_step", held), zap.Duration("took", time.Since(start)))
	return cp.Taken.UnixNano(), nil
}

// writingNow lists the objects that may be being written: those with a
// crash marker, and those a passthrough writer holds open (it may write
// after its flush). Their sizes are left for the next start to read. (A
// truncate through setattr is not listed: its moment between the ledger
// and the stored file is the audit's to reconcile.)
func (c *Core) writingNow() map[blob.ID]bool {
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	out := make(map[blob.ID]bool, len(c.marked)+len(c.watched))
	for id := range c.marked {
		out[id] = true
	}
	for h := range c.watched {
		out[h.id] = true
	}
	return out
}

// behind says whether the store, or the LRU order by reads, changed
// since the last checkpoint.
func (c *Core) behind() bool {
	c.ckpt.mu.Lock()
	defer c.ckpt.mu.Unlock()
	return c.ckpt.stale || c.store.Changes() != c.ckpt.saved || c.usesRecorded.Load() != c.ckpt.uses
}

// checkpointSoon is the first wait of a start that left the checkpoint
// behind (after a crash: listed what changed since it, or had none): a
// daemon that died again within CheckpointInterval left none, and every
// start of a crash loop listed the whole store again (an outside tester,
// crashing a mount every few seconds: every start "from_snapshot":
// false).
const checkpointSoon = 3 * time.Second

// checkpointLoop writes a checkpoint every CheckpointInterval while the
// store changes, spacing them out when they take long, until the Core
// closes (which writes the last one); the first comes checkpointSoon
// after a start that left it behind.
func (c *Core) checkpointLoop() {
	defer c.wg.Done()
	wait := c.cfg.CheckpointInterval
	c.ckpt.mu.Lock()
	if c.ckpt.stale {
		wait = min(wait, checkpointSoon)
	}
	c.ckpt.mu.Unlock()
	for {
		select {
		case <-c.done:
			return
		case <-c.cfg.After(wait):
		}
		if !c.behind() {
			continue
		}
		start := time.Now()
		if err := c.checkpoint(false); err != nil && !errors.Is(err, errHandingOver) {
			c.log.Warn("no checkpoint saved", zap.Error(err))
		}
		wait = max(c.cfg.CheckpointInterval, checkpointSpacing*time.Since(start))
	}
}
