package main

import (
	"errors"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/kvfs/kvfs/internal/usageerr"
)

// startProfile writes a CPU profile until the returned stop is called.
func startProfile(path string) (stop func(), err error) {
	f, err := createProfile("cpuprofile", path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// startMutexProfile samples every contended lock until the returned
// stop writes the profile: where the daemon's threads wait on each other.
func startMutexProfile(path string) (stop func(), err error) {
	f, err := createProfile("mutexprofile", path)
	if err != nil {
		return nil, err
	}
	runtime.SetMutexProfileFraction(1)
	return func() {
		pprof.Lookup("mutex").WriteTo(f, 0)
		runtime.SetMutexProfileFraction(0)
		f.Close()
	}, nil
}

// createProfile creates a profile's file before anything is mounted: a
// path that cannot be made is a bad flag (exit 2), not a failure of the
// daemon (an outside tester: exit 1).
func createProfile(flag, path string) (*os.File, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, usageerr.Errorf("--%s %s: %v", flag, path, errors.Unwrap(err))
	}
	return f, nil
}
