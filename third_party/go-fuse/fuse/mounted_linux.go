// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"fmt"
	"path/filepath"
	"syscall"
)

// NewMountedServer serves a FUSE connection that its caller opened and
// mounted itself: fd is its /dev/fuse descriptor, owned by the server
// from then on, already attached to a mount at mountPoint (for Unmount)
// whose INIT has not been answered. It reads and answers INIT as
// NewServer does, and returns before any other request is read.
//
// It is for mounts that NewServer cannot make: one made with the new
// mount API (fsopen, fsmount, move_mount), such as a mount placed
// beneath another one (MOVE_MOUNT_BENEATH) so that the one on top can be
// replaced without the mount point ever showing the directory under
// both.
func NewMountedServer(fs RawFileSystem, fd int, mountPoint string, opts *MountOptions) (*Server, error) {
	ms := newServer(fs, opts)
	ms.mountPoint = filepath.Clean(mountPoint)
	if !filepath.IsAbs(ms.mountPoint) {
		syscall.Close(fd)
		return nil, fmt.Errorf("mounted server: mount point %q is not absolute", mountPoint)
	}
	syscall.CloseOnExec(fd)
	var err error
	if ms.fuseFD, err = ms.newFuseFD(fd); err != nil {
		return nil, err // fd closed
	}
	ms.protocolServer.writev = ms.fuseFD.writev
	close(ms.ready)
	if code := ms.handleInit(); !code.Ok() {
		ms.fuseFD.close()
		return nil, fmt.Errorf("init: %s", code)
	}
	ms.fuseFD.loops.Add(1)
	return ms, nil
}
