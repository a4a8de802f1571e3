package main

import (
	"os"
	"runtime"
	"runtime/pprof"
)

// startProfile writes a CPU profile until the returned stop is called.
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
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
	f, err := os.Create(path)
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
