package gpudirect

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// Runtime is the part of the CUDA runtime API gpudirect calls. Calls
// that touch a device are made on a thread whose current device was set
// with SetDevice.
type Runtime interface {
	SetDevice(ordinal int) error
	Malloc(size int) (uintptr, error)
	Free(ptr uintptr) error
	CopyToDevice(dst uintptr, src []byte) error
	CopyFromDevice(dst []byte, src uintptr) error
}

// CuFile is the part of NVIDIA's cuFile (GPUDirect Storage) API gpudirect
// calls.
type CuFile interface {
	DriverOpen() error
	DriverClose() error
	HandleRegister(fd int) (handle uintptr, err error)
	HandleDeregister(handle uintptr)
	BufRegister(ptr uintptr, size int) error
	BufDeregister(ptr uintptr) error
	// Read reads size bytes at fileOff into the device buffer at
	// ptr+bufOff and returns how many it read.
	Read(handle, ptr uintptr, size int, fileOff, bufOff int64) (int, error)
}

// Libraries are what a Loader found: each part, or why it is missing.
type Libraries struct {
	Runtime    Runtime
	RuntimeErr error
	CuFile     CuFile
	CuFileErr  error
}

// Loader finds the CUDA runtime and cuFile; SystemLibraries loads the
// installed ones at run time.
type Loader func() Libraries

// ErrNoRuntime means there is no CUDA runtime to put bytes on a device.
var ErrNoRuntime = errors.New("no CUDA runtime")

// GPU reads objects into one device's memory: through cuFile where it is
// present and accepts the stored file, else through a Reader's host
// buffers and a copy. Each reason for not using cuFile is reported once.
type GPU struct {
	ordinal int
	rt      Runtime
	cf      CuFile // nil: the host path for every object
	report  func(string)

	mu   sync.Mutex
	said map[string]bool // GUARDED_BY(mu): reasons already reported

	direct, host atomic.Int64 // bytes moved by cuFile, by the host path
}

// OpenGPU binds device ordinal with the libraries load finds. It fails
// (with ErrNoRuntime) only without a CUDA runtime; without cuFile, or when
// its driver does not open, the GPU serves the host path and report
// (nil: say nothing) is told why, once.
func OpenGPU(ordinal int, load Loader, report func(string)) (*GPU, error) {
	if report == nil {
		report = func(string) {}
	}
	libs := load()
	if libs.Runtime == nil {
		return nil, fmt.Errorf("GPU %d: %w: %v", ordinal, ErrNoRuntime, libs.RuntimeErr)
	}
	g := &GPU{ordinal: ordinal, rt: libs.Runtime, report: report, said: map[string]bool{}}
	if err := g.onDevice(func() error { return nil }); err != nil {
		return nil, err
	}
	if libs.CuFile == nil {
		g.say(fmt.Sprintf("cuFile unavailable (%v); GPU %d is filled through host buffers", libs.CuFileErr, ordinal))
	} else if err := g.onDevice(libs.CuFile.DriverOpen); err != nil {
		g.say(fmt.Sprintf("cuFile driver does not open (%v); GPU %d is filled through host buffers", err, ordinal))
	} else {
		g.cf = libs.CuFile
	}
	return g, nil
}

// say reports a reason once.
func (g *GPU) say(msg string) {
	g.mu.Lock()
	first := !g.said[msg]
	g.said[msg] = true
	g.mu.Unlock()
	if first {
		g.report(msg)
	}
}

// onDevice runs fn on a thread whose current CUDA device is the GPU's:
// the runtime keeps the current device per thread, and goroutines move
// between threads.
func (g *GPU) onDevice(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := g.rt.SetDevice(g.ordinal); err != nil {
		return fmt.Errorf("GPU %d: %w", g.ordinal, err)
	}
	return fn()
}

// CuFile reports whether cuFile drives this GPU's reads.
func (g *GPU) CuFile() bool { return g.cf != nil }

// Moved is the bytes this GPU has read through cuFile and through the
// host path.
func (g *GPU) Moved() (cufile, host int64) { return g.direct.Load(), g.host.Load() }

