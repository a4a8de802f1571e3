package fusefs

import (
	"context"
	"errors"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
)

// dirPage is how many names a directory stream asks the core for at a
// time: each page holds the core's lock briefly, never the listing.
const dirPage = 1024

// Directory offsets the kernel hands back to resume (getdents, seekdir):
// "." is 1, ".." 2, and a name its core cookie plus 2, so an offset says
// where to resume whatever changed meanwhile (no positions to recount),
// and fits the kernel's signed 64-bit offset.
const (
	offDot    = 1
	offDotDot = 2
)

// dirStream lists a directory page by page. go-fuse serialises the calls
// on one handle (its file lock), so it needs no lock of its own.
type dirStream struct {
	fs   *FS
	id   core.ID
	pos  uint64 // the offset of the last entry given
	page []fuse.DirEntry
	more bool // names may follow the page
	err  syscall.Errno
}

var (
	_ fs.DirStream     = (*dirStream)(nil)
	_ fs.FileSeekdirer = (*dirStream)(nil)
)

func (n *dirNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	s := &dirStream{fs: n.fs, id: n.id}
	if err := s.fill(); err != nil {
		return nil, n.fs.errno("readdir", err)
	}
	return s, 0
}

// fill reads the page after pos; a directory removed meanwhile ends the
// listing.
func (s *dirStream) fill() error {
	s.page, s.more = s.page[:0], false
	if s.pos < offDotDot {
		s.page = append(s.page, fuse.DirEntry{Name: ".", Ino: uint64(s.id), Mode: syscall.S_IFDIR, Off: offDot},
			fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Off: offDotDot})[s.pos:]
	}
	after := uint64(0)
	if s.pos > offDotDot {
		after = s.pos - offDotDot
	}
	list, more, err := s.fs.core.ListPage(s.id, after, dirPage)
	if err != nil {
		return err
	}
	for _, e := range list {
		mode := uint32(syscall.S_IFREG)
		if e.Dir {
			mode = syscall.S_IFDIR
		}
		s.page = append(s.page, fuse.DirEntry{Name: e.Name, Ino: uint64(e.ID), Mode: mode, Off: e.Cookie + offDotDot})
	}
	s.more = more
	return nil
}

func (s *dirStream) HasNext() bool {
	if len(s.page) > 0 || s.err != 0 {
		return true
	}
	if !s.more {
		return false
	}
	if err := s.fill(); err != nil {
		if errors.Is(err, core.ErrNotFound) {
			return false
		}
		s.err = s.fs.errno("readdir", err)
		return true
	}
	return len(s.page) > 0
}

func (s *dirStream) Next() (fuse.DirEntry, syscall.Errno) {
	if s.err != 0 {
		err := s.err
		s.err = 0
		return fuse.DirEntry{}, err
	}
	e := s.page[0]
	s.page = s.page[1:]
	s.pos = e.Off
	return e, 0
}

// Seekdir resumes after the entry whose offset is off (0: the start),
// as the kernel asks after a seekdir or a rewinddir.
func (s *dirStream) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	s.pos, s.err = off, 0
	if err := s.fill(); err != nil && !errors.Is(err, core.ErrNotFound) {
		return s.fs.errno("readdir", err)
	}
	return 0
}

func (s *dirStream) Close() {}
