package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"time"

	"github.com/minio/minio-go/v7"
	"go.uber.org/zap"
)

// Upload retry backoff: doubling from minBackoff to maxBackoff, cut
// short when the breaker sees the server answer again.
const (
	minBackoff = 200 * time.Millisecond
	maxBackoff = 30 * time.Second
)

func (t *Tier) startUploaders() {
	for i := 0; i < t.cfg.Uploaders; i++ {
		t.workers.Add(1)
		go t.uploader()
	}
}

func (t *Tier) uploader() {
	defer t.workers.Done()
	for {
		select {
		case <-t.done:
			return
		case name := <-t.queue.ch:
			t.uploadUntilSettled(name)
		}
	}
}

// uploadUntilSettled retries name's upload until it is settled or the
// tier closes (then the journal keeps it).
func (t *Tier) uploadUntilSettled(name string) {
	backoff := minBackoff
	for {
		wake := t.wakeChan()
		if t.uploadOnce(name) {
			t.queue.settle(name)
			return
		}
		select {
		case <-t.clock.After(backoff):
		case <-wake:
		case <-t.done:
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// uploadOnce makes one attempt; settled is false when it is worth
// trying again later.
func (t *Tier) uploadOnce(name string) (settled bool) {
	if r, ok := t.cached(name); ok && r.found {
		t.st.present.Add(1)
		return true
	}
	if !t.breaker.allow() {
		return false
	}
	src, err := t.source(name)
	switch {
	case errors.Is(err, ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		t.breaker.neutral()
		t.st.skipped.Add(1)
		return true
	case err != nil:
		t.breaker.neutral()
		return t.uploadFailed(name, err, false)
	}
	defer src.rc.Close()
	return t.send(name, src)
}

// send checks the key is absent, then puts it if still absent.
func (t *Tier) send(name string, src source) bool {
	key, _ := t.key(name)
	oi, err := t.stat(key)
	switch {
	case err == nil:
		if info, _, merr := infoOf(oi); merr == nil {
			t.rememberPresent(name, info)
		}
		t.st.present.Add(1)
		return true
	case !errors.Is(err, ErrNotFound):
		return t.uploadFailed(name, err, false)
	}
	info, err := t.put(key, src)
	status := statusOf(err)
	switch {
	case err == nil:
		t.st.uploads.Add(1)
		t.st.uploadedBytes.Add(src.size)
		t.rememberPresent(name, info)
		return true
	case status == http.StatusPreconditionFailed:
		t.st.present.Add(1) // another writer won: not an error
		return true
	case status == http.StatusConflict || errors.Is(err, errSourceChanged) || errors.Is(err, ErrUnavailable):
		return t.uploadFailed(name, err, false)
	}
	return t.uploadFailed(name, err, status >= 400 && status < 500)
}

// uploadFailed counts a failed attempt; a permanent one (the server
// refused the request itself) is dropped.
func (t *Tier) uploadFailed(name string, err error, permanent bool) bool {
	t.st.failures.Add(1)
	if permanent {
		t.st.dropped.Add(1)
		t.log.Error("upload refused by the server; dropped", zap.String("name", name), zap.Error(err))
		return true
	}
	t.log.Debug("upload failed; will retry", zap.String("name", name), zap.Error(err))
	return false
}

// source is a local object ready to upload: positioned at its start,
// with its length and CRC32C.
type source struct {
	rc   io.ReadCloser
	size int64
	sum  uint32
}

// source opens name, checksums it and seeks back to its start.
func (t *Tier) source(name string) (source, error) {
	rc, size, err := t.open(name)
	if err != nil {
		return source{}, err
	}
	n, sum, err := checksumOf(rc)
	if err == nil && n != size {
		err = errSourceChanged
	}
	if err == nil {
		_, err = rc.Seek(0, io.SeekStart)
	}
	if err != nil {
		rc.Close()
		return source{}, err
	}
	return source{rc: rc, size: size, sum: sum}, nil
}

// put is the conditional PUT: If-None-Match: * makes the first writer
// win; the body fails (and the PUT with it) if the bytes are not the
// ones checksummed. One request, no multipart: If-None-Match applies to
// it directly on every server that supports it, and KV objects are far
// below S3's 5 GiB single-PUT limit.
func (t *Tier) put(key string, src source) (Info, error) {
	opts := minio.PutObjectOptions{
		UserMetadata:     userMeta(src.size, src.sum),
		ContentType:      "application/octet-stream",
		DisableMultipart: true,
	}
	opts.SetMatchETagExcept("*")
	ctx, cancel := context.WithCancel(t.baseCtx)
	defer cancel()
	wd := startWatchdog(t.cfg.Timeout, cancel)
	defer wd.stop()
	body := &kickReader{r: newVerifyReader(src.rc, src.size, src.sum), wd: wd}
	ui, err := t.client.PutObject(ctx, t.cfg.Bucket, key, body, src.size, opts)
	if errors.Is(err, errSourceChanged) {
		t.breaker.neutral()
		return Info{}, err
	}
	if err = t.classify(t.baseCtx, err); err != nil {
		return Info{}, err
	}
	return Info{Size: src.size, Checksum: checksumPrefix + formatCRC(src.sum), ETag: ui.ETag, ModTime: ui.LastModified}, nil
}

// kickReader kicks a watchdog on every read: a PUT whose body the server
// stops taking is cut after Timeout.
type kickReader struct {
	r  io.Reader
	wd *watchdog
}

func (k *kickReader) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	k.wd.kick()
	return n, err
}

// Put uploads r's bytes under name now, as an upload from the queue
// would (checksum metadata, If-None-Match: *), bypassing the queue. It
// returns ErrExists if the key was there. For seeding a bucket, tests
// and benchmarks.
func (t *Tier) Put(ctx context.Context, name string, r io.ReadSeeker) error {
	key, err := t.key(name)
	if err != nil {
		return err
	}
	n, sum, err := checksumOf(r)
	if err != nil {
		return err
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return err
	}
	info, err := t.put(key, source{rc: io.NopCloser(r), size: n, sum: sum})
	if statusOf(err) == http.StatusPreconditionFailed {
		return fmt.Errorf("%w: %s", ErrExists, key)
	}
	if err == nil {
		t.rememberPresent(name, info)
	}
	return err
}

// ErrExists: Put found the key already there (first writer won).
var ErrExists = errors.New("remote: object exists")
