package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
	"go.uber.org/zap"
)

// Errors the tier returns; test with errors.Is.
var (
	// ErrNotFound: the remote has no such object.
	ErrNotFound = errors.New("remote: not found")
	// ErrCorrupt: the object's bytes do not match the size and checksum
	// stored with it (damaged, truncated, or not written by kvfs).
	ErrCorrupt = errors.New("remote: corrupt object")
	// ErrUnavailable: the server did not answer in time, failed, or the
	// circuit breaker is open. Treat it as a miss.
	ErrUnavailable = errors.New("remote: unavailable")
	// ErrClosed: the tier was closed.
	ErrClosed = errors.New("remote: closed")
)

// Missed says whether a Lookup's or Fetch's error means the tier could
// not provide the object (a miss, to be answered like an absent name), as
// opposed to a failure of the caller's own, such as no room for it: not
// found, damaged, unreachable, the tier closed, or the request cancelled
// (the caller's end cuts a fetch short).
func Missed(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorrupt) ||
		errors.Is(err, ErrUnavailable) || errors.Is(err, ErrClosed) ||
		errors.Is(err, context.Canceled)
}

// Deps is what the daemon hands the tier besides its Config.
type Deps struct {
	// JournalDir holds the upload queue (one small file per pending
	// name); it is created if missing and replayed by New.
	JournalDir string
	// Open reads local objects for upload.
	Open Opener
	// Logger; nil means none.
	Logger *zap.Logger
	// Clock; nil means real time.
	Clock Clock
	// WrapTransport, if set, wraps the HTTP transport (tests count
	// requests with it).
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// CheckBucket: New asks the server once, in the background, whether
	// the bucket is there and these credentials reach it, and logs a
	// warning if not (see checkBucket).
	CheckBucket bool
}

// cacheMax bounds each of the name caches.
const cacheMax = 1 << 18

// copyBuf is the buffer size for transfers and checksums.
const copyBuf = 1 << 20

// Tier is the remote tier: lookups, fetches and the upload queue of one
// bucket prefix. Its methods are safe for concurrent use.
type Tier struct {
	cfg Config
	log *zap.Logger
	// warned: when each kind of refusal was last logged (see refused).
	warnMu  sync.Mutex
	warned  map[string]time.Time
	clock   Clock
	client  *minio.Client
	exclude *excluder
	open    Opener
	breaker *breaker
	names   *nameCache
	lookups flight[lookupResult]
	fetches flight[*fetchShare]
	queue   *queue
	st      counters
	rejects rejected
	// noTrailer: the server takes no checksum trailer on a PUT (GCS's
	// S3 API; minio-go refuses to send one there), so an upload reads
	// its object twice: the CRC32C first, for user metadata, then the
	// PUT, which must read the same bytes.
	noTrailer bool

	closed  atomic.Bool
	done    chan struct{}
	stop    context.CancelFunc // cancels requests in progress at Close
	baseCtx context.Context
	workers sync.WaitGroup

	wakeMu sync.Mutex
	wake   chan struct{} // closed when the breaker closes; GUARDED_BY(wakeMu)
}

// New makes a tier for cfg (after cfg.Finish), replays the upload
// journal and starts the upload workers. It sends no request.
func New(cfg Config, deps Deps) (*Tier, error) {
	if cfg.Bucket == "" || cfg.Timeout <= 0 || cfg.QueueMax < 1 || cfg.BreakerFailures < 1 {
		return nil, errors.New("remote: config not finished (call Config.Finish)")
	}
	if deps.Open == nil {
		return nil, errors.New("remote: no Opener for uploads")
	}
	ex, err := newExcluder(cfg.Exclude)
	if err != nil {
		return nil, err
	}
	t := &Tier{cfg: cfg, log: deps.Logger, clock: deps.Clock, exclude: ex, open: deps.Open,
		names: newNameCache(cacheMax), done: make(chan struct{}), wake: make(chan struct{})}
	if t.log == nil {
		t.log = zap.NewNop()
	}
	if t.clock == nil {
		t.clock = realClock{}
	}
	if t.client, err = newClient(cfg, deps.WrapTransport); err != nil {
		return nil, err
	}
	t.noTrailer = s3utils.IsGoogleEndpoint(*t.client.EndpointURL())
	t.breaker = newBreaker(t.clock, cfg.BreakerFailures, cfg.BreakerCoolDown, func(fails int, timedOut bool) {
		// Which of the two opened it (the limit was logged as
		// "failures" where one timeout had: an outside tester).
		why := fmt.Sprintf("%d failures in a row", fails)
		if timedOut {
			why = fmt.Sprintf("a request had no answer (or no progress) for %v", cfg.Timeout)
		}
		t.log.Warn("the remote server does not answer: circuit breaker open; uploads wait, names not held here answer absent, one probe per cool-down",
			zap.String("bucket", t.cfg.Bucket), zap.String("why", why), zap.Duration("cooldown", cfg.BreakerCoolDown))
	}, func() {
		t.log.Info("the remote server answers again: circuit breaker closed", zap.String("bucket", t.cfg.Bucket))
		t.wakeUploaders()
	})
	t.baseCtx, t.stop = context.WithCancel(context.Background())
	if t.queue, err = openQueue(deps.JournalDir, cfg.QueueMax, t); err != nil {
		return nil, err
	}
	t.startUploaders()
	if deps.CheckBucket {
		go t.checkBucket()
	}
	return t, nil
}

