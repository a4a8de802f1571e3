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
	// Write writes size bytes from the device buffer at ptr+bufOff at
	// fileOff and returns how many it wrote.
	Write(handle, ptr uintptr, size int, fileOff, bufOff int64) (int, error)
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

// CopyToDevice copies src into device memory at dst.
func (g *GPU) CopyToDevice(dst uintptr, src []byte) error {
	return g.onDevice(func() error { return g.rt.CopyToDevice(dst, src) })
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
		return g.CopyToDevice(dst+uintptr(off), b)
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
	total, _, err := g.cuFileSpan(opt, cuFileOp{"cuFileRead", g.cf.Read}, h, dst, 0, size)
	g.direct.Add(total)
	if err == nil && total < size {
		err = fmt.Errorf("%s: cuFile read %d of %d bytes", f.path, total, size)
	}
	return total, err
}

// cuFileOp is cuFileRead or cuFileWrite.
type cuFileOp struct {
	name string
	do   func(h, ptr uintptr, size int, fileOff, bufOff int64) (int, error)
}

// cuFileSpan moves size bytes between the device buffer at ptr and the
// file at base with op, Depth calls of Chunk bytes in flight, each on a
// thread of its own bound to the device. It returns the bytes moved and,
// after a failure, the buffer offset before which every byte moved.
func (g *GPU) cuFileSpan(opt Options, op cuFileOp, h, ptr uintptr, base, size int64) (int64, int64, error) {
	offs := make(chan int64)
	go func() {
		defer close(offs)
		for off := int64(0); off < size; off += int64(opt.Chunk) {
			offs <- off
		}
	}()
	var total atomic.Int64
	var fail failAt
	done := make(chan struct{}, opt.Depth)
	for i := 0; i < opt.Depth; i++ {
		go func() {
			err := g.onDevice(func() error { g.cuFileWorker(op, offs, opt.Chunk, size, h, ptr, base, &total, &fail); return nil })
			if err != nil { // no device on this thread: nothing is known moved
				fail.set(0, err)
				for range offs {
				}
			}
			done <- struct{}{}
		}()
	}
	for i := 0; i < opt.Depth; i++ {
		<-done
	}
	return total.Load(), fail.off, fail.err
}

// failAt is the failure at the lowest offset of a cuFile span.
type failAt struct {
	mu  sync.Mutex
	off int64 // GUARDED_BY(mu)
	err error // GUARDED_BY(mu)
}

func (f *failAt) set(off int64, err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil || off < f.off {
		f.off, f.err = off, err
	}
}

// skipped records that the chunk at off was not moved, after a failure:
// the bytes moved in order stop there at the latest.
func (f *failAt) skipped(off int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.off = min(f.off, off)
}

func (f *failAt) failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err != nil
}

// cuFileWorker moves the chunks at the offsets it takes from offs; after
// a failure anywhere it only drains offs.
func (g *GPU) cuFileWorker(op cuFileOp, offs <-chan int64, chunk int, size int64, h, ptr uintptr, base int64, total *atomic.Int64, fail *failAt) {
	for off := range offs {
		if fail.failed() {
			fail.skipped(off)
			continue
		}
		want := int(min(int64(chunk), size-off))
		n, err := op.do(h, ptr, want, base+off, off)
		switch {
		case err != nil:
			fail.set(off+int64(max(n, 0)), fmt.Errorf("%s at %d: %w", op.name, base+off, err))
		case n != want:
			fail.set(off+int64(n), fmt.Errorf("%s at %d: %d of %d bytes", op.name, base+off, n, want))
		}
		total.Add(int64(max(n, 0)))
	}
}

// Write writes size bytes of device memory at src to f where its last
// write ended (see Writer.Fill): the whole blocks with cuFile where it
// takes the stored file, with w's chunk size and depth, else through w's
// buffers and a copy; a partial last block always through host memory
// and the mount.
func (g *GPU) Write(w *Writer, f *File, src uintptr, size int64) (int64, error) {
	if g.cf != nil && size >= Align {
		h, err := g.register(f)
		if err == nil {
			defer g.onDevice(func() error { g.cf.HandleDeregister(h); return nil })
			return g.writeCuFile(w, f, h, src, size)
		}
		g.say(fmt.Sprintf("cuFile refuses the stored file (%v); objects it refuses are written through host buffers", err))
	}
	n, err := w.Fill(f, size, func(off int64, b []byte) error {
		return g.CopyFromDevice(b, src+uintptr(off))
	})
	g.host.Add(n)
	return n, err
}

// writeCuFile writes the whole blocks of [src, src+size) with cuFile
// and the rest through host memory and the mount.
func (g *GPU) writeCuFile(w *Writer, f *File, h, src uintptr, size int64) (int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	start, err := w.begin(f, size)
	if err != nil {
		return 0, err
	}
	body := size &^ (Align - 1)
	err = g.onDevice(func() error { return g.cf.BufRegister(src, int(body)) })
	if err != nil {
		return 0, f.endWrite(start, 0, fmt.Errorf("registering device buffer: %w", err))
	}
	total, failOff, err := g.cuFileSpan(w.opt, cuFileOp{"cuFileWrite", g.cf.Write}, h, src, start, body)
	g.onDevice(func() error { return g.cf.BufDeregister(src) })
	g.direct.Add(total)
	written := body
	if err != nil {
		written = failOff
	} else if body < size {
		tail := make([]byte, size-body)
		err = g.CopyFromDevice(tail, src+uintptr(body))
		if err == nil {
			var n int
			n, err = pwriteFull(int(f.pin.Fd()), tail, start+body)
			written += int64(n)
			g.host.Add(int64(n))
		}
	}
	return written, f.endWrite(start, written, err)
}
