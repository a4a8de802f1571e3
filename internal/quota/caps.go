package quota

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Root's CAP_SYS_RESOURCE lets a write pass a quota's hard limit on ext4
// (the VFS quota code's ignore_hardlimit; XFS enforces its limits on root
// too). A FUSE passthrough write is made with the credentials the daemon
// had when it registered the backing file, so a daemon that holds the
// capability exempts every passthrough writer from the store's quota.
// Linux keeps capabilities per thread and Go cannot change every thread
// of a process that links cgo (syscall.AllThreadsSyscall answers ENOTSUP,
// and purego links it), so the daemon drops the capability from one
// thread's bounding set and re-executes itself from that thread: a root
// exec takes its capabilities from the bounding set, so every thread of
// the new image lacks it.

// ReexecMarker is set in the environment of the re-executed daemon, so
// that it never re-executes twice.
const ReexecMarker = "KVFS_QUOTA_REEXEC"

// HoldsResourceCap says whether the calling thread has CAP_SYS_RESOURCE
// in its effective set.
func HoldsResourceCap() bool { return holds(unix.CAP_SYS_RESOURCE) }

func holds(capability int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[capability/32].Effective&(1<<(capability%32)) != 0
}

// CanShedResourceCap says whether ReexecWithoutResourceCap would work:
// root holding the capability, in a process that regains capabilities
// from the bounding set at exec (no SECBIT_NOROOT), not re-executed yet.
func CanShedResourceCap() bool { return canShed(unix.CAP_SYS_RESOURCE) }

func canShed(capability int) bool {
	bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
	return err == nil && bits&1 == 0 && os.Geteuid() == 0 && holds(capability) && os.Getenv(ReexecMarker) == ""
}

// ReexecWithoutResourceCap replaces the process with its own binary,
// same arguments and environment (plus ReexecMarker), without
// CAP_SYS_RESOURCE. It returns only on failure. It works from a thread
// of its own, which ends with it: a thread whose bounding set was cut is
// never reused.
func ReexecWithoutResourceCap() error { return reexecWithout(unix.CAP_SYS_RESOURCE) }

func reexecWithout(capability int) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(capability), 0, 0, 0); err != nil {
			errc <- fmt.Errorf("dropping capability %d from the bounding set: %w", capability, err)
			return
		}
		env := append(os.Environ(), ReexecMarker+"=1")
		errc <- fmt.Errorf("re-executing without capability %d: %w", capability, unix.Exec("/proc/self/exe", os.Args, env))
	}()
	return <-errc
}
