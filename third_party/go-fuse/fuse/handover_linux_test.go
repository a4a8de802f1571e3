// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// adoptFS answers GETATTR with a fixed size, and records Init and the
// extended attributes it is asked to set.
type adoptFS struct {
	RawFileSystem
	mu     sync.Mutex
	inited *Server
	xattrs map[string]string
}

func (fs *adoptFS) Init(s *Server) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.inited = s
}

func (fs *adoptFS) GetAttr(cancel <-chan struct{}, in *GetAttrIn, out *AttrOut) Status {
	out.Ino = in.NodeId
	out.Size = 1234
	out.Mode = syscall.S_IFREG | 0o644
	return OK
}

func (fs *adoptFS) SetXAttr(cancel <-chan struct{}, in *SetXAttrIn, attr string, data []byte) Status {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.xattrs[attr] = string(data)
	return OK
}

// fakeConn is a socket pair standing in for /dev/fuse: the server's end
// and the kernel's.
func fakeConn(t *testing.T) (server int, kernel int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fds[0], fds[1]
}

func bytesOf[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// ask sends one request on the kernel's end and reads the reply.
func ask(t *testing.T, kernel int, req []byte) (OutHeader, []byte) {
	t.Helper()
	if _, err := unix.Write(kernel, req); err != nil {
		t.Fatal(err)
	}
	return readOut(t, kernel)
}

func readOut(t *testing.T, kernel int) (OutHeader, []byte) {
	t.Helper()
	unix.SetsockoptTimeval(kernel, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 10})
	buf := make([]byte, 4096)
	n, err := unix.Read(kernel, buf)
	for err == unix.EINTR { // a read with a timeout is not restarted after the runtime's preemption signal
		n, err = unix.Read(kernel, buf)
	}
	if err != nil || n < int(sizeOfOutHeader) {
		t.Fatalf("reading the reply: %d bytes, %v", n, err)
	}
	var h OutHeader
	copy(bytesOf(&h), buf)
	return h, buf[sizeOfOutHeader:n]
}

func adoptState(flags uint64, kernelFlags uint64) InitState {
	return InitState{
		Kernel: InitIn{Major: _FUSE_KERNEL_VERSION, Minor: 44, MaxReadAhead: 128 << 10,
			Flags: uint32(kernelFlags) | CAP_INIT_EXT, Flags2: uint32(kernelFlags >> 32)},
		Flags:    flags,
		MaxWrite: 1 << 20,
	}
}

// TestAdoptServer: a server adopting an initialised connection reads no
// INIT, runs Init before it returns, and parses requests by the INIT
// state it was given (SETXATTR's header size depends on the negotiated
// CAP_SETXATTR_EXT); its DupFD is a second descriptor of the connection.
func TestAdoptServer(t *testing.T) {
	for _, ext := range []bool{false, true} {
		var flags uint64
		if ext {
			flags = CAP_SETXATTR_EXT
		}
		fs := &adoptFS{RawFileSystem: NewDefaultRawFileSystem(), xattrs: map[string]string{}}
		srvEnd, kernel := fakeConn(t)
		adopted := make(chan *Server, 1)
		go func() {
			ms, err := AdoptServer(fs, srvEnd, "", adoptState(flags, flags), nil)
			if err != nil {
				t.Errorf("AdoptServer: %v", err)
			}
			adopted <- ms
		}()
		var ms *Server
		select {
		case ms = <-adopted:
		case <-time.After(10 * time.Second):
			t.Fatal("AdoptServer did not return: it waits for an INIT the kernel never sends again")
		}
		if ms == nil {
			return
		}
		fs.mu.Lock()
		inited := fs.inited
		fs.mu.Unlock()
		if inited != ms {
			t.Fatalf("Init was not called with the server before AdoptServer returned")
		}
		if st := ms.InitState(); st.Flags != flags || st.Kernel.Minor != 44 || st.MaxWrite != 1<<20 {
			t.Errorf("InitState %+v, want the state adopted", st)
		}
		if err := ms.WaitMount(); err != nil {
			t.Errorf("WaitMount: %v", err)
		}
		served := make(chan struct{})
		go func() { ms.Serve(); close(served) }()

		get := GetAttrIn{InHeader: InHeader{Opcode: _OP_GETATTR, Unique: 2, NodeId: 7}}
		get.Length = uint32(unsafe.Sizeof(get))
		h, out := ask(t, kernel, bytesOf(&get))
		var attr AttrOut
		copy(bytesOf(&attr), out)
		if h.Unique != 2 || h.Status != 0 || attr.Size != 1234 || attr.Ino != 7 {
			t.Errorf("GETATTR: header %+v, attr size %d ino %d; want unique 2, OK, 1234, 7", h, attr.Size, attr.Ino)
		}

		set := SetXAttrIn{InHeader: InHeader{Opcode: _OP_SETXATTR, Unique: 3, NodeId: 7}, Size: 5}
		head := bytesOf(&set)[:setXAttrInSize(flags)]
		req := append(append(append([]byte(nil), head...), "user.k\x00"...), "value"...)
		(*InHeader)(unsafe.Pointer(&req[0])).Length = uint32(len(req))
		if h, _ := ask(t, kernel, req); h.Unique != 3 || h.Status != 0 {
			t.Errorf("SETXATTR (ext %v): header %+v", ext, h)
		}
		fs.mu.Lock()
		if got := fs.xattrs["user.k"]; got != "value" {
			t.Errorf("SETXATTR (ext %v) parsed as %q: the adopted INIT state was not applied", ext, fs.xattrs)
		}
		fs.mu.Unlock()

		dup, err := ms.DupFD()
		if err != nil {
			t.Fatal(err)
		}
		if fl, _ := unix.FcntlInt(uintptr(dup), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC == 0 || dup == srvEnd {
			t.Errorf("DupFD gave descriptor %d (flags %#x): want a new, close-on-exec one", dup, fl)
		}
		// The kernel's end answers a request written to the duplicate's
		// peer: the same connection.
		get.Unique = 4
		if h, _ := ask(t, kernel, bytesOf(&get)); h.Unique != 4 || h.Status != 0 {
			t.Errorf("GETATTR after DupFD: %+v", h)
		}
		unix.Close(dup)
		unix.Close(kernel) // the connection ends
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return once the connection ended")
		}
	}
}

