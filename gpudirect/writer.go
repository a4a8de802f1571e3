package gpudirect

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrUnaligned means a write was asked to continue an object whose last
// write ended at an offset that is not a multiple of Align: that write
// was its end (O_DIRECT cannot start mid-block).
var ErrUnaligned = errors.New("the last direct write ended mid-block, so no write can follow it")

// writeState is a writer File's progress: its bytes are written in
// order, from offset 0, by one transfer at a time.
type writeState struct {
	mu sync.Mutex // held for a whole transfer
	// next is where the next write starts: the end of what has been
	// written. GUARDED_BY(mu).
	next int64
	// sealed: the last write ended mid-block, and was the object's end.
	// GUARDED_BY(mu).
	sealed bool
	// openSize is the object's size when it was opened.
	openSize int64
}

// Writer moves bytes from host memory into objects over the direct path,
// through one set of page-aligned, page-locked buffers: Depth writes of
// Chunk bytes in flight, each from a buffer of its own. It serves one
// transfer at a time; loaders that write several objects at once use one
// Writer each.
//
// The stored file is written with O_DIRECT except the last, partial
// block of an object whose size is not a multiple of Align: O_DIRECT
// takes only whole blocks, so that tail (under 4 KiB) is written through
// the handle on the mount, as any writer's bytes are (with FUSE
// passthrough, to the same stored file). Padding the tail to a block and
// truncating afterwards would overwrite, with zeros, bytes past the end
// of an object opened without O_TRUNC, and would have the stored file
// briefly hold bytes that are not the object's.
type Writer struct{ transfer }

// NewWriter allocates a Writer's buffers.
func NewWriter(opt Options) (*Writer, error) {
	w := &Writer{}
	if err := w.init(opt); err != nil {
		return nil, err
	}
	return w, nil
}

// begin starts a write of size bytes (-1: unknown) to f where its last
// write ended, preallocated when the size is known; w.mu held.
func (w *Writer) begin(f *File, size int64) (int64, error) {
	start, err := f.beginWrite()
	if err == nil {
		f.preallocate(start, size)
	}
	return start, err
}

// Fill writes size bytes to f where its last write ended (Written; 0
// after OpenFile): fn fills each chunk in order, b being one of the
// writer's buffers and off its offset in this transfer (from 0 to size),
// and must fill all of it. Depth chunks are written while fn fills the
// next. It returns the bytes written: all of them, or, with an error,
// those before the first that failed. A transfer that ends at an object
// offset that is not a multiple of Align ends the object: it can take no
// further writes.
func (w *Writer) Fill(f *File, size int64, fn func(off int64, b []byte) error) (int64, error) {
	if size < 0 {
		return 0, fmt.Errorf("%s: negative size %d", f.path, size)
	}
	left := size
	return w.span(f, size, func(b []byte) ([]byte, bool, error) {
		n := int(min(int64(len(b)), left))
		if n > 0 {
			if err := fn(size-left, b[:n]); err != nil {
				return nil, true, err
			}
		}
		left -= int64(n)
		return b[:n], left == 0, nil
	})
}

// Write writes p to f where its last write ended (see Fill). A p that
// starts on a page boundary (Go allocates large slices so) is written
// from where it is, without a copy into the writer's buffers.
func (w *Writer) Write(f *File, p []byte) (int64, error) {
	if len(p) == 0 || uintptr(unsafe.Pointer(&p[0]))%Align != 0 || !f.direct {
		return w.Fill(f, int64(len(p)), func(off int64, b []byte) error {
			copy(b, p[off:])
			return nil
		})
	}
	rest := p
	return w.span(f, int64(len(p)), func(b []byte) ([]byte, bool, error) {
		n := min(len(b), len(rest))
		chunk := rest[:n:n]
		rest = rest[n:]
		return chunk, len(rest) == 0, nil
	})
}

