package fusefs

import (
	"errors"
	"sync"
	"syscall"

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

// dirStream is an open directory: the page of entries that follows the
// last offset it gave. Every READDIR says where to resume, so a request
// that does not follow on (a seekdir, a rewind, one the kernel repeats
// after an interrupt) reads the page after its own offset.
type dirStream struct {
	id core.ID

	mu   sync.Mutex
	pos  uint64          // GUARDED_BY(mu); the offset page follows
	page []fuse.DirEntry // GUARDED_BY(mu)
	more bool            // GUARDED_BY(mu); names may follow the page
}

func (f *FS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	id := core.ID(in.NodeId)
	if _, gone := f.gone.get(id); !gone && !f.core.IsDir(id) {
		return fuse.ENOTDIR
	}
	out.Fh = f.dirs.add(&dirStream{id: id, pos: ^uint64(0)})
	return fuse.OK
}

func (f *FS) ReleaseDir(in *fuse.ReleaseIn) { f.dirs.take(in.Fh) }

// FsyncDir makes the directory's entries durable (fsync on a directory).
func (f *FS) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	err := f.core.SyncDir(core.ID(in.NodeId))
	if _, gone := f.gone.get(core.ID(in.NodeId)); gone && err != nil {
		err = nil // nothing of it is left to make durable: its removal is the parent's
	}
	return f.status("fsyncdir", err)
}

func (f *FS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return f.readDir(in, out, false)
}

// ReadDirPlus lists with each name's entry, as a lookup answers it.
func (f *FS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return f.readDir(in, out, true)
}

func (f *FS) readDir(in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	s, put, ok := f.dirs.get(in.Fh)
	if !ok {
		return fuse.EBADF
	}
	defer put()
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.Offset != s.pos {
		if err := s.fill(f.core, in.Offset); err != nil {
			return f.status("readdir", err)
		}
	}
	for {
		if len(s.page) == 0 {
			if !s.more {
				return fuse.OK
			}
			if err := s.fill(f.core, s.pos); err != nil {
				return f.status("readdir", err)
			}
			continue
		}
		e := s.page[0]
		if !plus {
			if !out.AddDirEntry(e) {
				return fuse.OK
			}
		} else if !f.addPlus(s.id, e, out) {
			return fuse.OK
		}
		s.page, s.pos = s.page[1:], e.Off
	}
}

// addPlus adds e with its entry; false when the reply is full. A name
// gone since its page was read is listed without one.
func (f *FS) addPlus(dir core.ID, e fuse.DirEntry, out *fuse.DirEntryList) bool {
	eo := out.AddDirLookupEntry(e)
	if eo == nil {
		return false
	}
	if e.Off <= offDotDot {
		return true // the kernel takes nothing from "." and ".."'s entries
	}
	ce, a, err := f.core.Listed(dir, e.Name)
	if err != nil {
		return true
	}
	f.entry(eo, ce.ID, a)
	if a.Mode&syscall.S_IFMT != e.Mode&syscall.S_IFMT {
		out.FixMode(a.Mode)
	}
	return true
}

// fill reads the page that follows offset pos; a directory removed
// meanwhile ends the listing.
func (s *dirStream) fill(c *core.Core, pos uint64) error {
	s.pos, s.page, s.more = pos, s.page[:0], false
	if pos < offDotDot {
		// ".." carries its directory's inode number, as on ext4 (it
		// was 0, which go-fuse sends as 2^32-1: an outside tester).
		s.page = append(s.page, fuse.DirEntry{Name: ".", Ino: uint64(s.id), Mode: syscall.S_IFDIR, Off: offDot},
			fuse.DirEntry{Name: "..", Ino: uint64(c.DirParent(s.id)), Mode: syscall.S_IFDIR, Off: offDotDot})[pos:]
	}
	after := uint64(0)
	if pos > offDotDot {
		after = pos - offDotDot
	}
	list, more, err := c.ListPage(s.id, after, dirPage)
	if errors.Is(err, core.ErrNotFound) {
		return nil
	}
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
