package gpudirect

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// writerFile opens a file in dir for writing the way OpenFile opens a
// writer's stored file, without a mount: its "pin" is a plain descriptor
// of pinPath (the stored file itself unless a test wants to see which
// bytes went through the pin).
func writerFile(t testing.TB, path, pinPath string) *File {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pin, err := os.OpenFile(pinPath, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f := &File{path: path, pin: pin, write: &writeState{}}
	if err := f.openData(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.data.Close(); f.pin.Close() })
	return f
}

func newWriter(t testing.TB, opt Options) *Writer {
	t.Helper()
	w, err := NewWriter(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// onlyReader hides a reader's WriterTo and the like: ReadFrom sees a
// stream of unknown length.
type onlyReader struct{ io.Reader }

// Objects of odd sizes are written byte for byte, from a slice and from
// a stream, with several chunk sizes and depths.
func TestWriteOddSizes(t *testing.T) {
	dir := t.TempDir()
	for _, opt := range []Options{{Chunk: 8192, Depth: 3}, {Chunk: 4096, Depth: 1}, {}} {
		w := newWriter(t, opt)
		for _, size := range oddSizes {
			want := patterned(size, int64(size)+7)
			for _, how := range []string{"Write", "ReadFrom"} {
				p := filepath.Join(dir, how)
				f := writerFile(t, p, p)
				requireDirect(t, f)
				var n int64
				var err error
				if how == "Write" {
					n, err = w.Write(f, want)
				} else {
					n, err = w.ReadFrom(f, onlyReader{bytes.NewReader(want)})
				}
				if got := readFile(t, p); err != nil || n != int64(size) || !bytes.Equal(got, want) {
					t.Fatalf("%s, chunk %d depth %d, size %d: wrote %d, %v; %d bytes in the file, equal %v",
						how, w.opt.Chunk, w.opt.Depth, size, n, err, len(got), bytes.Equal(got, want))
				}
				if f.Written() != int64(size) {
					t.Fatalf("Written() = %d after %d bytes", f.Written(), size)
				}
			}
		}
	}
}

// The whole blocks go to the stored file with O_DIRECT; only a partial
// last block goes through the pin (the handle on the mount). The pin is
// a file of its own here, so each byte shows which way it went.
func TestWriteTailThroughPin(t *testing.T) {
	dir := t.TempDir()
	w := newWriter(t, Options{Chunk: 8192, Depth: 2})
	for _, size := range []int{1, 4095, 4096, 8192*3 + 4, 8192*3 + 4096 + 100} {
		data, pinned := filepath.Join(dir, "data"), filepath.Join(dir, "pin")
		os.Remove(pinned)
		f := writerFile(t, data, pinned)
		requireDirect(t, f)
		want := patterned(size, int64(size))
		if n, err := w.Write(f, want); err != nil || n != int64(size) {
			t.Fatalf("size %d: %d, %v", size, n, err)
		}
		// The stored file holds the whole blocks. The pin was
		// preallocated to size (through the mount, so that kvfs admits
		// it before the bytes come): zeros where the blocks went to the
		// stored file instead, then the tail.
		body := size &^ (Align - 1)
		if got := readFile(t, data); !bytes.Equal(got, want[:body]) {
			t.Fatalf("size %d: the stored file holds %d bytes, want the %d of its whole blocks", size, len(got), body)
		}
		if got := readFile(t, pinned); !bytes.Equal(got, append(make([]byte, body), want[body:]...)) {
			t.Fatalf("size %d: the pin holds %d bytes, want %d: zeros, then the tail of %d at %d", size, len(got), size, size-body, body)
		}
	}
}

// Writes continue where the last ended while it ended on a block
// boundary; one that ended mid-block was the object's end.
func TestWriteContinues(t *testing.T) {
	p := filepath.Join(t.TempDir(), "obj")
	f := writerFile(t, p, p)
	requireDirect(t, f)
	w := newWriter(t, Options{Chunk: 8192, Depth: 2})
	a, b := patterned(3*8192, 1), patterned(5000, 2)
	if _, err := w.Write(f, a); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(f, nil); err != nil {
		t.Fatalf("empty write: %v", err)
	}
	var offs []int64
	if _, err := w.Fill(f, int64(len(b)), func(off int64, c []byte) error {
		offs = append(offs, off)
		copy(c, b[off:])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(offs) != 1 || offs[0] != 0 {
		t.Fatalf("Fill handed out offsets %v; want the transfer's own, from 0", offs)
	}
	if got := readFile(t, p); !bytes.Equal(got, append(append([]byte(nil), a...), b...)) || f.Written() != int64(len(a)+len(b)) {
		t.Fatalf("two writes: %d bytes, Written %d", len(got), f.Written())
	}
	if _, err := w.Write(f, []byte("x")); !errors.Is(err, ErrUnaligned) {
		t.Fatalf("a write after one that ended mid-block: %v", err)
	}
}

// A failing producer stops the transfer: what was written before it
// stays, nothing after it is written.
func TestWriteProducerFails(t *testing.T) {
	p := filepath.Join(t.TempDir(), "obj")
	f := writerFile(t, p, p)
	w := newWriter(t, Options{Chunk: 4096, Depth: 3})
	want := patterned(10*4096, 3)
	boom := errors.New("boom")
	n, err := w.Fill(f, int64(len(want)), func(off int64, b []byte) error {
		if off == 6*4096 {
			return boom
		}
		copy(b, want[off:])
		return nil
	})
	if !errors.Is(err, boom) || n != 6*4096 {
		t.Fatalf("Fill with a failing producer: %d, %v", n, err)
	}
	if got := readFile(t, p); !bytes.Equal(got, want[:n]) {
		t.Fatalf("after the failure the file holds %d bytes, want the %d written", len(got), n)
	}
}

// A write that fails part way (the store's file system full) reports the
// bytes before the failure, and the file is cut back to them: chunks
// after it that did land are not left behind.
func TestWriteFailureCutsBack(t *testing.T) {
	dir := scratchMount(t, "tmpfs", "size=64k", "a 64 KiB tmpfs to make writes fail with ENOSPC")
	p := filepath.Join(dir, "obj")
	f := writerFile(t, p, p)
	w := newWriter(t, Options{Chunk: 8192, Depth: 3})
	want := patterned(40*8192+123, 4)
	n, err := w.Write(f, want)
	// Which chunk meets the full file system first depends on how the
	// writes in flight are scheduled (even the first, if the others ran
	// ahead of it); the 64 KiB are full either way, so there is always
	// something past the failure to cut back.
	if !errors.Is(err, syscall.ENOSPC) || n < 0 || n > 64<<10 {
		t.Fatalf("writing 320 KiB into 64 KiB: %d, %v; want ENOSPC by 64 KiB", n, err)
	}
	if got := readFile(t, p); !bytes.Equal(got, want[:n]) {
		t.Fatalf("after ENOSPC the file holds %d bytes, want exactly the %d reported written", len(got), n)
	}
	if f.Written() != n {
		t.Fatalf("Written() = %d, want %d", f.Written(), n)
	}
}

// OpenFile refuses what the direct path cannot do before it opens
// anything, and creates nothing outside a kvfs mount.
func TestOpenFileRefuses(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x")
	for _, flag := range []int{os.O_RDWR, os.O_WRONLY | os.O_APPEND, os.O_RDONLY | os.O_CREATE, os.O_RDONLY | os.O_TRUNC} {
		if _, err := OpenFile(p, flag, 0o644); !errors.Is(err, ErrMode) {
			t.Fatalf("OpenFile(%#x): %v; want ErrMode", flag, err)
		}
	}
	if _, err := Create(p); !errors.Is(err, ErrNotKVFS) || !strings.Contains(err.Error(), p) {
		t.Fatalf("Create outside kvfs: %v", err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Create outside kvfs left %s behind: %v", p, err)
	}
	if _, err := Create(filepath.Join(dir, "absent", "x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Create in a missing directory: %v", err)
	}
	r := storedFile(t, dir, []byte("read-only"))
	if _, err := newWriter(t, Options{}).Write(r, []byte("x")); !errors.Is(err, os.ErrPermission) {
		t.Fatalf("writing a File opened for reading: %v", err)
	}
}

// A store whose file system refuses O_DIRECT (ramfs) is written through
// its page cache, byte for byte, and says so.
func TestWriteRefusedODirectFallsBack(t *testing.T) {
	dir := scratchMount(t, "ramfs", "", "a ramfs, whose files refuse O_DIRECT")
	w := newWriter(t, Options{Chunk: 8192, Depth: 3})
	for _, size := range oddSizes {
		p := filepath.Join(dir, "obj")
		f := writerFile(t, p, p)
		if ok, why := f.Direct(); ok || !strings.Contains(why, "writing through its page cache") {
			t.Fatalf("ramfs file opened with O_DIRECT (%v) or the reason is wrong (%q)", ok, why)
		}
		want := patterned(size, int64(size)+5)
		if n, err := w.Write(f, want); err != nil || n != int64(size) || !bytes.Equal(readFile(t, p), want) {
			t.Fatalf("size %d on ramfs: %d, %v", size, n, err)
		}
	}
}

// A page-aligned slice is written from where it is; any other goes
// through the writer's buffers. Both land byte for byte.
func TestWriteAlignedWithoutCopy(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 5*8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	copy(mem, patterned(len(mem), 11))
	w := newWriter(t, Options{Chunk: 8192, Depth: 2})
	for _, c := range []struct {
		p    []byte
		copy bool
	}{{mem, false}, {mem[:3*8192+5], false}, {mem[1:], true}} {
		for i := range w.bufs.mem {
			w.bufs.mem[i] = 0xAA
		}
		p := filepath.Join(t.TempDir(), "obj")
		f := writerFile(t, p, p)
		requireDirect(t, f)
		if n, err := w.Write(f, c.p); err != nil || n != int64(len(c.p)) || !bytes.Equal(readFile(t, p), c.p) {
			t.Fatalf("%d bytes at offset %d of a page: %d, %v", len(c.p), len(mem)-len(c.p), n, err)
		}
		if copied := bytes.Count(w.bufs.mem, []byte{0xAA}) != len(w.bufs.mem); copied != c.copy {
			t.Fatalf("%d bytes: copied through the buffers %v, want %v", len(c.p), copied, c.copy)
		}
	}
}
