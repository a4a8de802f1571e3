package mount

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// unixPair is a connected pair of unixpacket sockets, as the handover
// socket's.
func unixPair(t *testing.T) (a, b *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "handover")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// TestRefusalAfterTheRequestsDeadline: a refusal made after the
// request's deadline passed (a quiesce retries for up to 10 s, the
// request's deadline is 5 s) still reaches the successor, which reads why
// the old daemon keeps the mount. Before, the write failed, the
// successor read EOF as the old daemon's death, mounted afresh, and
// failed 10 s later saying the old daemon had died (an outside tester).
func TestRefusalAfterTheRequestsDeadline(t *testing.T) {
	old, successor := unixPair(t)
	old.SetDeadline(time.Now().Add(-time.Second))
	refuseHandover(old, zap.NewNop(), "handover refused; serving on", errors.New("a request waits for room in the full cache"))
	successor.SetDeadline(time.Now().Add(5 * time.Second))
	var offer handoverOffer
	if _, err := readOffer(successor, &offer); err == nil || errors.Is(err, errPredecessorGone) {
		t.Fatalf("the successor read %v, want the old daemon's refusal", err)
	} else if offer.Error != "a request waits for room in the full cache" {
		t.Fatalf("the successor read %v (offer error %q), want the old daemon's reason", err, offer.Error)
	}
}
