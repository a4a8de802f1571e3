package mount

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/remote"
	"go.uber.org/zap"
)

// startRemote builds the remote tier when Options.Remote asks for one:
// its upload journal lives in the store (blob.RemoteName) and is
// replayed now, its uploads read objects through the core, and the core
// tells it what is published. Call it once the core is open.
func (m *Mount) startRemote() error {
	if m.Remote == nil {
		return nil
	}
	cfg := *m.Remote
	if cfg.NegativeTTL > m.CacheTimeout {
		// Never remember an absent name longer than the user lets the
		// kernel remember names; said (it was taken unsaid: an outside
		// tester).
		m.log.Warn("--remote-negative-ttl is longer than --cache-timeout: absent remote names are remembered for --cache-timeout",
			zap.Duration("remote_negative_ttl", cfg.NegativeTTL), zap.Duration("cache_timeout", m.CacheTimeout))
		cfg.NegativeTTL = m.CacheTimeout
	}
	t, err := remote.New(cfg, remote.Deps{
		JournalDir: filepath.Join(m.Store, blob.RemoteName),
		Open:       m.openForUpload,
		Logger:     m.log.Named("remote"),
		Clock:      m.RemoteClock,
		// A misspelt bucket or secret is warned of at once.
		CheckBucket: true,
	})
	switch {
	case errors.Is(err, ErrUsage):
		return err
	case err != nil:
		return fmt.Errorf("remote tier: %w", err)
	}
	m.tier = t
	m.log.Info("remote tier", zap.String("url", cfg.URL), zap.String("endpoint", cfg.Endpoint),
		zap.Duration("negative_ttl", cfg.NegativeTTL), zap.Int("queued", int(t.Stats().QueueDepth)))
	return nil
}

// publishHook is the core's Config.Published: write-behind to the tier,
// or nil without one (the core then does no work for it).
func (m *Mount) publishHook() func(string) {
	if m.Remote == nil {
		return nil
	}
	return func(path string) { m.tier.Enqueue(path) }
}

// rewriteHook is the core's Config.Rewritten: the tier's key for each
// name of a rewritten object goes, and the new bytes are uploaded in
// its place (remote.Tier.Replace); nil without a tier.
func (m *Mount) rewriteHook() func(string) {
	if m.Remote == nil {
		return nil
	}
	return func(path string) { m.tier.Replace(path) }
}

// closeRemote stops the tier's uploads; its journal keeps what is
// pending for the next mount. Call it after the server stops and before
// the core closes: uploads read through the core.
func (m *Mount) closeRemote() {
	if m.tier != nil {
		m.tier.Close()
	}
}

// Tier is the remote tier, nil without one; tests use it.
func (m *Mount) Tier() *remote.Tier { return m.tier }

// openForUpload is the tier's Opener: the object by its name, read
// through a handle that pins it (not evicted while it uploads). The
// core calls Published once writing has ended, and the tier checks it
// again: an object some handle has open for writing is not read
// (remote.ErrBusy, tried again later), and one that a writer reopens
// during the read is not uploaded as read.
func (m *Mount) openForUpload(name string) (remote.Source, error) {
	h, err := m.core.OpenPath(name)
	if errors.Is(err, core.ErrNotFound) {
		return nil, remote.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	id := h.ID()
	src, err := remote.NewFileSource(h.File(), func() bool { return m.core.Writers(id) > 0 },
		func() error { h.Release(); return nil })
	if err != nil {
		h.Release()
		return nil, err
	}
	return src, nil
}
