package blob

import (
	"encoding/binary"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// What a start can read of the store before its index is built: how big
// it is, the files as they lie in data/, and which of them were being
// written at a crash. None of it touches the index, so it may run while
// Load builds it.

// ExpectedObjects is about how many objects Load will find: the object
// count in the checkpoint's trailer, or the last start's count (the
// hint), whichever is more. It reads a few bytes and checks nothing.
func (s *Store) ExpectedObjects() int64 {
	n := int64(s.readHint())
	f, err := os.Open(filepath.Join(s.dir, CheckpointName))
	if err != nil {
		return n
	}
	defer f.Close()
	var st unix.Stat_t
	var tail [12]byte // the object count, then the CRC
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Size < int64(len(checkpointMagic))+12 {
		return n
	}
	if _, err := f.ReadAt(tail[:], st.Size-12); err != nil {
		return n
	}
	if c := binary.LittleEndian.Uint64(tail[:8]); c < 1<<40 {
		n = max(n, int64(c))
	}
	return n
}

// StatPath reads the attributes of rel, relative to data/, without
// following a symlink or leaving data/.
func (s *Store) StatPath(rel string) (unix.Stat_t, error) {
	if rel == "" {
		rel = "." // data/ itself, as OpenPath
	}
	return s.stat(rel)
}

// OpenPath opens rel, relative to data/, as openBeneath does.
func (s *Store) OpenPath(rel string, flags int) (*os.File, error) {
	if rel == "" {
		rel = "."
	}
	return s.openBeneath(rel, flags, 0)
}

// WritingInodes are the stored inodes marked in writing/: those a writer
// had open when the daemon stopped, which must not be served. The Load
// that follows deletes exactly these, not the markers of stores made
// meanwhile (a store taken while the index loads is born marked).
func (s *Store) WritingInodes() (map[uint64]bool, error) {
	m, err := s.readWriting()
	if err != nil {
		return nil, err
	}
	s.startMarks = m
	return m.inos, nil
}
