package remote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"go.uber.org/zap"
)

// queue is the write-behind queue and its journal: one small file per
// pending name in dir, named by the SHA-256 of the name and holding the
// name. A file is written (no fsync) before Enqueue returns and removed
// once the upload is settled, so a daemon killed with uploads pending
// (kill -9 included: the page cache keeps the file) finds them at the
// next New. Power loss can lose the entries of the last seconds, as it
// can lose the unsynced objects they name.
type queue struct {
	dir string
	max int
	t   *Tier
	ch  chan string // names waiting for a worker; cap max

	mu      sync.Mutex
	pending map[string]struct{} // journaled, not settled; GUARDED_BY(mu)
	// INVARIANT: len(pending) <= max; len(ch) <= len(pending).
	idle chan struct{} // closed while pending is empty; GUARDED_BY(mu)
}

func openQueue(dir string, max int, t *Tier) (*queue, error) {
	if dir == "" {
		return nil, errors.New("remote: no journal directory for the upload queue")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("remote: journal: %w", err)
	}
	q := &queue{dir: dir, max: max, t: t, ch: make(chan string, max),
		pending: make(map[string]struct{}), idle: make(chan struct{})}
	close(q.idle)
	return q, q.replay()
}

func journalName(name string) string {
	h := sha256.Sum256([]byte(name))
	return hex.EncodeToString(h[:])
}

// replay queues the names a previous run left pending.
func (q *queue) replay() error {
	ents, err := os.ReadDir(q.dir)
	if err != nil {
		return fmt.Errorf("remote: journal: %w", err)
	}
	var queued, dropped int
	for _, e := range ents {
		name, ok := q.readEntry(e)
		switch {
		case !ok:
			os.Remove(filepath.Join(q.dir, e.Name()))
		case q.admit(name) == admitNew:
			q.ch <- name
			queued++
		default:
			os.Remove(filepath.Join(q.dir, e.Name()))
			q.t.st.dropped.Add(1)
			dropped++
		}
	}
	if queued+dropped > 0 {
		q.t.log.Info("upload journal replayed", zap.Int("queued", queued), zap.Int("dropped", dropped))
	}
	return nil
}

// readEntry reads one journal file: ok is false for anything that is not
// a valid, current entry (a torn write, a name now excluded).
func (q *queue) readEntry(e fs.DirEntry) (string, bool) {
	if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
		return "", false
	}
	b, err := os.ReadFile(filepath.Join(q.dir, e.Name()))
	name := string(b)
	if err != nil || journalName(name) != e.Name() {
		return "", false
	}
	if !q.t.uploadable(name) {
		return "", false
	}
	return name, true
}

type admission int

const (
	admitNew admission = iota
	admitDup           // already pending
	admitFull
)

// admit adds name to pending unless it is there or the queue is full.
func (q *queue) admit(name string) admission {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.pending[name]; ok {
		return admitDup
	}
	if len(q.pending) >= q.max {
		return admitFull
	}
	if len(q.pending) == 0 {
		q.idle = make(chan struct{})
	}
	q.pending[name] = struct{}{}
	return admitNew
}

// add journals name and hands it to the workers. It reports whether the
// name is now pending (newly or already).
func (q *queue) add(name string) bool {
	switch q.admit(name) {
	case admitDup:
		return true
	case admitFull:
		q.t.st.dropped.Add(1)
		return false
	}
	p := filepath.Join(q.dir, journalName(name))
	if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
		q.t.log.Warn("upload journal write failed; upload dropped", zap.String("name", name), zap.Error(err))
		q.settle(name)
		q.t.st.dropped.Add(1)
		return false
	}
	q.ch <- name // never blocks: see INVARIANT
	return true
}

// settle ends name's upload, done or given up: its journal file goes.
func (q *queue) settle(name string) {
	err := os.Remove(filepath.Join(q.dir, journalName(name)))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		q.t.log.Warn("upload journal remove failed", zap.String("name", name), zap.Error(err))
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.pending, name)
	if len(q.pending) == 0 {
		close(q.idle)
	}
}

func (q *queue) depth() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

func (q *queue) idleChan() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.idle
}

// Enqueue schedules name's upload (write-behind) and returns at once; it
// reports whether name is pending. A temp name (Excluded), a name the
// tier knows the remote holds (it fetched it, saw it, or uploaded it),
// and a name already pending are not queued again. With QueueMax names
// pending, new ones are dropped (counted); a pending name survives a
// crash of the daemon and is uploaded by the next New on the journal.
func (t *Tier) Enqueue(name string) bool {
	if t.closed.Load() {
		return false
	}
	if !t.uploadable(name) {
		t.st.skipped.Add(1)
		return false
	}
	if r, ok := t.cached(name); ok && r.found {
		t.st.skipped.Add(1)
		return false
	}
	t.names.drop(name) // "absent" is about to be wrong
	return t.queue.add(name)
}

// uploadable reports whether name may be queued: a valid key, not a
// temp name. Enqueue and the journal's replay both ask it, so a name
// replayed is one Enqueue would have taken.
func (t *Tier) uploadable(name string) bool {
	_, err := t.key(name)
	return err == nil && !t.exclude.match(name)
}

// WaitUploads blocks until no upload is pending or ctx ends. It starts
// nothing: uploads go at their own pace (backoff, breaker).
func (t *Tier) WaitUploads(ctx context.Context) error {
	for {
		ch := t.queue.idleChan()
		select {
		case <-ch:
			if t.queue.depth() == 0 {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
