package remote

import (
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Source is a local object opened for upload. The tier reads it once,
// from its start to Size bytes, while it sends it: the length and the
// CRC32C stored with the object are those of the bytes read in that
// pass.
type Source interface {
	io.ReadCloser
	// Size is the object's length when it was opened.
	Size() int64
	// Unchanged is asked once the last byte was read, before the upload
	// is let complete: nil if the object is still the one opened (same
	// size and modification time, no writer), else why not.
	Unchanged() error
}

// Opener opens a local object for upload. It returns an error
// satisfying errors.Is(err, ErrNotFound) (or fs.ErrNotExist) when the
// object is gone, and the upload is dropped; ErrBusy when the object is
// being written, and the upload is tried again later.
type Opener func(name string) (Source, error)

// rewinder is a Source that can be read again from its start: what a
// server without checksum trailers needs (see Tier.noTrailer).
type rewinder interface {
	Rewind() error
}

// ErrBusy: the local object is open for writing; its upload waits.
var ErrBusy = errors.New("remote: local object is being written")

// errSourceChanged: the local object changed while it was read for
// upload (a writer reopened it, or its size or times moved): the PUT
// is cut before it completes, and the upload is tried again later.
var errSourceChanged = errors.New("local object changed while uploading")

// FileSource is a Source over an open file: Unchanged compares the
// file's size and mtime with those at open, and asks busy (if set)
// whether a writer has it open. Not ctime: kvfs itself records each
// open in the stored file's atime (LRU order across crashes), which
// moves ctime, and a reader's open must not cut an upload.
type FileSource struct {
	f     *os.File
	r     io.Reader
	at    unix.Stat_t
	busy  func() bool
	close func() error
}

// NewFileSource makes a Source of f, read from its start; busy (nil:
// never) says whether a writer has the object open; close (nil:
// f.Close) is what Close does, for an f that something else owns. It
// fails with ErrBusy if a writer has the object open now; the caller
// still owns f when it fails.
func NewFileSource(f *os.File, busy func() bool, close func() error) (*FileSource, error) {
	s := &FileSource{f: f, busy: busy, close: close}
	if s.close == nil {
		s.close = f.Close
	}
	if err := unix.Fstat(int(f.Fd()), &s.at); err != nil {
		return nil, err
	}
	if s.busy != nil && s.busy() {
		return nil, ErrBusy
	}
	s.r = io.NewSectionReader(f, 0, s.at.Size)
	return s, nil
}

func (s *FileSource) Read(p []byte) (int, error) { return s.r.Read(p) }

// Rewind starts the reading over.
func (s *FileSource) Rewind() error {
	s.r = io.NewSectionReader(s.f, 0, s.at.Size)
	return nil
}
func (s *FileSource) Size() int64 { return s.at.Size }

func (s *FileSource) Unchanged() error {
	var now unix.Stat_t
	if err := unix.Fstat(int(s.f.Fd()), &now); err != nil {
		return err
	}
	switch {
	case s.busy != nil && s.busy():
		return ErrBusy
	case now.Size != s.at.Size || now.Mtim != s.at.Mtim:
		return fmt.Errorf("%w: size %d, was %d", errSourceChanged, now.Size, s.at.Size)
	}
	return nil
}

func (s *FileSource) Close() error { return s.close() }

// sendReader is an upload's body: it reads the source once, exactly
// Size bytes, checksums them on the way, and fails the read that would
// end the body if the source changed meanwhile, so the server never
// receives a complete request for a mix of two versions.
type sendReader struct {
	src  Source
	h    hash.Hash32
	n    int64
	size int64
	kick func()
	// want, if set, is the CRC32C the bytes must have (checksummed by a
	// first pass, where the server takes no trailer).
	want *uint32
}

func newSendReader(src Source, kick func()) *sendReader {
	return &sendReader{src: src, h: newCRC(), size: src.Size(), kick: kick}
}

func (s *sendReader) Read(p []byte) (int, error) {
	if s.n == s.size {
		return 0, io.EOF
	}
	if rest := s.size - s.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := s.src.Read(p)
	s.h.Write(p[:n])
	s.n += int64(n)
	if s.kick != nil {
		s.kick()
	}
	switch {
	case s.n == s.size:
		if cerr := s.src.Unchanged(); cerr != nil {
			return 0, fmt.Errorf("%w: %w", errSourceChanged, cerr)
		}
		if s.want != nil && *s.want != s.h.Sum32() {
			return 0, fmt.Errorf("%w: the bytes differ from the ones checksummed", errSourceChanged)
		}
		return n, io.EOF
	case err == io.EOF:
		return 0, fmt.Errorf("%w: ended after %d of %d bytes", errSourceChanged, s.n, s.size)
	}
	return n, err
}

// sum is the CRC32C of what was read.
func (s *sendReader) sum() uint32 { return s.h.Sum32() }

// seekerSource is a Source over an io.ReadSeeker that nothing else
// changes (Tier.Put).
type seekerSource struct {
	r    io.ReadSeeker
	size int64
}

func (s *seekerSource) Rewind() error {
	_, err := s.r.Seek(0, io.SeekStart)
	return err
}

func newSeekerSource(r io.ReadSeeker) (*seekerSource, error) {
	size, err := r.Seek(0, io.SeekEnd)
	if err == nil {
		_, err = r.Seek(0, io.SeekStart)
	}
	return &seekerSource{r: r, size: size}, err
}

func (s *seekerSource) Read(p []byte) (int, error) { return s.r.Read(p) }
func (s *seekerSource) Size() int64                { return s.size }
func (s *seekerSource) Unchanged() error           { return nil }
func (s *seekerSource) Close() error               { return nil }