// checkBucket asks once whether the bucket is there and the credentials
// reach it: a misspelt bucket or secret otherwise shows only as names
// never found and uploads retried forever (the server refuses each
// request, which the breaker counts as an answer).
func (t *Tier) checkBucket() {
	ctx, cancel := context.WithTimeout(t.baseCtx, t.cfg.Timeout)
	defer cancel()
	ok, err := t.client.BucketExists(ctx, t.cfg.Bucket)
	if err == nil && !ok {
		// A HEAD's 404 has no body, so it names no cause: a listing's
		// says whether the bucket is missing or the key unknown
		// (versitygw answers an unknown access key 404).
		for o := range t.client.ListObjects(ctx, t.cfg.Bucket, minio.ListObjectsOptions{MaxKeys: 1}) {
			if o.Err != nil && minio.ToErrorResponse(o.Err).Code != "NoSuchBucket" {
				ok, err = true, o.Err
			}
			break
		}
	}
	switch err = t.classify(ctx, err); {
	case err == nil && !ok:
		t.log.Warn("the remote tier's bucket does not exist: nothing is found there and uploads fail until it is made", zap.String("bucket", t.cfg.Bucket))
	case errors.Is(err, ErrUnavailable):
		// A warning: a mistyped endpoint looks like this, and is seen at
		// --log-level warn as a wrong bucket or secret is.
		t.log.Warn("the remote tier's server did not answer at start (a wrong --remote-endpoint, or the server down); uploads wait in the journal", zap.String("endpoint", t.cfg.Endpoint), zap.Error(err))
	}
}

// misconfigured are the S3 error codes that say the tier's bucket or
// credentials are wrong, whatever their status.
// (XAdminUserNotFound: versitygw's answer, with 404, to an access key it
// does not know.)
var misconfigured = map[string]bool{"NoSuchBucket": true, "InvalidAccessKeyId": true, "SignatureDoesNotMatch": true,
	"AuthorizationHeaderMalformed": true, "InvalidBucketName": true, "AccessDenied": true, "InvalidToken": true, "ExpiredToken": true,
	"XAdminUserNotFound": true}

// refusalWarnEvery spaces the warnings for one kind of refusal.
const refusalWarnEvery = 10 * time.Minute

// refused logs, once in refusalWarnEvery for each kind, a request the
// server refused for the tier's configuration (401, 403, or a code in
// misconfigured): wrong credentials, no such bucket, no permission. Each alone is an answer (the breaker
// stays closed); every one of them is a misconfiguration to see.
func (t *Tier) refused(resp minio.ErrorResponse) {
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden && !misconfigured[resp.Code] {
		return // a request's own refusal (412: the key is there already)
	}
	kind := resp.Code
	if kind == "" {
		kind = http.StatusText(resp.StatusCode) // a HEAD's refusal has no body
	}
	if t.warnNow(kind) {
		t.log.Warn("the remote server refused a request: check the bucket, the credentials and their permissions (logged once in 10 minutes for each kind)",
			zap.String("bucket", t.cfg.Bucket), zap.String("code", kind), zap.Int("status", resp.StatusCode), zap.String("message", resp.Message))
	}
}

// warnNow says whether a warning of kind is due: once in
// refusalWarnEvery for each kind.
func (t *Tier) warnNow(kind string) bool {
	now := t.clock.Now()
	t.warnMu.Lock()
	defer t.warnMu.Unlock()
	if last, seen := t.warned[kind]; seen && now.Sub(last) < refusalWarnEvery {
		return false
	}
	if t.warned == nil {
		t.warned = map[string]time.Time{}
	}
	t.warned[kind] = now
	return true
}

