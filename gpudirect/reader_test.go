package gpudirect

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// patterned is n bytes unique to seed, so a chunk delivered at the wrong
// offset, twice, or as zeros is caught.
func patterned(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// storedFile writes data to a file in dir and opens it the way Open
// opens a stored file, without a mount (the unit tests exercise the data
// path; tests/ exercise it behind a real mount).
func storedFile(t testing.TB, dir string, data []byte) *File {
	t.Helper()
	p := filepath.Join(dir, fmt.Sprintf("obj-%d", len(data)))
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f := &File{path: p}
	if err := f.openData(p); err != nil {
		t.Fatal(err)
	}
	f.size = int64(len(data))
	t.Cleanup(func() { f.data.Close() })
	return f
}

// requireDirect skips where dir's file system refuses O_DIRECT: the tests
// of the direct path need a real disk.
func requireDirect(t testing.TB, f *File) {
	t.Helper()
	if ok, why := f.Direct(); !ok {
		t.Skipf("needs a disk that takes O_DIRECT at %s: %s", f.path, why)
	}
}

// scratchMount mounts a fresh file system of type fstype, with options
// data, on a directory of the test's own, unmounted when it ends; it
// skips where it cannot (why says what the mount is for).
func scratchMount(t testing.TB, fstype, data, why string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts " + why)
	}
	dir := t.TempDir()
	if err := unix.Mount("none", dir, fstype, 0, data); err != nil {
		t.Skipf("cannot mount %s: %v", fstype, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func newReader(t testing.TB, opt Options) *Reader {
	t.Helper()
	r, err := NewReader(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// streamAll collects what Stream delivers, checking offsets are in order
// and contiguous.
func streamAll(t testing.TB, r *Reader, f *File) ([]byte, error) {
	t.Helper()
	var got []byte
	n, err := r.Stream(f, func(off int64, b []byte) error {
		if off != int64(len(got)) {
			t.Fatalf("chunk at %d, want %d", off, len(got))
		}
		if len(b) > r.opt.Chunk {
			t.Fatalf("chunk of %d bytes, more than %d", len(b), r.opt.Chunk)
		}
		got = append(got, b...)
		return nil
	})
	if n != int64(len(got)) {
		t.Fatalf("Stream returned %d, delivered %d", n, len(got))
	}
	return got, err
}

var oddSizes = []int{0, 1, 4095, 4096, 4097, 8191, 3*8192 + 1, 5*8192 - 512, 1<<20 + 3}

func TestStreamOddSizes(t *testing.T) {
	dir := t.TempDir()
	for _, opt := range []Options{{Chunk: 8192, Depth: 3}, {Chunk: 4096, Depth: 1}, {}} {
		r := newReader(t, opt)
		for _, size := range oddSizes {
			want := patterned(size, int64(size))
			f := storedFile(t, dir, want)
			requireDirect(t, f)
			got, err := streamAll(t, r, f)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("chunk %d depth %d, size %d: %d bytes back, equal %v, err %v",
					r.opt.Chunk, r.opt.Depth, size, len(got), bytes.Equal(got, want), err)
			}
		}
	}
}

// TestStreamManyBufferCycles streams an object of 17 chunks, so each of
// the default depth's 4 buffers is reused four times and the last chunk is
// short.
func TestStreamManyBufferCycles(t *testing.T) {
	size := 16<<20 + 12345
	want := patterned(size, 100)
	f := storedFile(t, t.TempDir(), want)
	requireDirect(t, f)
	got, err := streamAll(t, newReader(t, Options{}), f)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("16 MiB + 12345: %d bytes back, equal %v, err %v", len(got), bytes.Equal(got, want), err)
	}
}

func TestReadAtUnalignedAndShort(t *testing.T) {
	size := 5*8192 + 1234
	want := patterned(size, 7)
	f := storedFile(t, t.TempDir(), want)
	requireDirect(t, f)
	r := newReader(t, Options{Chunk: 8192, Depth: 2})
	cases := []struct{ off, n int }{
		{0, size}, {0, 1}, {1, 1}, {4095, 2}, {4097, 8192 * 2}, {8191, 1}, {size - 1, 1},
		{size - 100, 50}, {3, size - 3}, {12345, 3 * 8192}, {0, 0},
		{size - 10, 100}, {size - 1, 4096}, {1, size + 5000}, // run past the end: short, io.EOF
	}
	for _, c := range cases {
		p := make([]byte, c.n)
		n, err := r.ReadAt(f, p, int64(c.off))
		wantN := min(c.n, size-c.off)
		if n != wantN || !bytes.Equal(p[:n], want[c.off:c.off+n]) {
			t.Fatalf("ReadAt(%d bytes at %d) = %d, %v; want %d bytes, equal %v", c.n, c.off, n, err, wantN, bytes.Equal(p[:n], want[c.off:c.off+n]))
		}
		if (wantN < c.n) != (err == io.EOF) || (wantN == c.n && err != nil) {
			t.Fatalf("ReadAt(%d bytes at %d): err %v with %d of %d", c.n, c.off, err, n, c.n)
		}
	}
	for _, off := range []int64{int64(size), int64(size) + 1, 1 << 40} {
		if n, err := r.ReadAt(f, make([]byte, 10), off); n != 0 || err != io.EOF {
			t.Fatalf("ReadAt at %d (size %d) = %d, %v; want 0, EOF", off, size, n, err)
		}
	}
	if _, err := r.ReadAt(f, make([]byte, 10), -1); err == nil {
		t.Fatal("ReadAt at -1 succeeded")
	}
}

// A stored file that lost bytes after Open (a reader of an object whose
// size changed behind kvfs's back) fails with io.ErrUnexpectedEOF
// instead of handing back a short object as if whole.
func TestStreamFileShrank(t *testing.T) {
	want := patterned(3*8192+100, 9)
	f := storedFile(t, t.TempDir(), want)
	requireDirect(t, f)
	if err := os.Truncate(f.backing, 8192+7); err != nil {
		t.Fatal(err)
	}
	got, err := streamAll(t, newReader(t, Options{Chunk: 8192, Depth: 2}), f)
	if !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Equal(got, want[:8192+7]) {
		t.Fatalf("after truncation: %d bytes, err %v; want %d bytes and io.ErrUnexpectedEOF", len(got), err, 8192+7)
	}
}

// An error from the consumer stops the transfer; the reader's buffers
// are then free for the next one.
func TestStreamStopsOnError(t *testing.T) {
	want := patterned(64*4096, 11)
	f := storedFile(t, t.TempDir(), want)
	r := newReader(t, Options{Chunk: 4096, Depth: 4})
	boom := errors.New("boom")
	calls := 0
	_, err := r.Stream(f, func(int64, []byte) error {
		if calls++; calls == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls != 3 {
		t.Fatalf("Stream = %v after %d calls; want boom after 3", err, calls)
	}
	got, err := streamAll(t, r, f)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("second Stream: %d bytes, err %v", len(got), err)
	}
}

func TestOptions(t *testing.T) {
	for _, bad := range []Options{{Chunk: 4095}, {Chunk: -4096}, {Chunk: 4096 + 1}, {Depth: -1}, {Depth: MaxDepth + 1}, {Chunk: 2 << 30}} {
		if _, err := NewReader(bad); err == nil {
			t.Errorf("NewReader(%+v) accepted", bad)
		}
	}
	r := newReader(t, Options{})
	if o := r.Options(); o.Chunk != DefaultChunk || o.Depth != DefaultDepth {
		t.Fatalf("defaults: %+v", o)
	}
	locked, why := r.Locked()
	if os.Geteuid() == 0 && !locked {
		t.Fatalf("root could not page-lock the buffers: %s", why)
	}
	if !locked && why == "" {
		t.Fatal("unlocked buffers without a reason")
	}
	for _, b := range r.bufs.bufs {
		if addr := uintptr(unsafe.Pointer(&b[0])); addr%Align != 0 {
			t.Fatalf("buffer at %#x is not %d-aligned", addr, Align)
		}
	}
}

// A store whose file system refuses O_DIRECT (ramfs; tmpfs before Linux
// 6.6) is read through its page cache, byte for byte, and says so.
func TestRefusedODirectFallsBack(t *testing.T) {
	dir := scratchMount(t, "ramfs", "", "a ramfs, whose files refuse O_DIRECT")
	r := newReader(t, Options{Chunk: 8192, Depth: 3})
	for _, size := range oddSizes {
		want := patterned(size, int64(size)+1)
		f := storedFile(t, dir, want)
		if ok, why := f.Direct(); ok || why == "" {
			t.Fatalf("ramfs file opened with O_DIRECT (%v) or no reason given (%q)", ok, why)
		}
		got, err := streamAll(t, r, f)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("size %d on ramfs: %d bytes, err %v", size, len(got), err)
		}
		p := make([]byte, 100)
		if n, _ := r.ReadAt(f, p, 1); size > 1 && !bytes.Equal(p[:n], want[1:1+n]) {
			t.Fatalf("ReadAt on ramfs, size %d: wrong bytes", size)
		}
	}
}

// The stored file is never reached through a symbolic link, in its last
// name or on the way (a stored directory swapped for a link out of the
// store), and its descriptor's flags hold no O_NOFOLLOW, which cuFile
// refuses.
func TestOpenNoFollow(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "obj.data")
	if err := os.WriteFile(file, []byte("bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := openNoFollow(file, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	unix.Close(fd)
	if err != nil || fl&unix.O_NOFOLLOW != 0 {
		t.Fatalf("F_GETFL %#o, %v: want no O_NOFOLLOW", fl, err)
	}
	link := filepath.Join(dir, "link.data")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	if fd, err := openNoFollow(link, unix.O_RDONLY|unix.O_CLOEXEC); err != unix.ELOOP {
		unix.Close(fd)
		t.Fatalf("open through a symlink: %v, want ELOOP", err)
	}
	linkedDir := filepath.Join(t.TempDir(), "store")
	if err := os.Symlink(dir, linkedDir); err != nil {
		t.Fatal(err)
	}
	if fd, err := openNoFollow(filepath.Join(linkedDir, "obj.data"), unix.O_RDONLY|unix.O_CLOEXEC); err != unix.ELOOP {
		unix.Close(fd)
		t.Fatalf("open under a symlinked directory: %v, want ELOOP", err)
	}
}
