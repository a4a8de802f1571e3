// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"testing"
	"time"
	"unsafe"
)

// initRoundTrip answers an INIT request offering kernelFlags and returns
// the reply.
func initRoundTrip(t *testing.T, opts MountOptions, kernelFlags uint64) InitOut {
	t.Helper()
	in := InitIn{
		InHeader:     InHeader{Length: uint32(unsafe.Sizeof(InitIn{})), Opcode: _OP_INIT, Unique: 1},
		Major:        _FUSE_KERNEL_VERSION,
		Minor:        44,
		MaxReadAhead: 128 << 10,
		Flags:        uint32(kernelFlags) | CAP_INIT_EXT,
		Flags2:       uint32(kernelFlags >> 32),
	}
	inBuf := unsafe.Slice((*byte)(unsafe.Pointer(&in)), unsafe.Sizeof(in))
	var out InitOut
	outBuf := unsafe.Slice((*byte)(unsafe.Pointer(&out)), unsafe.Sizeof(out))
	header := make([]byte, sizeOfOutHeader)
	ps := NewProtocolServer(NewDefaultRawFileSystem(), &opts)
	n, status := ps.HandleRequest([][]byte{inBuf}, [][]byte{header, outBuf})
	if status != OK || n != len(header)+len(outBuf) {
		t.Fatalf("INIT: status %v, %d bytes; want OK, %d", status, n, len(header)+len(outBuf))
	}
	return out
}

func TestInitRequestTimeout(t *testing.T) {
	for _, c := range []struct {
		name    string
		timeout time.Duration
		offered bool
		want    uint16
	}{
		{"offered", 90 * time.Second, true, 90},
		{"rounded up", 1500 * time.Millisecond, true, 2},
		{"capped", 100000 * time.Second, true, 65535},
		{"not offered", 90 * time.Second, false, 0},
		{"not asked", 0, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var flags uint64
			if c.offered {
				flags = CAP_REQUEST_TIMEOUT
			}
			out := initRoundTrip(t, MountOptions{RequestTimeout: c.timeout}, flags)
			if got := out.Flags64()&CAP_REQUEST_TIMEOUT != 0; got != (c.want != 0) {
				t.Errorf("CAP_REQUEST_TIMEOUT in the reply: %v, want %v", got, c.want != 0)
			}
			if out.RequestTimeout != c.want {
				t.Errorf("RequestTimeout %d, want %d", out.RequestTimeout, c.want)
			}
		})
	}
}

func TestInitRequestTimeoutDisabled(t *testing.T) {
	opts := MountOptions{RequestTimeout: time.Minute, DisabledCapabilities: CAP_REQUEST_TIMEOUT}
	out := initRoundTrip(t, opts, CAP_REQUEST_TIMEOUT)
	if out.Flags64()&CAP_REQUEST_TIMEOUT != 0 || out.RequestTimeout != 0 {
		t.Errorf("with the capability disabled: flags %#x, RequestTimeout %d; want neither", out.Flags64(), out.RequestTimeout)
	}
}