func newClient(cfg Config, wrap func(http.RoundTripper) http.RoundTripper) (*minio.Client, error) {
	host, secure := "s3.amazonaws.com", true
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil {
			return nil, usagef("bad remote endpoint %q: %v", Redact(cfg.Endpoint), err)
		}
		host, secure = u.Host, u.Scheme == "https"
	}
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("remote: transport: %w", err)
	}
	var rt http.RoundTripper = tr
	if wrap != nil {
		rt = wrap(rt)
	}
	c, err := minio.New(host, &minio.Options{
		Creds:     credsFor(cfg),
		Secure:    secure,
		Region:    cfg.Region, // known: no GetBucketLocation round trip
		Transport: rt,
		// One try per call: the breaker and the upload backoff decide
		// what happens after a failure, not ten hidden retries.
		MaxRetries: 1,
		// An upload's CRC32C goes as the PUT's trailer, computed in the
		// one pass that reads and sends the object.
		TrailingHeaders: true,
	})
	if err != nil {
		return nil, fmt.Errorf("remote: client for %s: %w", host, err)
	}
	return c, nil
}

func credsFor(cfg Config) *credentials.Credentials {
	if cfg.AccessKey != "" {
		return credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken)
	}
	return credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{}, &credentials.FileAWSCredentials{}, &credentials.IAM{},
	})
}

// Close stops the upload workers and cancels requests in progress. It
// uploads nothing more: the journal keeps what is pending for the next
// New. Calls after Close fail with ErrClosed (Lookup answers not found).
func (t *Tier) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	close(t.done)
	t.stop()
	t.workers.Wait()
	return nil
}

// ErrBadName: a name that cannot be an S3 key (not valid UTF-8, over
// 1024 bytes with the prefix, not a clean relative path). It is never
// sent: an upload of it is refused for good, a lookup is a miss.
var ErrBadName = errors.New("remote: name cannot be an object key")

// key is name's object key. Names are relative, slash-separated paths
// without empty, "." or ".." components, in UTF-8 (S3 keys are).
func (t *Tier) key(name string) (string, error) {
	if name == "" || strings.HasPrefix(name, "/") || path.Clean(name) != name || name == "." ||
		strings.HasPrefix(name, "../") || name == ".." {
		return "", fmt.Errorf("%w: %q is not a clean relative path", ErrBadName, name)
	}
	if !utf8.ValidString(name) {
		return "", fmt.Errorf("%w: %q is not valid UTF-8", ErrBadName, name)
	}
	k := t.cfg.Prefix + name
	if len(k) > 1024 {
		return "", fmt.Errorf("%w: %q makes a key over S3's 1024 bytes", ErrBadName, name)
	}
	return k, nil
}

// Excluded reports whether name matches an exclude rule (a temp name):
// never uploaded, never looked up remotely.
func (t *Tier) Excluded(name string) bool { return t.exclude.match(name) }

// classify turns a request's error into the tier's: nil, ErrNotFound, or
// ErrUnavailable, and tells the breaker. parent is the caller's context:
// if it ended, the error is the caller's, not the server's.
func (t *Tier) classify(parent context.Context, err error) error {
	if err == nil {
		t.breaker.success()
		return nil
	}
	if parent.Err() != nil {
		t.breaker.neutral()
		return parent.Err()
	}
	var resp minio.ErrorResponse
	errors.As(err, &resp)
	switch {
	case resp.StatusCode == http.StatusNotFound && !misconfigured[resp.Code]:
		t.breaker.success()
		return ErrNotFound
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		t.breaker.success() // alive; the request itself was refused
		t.refused(resp)
		return fmt.Errorf("remote: %s (HTTP %d): %w", resp.Code, resp.StatusCode, err)
	}
	t.breaker.fail(timedOut(err))
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// timedOut says whether a request's error is its deadline passing, or
// the network's timeout: no answer for the whole timeout.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// statusOf is the HTTP status of a request's error, 0 if it has none.
func statusOf(err error) int {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		return resp.StatusCode
	}
	return 0
}

// wakeUploaders cuts short the backoff of uploads waiting to retry; the
// breaker calls it when the server answers again.
func (t *Tier) wakeUploaders() {
	t.wakeMu.Lock()
	close(t.wake)
	t.wake = make(chan struct{})
	t.wakeMu.Unlock()
}

func (t *Tier) wakeChan() <-chan struct{} {
	t.wakeMu.Lock()
	defer t.wakeMu.Unlock()
	return t.wake
}
