package main

import (
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
	return b.mountLoop(cl, loopFS{name: "loopback", pkg: loopbackPkg, fsType: "fuse.loopback",
		args: func(mp, orig string) []string { return []string{"-q", "-directmount", mp, orig} }, only: loopbackWorkloads})
}

// loopFS is a loopback file system the bench builds and mounts.
type loopFS struct {
	name, pkg, fsType string
	args              func(mp, orig string) []string
	only              map[string]bool
}

// mountLoop builds (or takes from --loopback-bin) and mounts l over a
// directory of its own in the work directory; its teardown unmounts it.
func (b *bench) mountLoop(cl *cleanups, l loopFS) (*target, error) {
	bin := filepath.Join(b.work, l.name)
	if b.cfg.loopbackBin != "" {
		bin = filepath.Join(b.cfg.loopbackBin, l.name)
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("--loopback-bin: %v (make kit builds it)", err)
		}
	} else if out, err := exec.Command("go", "build", "-o", bin, l.pkg).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s: %v: %s", l.pkg, err, out)
	}
	orig, mp := filepath.Join(b.work, l.name+"-orig"), filepath.Join(b.work, "mnt-"+l.name)
	for _, d := range []string{orig, mp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(bin, l.args(mp, orig)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	cl.add(func() { stopLoopback(mp, cmd, exited) })
	deadline := time.Now().Add(b.cfg.mountTimeout)
	for mountedType(mp) != l.fsType {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("%s exited before mounting: %v", l.name, err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s mount did not appear", l.name)
		}
	}
	b.progress("mounted %s (%s) at %s over %s", l.name, l.pkg, mp, orig)
	return &target{name: l.name, root: mp, only: l.only, pid: cmd.Process.Pid}, nil
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
