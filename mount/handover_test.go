package mount

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
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

// A successor that does not say it cuts an object at an OPEN with
// O_TRUNC (a kvfs from before) is refused a connection whose INIT reply
// had the kernel send O_TRUNC there: it would open the object whole,
// and a rewrite would keep the old bytes past its end. Where the kernel
// sends a SETATTR instead, any successor will do.
func TestKeepsOpenTruncation(t *testing.T) {
	for _, c := range []struct {
		flags     uint64
		truncates bool
		refused   bool
	}{
		{fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_PASSTHROUGH, false, true},
		{fuse.CAP_ATOMIC_O_TRUNC, true, false},
		{fuse.CAP_PASSTHROUGH, false, false},
		{0, true, false},
	} {
		if err := keepsOpenTruncation(c.flags, c.truncates); (err != nil) != c.refused {
			t.Errorf("flags %#x, successor truncates %v: %v, want refused %v", c.flags, c.truncates, err, c.refused)
		}
	}
}
