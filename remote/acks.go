package remote

import (
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ackWatch follows how many bytes the peer of a request's connection has
// acknowledged (TCP_INFO's bytes_acked), so that a watchdog can tell a
// body still draining from the socket's buffers, over a slow link, from
// a stall.
type ackWatch struct {
	mu    sync.Mutex
	conn  syscall.RawConn // GUARDED_BY(mu); nil: none known
	acked uint64          // GUARDED_BY(mu): at the last look
}

// use notes the connection a request got (httptrace's GotConn).
func (a *ackWatch) use(c net.Conn) {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = tc.NetConn() // TLS
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	a.mu.Lock()
	a.conn, a.acked = rc, 0
	a.mu.Unlock()
	a.moved()
}

// moved says whether the peer acknowledged bytes since the last look;
// false when the connection is not known or not TCP.
func (a *ackWatch) moved() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn == nil {
		return false
	}
	var info *unix.TCPInfo
	var err error
	if cerr := a.conn.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); cerr != nil || err != nil {
		return false
	}
	moved := info.Bytes_acked > a.acked
	a.acked = info.Bytes_acked
	return moved
}
