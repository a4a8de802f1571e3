package blob

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// UsesName is the journal of the reads recorded since the checkpoint
// began (see Store.NoteUses). A start from the checkpoint after a crash
// puts the objects it names after the checkpoint's order, by the time of
// their last use: without it, the order a crash left was the
// checkpoint's, up to a checkpoint interval old, and the objects read
// most recently were evicted first (an outside tester, 3 of 3). A walk
// start reads the stored files' times instead, which the same records
// set (core's lastuse.go).
const UsesName = "kvfs.uses"

// usesMax bounds the journal: a checkpoint, which uses call for, empties
// it far sooner; past it uses are left to the stored files' times.
const usesMax = 64 << 20

// Use is a read of object ID at At (unix nanoseconds).
type Use struct {
	ID ID
	At int64
}

const useSize = 16

// usesJournal is the journal's open file; mu orders appends with the
// checkpoint's trim.
type usesJournal struct {
	mu   sync.Mutex
	f    *os.File
	size int64
}

// NoteUses appends uses to the journal. Not synced: it outlives the
// daemon, not the machine, as the times it mirrors.
func (s *Store) NoteUses(uses []Use) error {
	if len(uses) == 0 {
		return nil
	}
	j := &s.uses
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		fd, err := unix.Openat(int(s.root.Fd()), UsesName, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return &os.PathError{Op: "open", Path: UsesName, Err: err}
		}
		j.f = os.NewFile(uintptr(fd), UsesName)
		st, err := j.f.Stat()
		if err != nil {
			return err
		}
		j.size = st.Size()
	}
	if j.size+int64(len(uses))*useSize > usesMax {
		return nil
	}
	b := make([]byte, 0, len(uses)*useSize)
	for _, u := range uses {
		b = binary.LittleEndian.AppendUint64(b, uint64(u.ID))
		b = binary.LittleEndian.AppendUint64(b, uint64(u.At))
	}
	n, err := j.f.Write(b)
	j.size += int64(n)
	return err
}

// UsesMark is where the journal ends now: a checkpoint whose order is
// read after it holds every use journaled before it.
func (s *Store) UsesMark() int64 {
	s.uses.mu.Lock()
	defer s.uses.mu.Unlock()
	return s.uses.size
}

// TrimUses drops the uses journaled before mark, once the checkpoint
// that holds them is written: the rest, journaled while it was taken,
// is kept for the next start.
func (s *Store) TrimUses(mark int64) error {
	j := &s.uses
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil || mark == 0 {
		return nil
	}
	rest := make([]byte, j.size-mark)
	if len(rest) > 0 {
		fd, err := unix.Openat(int(s.root.Fd()), UsesName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: UsesName, Err: err}
		}
		_, err = unix.Pread(fd, rest, mark)
		unix.Close(fd)
		if err != nil {
			return &os.PathError{Op: "read", Path: UsesName, Err: err}
		}
	}
	if err := j.f.Truncate(0); err != nil {
		return err
	}
	n, err := j.f.Write(rest)
	j.size = int64(n)
	return err
}

// readUses is the journal's last use of each object, if there is one.
func (s *Store) readUses() map[ID]int64 {
	b, err := readFileAt(s.root, UsesName)
	if err != nil || len(b) < useSize {
		return nil
	}
	last := make(map[ID]int64, len(b)/useSize)
	for ; len(b) >= useSize; b = b[useSize:] {
		id, at := ID(binary.LittleEndian.Uint64(b)), int64(binary.LittleEndian.Uint64(b[8:]))
		last[id] = max(last[id], at)
	}
	return last
}

// readFileAt reads name in the directory d holds, never through a
// symlink.
func readFileAt(d *os.File, name string) ([]byte, error) {
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > usesMax {
		return nil, errors.New("not a journal")
	}
	b := make([]byte, st.Size())
	n, err := f.ReadAt(b, 0)
	if errors.Is(err, io.EOF) {
		err = nil // cut since: what was read is whole entries or a part the reader drops
	}
	return b[:n], err
}
