package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"go.uber.org/zap"
)

// CreateFunc makes the file a fetched object's bytes go into. Fetch
// calls it once the object's Info is known from the GET's response (its
// exact size, for admission) and before any byte is written. The caller
// owns the file: Fetch never closes nor removes it, also on error.
type CreateFunc func(Info) (*os.File, error)

// Fetched is a completed, verified fetch.
type Fetched struct {
	Info Info
	// File is the file create returned, holding exactly Info.Size bytes
	// that matched the object's checksum; its offset is at the end.
	File *os.File
	// Leader is true for the caller whose call downloaded the bytes;
	// the others got a local copy of them.
	Leader bool
}

// Fetch downloads name into a file made by create and verifies it
// against the size and CRC32C stored with the object. However many
// callers fetch name at once, one GET is sent: the first caller's file
// receives the download, and every other caller's create is called
// after it completed and gets a local copy (copy_file_range) of the
// verified bytes. A 404 returns ErrNotFound and drops any remembered
// Info; a damaged or truncated object returns ErrCorrupt; a failing or
// stalled server returns ErrUnavailable; create's and the file's errors
// are returned as they are. On error, File is set if create made one:
// the caller removes it.
func (t *Tier) Fetch(ctx context.Context, name string, create CreateFunc) (Fetched, error) {
	if t.closed.Load() {
		return Fetched{}, ErrClosed
	}
	if t.exclude.match(name) {
		return Fetched{}, ErrNotFound
	}
	key, err := t.key(name)
	if err != nil {
		return Fetched{}, err
	}
	if t.queue.tombstone(name) {
		return Fetched{}, ErrNotFound
	}
	c, lead := t.fetches.join(name)
	if lead {
		return t.lead(ctx, name, key, c, create)
	}
	return t.follow(ctx, c, create)
}

// fetchShare is the leader's result as followers see it: a read-only
// descriptor of the leader's file, open until the last follower copied.
type fetchShare struct {
	info Info
	src  *os.File
	refs atomic.Int32
}

func (s *fetchShare) release() {
	if s != nil && s.refs.Add(-1) == 0 && s.src != nil {
		s.src.Close()
	}
}

func (t *Tier) lead(ctx context.Context, name, key string, c *call[*fetchShare], create CreateFunc) (Fetched, error) {
	f, info, err := t.download(ctx, name, key, create)
	if errors.Is(err, ErrUnavailable) {
		// The open answers ENOENT and the name leaves the kernel; the
		// name's next lookup asks again (absent while the breaker is
		// open), where the positive memory answered it present at once
		// (an outside tester: stat showed the name, and its size, right
		// after the failed open).
		t.names.drop(name)
	}
	var share *fetchShare
	if err == nil {
		share = &fetchShare{info: info}
		share.src, _ = reopen(f) // nil: followers fetch on their own
	}
	n := t.fetches.seal(name, c)
	if share != nil {
		share.refs.Store(int32(n) + 1)
		share.release() // the leader's reference
	}
	c.publish(share, err)
	return Fetched{Info: info, File: f, Leader: true}, err
}

// reopen opens a second, independent descriptor of f's file: it stays
// valid whatever the leader's caller then does with f (close, rename).
func reopen(f *os.File) (*os.File, error) {
	return os.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
}

func (t *Tier) follow(ctx context.Context, c *call[*fetchShare], create CreateFunc) (Fetched, error) {
	share, err := c.wait(ctx)
	if err != nil {
		if ctx.Err() != nil { // gave up early: release when the call ends
			go func() { <-c.done; c.val.release() }()
		}
		return Fetched{}, err
	}
	defer share.release()
	if share.src == nil {
		return Fetched{}, fmt.Errorf("%w: shared download could not be reopened", ErrUnavailable)
	}
	f, err := create(share.info)
	if err != nil {
		return Fetched{}, err
	}
	return Fetched{Info: share.info, File: f}, copyLocal(f, share.src, share.info.Size)
}

// copyLocal copies size bytes of src's file into dst through a private
// descriptor (its own offset), which lets the kernel copy in place.
func copyLocal(dst, src *os.File, size int64) error {
	r, err := reopen(src)
	if err != nil {
		return err
	}
	defer r.Close()
	n, err := io.Copy(dst, io.LimitReader(r, size))
	if err == nil && n != size {
		err = fmt.Errorf("remote: local copy of a fetched object: %d of %d bytes", n, size)
	}
	return err
}

