package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/internal/mountinfo"
	"github.com/kvfs/kvfs/mount"
	"golang.org/x/sys/unix"
)

// cleanups run once, last registered first, whether the bench ends
// normally, on an error or on a signal.
type cleanups struct {
	mu   sync.Mutex
	fns  []func()
	once sync.Once
}

func (c *cleanups) add(fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fns = append(c.fns, fn)
}

func (c *cleanups) run() {
	c.once.Do(func() {
		c.mu.Lock()
		fns := c.fns
		c.fns = nil
		c.mu.Unlock()
		for i := len(fns) - 1; i >= 0; i-- {
			fns[i]()
		}
	})
}

// onSignal cancels the run on the first SIGINT or SIGTERM so the bench
// stops between operations and cleans up; a second signal, or a run
// that does not stop within grace, cleans up at once and exits.
func onSignal(cancel context.CancelFunc, c *cleanups, grace time.Duration) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		fmt.Fprintln(os.Stderr, "kvfs-bench: interrupted; stopping and cleaning up (again to force)")
		cancel()
		select {
		case <-sigs:
		case <-time.After(grace):
		}
		c.run()
		os.Exit(130)
	}()
}

// fsInfo is the file system a path lives on.
type fsInfo struct {
	Type       string `json:"type"`
	Source     string `json:"source"`
	MountPoint string `json:"mount_point"`
	Dev        uint64 `json:"dev"`
}

const (
	tmpfsMagic = 0x01021994
	ramfsMagic = 0x858458f6
)

// whichFS finds the mount holding path (the longest mount point that
// contains it) and refuses memory-backed file systems, which would make
// every comparison meaningless.
func whichFS(path string) (fsInfo, error) {
	var info fsInfo
	var sf unix.Statfs_t
	if err := unix.Statfs(path, &sf); err != nil {
		return info, err
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return info, err
	}
	info.Dev = st.Dev
	best := -1
	for _, m := range mountinfo.Read() {
		if within(path, m.Point) && len(m.Point) > best {
			best = len(m.Point)
			info.Type, info.Source, info.MountPoint = m.FSType, m.Source, m.Point
		}
	}
	if sf.Type == tmpfsMagic || sf.Type == ramfsMagic || info.Type == "tmpfs" || info.Type == "ramfs" {
		return info, fmt.Errorf("%s is on %s (memory); pick a directory on a real disk with --dir", path, info.Type)
	}
	return info, nil
}

// ext4Journaled says whether the ext4 on device source has a journal:
// without one the kernel names no journal thread (journal_task reads
// "<none>"). Unknown counts as journaled.
func ext4Journaled(source string) bool {
	dev, err := filepath.EvalSymlinks(source)
	if err != nil {
		dev = source
	}
	task, err := os.ReadFile(filepath.Join("/sys/fs/ext4", filepath.Base(dev), "journal_task"))
	return err != nil || strings.TrimSpace(string(task)) != "<none>"
}

func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// mountedType is the type of the mount at exactly mp, or "".
func mountedType(mp string) string {
	m, _ := mountinfo.At(mp)
	return m.FSType
}

// kvfsMountsUnder lists kvfs mounts at or below dir.
func kvfsMountsUnder(dir string) []string {
	var out []string
	for _, m := range mountinfo.Read() {
		if m.FSType == mount.FSType && within(m.Point, dir) {
			out = append(out, m.Point)
		}
	}
	return out
}

// makeWorkDir creates the directory the bench works in: under --dir if
// given, else under /var/tmp (usually a disk) or /tmp. It returns a
// function that removes it, refusing while anything is still mounted
// inside, so that a cleanup never deletes through a live mount.
func makeWorkDir(parent string) (string, func(), error) {
	if parent == "" {
		parent = "/var/tmp"
		if _, err := os.Stat(parent); err != nil {
			parent = os.TempDir()
		}
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp(parent, "kvfs-bench-")
	if err != nil {
		return "", nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return "", nil, err
	}
	remove := func() {
		if left := kvfsMountsUnder(dir); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "kvfs-bench: NOT removing %s: still mounted: %v\n", dir, left)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(os.Stderr, "kvfs-bench: removing %s: %v\n", dir, err)
		}
	}
	return dir, remove, nil
}

// dropCaches empties the page, dentry and inode caches (root only).
func dropCaches() error {
	unix.Sync()
	err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("not permitted (need root): %w", err)
	}
	return err
}

// canDropCaches says whether dropCaches can work, and why not.
func canDropCaches() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "not root: cannot write /proc/sys/vm/drop_caches"
	}
	f, err := os.OpenFile("/proc/sys/vm/drop_caches", os.O_WRONLY, 0)
	if err != nil {
		return false, fmt.Sprintf("cannot open /proc/sys/vm/drop_caches: %v", err)
	}
	f.Close()
	return true, ""
}

// syncFS flushes the file system holding dir, so one measurement's dirty
// pages are not written back during the next one's.
func syncFS(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Sync()
		return
	}
	unix.Syncfs(fd)
	unix.Close(fd)
}

// holders lists the processes with a descriptor, working directory or
// root under dir, for a report of why an unmount was busy.
func holders(dir string) string {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var out []string
	for _, p := range procs {
		links := []string{filepath.Join(p, "cwd"), filepath.Join(p, "root")}
		fds, _ := filepath.Glob(filepath.Join(p, "fd", "*"))
		for _, l := range append(links, fds...) {
			if t, err := os.Readlink(l); err == nil && within(t, dir) {
				comm, _ := os.ReadFile(filepath.Join(p, "comm"))
				out = append(out, fmt.Sprintf("%s %s (%s)", filepath.Base(p), strings.TrimSpace(string(comm)), t))
				break
			}
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
