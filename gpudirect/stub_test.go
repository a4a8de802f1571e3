package gpudirect

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ebitengine/purego"
)

// buildStubs compiles testdata/stubcuda.c into stand-ins for
// libcufile.so.0 and libcudart.so.12 in a directory of their own, so
// the real loader (dlopen, symbol binding, struct returns, the
// descriptor's layout) is exercised without a GPU.
func buildStubs(t testing.TB) (cufile, cudart string) {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("needs a C compiler (gcc) to build the cuFile and CUDA runtime stand-ins")
	}
	dir := t.TempDir()
	cufile, cudart = filepath.Join(dir, "libcufile.so.0"), filepath.Join(dir, "libcudart.so.12")
	for out, def := range map[string]string{cufile: "-DSTUB_CUFILE", cudart: "-DSTUB_CUDART"} {
		cmd := exec.Command(cc, "-shared", "-fPIC", "-O1", def, "-o", out, "testdata/stubcuda.c")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", out, err, b)
		}
	}
	return cufile, cudart
}

// stubCounter calls a counter the stub cuFile exports.
func stubCounter(t testing.TB, lib, name string) int64 {
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	var fn func() int64
	purego.RegisterLibFunc(&fn, h, name)
	return fn()
}

func TestLoadLibrariesThroughPurego(t *testing.T) {
	cufile, cudart := buildStubs(t)
	libs := LoadLibraries([]string{"/nonexistent/libcufile.so.0", cufile}, []string{cudart})
	if libs.Runtime == nil || libs.CuFile == nil {
		t.Fatalf("loading the stand-ins: runtime %v, cuFile %v", libs.RuntimeErr, libs.CuFileErr)
	}
	var rep reports
	g, err := OpenGPU(0, func() Libraries { return libs }, rep.add)
	if err != nil || !g.CuFile() {
		t.Fatalf("OpenGPU: %v, cuFile %v, reports %q", err, g.CuFile(), rep.msgs)
	}
	defer g.Close()
	r := newReader(t, Options{Chunk: 8192, Depth: 3})
	for _, size := range []int{1, 4095, 8192*5 + 17} {
		want := patterned(size, int64(size))
		f := storedFile(t, t.TempDir(), want)
		requireDirect(t, f)
		before := stubCounter(t, cufile, "stub_cufile_reads")
		if got := readBack(t, g, r, f); !bytes.Equal(got, want) {
			t.Fatalf("size %d through the stub cuFile: wrong bytes", size)
		}
		if reads := stubCounter(t, cufile, "stub_cufile_reads") - before; reads != int64((size+8191)/8192) {
			t.Fatalf("size %d: the stub saw %d cuFileRead calls, want %d", size, reads, (size+8191)/8192)
		}
	}
	w := newWriter(t, Options{Chunk: 8192, Depth: 3})
	for _, size := range []int{8192*5 + 17, 3 * 8192} {
		want := patterned(size, int64(size)+3)
		p := filepath.Join(t.TempDir(), "written")
		f := writerFile(t, p, p)
		requireDirect(t, f)
		before := stubCounter(t, cufile, "stub_cufile_writes")
		if n, err := g.Write(w, f, toDevice(t, g, want), int64(size)); err != nil || n != int64(size) || !bytes.Equal(readFile(t, p), want) {
			t.Fatalf("size %d through the stub cuFileWrite: %d, %v", size, n, err)
		}
		if writes := stubCounter(t, cufile, "stub_cufile_writes") - before; writes != int64(size/8192) {
			t.Fatalf("size %d: the stub saw %d cuFileWrite calls, want %d", size, writes, size/8192)
		}
	}
	if h, b := stubCounter(t, cufile, "stub_cufile_open_handles"), stubCounter(t, cufile, "stub_cufile_open_bufs"); h != 0 || b != 0 {
		t.Fatalf("left registered: %d handles, %d buffers", h, b)
	}
	// A descriptor without O_DIRECT is refused by the stub as by
	// cuFile; the error comes back through the struct return.
	if _, err := libs.CuFile.HandleRegister(0); err == nil || !strings.Contains(err.Error(), "O_DIRECT not set") {
		t.Fatalf("HandleRegister of stdin: %v", err)
	}
	if err := libs.Runtime.SetDevice(7); err == nil || !strings.Contains(err.Error(), "invalid device ordinal") {
		t.Fatalf("cudaSetDevice(7): %v", err)
	}
}

func TestLoadLibrariesMissing(t *testing.T) {
	libs := LoadLibraries([]string{"libcufile-none.so.0"}, []string{"libcudart-none.so.12"})
	if libs.Runtime != nil || libs.CuFile != nil {
		t.Fatal("loaded libraries that do not exist")
	}
	for _, e := range []error{libs.CuFileErr, libs.RuntimeErr} {
		if e == nil || !strings.Contains(e.Error(), "cannot load") {
			t.Fatalf("missing library error: %v", e)
		}
	}
	if _, err := OpenGPU(0, func() Libraries { return libs }, nil); err == nil || !strings.Contains(err.Error(), "libcudart-none.so.12") {
		t.Fatalf("OpenGPU without libraries: %v", err)
	}
}
