package gpudirect

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// toDevice puts data in fresh device memory.
func toDevice(t *testing.T, g *GPU, data []byte) uintptr {
	t.Helper()
	dev, err := g.Alloc(len(data))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Free(dev) })
	if err := g.CopyToDevice(dev, data); err != nil {
		t.Fatal(err)
	}
	return dev
}

// With cuFile, the whole blocks go from device memory to the stored file
// by cuFileWrite, one call per chunk (the fake refuses a partial block,
// as O_DIRECT does); a partial last block goes through host memory.
func TestGPUWriteWithCuFile(t *testing.T) {
	_, cf, load := fakeLibs(true)
	var rep reports
	g, err := OpenGPU(0, load, rep.add)
	if err != nil || !g.CuFile() {
		t.Fatalf("OpenGPU: %v", err)
	}
	defer g.Close()
	w := newWriter(t, Options{Chunk: 8192, Depth: 3})
	dir := t.TempDir()
	var wantCuFile, wantHost int64
	for _, size := range []int{4096, 4097, 3*8192 + 5, 4 * 8192} {
		want := patterned(size, int64(size))
		p := filepath.Join(dir, "obj")
		f := writerFile(t, p, p)
		requireDirect(t, f)
		clear(cf.writes)
		n, err := g.Write(w, f, toDevice(t, g, want), int64(size))
		if got := readFile(t, p); err != nil || n != int64(size) || !bytes.Equal(got, want) {
			t.Fatalf("size %d through cuFile: %d, %v; %d bytes in the file", size, n, err, len(got))
		}
		body := size &^ (Align - 1)
		if len(cf.writes) != (body+8191)/8192 {
			t.Fatalf("size %d: cuFileWrite calls %v; want one per 8 KiB chunk of the %d whole-block bytes", size, cf.writes, body)
		}
		wantCuFile += int64(body)
		wantHost += int64(size - body)
	}
	if c, h := g.Moved(); c != wantCuFile || h != wantHost {
		t.Fatalf("moved %d by cuFile and %d by host, want %d and %d", c, h, wantCuFile, wantHost)
	}
	if cf.handles != 0 || cf.bufs != 0 || len(rep.msgs) != 0 {
		t.Fatalf("left %d handles, %d buffers registered; reports %q", cf.handles, cf.bufs, rep.msgs)
	}
}

// Without cuFile, and for a stored file cuFile refuses, device memory
// is written through the writer's host buffers; a failing cuFileWrite is
// an error, with nothing left registered.
func TestGPUWriteHostPathAndErrors(t *testing.T) {
	for _, withCuFile := range []bool{false, true} {
		_, cf, load := fakeLibs(withCuFile)
		cf.refuse = &CuFileError{Call: "cuFileHandleRegister", Code: 5008}
		var rep reports
		g, _ := OpenGPU(0, load, rep.add)
		w := newWriter(t, Options{Chunk: 8192, Depth: 2})
		for _, size := range []int{0, 1, 5000, 70000} {
			want := patterned(size, int64(size)+1)
			p := filepath.Join(t.TempDir(), "obj")
			f := writerFile(t, p, p)
			var dev uintptr
			if size > 0 {
				dev = toDevice(t, g, want)
			}
			if n, err := g.Write(w, f, dev, int64(size)); err != nil || n != int64(size) || !bytes.Equal(readFile(t, p), want) {
				t.Fatalf("cuFile %v, size %d through host buffers: %d, %v", withCuFile, size, n, err)
			}
		}
		if _, host := g.Moved(); host != 75001 || len(rep.msgs) != 1 {
			t.Fatalf("cuFile %v: host path moved %d bytes; reports %q", withCuFile, host, rep.msgs)
		}
	}
	_, cf, load := fakeLibs(true)
	cf.readFail = true
	g, _ := OpenGPU(0, load, nil)
	p := filepath.Join(t.TempDir(), "obj")
	f := writerFile(t, p, p)
	requireDirect(t, f)
	want := patterned(5*4096, 9)
	n, err := g.Write(newWriter(t, Options{Chunk: 4096, Depth: 2}), f, toDevice(t, g, want), int64(len(want)))
	if err == nil || !strings.Contains(err.Error(), "CUDA driver error") || n != 0 || f.Written() != 0 {
		t.Fatalf("failing cuFileWrite: %d, %v, Written %d", n, err, f.Written())
	}
	if cf.handles != 0 || cf.bufs != 0 {
		t.Fatalf("after a failed write: %d handles, %d buffers still registered", cf.handles, cf.bufs)
	}
}
