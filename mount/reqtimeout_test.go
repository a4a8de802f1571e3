package mount

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// TestRequestTimeoutOffered: a --request-timeout the kernel's INIT did
// not offer to take is a usage error (exit 2) naming the problem; one it
// offered, or none asked for, is not.
func TestRequestTimeoutOffered(t *testing.T) {
	err := requestTimeoutOffered(time.Minute, fuse.CAP_ASYNC_READ)
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "does not offer") {
		t.Errorf("not offered: %v; want a usage error saying the kernel does not offer it", err)
	}
	if err := requestTimeoutOffered(time.Minute, fuse.CAP_REQUEST_TIMEOUT); err != nil {
		t.Errorf("offered: %v", err)
	}
	if err := requestTimeoutOffered(0, 0); err != nil {
		t.Errorf("not asked for, not offered: %v", err)
	}
}