// ReadFrom writes what r yields, until io.EOF, to f where its last write
// ended (see Fill). Not knowing the size, it cannot preallocate it (see
// preallocate): where the size is known, Fill and Write are faster.
func (w *Writer) ReadFrom(f *File, r io.Reader) (int64, error) {
	return w.span(f, -1, func(b []byte) ([]byte, bool, error) {
		n, err := io.ReadFull(r, b)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return b[:n], true, nil
		}
		return b[:n], false, err
	})
}

// wslot is one buffer's trip: the write of one chunk.
type wslot struct {
	buf  []byte // the buffer
	data []byte // what is written: the buffer filled, or the caller's
	off  int64
	done int // bytes written
	err  error
}

// span writes the chunks produce yields, size bytes in all (-1:
// unknown), in order from where f's last write ended, Depth at a time.
// produce is handed a free buffer and returns the bytes to write next
// (that buffer filled, or memory of the caller's that stays put until
// span returns, page-aligned) and whether they are the last.
func (w *Writer) span(f *File, size int64, produce func(b []byte) ([]byte, bool, error)) (int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	start, err := w.begin(f, size)
	if err != nil {
		return 0, err
	}
	free := make(chan *wslot, len(w.bufs.bufs))
	for _, b := range w.bufs.bufs {
		free <- &wslot{buf: b}
	}
	jobs := make(chan *wslot)
	var workers sync.WaitGroup
	fds := f.fds()
	for i := 0; i < w.opt.Depth; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for s := range jobs {
				s.done, s.err = fds.writeChunk(s.data, s.off)
				free <- s
			}
		}()
	}
	var failed firstFailure
	end, perr := feed(start, produce, free, jobs, &failed)
	close(jobs)
	workers.Wait()
	for len(free) > 0 {
		s := <-free
		failed.note(s)
	}
	written := end - start
	if failed.err != nil {
		written = failed.off - start
	}
	return written, f.endWrite(start, written, errors.Join(failed.err, perr))
}

// feed hands produce's chunks to the workers, each with a free buffer,
// until the last or a failure; it returns where the chunks it handed out
// end.
func feed(off int64, produce func([]byte) ([]byte, bool, error), free chan *wslot, jobs chan<- *wslot, failed *firstFailure) (int64, error) {
	for {
		s := <-free
		if failed.note(s) {
			free <- s
			return off, nil
		}
		data, last, err := produce(s.buf)
		if err != nil || len(data) == 0 {
			free <- s
			return off, err
		}
		s.data, s.off, s.done, s.err = data, off, 0, nil
		jobs <- s
		off += int64(len(data))
		if last || len(data)%Align != 0 {
			return off, nil
		}
	}
}

// firstFailure is the failed write at the lowest offset: everything
// before it was written.
type firstFailure struct {
	off int64 // where the bytes written stop
	err error
}

// note records s's failure, if it failed; it reports whether any write
// has failed so far.
func (ff *firstFailure) note(s *wslot) bool {
	if s.err != nil && (ff.err == nil || s.off+int64(s.done) < ff.off) {
		ff.off, ff.err = s.off+int64(s.done), fmt.Errorf("writing at %d: %w", s.off+int64(s.done), s.err)
	}
	s.err = nil
	return ff.err != nil
}

// writeFds are a writer File's descriptors, taken once per transfer.
type writeFds struct {
	data, pin int
	direct    bool
}

func (f *File) fds() writeFds {
	return writeFds{data: int(f.data.Fd()), pin: int(f.pin.Fd()), direct: f.direct}
}

// writeChunk writes b at off: with O_DIRECT, the whole blocks to the
// stored file and a partial last block through the mount (see Writer).
func (fd writeFds) writeChunk(b []byte, off int64) (int, error) {
	body := len(b)
	if fd.direct {
		body &^= Align - 1
	}
	n, err := pwriteFull(fd.data, b[:body], off)
	if err != nil || body == len(b) {
		return n, err
	}
	m, err := pwriteFull(fd.pin, b[body:], off+int64(body))
	return n + m, err
}

