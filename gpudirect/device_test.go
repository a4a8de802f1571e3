package gpudirect

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fakeRuntime is a CUDA runtime whose "device memory" is Go memory.
type fakeRuntime struct {
	mu      sync.Mutex
	allocs  map[uintptr][]byte
	devices int
	copies  int
}

func newFakeRuntime() *fakeRuntime { return &fakeRuntime{allocs: map[uintptr][]byte{}, devices: 1} }

func (r *fakeRuntime) SetDevice(n int) error {
	if n < 0 || n >= r.devices {
		return errors.New("invalid device ordinal")
	}
	return nil
}

func (r *fakeRuntime) Malloc(size int) (uintptr, error) {
	b := make([]byte, size)
	p := uintptr(unsafe.Pointer(&b[0]))
	r.mu.Lock()
	r.allocs[p] = b
	r.mu.Unlock()
	return p, nil
}

func (r *fakeRuntime) Free(p uintptr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.allocs[p]; !ok {
		return errors.New("free of an unknown pointer")
	}
	delete(r.allocs, p)
	return nil
}

// mem is the device memory at p, n bytes, which must lie in one
// allocation.
func (r *fakeRuntime) mem(p uintptr, n int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	for base, b := range r.allocs {
		if p >= base && p+uintptr(n) <= base+uintptr(len(b)) {
			return b[p-base : p-base+uintptr(n)]
		}
	}
	panic("access outside device memory")
}

func (r *fakeRuntime) CopyToDevice(dst uintptr, src []byte) error {
	r.mu.Lock()
	r.copies++
	r.mu.Unlock()
	copy(r.mem(dst, len(src)), src)
	return nil
}

func (r *fakeRuntime) CopyFromDevice(dst []byte, src uintptr) error {
	copy(dst, r.mem(src, len(dst)))
	return nil
}

// fakeCuFile is cuFile reading with pread into fakeRuntime's memory.
type fakeCuFile struct {
	rt       *fakeRuntime
	openErr  error
	refuse   error
	mu       sync.Mutex
	reads    map[int64]int // file offset -> size read
	writes   map[int64]int // file offset -> size written
	handles  int
	bufs     int
	closed   bool
	readFail bool
}

func (c *fakeCuFile) DriverOpen() error  { return c.openErr }
func (c *fakeCuFile) DriverClose() error { c.closed = true; return nil }

func (c *fakeCuFile) HandleRegister(fd int) (uintptr, error) {
	if c.refuse != nil {
		return 0, c.refuse
	}
	// As libcufile does (1.15, CUDA 13, seen on an H200 machine).
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err != nil || fl&unix.O_NOFOLLOW != 0 {
		return 0, &CuFileError{Call: "cuFileHandleRegister", Code: 5019}
	}
	c.handles++
	return uintptr(fd + 1), nil
}

func (c *fakeCuFile) HandleDeregister(uintptr)           { c.handles-- }
func (c *fakeCuFile) BufRegister(p uintptr, n int) error { c.bufs++; return nil }
func (c *fakeCuFile) BufDeregister(p uintptr) error      { c.bufs--; return nil }

func (c *fakeCuFile) Read(h, p uintptr, size int, fileOff, bufOff int64) (int, error) {
	if c.readFail {
		return 0, &CuFileError{Call: "cuFileRead", Code: 5011}
	}
	c.mu.Lock()
	c.reads[fileOff] = size
	c.mu.Unlock()
	// O_DIRECT wants whole blocks: read through a bounce buffer, as
	// cuFile does for an unaligned tail.
	bounce := make([]byte, (size+Align-1)&^(Align-1)+Align)
	off := Align - int(uintptr(unsafe.Pointer(&bounce[0]))%Align)
	b := bounce[off : off+(size+Align-1)&^(Align-1)]
	n, err := unix.Pread(int(h-1), b, fileOff)
	n = min(n, size)
	copy(c.rt.mem(p+uintptr(bufOff), n), b[:n])
	return n, err
}

func (c *fakeCuFile) Write(h, p uintptr, size int, fileOff, bufOff int64) (int, error) {
	if c.readFail {
		return 0, &CuFileError{Call: "cuFileWrite", Code: 5011}
	}
	if size%Align != 0 || fileOff%Align != 0 {
		return 0, &CuFileError{Call: "cuFileWrite", Code: 5022}
	}
	c.mu.Lock()
	c.writes[fileOff] = size
	c.mu.Unlock()
	bounce := make([]byte, size+Align)
	off := Align - int(uintptr(unsafe.Pointer(&bounce[0]))%Align)
	b := bounce[off : off+size]
	copy(b, c.rt.mem(p+uintptr(bufOff), size))
	return unix.Pwrite(int(h-1), b, fileOff)
}

func fakeLibs(withCuFile bool) (*fakeRuntime, *fakeCuFile, Loader) {
	rt := newFakeRuntime()
	cf := &fakeCuFile{rt: rt, reads: map[int64]int{}, writes: map[int64]int{}}
	return rt, cf, func() Libraries {
		l := Libraries{Runtime: rt}
		if withCuFile {
			l.CuFile = cf
		} else {
			l.CuFileErr = errors.New("libcufile.so.0: cannot open shared object file")
		}
		return l
	}
}

// reports collects what a GPU reports.
type reports struct{ msgs []string }

func (r *reports) add(m string) { r.msgs = append(r.msgs, m) }

