package gpudirect

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"golang.org/x/sys/unix"
)

// Reader moves objects into host memory over the direct path, through
// one set of page-aligned, page-locked buffers: Depth reads of Chunk
// bytes in flight, each into a buffer of its own. It serves one transfer
// at a time; loaders that read several objects at once use one Reader
// each.
type Reader struct{ transfer }

// NewReader allocates a Reader's buffers.
func NewReader(opt Options) (*Reader, error) {
	r := &Reader{}
	if err := r.init(opt); err != nil {
		return nil, err
	}
	return r, nil
}

// transfer is what a Reader and a Writer hold: the options and the
// buffers, used by one transfer at a time.
type transfer struct {
	opt  Options
	bufs *buffers
	mu   sync.Mutex // one transfer at a time: they share bufs
}

func (t *transfer) init(opt Options) error {
	opt, err := opt.withDefaults()
	if err != nil {
		return err
	}
	t.opt = opt
	t.bufs, err = newBuffers(opt.Chunk, opt.Depth)
	return err
}

// Options are the chunk size and depth.
func (t *transfer) Options() Options { return t.opt }

// Locked reports whether the buffers are page-locked and, if not, why.
func (t *transfer) Locked() (bool, string) { return t.bufs.locked, t.bufs.why }

// Close frees the buffers.
func (t *transfer) Close() error { return t.bufs.close() }

// Stream reads the whole object in order, handing each chunk to fn with
// its offset. The chunk is one of the reader's buffers and is only valid
// until fn returns. An error from fn stops the transfer and is returned.
// Stream fails with io.ErrUnexpectedEOF if the stored file holds fewer
// bytes than the object had at Open.
func (r *Reader) Stream(f *File, fn func(off int64, b []byte) error) (int64, error) {
	n, err := r.span(f, 0, f.size, fn)
	if err == nil && n < f.size {
		err = fmt.Errorf("%s: %w: %d of %d bytes", f.path, io.ErrUnexpectedEOF, n, f.size)
	}
	return n, err
}

// ReadAt reads len(p) bytes at off (any alignment) into p, as io.ReaderAt
// does: fewer only at the end of the object, with io.EOF.
func (r *Reader) ReadAt(f *File, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%s: negative offset %d", f.path, off)
	}
	if off >= f.size {
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), f.size)
	start := off &^ (Align - 1)
	got, err := r.span(f, start, end, func(o int64, b []byte) error {
		lo, hi := max(o, off), min(o+int64(len(b)), end)
		if lo < hi {
			copy(p[lo-off:hi-off], b[lo-o:hi-o])
		}
		return nil
	})
	n := int(max(0, min(start+got, end)-off))
	if err == nil && n < len(p) {
		err = io.EOF
		if start+got < end {
			err = io.ErrUnexpectedEOF
		}
	}
	return n, err
}

// slot is one buffer's trip: the read of one chunk.
type slot struct {
	buf  []byte
	off  int64
	want int // bytes of the span in this chunk
	n    int
	err  error
	done chan struct{}
}

// span reads [start, end) of the stored file, start aligned, Depth chunks
// in flight, and hands the chunks to fn in order. It returns the bytes
// handed over, which are fewer than asked only where the file ends early.
func (r *Reader) span(f *File, start, end int64, fn func(int64, []byte) error) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	slots := make([]slot, len(r.bufs.bufs))
	free := make(chan *slot, len(slots))
	for i := range slots {
		slots[i] = slot{buf: r.bufs.bufs[i], done: make(chan struct{}, 1)}
		free <- &slots[i]
	}
	order := make(chan *slot, len(slots))
	stop := make(chan struct{})
	var workers sync.WaitGroup
	jobs := r.startWorkers(f, &workers)
	go dispatch(start, end, r.opt.Chunk, free, order, jobs, stop)
	n, err := consume(order, free, fn)
	close(stop)
	for s := range order { // let the reads in flight finish with the buffers
		<-s.done
	}
	workers.Wait()
	return n, err
}

// startWorkers starts Depth goroutines that each issue one read at a
// time; closing the returned channel ends them.
func (r *Reader) startWorkers(f *File, wg *sync.WaitGroup) chan<- *slot {
	jobs := make(chan *slot)
	fd := int(f.data.Fd())
	for i := 0; i < r.opt.Depth; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range jobs {
				s.n, s.err = readChunk(fd, s.buf, s.off, s.want, f.direct)
				s.done <- struct{}{}
			}
		}()
	}
	return jobs
}

// dispatch hands out the chunks of [start, end) in order, one per free
// buffer, until done or stopped; it then closes order and jobs.
func dispatch(start, end int64, chunk int, free <-chan *slot, order, jobs chan<- *slot, stop <-chan struct{}) {
	defer close(jobs)
	defer close(order)
	for off := start; off < end; off += int64(chunk) {
		var s *slot
		select {
		case s = <-free:
		case <-stop:
			return
		}
		s.off, s.want, s.n, s.err = off, int(min(int64(chunk), end-off)), 0, nil
		order <- s
		jobs <- s
	}
}

// consume hands finished chunks to fn in order and returns each buffer.
func consume(order <-chan *slot, free chan<- *slot, fn func(int64, []byte) error) (int64, error) {
	var total int64
	for s := range order {
		<-s.done
		if s.err != nil {
			return total, fmt.Errorf("reading at %d: %w", s.off, s.err)
		}
		if s.n > 0 {
			if err := fn(s.off, s.buf[:s.n]); err != nil {
				return total, err
			}
			total += int64(s.n)
		}
		short := s.n < s.want
		free <- s // s belongs to dispatch again
		if short {
			return total, nil // the file ends here
		}
	}
	return total, nil
}

// readChunk reads want bytes at off into buf. With O_DIRECT the length
// asked is rounded up to Align (the tail of a file then comes back
// short); a short read ends the file.
func readChunk(fd int, buf []byte, off int64, want int, direct bool) (int, error) {
	ask := want
	if direct {
		ask = min(len(buf), (want+Align-1)&^(Align-1))
	}
	n := 0
	for n < want {
		m, err := unix.Pread(fd, buf[n:ask], off+int64(n))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 || (direct && m%Align != 0) {
			n += m
			break
		}
		n += m
	}
	return min(n, want), nil
}
