package remote

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
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
			t.runUntilSettled(name)
			for next, ok := t.queue.nextUnsent(); ok && !t.closed.Load(); next, ok = t.queue.nextUnsent() {
				t.runUntilSettled(next)
			}
		}
	}
}

// runUntilSettled does what is pending for name (upload, delete, or a
// delete then an upload) until it is settled or the tier closes (then
// the journal keeps it). What is pending may change meanwhile (an rm
// during an upload): it is settled only as it was when it succeeded.
func (t *Tier) runUntilSettled(name string) {
	backoff := minBackoff
	for {
		wake := t.wakeChan()
		o, gen, ok := t.queue.current(name)
		if !ok {
			return
		}
		if t.runOnce(name, o, &gen) {
			if t.queue.settle(name, gen) {
				return
			}
			backoff = minBackoff
			continue
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

// runOnce makes one attempt at o, begun at *gen; settled is false when
// it is worth trying again later. A delete-then-upload whose delete
// succeeds is turned into an upload, so a retry does not delete again,
// and *gen becomes that upload's (an upload that settles it is not run
// a second time: it counted as already present, once a rewrite).
func (t *Tier) runOnce(name string, o op, gen *uint64) (settled bool) {
	switch o {
	case opDelete:
		return t.deleteOnce(name)
	case opDeleteUpload:
		return t.replaceOnce(name, gen)
	}
	return t.uploadOnce(name)
}

// replaceOnce makes one attempt at a replacement: the key's copy goes
// and the local object is uploaded in its place, unless the key holds
// the local object's bytes already (see holdsLocal), which is then left
// alone. A temp name renamed over a name the fleet holds, with
// the same bytes (LMCache's os.replace of a content-keyed object, on a
// node that knew the key only from the bucket), cost a delete, a window
// in which every other node missed the key, and the whole upload again
// (an outside tester). The look waits for the local object's writer, as
// an upload does.
func (t *Tier) replaceOnce(name string, gen *uint64) (settled bool) {
	key, done, settled := t.begin(name)
	if done {
		return settled
	}
	oi, err := t.stat(key)
	switch {
	case errors.Is(err, ErrUnavailable):
		t.st.failures.Add(1)
		return false
	case err == nil:
		info, same, lerr := t.holdsLocal(name, oi)
		if errors.Is(lerr, ErrBusy) {
			t.log.Debug("replacement waits for the writer", zap.String("name", strconv.Quote(name)))
			return false
		}
		if same {
			t.rememberPresent(name, info)
			t.st.present.Add(1)
			return true
		}
	}
	if !errors.Is(err, ErrNotFound) && !t.deleteOnce(name) {
		return false
	}
	*gen = t.queue.deleted(name, *gen)
	return t.sendLocal(name, key)
}

// holdsLocal says whether oi, the bucket's object under name's key, has
// the local object's size and CRC32C, and its MD5 where the server's
// ETag is one: the local object is read once. ErrBusy: a writer has it
// open, or it changed while read.
func (t *Tier) holdsLocal(name string, oi minio.ObjectInfo) (Info, bool, error) {
	info, want, err := infoOf(oi)
	if err != nil {
		return info, false, nil // not kvfs's: replaced
	}
	src, err := t.open(name)
	switch {
	case errors.Is(err, ErrBusy):
		return info, false, err
	case err != nil:
		return info, false, nil // gone (evicted): the bucket's copy goes
	}
	defer src.Close()
	if src.Size() != info.Size {
		return info, false, nil
	}
	t.st.reads.Add(1)
	// A CRC32C is 32 bits, and can be made to collide on purpose (an
	// outside tester left the bucket's bytes under a key whose local
	// object differed in 6 bytes): where the server's ETag is the
	// object's MD5, it must match too.
	etag, withMD5 := plainMD5(oi.ETag)
	crc, md := newCRC(), md5.New()
	sums := io.Writer(crc)
	if withMD5 {
		sums = io.MultiWriter(crc, md)
	}
	n, err := io.CopyBuffer(sums, io.LimitReader(src, info.Size), make([]byte, copyBuf))
	if err != nil || n != info.Size {
		return info, false, nil
	}
	if err := src.Unchanged(); errors.Is(err, ErrBusy) || errors.Is(err, errSourceChanged) {
		return info, false, ErrBusy // its publish wakes the look again
	} else if err != nil {
		return info, false, nil
	}
	same := crc.Sum32() == want && (!withMD5 || etag == hex.EncodeToString(md.Sum(nil)))
	return info, same, nil
}

// plainMD5 is an ETag that is an object's MD5 (32 hex digits, what a
// single-part PUT without SSE-KMS gets on S3 and its kin), lower-cased;
// ok is false for any other (a multipart upload's, an encrypted one's).
func plainMD5(etag string) (string, bool) {
	etag = strings.ToLower(strings.Trim(etag, `"`))
	if len(etag) != 32 {
		return "", false
	}
	if _, err := hex.DecodeString(etag); err != nil {
		return "", false
	}
	return etag, true
}

// uploadOnce makes one upload attempt.
func (t *Tier) uploadOnce(name string) (settled bool) {
	if r, ok := t.cached(name); ok && r.found {
		t.st.present.Add(1)
		return true
	}
	if !t.breaker.allow() {
		return false
	}
	key, err := t.key(name)
	if err != nil {
		t.breaker.neutral()
		return t.uploadFailed(name, err)
	}
	// HEAD first: a key already there is not read at all.
	oi, err := t.stat(key)
	switch {
	case err == nil:
		if info, _, merr := infoOf(oi); merr == nil {
			t.rememberPresent(name, info)
		}
		t.st.present.Add(1)
		return true
	case errors.Is(err, ErrUnavailable):
		return t.uploadFailed(name, err)
	}
	// 404, or a refusal a HEAD cannot explain (it has no body): the
	// PUT's answer says what the server thinks of the key.
	return t.sendLocal(name, key)
}

// sendLocal opens the local object and puts it.
func (t *Tier) sendLocal(name, key string) bool {
	src, err := t.open(name)
	switch {
	case errors.Is(err, ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		t.st.skipped.Add(1)
		return true
	case errors.Is(err, ErrBusy):
		t.log.Debug("upload waits for the writer", zap.String("name", strconv.Quote(name)))
		return false
	case err != nil:
		return t.uploadFailed(name, err)
	}
	defer src.Close()
	t.st.reads.Add(1)
	info, err := t.put(key, src)
	switch {
	case err == nil:
		t.st.uploads.Add(1)
		t.st.uploadedBytes.Add(info.Size)
		t.rememberPresent(name, info)
		return true
	case statusOf(err) == http.StatusPreconditionFailed:
		t.st.present.Add(1) // another writer won: not an error
		return true
	case errors.Is(err, errSourceChanged):
		t.st.changed.Add(1)
		t.log.Debug("local object changed while uploading; will retry", zap.String("name", strconv.Quote(name)), zap.Error(err))
		return false
	}
	return t.uploadFailed(name, err)
}

// uploadFailed counts a failed attempt. A permanent refusal (see
// permanent) is counted, logged once and settled: dropped from the
// queue and the journal; any other failure is tried again later.
func (t *Tier) uploadFailed(name string, err error) bool {
	if permanent(err) {
		t.reject(name, err)
		return true
	}
	t.st.failures.Add(1)
	t.log.Debug("upload failed; will retry", zap.String("name", strconv.Quote(name)), zap.Error(err))
	return false
}

// put is the conditional PUT: If-None-Match: * makes the first writer
// win. The body is the source read once: its length is declared up
// front (kvfs-size), its CRC32C is computed as it goes out and sent as
// the request's trailer (x-amz-checksum-crc32c, which the server checks
// and stores with the object), and the read that would end it fails if
// the source changed, so an object made of two versions is never
// stored. One request, no multipart: If-None-Match applies to it
// directly on every server that supports it, and KV objects are far
// below S3's 5 GiB single-PUT limit.
func (t *Tier) put(key string, src Source) (Info, error) {
	size := src.Size()
	opts := minio.PutObjectOptions{
		UserMetadata:     map[string]string{metaSize: strconv.FormatInt(size, 10)},
		ContentType:      "application/octet-stream",
		DisableMultipart: true,
		Checksum:         minio.ChecksumCRC32C,
		// No SHA-256 of the body in the signature (a second hash, and
		// versitygw refuses the signed-chunks-with-trailer form): the
		// CRC32C trailer is what guards the bytes.
		DisableContentSha256: true,
	}
	if size == 0 {
		// An empty body has no trailer: its checksum is known now.
		if err := src.Unchanged(); err != nil {
			return Info{}, fmt.Errorf("%w: %w", errSourceChanged, err)
		}
		opts.UserMetadata = userMeta(0, 0)
		opts.Checksum = minio.ChecksumNone
	}
	var want *uint32
	if t.noTrailer && size > 0 {
		sum, err := t.checksumFirst(src)
		if err != nil {
			return Info{}, err
		}
		opts.UserMetadata, opts.Checksum, want = userMeta(size, sum), minio.ChecksumNone, &sum
	}
	opts.SetMatchETagExcept("*")
	ctx, cancel := context.WithCancel(t.baseCtx)
	defer cancel()
	// The body's reads show its progress until the last one; the bytes
	// that last read handed over then sit in the socket's buffers (4
	// MiB and more), and a slow link drains them for longer than the
	// timeout: an outside tester's 8 MiB upload over 512 KiB/s was cut
	// at every try, for good. The peer's acknowledgements show it too.
	var sent ackWatch
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { sent.use(i.Conn) }})
	wd := startWatchdogWith(t.cfg.Timeout, cancel, sent.moved)
	defer wd.stop()
	body := newSendReader(src, func() { wd.kick(); sent.moved() })
	body.want = want
	ui, err := t.client.PutObject(ctx, t.cfg.Bucket, key, body, size, opts)
	if errors.Is(err, errSourceChanged) {
		t.breaker.neutral()
		return Info{}, err
	}
	if err != nil && wd.fired.Load() {
		// Cut by the watchdog: no progress, and no answer, for the
		// whole timeout; the breaker opens at once (it counted one
		// failure of several: an outside tester).
		err = fmt.Errorf("%w: no progress within %v (%v)", context.DeadlineExceeded, t.cfg.Timeout, err)
	}
	if err = t.classify(t.baseCtx, err); err != nil {
		return Info{}, err
	}
	return Info{Size: size, Checksum: checksumPrefix + formatCRC(body.sum()), ETag: ui.ETag, ModTime: ui.LastModified}, nil
}

// checksumFirst is the first of two passes where the server takes no
// checksum trailer (GCS's S3 API): the CRC32C goes in user metadata,
// which is sent before the body, and the second pass (the PUT) must
// read the same bytes.
func (t *Tier) checksumFirst(src Source) (uint32, error) {
	rw, ok := src.(rewinder)
	if !ok {
		return 0, errors.New("remote: this server takes no checksum trailer, and the source cannot be read twice")
	}
	n, sum, err := checksumOf(io.LimitReader(src, src.Size()))
	if err == nil && n != src.Size() {
		err = fmt.Errorf("%w: %d of %d bytes", errSourceChanged, n, src.Size())
	}
	if err == nil {
		err = rw.Rewind()
	}
	t.st.reads.Add(1)
	return sum, err
}

// Put uploads r's bytes under name now, as an upload from the queue
// would (size and checksum recorded, If-None-Match: *), bypassing the
// queue. It returns ErrExists if the key was there. For seeding a
// bucket, tests and benchmarks.
func (t *Tier) Put(ctx context.Context, name string, r io.ReadSeeker) error {
	key, err := t.key(name)
	if err != nil {
		return err
	}
	src, err := newSeekerSource(r)
	if err != nil {
		return err
	}
	info, err := t.put(key, src)
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
