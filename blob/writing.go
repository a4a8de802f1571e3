package blob

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Crash markers. writing/ holds one hard link per file that has a write
// handle open, named by the file's ID, spread over writingShards
// subdirectories by ID: every store creates its file there and removes
// the marker when its writing ends, and one directory would be one
// kernel lock (the directory's) that every writer of the node takes
// twice. Markers directly under writing/ are a store of an earlier
// version's, read the same.

const writingShards = 16

// shardName is the subdirectory of writing/ that holds id's marker.
func shardName(id ID) string { return strconv.FormatUint(uint64(id)%writingShards, 16) }

func writingName(id ID) string { return strconv.FormatUint(uint64(id), 16) }

// openShards makes and opens writing/'s subdirectories.
func (s *Store) openShards() error {
	for i := range s.shards {
		name := shardName(ID(i))
		if err := unix.Mkdirat(int(s.writing.Fd()), name, 0o755); err != nil && err != unix.EEXIST {
			return &os.PathError{Op: "mkdir", Path: filepath.Join(WritingName, name), Err: err}
		}
		fd, err := unix.Openat(int(s.writing.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: filepath.Join(WritingName, name), Err: err}
		}
		s.shards[i] = os.NewFile(uintptr(fd), filepath.Join(s.writing.Name(), name))
	}
	return nil
}

// marker is the directory and name of id's marker.
func (s *Store) marker(id ID) (dirfd int, name string) {
	return int(s.shards[uint64(id)%writingShards].Fd()), writingName(id)
}

// markerPath is id's marker, relative to the store, for messages.
func markerPath(id ID) string { return filepath.Join(WritingName, shardName(id), writingName(id)) }

// MarkWriting records that id has a write handle open, durably enough to
// survive a crash of the daemon: a hard link to f under writing/.
func (s *Store) MarkWriting(f *os.File, id ID) error {
	s.changes.Add(1)
	dirfd, name := s.marker(id)
	err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), dirfd, name, unix.AT_SYMLINK_FOLLOW)
	if err == unix.EEXIST || err == unix.ENOENT {
		// Already marked, or the file has no name left to lose.
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "mark writing", Path: markerPath(id), Err: err}
	}
	return nil
}

// MarkStored marks the file stored at rel as id, as MarkWriting marks
// one being written: an owner that unlinks a file's names one by one
// marks it first, so that a crash between the unlinks leaves it marked,
// and the next start deletes every name it kept. It reports whether it
// marked the file: not if rel is gone, or if id's marker is there
// already (one the caller must not clear).
func (s *Store) MarkStored(rel string, id ID) (bool, error) {
	s.changes.Add(1)
	wfd, wname := s.marker(id)
	err := s.at(rel, func(dirfd int, name string) error { return unix.Linkat(dirfd, name, wfd, wname, 0) })
	switch underlying(err) {
	case nil:
		return true, nil
	case unix.ENOENT, unix.EEXIST:
		return false, nil
	}
	return false, &os.PathError{Op: "mark", Path: rel, Err: underlying(err)}
}

// ClearWriting records that id is complete again.
func (s *Store) ClearWriting(id ID) error {
	s.changes.Add(1)
	dirfd, name := s.marker(id)
	err := unix.Unlinkat(dirfd, name, 0)
	if err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "clear writing", Path: markerPath(id), Err: err}
	}
	return nil
}

// ReadMarkers lists the markers under a writing/ directory, shards and
// an earlier version's flat markers alike, as paths relative to it: a
// shard is read only if it is a real directory, never through a link.
func ReadMarkers(writing string) ([]string, error) {
	ents, err := os.ReadDir(writing)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() {
			names = append(names, e.Name())
			continue
		}
		sub, err := os.ReadDir(filepath.Join(writing, e.Name()))
		if err != nil {
			continue
		}
		for _, m := range sub {
			names = append(names, filepath.Join(e.Name(), m.Name()))
		}
	}
	return names, nil
}
