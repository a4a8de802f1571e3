// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"fmt"
	"path/filepath"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// InitState is what INIT settled on a FUSE connection. The kernel sends
// INIT once per connection, so a process that takes a live connection
// over from another one (its /dev/fuse descriptor passed with
// SCM_RIGHTS: a handover) is given this instead of reading it.
type InitState struct {
	// Kernel is the kernel's INIT request: its protocol version and
	// capabilities, which the parsing of some requests depends on.
	Kernel InitIn
	// Flags are the capabilities the INIT reply gave.
	Flags uint64
	// MaxWrite is the reply's max_write: the largest WRITE the kernel
	// sends, which every read buffer must hold.
	MaxWrite int
}

// InitState returns what INIT settled on the server's connection.
func (ms *Server) InitState() InitState {
	return InitState{Kernel: ms.kernelSettings, Flags: ms.negotiatedFlags, MaxWrite: ms.opts.MaxWrite}
}

// DupFD returns a new descriptor of the server's /dev/fuse connection,
// close-on-exec, to pass to the process that is to take the connection
// over (unix.UnixRights). The caller owns it. The connection lives while
// any descriptor of it is open.
func (ms *Server) DupFD() (int, error) {
	fd := -1
	var err error
	cerr := ms.fuseFD.conn.Control(func(raw uintptr) {
		fd, err = unix.FcntlInt(raw, unix.F_DUPFD_CLOEXEC, 0)
	})
	if cerr != nil {
		return -1, cerr
	}
	return fd, err
}

// Detach closes the server's descriptor of its connection without
// unmounting: the connection lives on in the descriptors passed on
// (DupFD), served by whoever holds them. A reader blocked in read(2)
// still takes one more request, which it can no longer answer; the
// successor's ResendNotify, sent once this process is gone or its
// readers are done, has the kernel queue those again. Serve returns, and
// calls the file system's OnUnmount, once every reader is done.
func (ms *Server) Detach() error {
	return ms.fuseFD.close()
}

// AdoptServer serves a FUSE connection that another server initialised:
// fd is a descriptor of its /dev/fuse (the other server's DupFD, passed
// over), owned by the new server from then on; st is what that server's
// InitState returned, and mountPoint where it is mounted (for Unmount;
// "" if unknown). Nothing is mounted and no INIT is read: fs.Init runs
// before AdoptServer returns, and Serve then reads the connection's
// requests. opts.MaxWrite is raised to st's, so that every request the
// kernel may send fits.
func AdoptServer(fs RawFileSystem, fd int, mountPoint string, st InitState, opts *MountOptions) (*Server, error) {
	if st.Kernel.Major != _FUSE_KERNEL_VERSION || st.Kernel.Minor < _MINIMUM_MINOR_VERSION {
		return nil, fmt.Errorf("adopt: INIT state of protocol %d.%d, want %d.%d or later",
			st.Kernel.Major, st.Kernel.Minor, _FUSE_KERNEL_VERSION, _MINIMUM_MINOR_VERSION)
	}
	o := MountOptions{MaxBackground: _DEFAULT_BACKGROUND_TASKS}
	if opts != nil {
		o = *opts
	}
	o.MaxWrite = max(o.MaxWrite, st.MaxWrite)
	ms := newServer(fs, &o)
	if ms.opts.MaxWrite < st.MaxWrite {
		return nil, fmt.Errorf("adopt: the connection's max_write %d is over this kernel's limit %d", st.MaxWrite, ms.opts.MaxWrite)
	}
	if mountPoint != "" {
		mountPoint = filepath.Clean(mountPoint)
	}
	ms.mountPoint = mountPoint
	ms.adopted = true
	ms.kernelSettings = st.Kernel
	ms.negotiatedFlags = st.Flags
	syscall.CloseOnExec(fd)
	var err error
	if ms.fuseFD, err = ms.newFuseFD(fd); err != nil {
		return nil, err
	}
	ms.protocolServer.writev = ms.fuseFD.writev
	close(ms.ready)
	if ms.kernelSettings.Minor >= 13 {
		ms.setSplice()
	}
	ms.fileSystem.Init(ms)
	ms.fuseFD.loops.Add(1)
	return ms, nil
}

// ResendNotify asks the kernel to queue again every request this
// connection's readers have read and not answered (FUSE_NOTIFY_RESEND,
// Linux 6.9 and later: CAP_HAS_RESEND in the kernel's INIT flags), with
// bit 63 of their unique IDs set. A server that took the connection over
// sends it for the requests its predecessor read and never ran.
func (ms *Server) ResendNotify() Status {
	if ms.kernelSettings.Flags64()&CAP_HAS_RESEND == 0 {
		return ENOSYS
	}
	if ms.protocolServer.writev == nil {
		return ENOSYS
	}
	// A notification's header carries its code, positive, where a
	// reply's carries an errno (as serializeHeader writes it).
	hdr := OutHeader{Length: uint32(sizeOfOutHeader), Status: int32(-NOTIFY_RESEND)}
	_, errno := ms.protocolServer.writev([][]byte{unsafe.Slice((*byte)(unsafe.Pointer(&hdr)), sizeOfOutHeader)})
	return Status(errno)
}

// Outstanding is how many requests the server has read and not yet
// finished: a request is finished once its reply is written (or it
// needs none). A process handing its connection over stops its file
// system from starting requests, then waits until every outstanding
// request is one it stopped: those it answered are then answered on the
// connection, and the rest are the ones ResendNotify has the kernel
// queue again for the successor.
func (ms *Server) Outstanding() int {
	r := ms.fuseFD
	r.reqMu.Lock()
	defer r.reqMu.Unlock()
	return r.outstanding
}