// TestAdoptServerRefusesForeignProtocol: an INIT state of another major
// version, or an empty one, is refused.
func TestAdoptServerRefusesForeignProtocol(t *testing.T) {
	srvEnd, kernel := fakeConn(t)
	defer unix.Close(srvEnd)
	defer unix.Close(kernel)
	if _, err := AdoptServer(NewDefaultRawFileSystem(), srvEnd, "", InitState{}, nil); err == nil {
		t.Error("an empty INIT state was adopted")
	}
}

// TestResendNotify: the notification is one header, code
// FUSE_NOTIFY_RESEND, unique 0; a kernel that does not offer CAP_HAS_RESEND
// gets none.
func TestResendNotify(t *testing.T) {
	for _, offered := range []bool{true, false} {
		var kflags uint64
		if offered {
			kflags = CAP_HAS_RESEND
		}
		srvEnd, kernel := fakeConn(t)
		ms, err := AdoptServer(NewDefaultRawFileSystem(), srvEnd, "", adoptState(0, kflags), nil)
		if err != nil {
			t.Fatal(err)
		}
		st := ms.ResendNotify()
		if !offered {
			if st != ENOSYS {
				t.Errorf("ResendNotify without CAP_HAS_RESEND: %v, want ENOSYS", st)
			}
		} else {
			if st != OK {
				t.Fatalf("ResendNotify: %v", st)
			}
			h, rest := readOut(t, kernel)
			// FUSE_NOTIFY_RESEND is 7 in the kernel's ABI.
			if h.Length != uint32(sizeOfOutHeader) || h.Status != 7 || h.Unique != 0 || len(rest) != 0 {
				t.Errorf("notification %+v with %d more bytes; want a bare header, code 7 (FUSE_NOTIFY_RESEND), unique 0", h, len(rest))
			}
		}
		served := make(chan struct{})
		go func() { ms.Serve(); close(served) }()
		unix.Close(kernel)
		<-served
	}
}

// blockFS holds every GETATTR until release is closed.
type blockFS struct {
	RawFileSystem
	entered chan struct{}
	release chan struct{}
}

func (fs *blockFS) GetAttr(cancel <-chan struct{}, in *GetAttrIn, out *AttrOut) Status {
	fs.entered <- struct{}{}
	<-fs.release
	out.Ino = in.NodeId
	return OK
}

// TestOutstanding: a request counts from its read until its reply is
// written, whether its handler is running or has returned.
func TestOutstanding(t *testing.T) {
	fs := &blockFS{RawFileSystem: NewDefaultRawFileSystem(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	srvEnd, kernel := fakeConn(t)
	ms, err := AdoptServer(fs, srvEnd, "", adoptState(0, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { ms.Serve(); close(served) }()
	if n := ms.Outstanding(); n != 0 {
		t.Fatalf("%d outstanding before any request", n)
	}
	get := GetAttrIn{InHeader: InHeader{Opcode: _OP_GETATTR, Unique: 2, NodeId: 7}}
	get.Length = uint32(unsafe.Sizeof(get))
	if _, err := unix.Write(kernel, bytesOf(&get)); err != nil {
		t.Fatal(err)
	}
	<-fs.entered
	if n := ms.Outstanding(); n != 1 {
		t.Errorf("%d outstanding while the handler runs, want 1", n)
	}
	close(fs.release)
	if h, _ := readOut(t, kernel); h.Unique != 2 {
		t.Fatalf("reply %+v", h)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ms.Outstanding() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d outstanding after the reply", ms.Outstanding())
		}
		time.Sleep(time.Millisecond)
	}
	unix.Close(kernel)
	<-served
}
