// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// moveMountBeneath is MOVE_MOUNT_BENEATH (Linux 6.5), which x/sys does
// not name yet.
const moveMountBeneath = 0x200

// TestNewMountedServer mounts a FUSE connection itself, beneath a tmpfs
// already on the mount point, serves it with NewMountedServer, and
// detaches the tmpfs: the mount point goes from the tmpfs straight to
// the FUSE file system, whose file then reads (the tmpfs holds another), and Unmount takes it away.
func TestNewMountedServer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts with the new mount API")
	}
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for syscall.Unmount(mnt, syscall.MNT_DETACH) == nil {
		}
	})
	if err := os.WriteFile(filepath.Join(mnt, "top"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fsfd, err := unix.Fsopen("fuse", unix.FSOPEN_CLOEXEC)
	if err != nil {
		t.Skipf("no new mount API: %v", err)
	}
	for _, kv := range [][2]string{{"fd", strconv.Itoa(fd)}, {"rootmode", "40000"}, {"user_id", "0"}, {"group_id", "0"}, {"subtype", "mountedtest"}} {
		if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
			syscall.Close(fsfd)
			t.Fatalf("fsconfig %s: %v", kv[0], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		syscall.Close(fsfd)
		t.Fatal(err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
	syscall.Close(fsfd) // its context would keep the superblock, and the connection, alive
	if err != nil {
		t.Fatal(err)
	}
	err = unix.MoveMount(mfd, "", unix.AT_FDCWD, mnt, unix.MOVE_MOUNT_F_EMPTY_PATH|moveMountBeneath)
	syscall.Close(mfd) // an open descriptor of its root would keep the mount busy
	if err != nil {
		syscall.Close(fd)
		t.Skipf("no MOVE_MOUNT_BENEATH: %v", err)
	}
	fs := &oneFile{RawFileSystem: NewDefaultRawFileSystem(), data: []byte("mounted by its caller")}
	s, err := NewMountedServer(fs, fd, mnt, &MountOptions{Name: "mountedtest", DirectMount: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.Serve(); close(done) }()
	if _, err := os.Stat(filepath.Join(mnt, "top")); err != nil {
		t.Fatalf("before the swap the mount point does not show the tmpfs on top: %v", err)
	}
	if err := syscall.Unmount(mnt, syscall.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitMount(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "top")); !os.IsNotExist(err) {
		t.Fatalf("after the swap the tmpfs's file is still there: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(mnt, "f"))
	if err != nil || string(got) != string(fs.data) {
		t.Fatalf("read %q, %v; want %q", got, err, fs.data)
	}
	if err := s.Unmount(); err != nil {
		t.Fatal(err)
	}
	<-done
	if _, err := os.Stat(filepath.Join(mnt, "f")); !os.IsNotExist(err) {
		t.Fatalf("after Unmount the file system's file is still there: %v", err)
	}
}