// Alloc allocates device memory.
func (g *GPU) Alloc(size int) (ptr uintptr, err error) {
	err = g.onDevice(func() error {
		ptr, err = g.rt.Malloc(max(size, 1))
		return err
	})
	return ptr, err
}

// Free frees device memory from Alloc.
func (g *GPU) Free(ptr uintptr) error {
	return g.onDevice(func() error { return g.rt.Free(ptr) })
}

// CopyFromDevice copies device memory at src into dst.
func (g *GPU) CopyFromDevice(dst []byte, src uintptr) error {
	return g.onDevice(func() error { return g.rt.CopyFromDevice(dst, src) })
}

// Close closes the cuFile driver.
func (g *GPU) Close() error {
	if g.cf == nil {
		return nil
	}
	return g.onDevice(g.cf.DriverClose)
}

// Read reads the whole object into device memory at dst (Size() bytes):
// with cuFile, r's chunk size and depth; else through r's buffers.
func (g *GPU) Read(r *Reader, f *File, dst uintptr) (int64, error) {
	if g.cf != nil {
		h, err := g.register(f)
		if err == nil {
			defer g.onDevice(func() error { g.cf.HandleDeregister(h); return nil })
			return g.readCuFile(r.opt, f, h, dst)
		}
		g.say(fmt.Sprintf("cuFile refuses the stored file (%v); objects it refuses are read through host buffers", err))
	}
	n, err := r.Stream(f, func(off int64, b []byte) error {
		return g.onDevice(func() error { return g.rt.CopyToDevice(dst+uintptr(off), b) })
	})
	g.host.Add(n)
	return n, err
}

// register registers the stored file with cuFile. cuFile needs O_DIRECT
// for GPUDirect transfers.
func (g *GPU) register(f *File) (h uintptr, err error) {
	if direct, why := f.Direct(); !direct {
		return 0, errors.New(why)
	}
	err = g.onDevice(func() error {
		h, err = g.cf.HandleRegister(f.Fd())
		return err
	})
	return h, err
}

// readCuFile reads f into dst with cuFile, Depth reads of Chunk bytes in
// flight, each on a thread of its own bound to the device.
func (g *GPU) readCuFile(opt Options, f *File, h, dst uintptr) (int64, error) {
	size := f.Size()
	if err := g.onDevice(func() error { return g.cf.BufRegister(dst, int(max(size, 1))) }); err != nil {
		return 0, fmt.Errorf("registering device buffer: %w", err)
	}
	defer g.onDevice(func() error { return g.cf.BufDeregister(dst) })
	offs := make(chan int64)
	go func() {
		defer close(offs)
		for off := int64(0); off < size; off += int64(opt.Chunk) {
			offs <- off
		}
	}()
	var total atomic.Int64
	errs := make(chan error, opt.Depth)
	for i := 0; i < opt.Depth; i++ {
		go func() {
			errs <- g.onDevice(func() error { return g.cuFileWorker(offs, opt.Chunk, size, h, dst, &total) })
		}()
	}
	var err error
	for i := 0; i < opt.Depth; i++ {
		err = errors.Join(err, <-errs)
	}
	g.direct.Add(total.Load())
	if err == nil && total.Load() < size {
		err = fmt.Errorf("%s: cuFile read %d of %d bytes", f.path, total.Load(), size)
	}
	return total.Load(), err
}

// cuFileWorker reads the chunks at the offsets it takes from offs; after
// an error it only drains offs.
func (g *GPU) cuFileWorker(offs <-chan int64, chunk int, size int64, h, dst uintptr, total *atomic.Int64) error {
	var failed error
	for off := range offs {
		if failed != nil {
			continue
		}
		want := int(min(int64(chunk), size-off))
		n, err := g.cf.Read(h, dst, want, off, off)
		switch {
		case err != nil:
			failed = fmt.Errorf("cuFileRead at %d: %w", off, err)
		case n != want:
			failed = fmt.Errorf("cuFileRead at %d: %d of %d bytes", off, n, want)
		}
		total.Add(int64(n))
	}
	return failed
}