// pwriteFull writes all of b at off.
func pwriteFull(fd int, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Pwrite(fd, b[n:], off+int64(n))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.ErrShortWrite
		}
		n += m
	}
	return n, nil
}

// preallocate allocates, in the stored file, the size bytes a transfer
// is about to write from start, when that is known and the file is
// written with O_DIRECT: the store's file system then takes the writes
// as overwrites of allocated blocks, several at once. (ext4 serialises
// O_DIRECT writes that extend a file, each one journalling the new size:
// 1 MiB writes four at a time ran at 0.6 of one 32 MiB write here, and
// at 0.98 preallocated; docs/gpudirect.md has the table.) It asks
// through the handle on the mount first, so that kvfs admits the whole
// size before any byte lands, evicting for it: allocated in the stored
// file directly, it was growth the poller saw, and growth past a
// writer's budget (twice its reservation, at most half the capacity) is
// admitted only at the close, the store over the capacity meanwhile by
// up to the object (an outside tester: a 1 GiB put into 1200 MiB beside
// a cold 1 GiB object, 889 MB over). Where the mount refuses it (an
// object that can never fit, EFBIG; no room within the wait limit,
// ENOSPC), the stored file is allocated directly, as before: the writes
// go on, the poller cuts what it cannot admit, and the close refuses
// the object (ENOSPC) and removes it, as any writer's. Where the store
// refuses that too, the writes extend the file as they go.
func (f *File) preallocate(start, size int64) {
	if size <= 0 || !f.direct {
		return
	}
	if unix.Fallocate(int(f.pin.Fd()), 0, start, size) != nil {
		unix.Fallocate(int(f.data.Fd()), 0, start, size)
	}
}

// beginWrite starts a transfer into f (endWrite ends it) and says where
// it starts.
func (f *File) beginWrite() (int64, error) {
	ws := f.write
	if ws == nil {
		return 0, &os.PathError{Op: "write", Path: f.path, Err: os.ErrPermission}
	}
	ws.mu.Lock()
	if ws.sealed {
		ws.mu.Unlock()
		return 0, fmt.Errorf("%s: %w (at %d)", f.path, ErrUnaligned, ws.next)
	}
	return ws.next, nil
}

// endWrite ends a transfer that wrote the written bytes from start, with
// the error that stopped it, if any. After a failure the stored file is
// cut back (through the mount, so that kvfs sees it) to what was written
// in order, or to its size at open if that is more: bytes of later
// chunks that did land are not left past the end, as with a short
// write(2).
func (f *File) endWrite(start, written int64, err error) error {
	ws := f.write
	defer ws.mu.Unlock()
	ws.next = start + written
	ws.sealed = ws.next%Align != 0
	if err == nil {
		return nil
	}
	err = fmt.Errorf("%s: %w", f.path, err)
	keep := max(ws.openSize, ws.next)
	var st unix.Stat_t
	if unix.Fstat(int(f.data.Fd()), &st) == nil && st.Size > keep {
		if terr := f.pin.Truncate(keep); terr != nil {
			err = errors.Join(err, terr)
		}
	}
	return err
}

// Written is where f's next write starts: the end of what has been
// written to it over the direct path.
func (f *File) Written() int64 {
	if f.write == nil {
		return 0
	}
	f.write.mu.Lock()
	defer f.write.mu.Unlock()
	return f.write.next
}

// refreshAttrs has the kernel fetch the object's attributes from kvfs
// before a writer's close: the bytes written with O_DIRECT went around
// the mount, so the size the kernel has cached for it is stale until it
// asks (kvfs answers from the stored file, after it has seen the bytes).
func (f *File) refreshAttrs() error {
	var stx unix.Statx_t
	err := unix.Statx(int(f.pin.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_STATX_FORCE_SYNC, unix.STATX_SIZE, &stx)
	if err != nil {
		return &os.PathError{Op: "statx", Path: f.path, Err: err}
	}
	return nil
}
