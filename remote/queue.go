package remote

import (
	"bytes"
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

	"github.com/minio/minio-go/v7"
	"go.uber.org/zap"
)

// op is what is pending for a name.
type op uint8

const (
	opUpload       op = iota // upload the local object
	opDelete                 // delete the key (an rm): a tombstone meanwhile
	opDeleteUpload           // an rm, then a new store: delete, then upload
)

// journal file contents: an upload's is the bare name (as before
// deletes existed); the others start with their tag. A name never holds
// a NUL byte.
var opTags = map[op]string{opDelete: "delete\x00", opDeleteUpload: "delete+upload\x00"}

// merge is what is pending after o was pending and next arrives.
func merge(o, next op) op {
	switch {
	case next == opDelete:
		return opDelete // the rm wins over any upload not yet done
	case next == opDeleteUpload:
		return opDeleteUpload // a replacement: whatever was sent goes
	case o == opUpload:
		return opUpload
	}
	return opDeleteUpload // a store after an rm: the delete goes first
}

// queue is the write-behind queue and its journal: one small file per
// pending name in dir, named by the SHA-256 of the name and holding the
// name (with its op's tag). A file is written (no fsync) before Enqueue
// or Delete returns and removed once the work is settled, so a daemon
// killed with work pending (kill -9 included: the page cache keeps the
// file) finds it at the next New. Power loss can lose the entries of
// the last seconds, as it can lose the unsynced objects they name.
//
// Lock order: fileMu, then mu. fileMu serializes the journal's file
// operations with the changes of pending they record (so a file always
// holds its name's current op); mu alone guards pending, and is what
// lookups take (tombstones), never across a file operation.
type queue struct {
	dir string
	max int
	t   *Tier
	ch  chan string // names waiting for a worker; cap max

	fileMu sync.Mutex

	mu      sync.Mutex
	pending map[string]*entry // journaled, not settled; GUARDED_BY(mu)
	// unsent: pending names ch had no room for, taken by the workers
	// after each name they settle; GUARDED_BY(mu).
	unsent []string
	// INVARIANT: uploads are admitted while the pending names that are
	// not rms alone are fewer than max; deletes always (an rm dropped
	// for a full queue left the key in the bucket, found again by every
	// node: an outside tester), and they take none of the uploads' room
	// (counted, rms pending took it, and a restart's replay dropped an
	// upload accepted before: an outside tester).
	idle chan struct{} // closed while pending is empty; GUARDED_BY(mu)
	// deletes is how many pending entries are rms alone (opDelete);
	// GUARDED_BY(mu).
	deletes int
}

type entry struct {
	op  op
	gen uint64 // bumped by every change of op
}

func openQueue(dir string, max int, t *Tier) (*queue, error) {
	if dir == "" {
		return nil, errors.New("remote: no journal directory for the upload queue")
	}
	// Only the daemon reads it: its entries name objects, those below
	// directories other users may not list too.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("remote: journal: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil { // one an older kvfs made
		return nil, fmt.Errorf("remote: journal: %w", err)
	}
	q := &queue{dir: dir, max: max, t: t, ch: make(chan string, max),
		pending: make(map[string]*entry), idle: make(chan struct{})}
	close(q.idle)
	return q, q.replay()
}

func journalName(name string) string {
	h := sha256.Sum256([]byte(name))
	return hex.EncodeToString(h[:])
}

func (q *queue) path(name string) string { return filepath.Join(q.dir, journalName(name)) }