// readBack reads f into a fresh device buffer and copies it back.
func readBack(t *testing.T, g *GPU, r *Reader, f *File) []byte {
	t.Helper()
	dev, err := g.Alloc(int(f.Size()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free(dev)
	n, err := g.Read(r, f, dev)
	if err != nil || n != f.Size() {
		t.Fatalf("GPU.Read: %d of %d bytes, %v", n, f.Size(), err)
	}
	out := make([]byte, f.Size())
	if err := g.CopyFromDevice(out, dev); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestGPUWithCuFile(t *testing.T) {
	_, cf, load := fakeLibs(true)
	var rep reports
	g, err := OpenGPU(0, load, rep.add)
	if err != nil || !g.CuFile() {
		t.Fatalf("OpenGPU: %v, cuFile %v", err, g != nil && g.CuFile())
	}
	r := newReader(t, Options{Chunk: 8192, Depth: 3})
	dir := t.TempDir()
	for _, size := range []int{1, 4097, 3*8192 + 5} {
		want := patterned(size, int64(size))
		f := storedFile(t, dir, want)
		requireDirect(t, f)
		clear(cf.reads)
		if got := readBack(t, g, r, f); !bytes.Equal(got, want) {
			t.Fatalf("size %d through cuFile: wrong bytes", size)
		}
		if len(cf.reads) != (size+8191)/8192 {
			t.Fatalf("size %d: %d cuFile reads, want one per 8 KiB chunk: %v", size, len(cf.reads), cf.reads)
		}
	}
	if viaCuFile, viaHost := g.Moved(); viaCuFile != 1+4097+3*8192+5 || viaHost != 0 {
		t.Fatalf("moved %d by cuFile, %d by host", viaCuFile, viaHost)
	}
	if cf.handles != 0 || cf.bufs != 0 || len(rep.msgs) != 0 {
		t.Fatalf("left %d handles, %d buffers registered; reports %q", cf.handles, cf.bufs, rep.msgs)
	}
	g.Close()
	if !cf.closed {
		t.Fatal("Close did not close the cuFile driver")
	}
}

// Without cuFile the GPU is filled through host buffers, and why is said
// once however many objects are read.
func TestGPUWithoutCuFile(t *testing.T) {
	rt, _, load := fakeLibs(false)
	var rep reports
	g, err := OpenGPU(0, load, rep.add)
	if err != nil || g.CuFile() {
		t.Fatalf("OpenGPU: %v, cuFile %v", err, g.CuFile())
	}
	r := newReader(t, Options{Chunk: 8192, Depth: 2})
	for i, size := range []int{0, 5000, 70000} {
		want := patterned(size, int64(i))
		f := storedFile(t, t.TempDir(), want)
		if got := readBack(t, g, r, f); !bytes.Equal(got, want) {
			t.Fatalf("size %d through host buffers: wrong bytes", size)
		}
	}
	if len(rep.msgs) != 1 || !strings.Contains(rep.msgs[0], "cuFile unavailable") || !strings.Contains(rep.msgs[0], "libcufile.so.0") {
		t.Fatalf("reports %q; want one naming the missing library", rep.msgs)
	}
	if _, host := g.Moved(); host != 75000 || rt.copies == 0 {
		t.Fatalf("host path moved %d bytes in %d copies", host, rt.copies)
	}
}

// cuFile refusing a stored file (its file system, its open flags) sends
// that object through host buffers, said once; a driver that does not
// open, likewise for every object.
func TestGPUCuFileRefuses(t *testing.T) {
	_, cf, load := fakeLibs(true)
	cf.refuse = &CuFileError{Call: "cuFileHandleRegister", Code: 5008}
	var rep reports
	g, _ := OpenGPU(0, load, rep.add)
	r := newReader(t, Options{Chunk: 8192, Depth: 2})
	for i := 0; i < 3; i++ {
		want := patterned(20000, int64(i))
		f := storedFile(t, t.TempDir(), want)
		requireDirect(t, f)
		if got := readBack(t, g, r, f); !bytes.Equal(got, want) {
			t.Fatal("refused by cuFile: wrong bytes through host buffers")
		}
	}
	if len(rep.msgs) != 1 || !strings.Contains(rep.msgs[0], "not supported on this file") {
		t.Fatalf("reports %q; want one, naming cuFile's reason", rep.msgs)
	}
	_, cf2, load2 := fakeLibs(true)
	cf2.openErr = &CuFileError{Call: "cuFileDriverOpen", Code: 5001}
	var rep2 reports
	if g2, err := OpenGPU(0, load2, rep2.add); err != nil || g2.CuFile() || len(rep2.msgs) != 1 ||
		!strings.Contains(rep2.msgs[0], "nvidia-fs driver is not loaded") {
		t.Fatalf("driver open failure: %v, reports %q", err, rep2.msgs)
	}
}

func TestGPUErrors(t *testing.T) {
	if _, err := OpenGPU(0, func() Libraries { return Libraries{RuntimeErr: errors.New("no libcudart")} }, nil); !errors.Is(err, ErrNoRuntime) {
		t.Fatalf("OpenGPU without a runtime: %v", err)
	}
	_, _, load := fakeLibs(true)
	if _, err := OpenGPU(3, load, nil); err == nil || !strings.Contains(err.Error(), "GPU 3") {
		t.Fatalf("OpenGPU of a missing device: %v", err)
	}
	_, cf, load := fakeLibs(true)
	cf.readFail = true
	g, _ := OpenGPU(0, load, nil)
	f := storedFile(t, t.TempDir(), patterned(10000, 1))
	requireDirect(t, f)
	dev, _ := g.Alloc(10000)
	if _, err := g.Read(newReader(t, Options{Chunk: 4096, Depth: 2}), f, dev); err == nil || !strings.Contains(err.Error(), "CUDA driver error") {
		t.Fatalf("failing cuFileRead: %v", err)
	}
	if cf.handles != 0 || cf.bufs != 0 {
		t.Fatalf("after a failed read: %d handles, %d buffers still registered", cf.handles, cf.bufs)
	}
}
