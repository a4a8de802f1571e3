package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The floor every data row is held to: go-fuse's own example/loopback
// (FUSE passthrough, no accounting), built from the module cache of the
// go-fuse version kvfs uses, over a directory on the same disk.
const loopbackPkg = "github.com/hanwen/go-fuse/v2/example/loopback"

// loopbackWorkloads are the rows the loopback takes part in.
var loopbackWorkloads = map[string]bool{"read": true, "cold": true, "store": true, "mixed": true, "stat": true, "small": true}

// mountLoopback builds and mounts the loopback; its teardown unmounts it.
func (b *bench) mountLoopback(cl *cleanups) (*target, error) {
	bin := filepath.Join(b.work, "loopback")
	if out, err := exec.Command("go", "build", "-o", bin, loopbackPkg).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s: %v: %s", loopbackPkg, err, out)
	}
	orig, mp := filepath.Join(b.work, "loop-orig"), filepath.Join(b.work, "mnt-loopback")
	for _, d := range []string{orig, mp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(bin, "-q", "-directmount", mp, orig)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	cl.add(func() { stopLoopback(mp, cmd, exited) })
	deadline := time.Now().Add(b.cfg.mountTimeout)
	for mountedType(mp) != "fuse.loopback" {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("loopback exited before mounting: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, errors.New("loopback mount did not appear")
		}
	}
	b.progress("mounted go-fuse's example/loopback at %s over %s", mp, orig)
	return &target{name: "loopback", root: mp, only: loopbackWorkloads}, nil
}

func stopLoopback(mp string, cmd *exec.Cmd, exited chan error) {
	if err := unix.Unmount(mp, 0); err != nil {
		unix.Unmount(mp, unix.MNT_DETACH)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
}
