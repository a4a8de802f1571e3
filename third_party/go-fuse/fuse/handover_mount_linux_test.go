// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// oneFile is a file system of one file, "f" (node 2), in the root.
type oneFile struct {
	RawFileSystem
	data []byte
}

func (fs *oneFile) attr(node uint64, a *Attr) {
	a.Ino = node
	if node == 1 {
		a.Mode = syscall.S_IFDIR | 0o755
		a.Nlink = 2
		return
	}
	a.Mode = syscall.S_IFREG | 0o644
	a.Size = uint64(len(fs.data))
	a.Nlink = 1
}

func (fs *oneFile) Lookup(cancel <-chan struct{}, h *InHeader, name string, out *EntryOut) Status {
	if h.NodeId != 1 || name != "f" {
		return ENOENT
	}
	out.NodeId = 2
	fs.attr(2, &out.Attr)
	return OK
}

func (fs *oneFile) GetAttr(cancel <-chan struct{}, in *GetAttrIn, out *AttrOut) Status {
	fs.attr(in.NodeId, &out.Attr)
	return OK
}

func (fs *oneFile) Open(cancel <-chan struct{}, in *OpenIn, out *OpenOut) Status {
	out.Fh = 1
	out.OpenFlags = FOPEN_DIRECT_IO // every read reaches the server
	return OK
}

func (fs *oneFile) Read(cancel <-chan struct{}, in *ReadIn, buf []byte) (ReadResult, Status) {
	if in.Fh != 1 {
		return nil, EBADF
	}
	end := min(int(in.Offset)+len(buf), len(fs.data))
	return ReadResultData(fs.data[min(int(in.Offset), end):end]), OK
}

func (fs *oneFile) Release(cancel <-chan struct{}, in *ReleaseIn) {}

// TestAdoptMountedConnection hands a live mount from one server to
// another, in one process, as a restart would across two: the new server
// adopts a duplicate of the connection with the old one's INIT state, the
// old one detaches, the requests its blocked readers took and could not
// answer are resent, and every client call succeeds: a descriptor opened
// before the handover reads on after it, and no stat fails.
func TestAdoptMountedConnection(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts with DirectMountStrict (no fusermount here)")
	}
	fs := &oneFile{RawFileSystem: NewDefaultRawFileSystem(), data: []byte("hello, handover")}
	mnt := t.TempDir()
	opts := &MountOptions{DirectMountStrict: true, Name: "adopttest"}
	a, err := NewServer(fs, mnt, opts)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	aDone := make(chan struct{})
	go func() { a.Serve(); close(aDone) }()
	if err := a.WaitMount(); err != nil {
		t.Fatal(err)
	}
	// Whatever happens below, no mount is left behind.
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	path := filepath.Join(mnt, "f")
	held, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	var before syscall.Stat_t
	if err := syscall.Stat(mnt, &before); err != nil {
		t.Fatal(err)
	}
	// A failed handover leaves client calls waiting for an answer that
	// never comes, and this process unable to exit: abort the connection.
	t.Cleanup(func() {
		if t.Failed() {
			abortConnection(t, before.Dev)
		}
	})

	dup, err := a.DupFD()
	if err != nil {
		t.Fatal(err)
	}
	b, err := AdoptServer(fs, dup, mnt, a.InitState(), opts)
	if err != nil {
		t.Fatal(err)
	}
	bDone := make(chan struct{})
	go func() { b.Serve(); close(bDone) }()
	if err := a.Detach(); err != nil {
		t.Fatal(err)
	}

	// Client calls until the old server's readers are all done: each
	// takes one request, which it cannot answer.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	calls := 0
	for done := false; !done && calls < 64; calls++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var st syscall.Stat_t
			// A new name each time: the kernel asks the server.
			if err := syscall.Stat(filepath.Join(mnt, fmt.Sprintf("absent%d", i)), &st); err != syscall.ENOENT {
				errs <- fmt.Errorf("stat of an absent name: %v, want ENOENT", err)
			}
		}(calls)
		select {
		case <-aDone:
			done = true
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case <-aDone:
	case <-time.After(10 * time.Second):
		t.Fatalf("the old server still reads after %d client calls", calls)
	}
	if st := b.ResendNotify(); st != OK {
		t.Fatalf("ResendNotify: %v", st)
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatalf("client calls the old server took were not resent and answered (of %d)", calls)
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	buf := make([]byte, 64)
	n, err := held.ReadAt(buf, 0)
	if string(buf[:n]) != string(fs.data) {
		t.Errorf("the descriptor held across the handover read %q, %v; want %q", buf[:n], err, fs.data)
	}
	var after syscall.Stat_t
	if err := syscall.Stat(mnt, &after); err != nil || after.Dev != before.Dev {
		t.Errorf("the mount after the handover: %v, device %d, was %d", err, after.Dev, before.Dev)
	}
	t.Logf("%d client calls until the old server's readers were done", calls)

	held.Close()
	if err := b.Unmount(); err != nil {
		t.Errorf("unmount by the new server: %v", err)
	}
	select {
	case <-bDone:
	case <-time.After(10 * time.Second):
		t.Error("the new server did not stop after the unmount")
	}
}

// abortConnection aborts the FUSE connection of device dev through
// fusectl, mounting it if need be.
func abortConnection(t *testing.T, dev uint64) {
	const fusectl = "/sys/fs/fuse/connections"
	conn := filepath.Join(fusectl, fmt.Sprint(unix.Minor(dev)), "abort")
	if _, err := os.Stat(conn); err != nil {
		syscall.Mount("fusectl", fusectl, "fusectl", 0, "")
	}
	if err := os.WriteFile(conn, []byte("1"), 0); err != nil {
		t.Logf("aborting the connection: %v", err)
	}
}
