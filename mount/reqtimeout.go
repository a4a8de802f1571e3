package mount

import (
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
)

// FUSE request timeouts (Linux 6.14 and later): the kernel aborts a
// connection that has left a request unanswered for longer than its
// timeout, so callers of a stuck daemon get ECONNABORTED instead of
// waiting forever. kvfs sets it per connection, in the INIT reply
// (fuse.MountOptions.RequestTimeout, a patch kvfs carries in
// third_party/go-fuse), and never through the system-wide
// /proc/sys/fs/fuse/default_request_timeout, which would hand its
// timeout to every FUSE mount made meanwhile and outlive a killed kvfs.
const (
	// sysctlMaxRequestTimeout caps every connection's timeout; it is
	// only read.
	sysctlMaxRequestTimeout = "/proc/sys/fs/fuse/max_request_timeout"
	// requestTimeoutDoc is where a refused --request-timeout points.
	requestTimeoutDoc = "`kvfs unmount` aborts a hung daemon's connection instead (docs/operations.md, \"A hung daemon\")"
)

// checkRequestTimeout validates a --request-timeout that is not negative
// (validate's check) before anything is touched. A kernel without the
// sysctls predates request timeouts: refused here, before the store is
// opened; whether the kernel offers them is known for sure only at INIT
// (requestTimeoutOffered).
func checkRequestTimeout(d time.Duration) error {
	switch {
	case d == 0:
		return nil
	case d > fuse.MaxRequestTimeout:
		return usagef("--request-timeout %v: the kernel takes at most %v", d, fuse.MaxRequestTimeout)
	}
	if _, err := os.Stat(sysctlMaxRequestTimeout); err != nil {
		return usagef("--request-timeout: this kernel has no FUSE request timeouts (Linux 6.14 or later); %s", requestTimeoutDoc)
	}
	return nil
}

// requestTimeoutOffered refuses a --request-timeout that the kernel's
// INIT did not offer to take (kernelFlags, the flags it sent).
func requestTimeoutOffered(d time.Duration, kernelFlags uint64) error {
	if d > 0 && kernelFlags&fuse.CAP_REQUEST_TIMEOUT == 0 {
		return usagef("--request-timeout: this kernel does not offer per-connection FUSE request timeouts; %s", requestTimeoutDoc)
	}
	return nil
}

// logRequestTimeout says what the connection's timeout is, and when the
// kernel's max_request_timeout caps it.
func logRequestTimeout(d time.Duration, log *zap.Logger) {
	if d == 0 {
		return
	}
	secs := int64((d + time.Second - 1) / time.Second)
	if max, err := readSysctl(sysctlMaxRequestTimeout); err == nil && max > 0 && max < secs {
		log.Warn("max_request_timeout caps the request timeout", zap.Int64("asked_s", secs), zap.Int64("max_s", max))
	}
	log.Info("FUSE request timeout set for this connection", zap.Int64("seconds", secs),
		zap.String("note", "the kernel checks about every 15s"))
}

func readSysctl(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