// replay queues the names a previous run left pending.
func (q *queue) replay() error {
	ents, err := os.ReadDir(q.dir)
	if err != nil {
		return fmt.Errorf("remote: journal: %w", err)
	}
	var queued, dropped int
	var invalid []string
	for _, e := range ents {
		name, o, ok := q.readEntry(e)
		switch {
		case !ok:
			os.Remove(filepath.Join(q.dir, e.Name()))
			if !strings.HasPrefix(e.Name(), ".") { // not an entry's own temp file
				invalid = append(invalid, e.Name())
			}
		case q.change(name, o, false) == admitNew:
			// Unbounded: each was admitted when it was journaled.
			q.schedule(name)
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
	if len(invalid) > 0 {
		// Torn by a crash, or put there by hand (the directory is
		// kvfs's): said, not removed without a word (an outside
		// tester's file there went so).
		q.t.log.Warn("removed from the upload journal what is no entry of it", zap.String("dir", q.dir), zap.Strings("names", invalid[:min(len(invalid), 10)]), zap.Int("count", len(invalid)))
	}
	return nil
}

// readEntry reads one journal file: ok is false for anything that is not
// a valid, current entry (a torn write, a name now excluded).
func (q *queue) readEntry(e fs.DirEntry) (string, op, bool) {
	if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
		return "", 0, false
	}
	b, err := os.ReadFile(filepath.Join(q.dir, e.Name()))
	if err != nil {
		return "", 0, false
	}
	o := opUpload
	for tagged, tag := range opTags {
		if rest, ok := bytes.CutPrefix(b, []byte(tag)); ok {
			o, b = tagged, rest
		}
	}
	name := string(b)
	if journalName(name) != e.Name() || !q.t.uploadable(name) {
		return "", 0, false
	}
	return name, o, true
}

type admission int

const (
	admitNew     admission = iota
	admitChanged           // was pending: its op changed
	admitDup               // was pending with that op already
	admitFull
)

// change makes o pending for name (merged with what is), unless the
// queue is full. mu taken.
func (q *queue) change(name string, o op, bounded bool) admission {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e, ok := q.pending[name]; ok {
		if m := merge(e.op, o); m != e.op {
			q.setOp(e, m)
			e.gen++
			return admitChanged
		}
		return admitDup
	}
	if bounded && len(q.pending)-q.deletes >= q.max && o == opUpload {
		return admitFull
	}
	if len(q.pending) == 0 {
		q.idle = make(chan struct{})
	}
	e := &entry{}
	q.setOp(e, o)
	q.pending[name] = e
	return admitNew
}

// setOp sets a pending entry's op, counting the rms alone; mu held.
func (q *queue) setOp(e *entry, o op) {
	if e.op == opDelete {
		q.deletes--
	}
	e.op = o
	if o == opDelete {
		q.deletes++
	}
}

// add journals o for name and hands new names to the workers. It
// reports whether the name is now pending.
func (q *queue) add(name string, o op) bool {
	q.fileMu.Lock()
	defer q.fileMu.Unlock()
	a := q.change(name, o, true)
	switch a {
	case admitDup:
		// Published again (its writer's last release after a reopen):
		// an upload waiting for its writer need not wait out its
		// backoff.
		q.t.wakeUploaders()
		return true
	case admitFull:
		q.t.st.dropped.Add(1)
		if q.t.warnNow("queue full") {
			q.t.log.Warn("the upload queue is full: new uploads are dropped (remote_upload_dropped counts them; logged once in 10 minutes)",
				zap.String("name", name), zap.Int("queue", q.t.cfg.QueueMax))
		}
		return false
	}
	cur, _, _ := q.current(name)
	if err := os.WriteFile(q.path(name), []byte(opTags[cur]+name), 0o600); err != nil {
		q.t.log.Warn("upload journal write failed; dropped", zap.String("name", name), zap.Error(err))
		q.forgetLocked(name)
		q.t.st.dropped.Add(1)
		return false
	}
	if a == admitNew {
		q.schedule(name)
	}
	return true
}

// schedule hands a newly pending name to the workers: through ch, or,
// once ch is full (a worker is then busy with one of its names, and
// takes the unsent after), through unsent. It never blocks.
func (q *queue) schedule(name string) {
	select {
	case q.ch <- name:
	default:
		q.mu.Lock()
		q.unsent = append(q.unsent, name)
		q.mu.Unlock()
	}
}

// nextUnsent takes the oldest name schedule found no room for in ch.
func (q *queue) nextUnsent() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.unsent) == 0 {
		return "", false
	}
	name := q.unsent[0]
	q.unsent[0] = ""
	q.unsent = q.unsent[1:]
	return name, true
}

// current is what is pending for name, and its generation.
func (q *queue) current(name string) (op, uint64, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.pending[name]
	if !ok {
		return 0, 0, false
	}
	return e.op, e.gen, true
}

// tombstone says whether an rm of name is pending: the name is absent
// whatever the bucket says.
func (q *queue) tombstone(name string) bool {
	o, _, ok := q.current(name)
	return ok && o != opUpload
}

// deleted records that the delete of a delete-then-upload begun at gen
// is done: only the upload is left (in the journal too). It returns the
// generation the upload settles (gen moved on, if nothing else changed
// the name meanwhile; a change since keeps its own, newer one).
func (q *queue) deleted(name string, gen uint64) uint64 {
	q.fileMu.Lock()
	defer q.fileMu.Unlock()
	q.mu.Lock()
	e, ok := q.pending[name]
	if ok && e.op == opDeleteUpload {
		q.setOp(e, opUpload)
		e.gen++
		if e.gen == gen+1 {
			gen = e.gen
		}
	}
	q.mu.Unlock()
	if ok {
		if err := os.WriteFile(q.path(name), []byte(name), 0o600); err != nil {
			q.t.log.Warn("upload journal write failed", zap.String("name", name), zap.Error(err))
		}
	}
	return gen
}

