package mount

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// FUSE request timeouts (Linux 6.14 and later): the kernel aborts a
// connection that has left a request unanswered for longer than its
// timeout, so callers of a stuck daemon get ENOTCONN or ECONNABORTED
// instead of waiting forever. A connection's timeout is fixed when its
// INIT reply is processed: the INIT reply's request_timeout (with
// CAP_REQUEST_TIMEOUT), else default_request_timeout, capped by
// max_request_timeout. go-fuse v2.12.1 knows CAP_REQUEST_TIMEOUT and the
// InitOut.RequestTimeout field but never fills the field in, and offers
// no hook into its INIT reply; so the only way is the system-wide
// default, set for the moment of this mount's INIT and put back after.
const (
	sysctlDefaultRequestTimeout = "/proc/sys/fs/fuse/default_request_timeout"
	sysctlMaxRequestTimeout     = "/proc/sys/fs/fuse/max_request_timeout"
	// maxRequestTimeout is the largest the kernel takes (a u16 of
	// seconds).
	maxRequestTimeout = 65535 * time.Second
)

// checkRequestTimeout validates a --request-timeout that is not negative
// (validate's check) before anything is touched.
func checkRequestTimeout(d time.Duration) error {
	switch {
	case d == 0:
		return nil
	case d > maxRequestTimeout:
		return usagef("--request-timeout %v: the kernel takes at most %v", d, maxRequestTimeout)
	}
	if _, err := os.Stat(sysctlDefaultRequestTimeout); err != nil {
		return usagef("--request-timeout: this kernel has no FUSE request timeouts (%s: Linux 6.14 or later)", sysctlDefaultRequestTimeout)
	}
	if unix.Access(sysctlDefaultRequestTimeout, unix.W_OK) != nil {
		return usagef("--request-timeout needs root: it sets %s for the moment of the mount", sysctlDefaultRequestTimeout)
	}
	return nil
}

// setRequestTimeout sets the kernel's default FUSE request timeout to d
// (whole seconds, rounded up) until restore is called, which must be
// after the mount's INIT. Concurrent kvfs mounts take turns (a lock on
// the sysctl file), so each restores what was there before it. Another
// FUSE file system whose INIT lands in the window gets the same default.
func setRequestTimeout(d time.Duration, log *zap.Logger) (restore func(), err error) {
	if d == 0 {
		return func() {}, nil
	}
	f, err := os.OpenFile(sysctlDefaultRequestTimeout, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("--request-timeout: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("--request-timeout: locking %s: %w", sysctlDefaultRequestTimeout, err)
	}
	old, err := readSysctl(sysctlDefaultRequestTimeout)
	secs := int64((d + time.Second - 1) / time.Second)
	if err == nil {
		err = writeSysctl(sysctlDefaultRequestTimeout, secs)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("--request-timeout: %w", err)
	}
	if max, err := readSysctl(sysctlMaxRequestTimeout); err == nil && max > 0 && max < secs {
		log.Warn("max_request_timeout caps the request timeout", zap.Int64("asked_s", secs), zap.Int64("max_s", max))
	}
	log.Info("FUSE request timeout set for this mount", zap.Int64("seconds", secs),
		zap.String("note", "the kernel checks about every 15s"))
	return func() {
		if err := writeSysctl(sysctlDefaultRequestTimeout, old); err != nil {
			log.Error("could not put back the FUSE default request timeout", zap.Int64("was", old), zap.Error(err))
		}
		f.Close()
	}, nil
}

func readSysctl(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func writeSysctl(path string, v int64) error {
	return os.WriteFile(path, []byte(strconv.FormatInt(v, 10)), 0)
}