// download is the leader's GET, checked and written into create's file.
func (t *Tier) download(ctx context.Context, name, key string, create CreateFunc) (*os.File, Info, error) {
	if !t.breaker.allow() {
		return nil, Info{}, fmt.Errorf("%w: circuit breaker open", ErrUnavailable)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wd := startWatchdog(t.cfg.Timeout, cancel)
	defer wd.stop()
	body, oi, _, err := minio.Core{Client: t.client}.GetObject(rctx, t.cfg.Bucket, key, checksumMode())
	if err != nil && wd.fired.Load() {
		// Cut by the watchdog: no answer for the whole timeout.
		err = fmt.Errorf("%w: no answer within %v (%v)", context.DeadlineExceeded, t.cfg.Timeout, err)
	}
	if err = t.classify(ctx, err); err != nil {
		if errors.Is(err, ErrNotFound) {
			t.rememberAbsent(name) // replaces a present entry
		}
		return nil, Info{}, err
	}
	defer body.Close()
	info, sum, err := infoOf(oi)
	if err == nil && oi.Size != info.Size {
		what := "truncated"
		if oi.Size > info.Size {
			what = "longer than uploaded" // an outside tester read "truncated" for it
		}
		err = fmt.Errorf("%s: %d bytes stored, %d recorded at upload", what, oi.Size, info.Size)
	}
	if err != nil {
		return nil, Info{}, t.corrupt(name, key, err)
	}
	wd.stop() // admission may wait for eviction: not the server's time
	f, err := create(info)
	if err != nil {
		return nil, Info{}, err
	}
	wd.kick()
	return f, info, t.receive(ctx, name, key, f, body, info, sum, wd)
}

// checksumMode asks for the CRC32C stored with the object in the GET's
// answer, without minio-go's own check of it (GetObjectOptions.Checksum):
// that one turns a mismatch into a read error at the end of the body,
// which would count a damaged object as a server failing. receive checks
// the bytes itself.
func checksumMode() minio.GetObjectOptions {
	var o minio.GetObjectOptions
	o.Set("x-amz-checksum-mode", "ENABLED")
	return o
}

func (t *Tier) receive(ctx context.Context, name, key string, f *os.File, body io.Reader, info Info, sum uint32, wd *watchdog) error {
	n, got, err := copyChecked(f, body, wd)
	var lerr localError
	switch {
	case errors.As(err, &lerr):
		return lerr.err
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		// The response came, the body did not: stalled for the timeout
		// (the watchdog's cut: the breaker opens at once), or the
		// connection broke.
		t.breaker.fail(wd.fired.Load())
		return fmt.Errorf("%w: %s: after %d of %d bytes: %v", ErrUnavailable, key, n, info.Size, err)
	case n != info.Size:
		return t.corrupt(name, key, fmt.Errorf("got %d bytes, %d recorded at upload", n, info.Size))
	case got != sum:
		return t.corrupt(name, key, fmt.Errorf("crc32c %s, %s recorded at upload", formatCRC(got), formatCRC(sum)))
	}
	t.st.fetches.Add(1)
	t.st.fetchedBytes.Add(n)
	t.rememberPresent(name, info)
	return nil
}

// corrupt counts a bad object and remembers it as absent: it is a miss
// until the TTL ends, not an error on every lookup.
func (t *Tier) corrupt(name, key string, why error) error {
	t.st.corrupt.Add(1)
	t.rememberAbsent(name)
	t.log.Warn("remote object failed verification", zap.String("key", key), zap.Error(why))
	return fmt.Errorf("%w: %s: %v", ErrCorrupt, key, why)
}

// localError wraps an error of the local file, to tell it from the
// network's.
type localError struct{ err error }

func (e localError) Error() string { return e.err.Error() }

// copyChecked copies body into f, computing the CRC32C on the way and
// kicking the watchdog on every read.
func copyChecked(f *os.File, body io.Reader, wd *watchdog) (int64, uint32, error) {
	h := newCRC()
	buf := make([]byte, copyBuf)
	var n int64
	for {
		// Whole buffers: a network body returns what one packet train
		// brought, and as many writes of the store's file cost as many
		// system calls.
		k, rerr := readFull(body, buf, wd)
		if k > 0 {
			h.Write(buf[:k])
			if _, err := f.Write(buf[:k]); err != nil {
				return n, 0, localError{err}
			}
			n += int64(k)
		}
		if rerr == io.EOF {
			return n, h.Sum32(), nil
		}
		if rerr != nil {
			return n, 0, rerr
		}
	}
}

// readFull reads into buf until it is full or the body ends (io.EOF),
// kicking the watchdog on every read.
func readFull(body io.Reader, buf []byte, wd *watchdog) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := body.Read(buf[n:])
		if k > 0 {
			wd.kick()
		}
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// watchdog calls stop when kick has not been called for d: a transfer
// that stalls is cut, one that progresses is never. progress, if set, is
// asked when d has passed without a kick: true (the transfer moved in
// ways kick does not see) arms it for another d.
type watchdog struct {
	d        time.Duration
	t        *time.Timer
	fired    atomic.Bool // it cut the transfer
	progress func() bool
}

func startWatchdog(d time.Duration, stop func()) *watchdog {
	return startWatchdogWith(d, stop, nil)
}

func startWatchdogWith(d time.Duration, stop func(), progress func() bool) *watchdog {
	w := &watchdog{d: d, progress: progress}
	w.t = time.AfterFunc(d, func() {
		if w.progress != nil && w.progress() {
			w.t.Reset(w.d)
			return
		}
		w.fired.Store(true)
		stop()
	})
	return w
}

func (w *watchdog) kick() { w.t.Reset(w.d) }
func (w *watchdog) stop() { w.t.Stop() }