// settle ends name's work as it was at gen, done or given up: its
// journal file goes. It reports false, and keeps the name, when the
// work changed since (an rm or a new store meanwhile): there is more to
// do.
func (q *queue) settle(name string, gen uint64) bool {
	q.fileMu.Lock()
	defer q.fileMu.Unlock()
	q.mu.Lock()
	e, ok := q.pending[name]
	stale := ok && e.gen != gen
	q.mu.Unlock()
	if stale {
		return false
	}
	q.forgetLocked(name)
	return true
}

// forgetLocked removes name's journal file and pending entry; fileMu
// held.
func (q *queue) forgetLocked(name string) {
	err := os.Remove(q.path(name))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		q.t.log.Warn("upload journal remove failed", zap.String("name", name), zap.Error(err))
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.pending[name]
	if !ok {
		return
	}
	q.setOp(e, opUpload) // counted no more among the rms alone
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
// and a name already pending are not queued again; a name that cannot
// be a key is refused for good (counted, logged once). With QueueMax
// names pending, new uploads are dropped (counted; deletes never are); a pending name
// survives a crash of the daemon and is uploaded by the next New on the
// journal. A store after an rm still pending (Delete) uploads once the
// delete is done.
func (t *Tier) Enqueue(name string) bool {
	if t.closed.Load() {
		return false
	}
	if t.exclude.match(name) {
		t.st.skipped.Add(1)
		return false
	}
	if _, err := t.key(name); err != nil {
		t.reject(name, err)
		return false
	}
	if r, ok := t.cached(name); ok && r.found && !t.queue.tombstone(name) {
		t.st.skipped.Add(1)
		return false
	}
	t.names.drop(name) // "absent" is about to be wrong
	return t.queue.add(name, opUpload)
}

// Delete is an rm of name with the shared tier: the key is deleted from
// the bucket in the background, and until that is done (server down,
// daemon restarted: the journal keeps it) the tier answers name absent
// whatever the bucket says. A store of name afterwards (Enqueue)
// supersedes it: the delete goes first, then the new object's upload.
// A temp name, or one that cannot be a key, was never sent: nothing to
// do. It reports whether the delete is pending.
func (t *Tier) Delete(name string) bool {
	if t.closed.Load() || !t.uploadable(name) {
		return false
	}
	ok := t.queue.add(name, opDelete)
	t.rememberAbsent(name)
	return ok
}

// Replace is a change of name's local object on this node: another
// object renamed over it, or its bytes rewritten or truncated. What the
// bucket holds under its key is no longer this node's object, so it
// goes as after an rm (Delete: absent here meanwhile, journaled), and
// the local object is uploaded in its place once its writing has ended
// (its publish then is that same upload). It supersedes what the tier
// knows of the name, which Enqueue does not: a first store of a key
// that another node uploaded still finds it there and leaves it. A
// temp name, or one that cannot be a key, was never sent. It reports
// whether the delete and upload are pending.
func (t *Tier) Replace(name string) bool {
	if t.closed.Load() || !t.uploadable(name) {
		return false
	}
	ok := t.queue.add(name, opDeleteUpload)
	t.rememberAbsent(name)
	return ok
}

// deleteOnce makes one attempt at deleting name's key: settled when the
// key is gone (deleted now, or absent already) or refused for good.
func (t *Tier) deleteOnce(name string) bool {
	key, done, settled := t.begin(name)
	if done {
		return settled
	}
	ctx, cancel := context.WithTimeout(t.baseCtx, t.cfg.Timeout)
	defer cancel()
	t.st.deleteRequests.Add(1)
	err := t.classify(t.baseCtx, t.client.RemoveObject(ctx, t.cfg.Bucket, key, minio.RemoveObjectOptions{}))
	switch {
	case err == nil || errors.Is(err, ErrNotFound):
		t.st.deletes.Add(1)
		t.rememberAbsent(name)
		return true
	case permanent(err):
		t.reject(name, err)
		return true
	}
	t.st.failures.Add(1)
	t.log.Debug("remote delete failed; will retry", zap.String("name", name), zap.Error(err))
	return false
}

// begin starts an attempt at name's work: its key, unless the attempt
// is done before any request (done), settled for good where the name
// cannot be a key (refused), not where the breaker is open (later).
func (t *Tier) begin(name string) (key string, done, settled bool) {
	key, err := t.key(name)
	if err != nil {
		t.reject(name, err)
		return "", true, true
	}
	if !t.breaker.allow() {
		return "", true, false
	}
	return key, false, false
}

// uploadable reports whether name may be queued: a valid key, not a
// temp name. Enqueue and the journal's replay both ask it, so a name
// replayed is one Enqueue would have taken.
func (t *Tier) uploadable(name string) bool {
	_, err := t.key(name)
	return err == nil && !t.exclude.match(name)
}

// WaitUploads blocks until nothing is pending (uploads and deletes) or
// ctx ends. It starts nothing: work goes at its own pace (backoff,
// breaker).
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
