package remote

import (
	"errors"
	"net/http"
	"strconv"
	"sync"

	"github.com/minio/minio-go/v7"
	"go.uber.org/zap"
)

// Error classes of an upload or a delete (docs/remote.md, "Errors"):
//   - permanent: the server refuses this key, or the name cannot be a
//     key at all; trying again cannot help. Counted (remote_rejected),
//     logged once, dropped from the queue and the journal.
//   - transient: anything else (no answer, 5xx, throttling, a request
//     that timed out, credentials the server does not accept, a bucket
//     that is missing): tried again with backoff, the journal keeps it.
//
// Wrong credentials are transient on purpose: they refuse every key
// alike, and dropping the whole journal for a typo in a secret would
// lose every pending upload; a restart with the right secret sends them.
var permanentCodes = map[string]bool{
	"InvalidArgument":         true,
	"InvalidObjectName":       true,
	"XMinioInvalidObjectName": true,
	"KeyTooLongError":         true,
	"AccessDenied":            true,
	"EntityTooLarge":          true,
	"MethodNotAllowed":        true,
	// A store whose keys are paths (versitygw's posix backend) cannot
	// hold "x" beside "x/y": whichever came second is refused for good.
	"ObjectParentIsFile":        true,
	"ExistingObjectIsDirectory": true,
}

// transient400 are the 400s that say nothing against the key.
var transient400 = map[string]bool{
	"RequestTimeout":               true,
	"ExpiredToken":                 true,
	"TokenRefreshRequired":         true,
	"AuthorizationHeaderMalformed": true,
	"IncompleteBody":               true,
	"BadDigest":                    true,
	"XAmzContentSHA256Mismatch":    true,
	"InvalidDigest":                true,
	"RequestTimeTooSkewed":         true,
}

// permanent says whether err refuses the key for good. It is asked of
// a PUT's or DELETE's answer, which names its reason in a body; a HEAD's
// 400 or 403 has none (and a HEAD of a missing key answers 403 without
// list permission), so the upload goes on to its PUT instead.
func permanent(err error) bool {
	if errors.Is(err, ErrBadName) {
		return true
	}
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) {
		return false
	}
	switch {
	case permanentCodes[resp.Code]:
		return true
	case resp.StatusCode == http.StatusBadRequest:
		return !transient400[resp.Code]
	}
	return false
}

// rejectedMax bounds the names remembered as refused for good.
const rejectedMax = 4096

// rejected remembers names refused for good, so each is logged once
// however often it is published again.
type rejected struct {
	mu    sync.Mutex
	names map[string]struct{} // GUARDED_BY(mu)
}

// first records name and reports whether it is new.
func (r *rejected) first(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.names[name]; ok {
		return false
	}
	if r.names == nil || len(r.names) >= rejectedMax {
		r.names = make(map[string]struct{})
	}
	r.names[name] = struct{}{}
	return true
}

// reject counts a name refused for good and logs it the first time.
func (t *Tier) reject(name string, err error) {
	t.st.rejected.Add(1)
	if t.rejects.first(name) {
		t.log.Warn("refused for good; dropped (logged once per name)",
			zap.String("name", strconv.Quote(name)), zap.Error(err))
	}
}
