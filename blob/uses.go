package blob

import (
	"cmp"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// UsesName is the journal of the reads recorded since the checkpoint
// began (see Store.NoteUses), by stored inode. A start from the
// checkpoint after a crash puts the objects it names after the
// checkpoint's order, by the time of their last use: without it, the
// order a crash left was the checkpoint's, up to a checkpoint interval
// old, and the objects read most recently were evicted first (an
// outside tester, 3 of 3). A walk start (no usable checkpoint) reads it
// too, beside the stored files' times. It is the only record of reads:
// writing them into the stored files' atimes moved each file's ctime a
// second after every read, so `git diff-files` called read files
// changed and `tar --listed-incremental` saved every file read since
// the last level (an outside tester).
const UsesName = "kvfs.reads"

// oldUsesName is the journal before 2026-12-06, by object ID, which
// means nothing to another daemon's index; a start removes it.
const oldUsesName = "kvfs.uses"

// usesMax bounds the journal: a checkpoint, which uses call for, empties
// it far sooner; past it (no checkpoint for a long time: an interval of
// 0) it is compacted to each inode's last use, and where that is still
// more than half of it, the older half of those is dropped.
const usesMax = 64 << 20

// Use is a read at At (unix nanoseconds) of the object whose stored
// file is inode Ino.
type Use struct {
	Ino uint64
	At  int64
}

const useSize = 16

// usesJournal is the journal's open file; mu orders appends with the
// checkpoint's trim and the compaction.
type usesJournal struct {
	mu   sync.Mutex
	f    *os.File
	size int64
	// gen counts compactions: a mark taken before one no longer says
	// where the uses before it end (see TrimUses).
	gen int64
}

// UsesMark is where the journal ends at a moment (UsesMark).
type UsesMark struct{ gen, size int64 }

// NoteUses appends uses to the journal. Not synced: it outlives the
// daemon, not the machine, as the times it mirrors.
func (s *Store) NoteUses(uses []Use) error {
	if len(uses) == 0 {
		return nil
	}
	j := &s.uses
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := s.openUses(); err != nil {
		return err
	}
	if j.size+int64(len(uses))*useSize > usesMax {
		if err := s.compactUses(); err != nil {
			return err
		}
	}
	n, err := j.f.Write(encodeUses(uses))
	j.size += int64(n)
	return err
}

// encodeUses is uses as the journal holds them.
func encodeUses(uses []Use) []byte {
	b := make([]byte, 0, len(uses)*useSize)
	for _, u := range uses {
		b = binary.LittleEndian.AppendUint64(b, u.Ino)
		b = binary.LittleEndian.AppendUint64(b, uint64(u.At))
	}
	return b
}

// openUses opens the journal for appending, once; j.mu held.
func (s *Store) openUses() error {
	j := &s.uses
	if j.f != nil {
		return nil
	}
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
	return nil
}

// compactUses rewrites the journal as each inode's last use, in the
// order of those uses, keeping the newer half of them where they are
// more than half of usesMax; j.mu held.
func (s *Store) compactUses() error {
	j := &s.uses
	last := s.readUses()
	uses := make([]Use, 0, len(last))
	for ino, at := range last {
		uses = append(uses, Use{ino, at})
	}
	slices.SortFunc(uses, func(a, b Use) int { return cmp.Compare(a.At, b.At) })
	if keep := usesMax / 2 / useSize; len(uses) > keep {
		uses = uses[len(uses)-keep:]
	}
	j.gen++
	return s.rewriteUses(encodeUses(uses))
}

// rewriteUses makes b the whole journal; j.mu held.
func (s *Store) rewriteUses(b []byte) error {
	j := &s.uses
	if err := j.f.Truncate(0); err != nil {
		return err
	}
	n, err := j.f.Write(b)
	j.size = int64(n)
	return err
}

// UsesMark is where the journal ends now: a checkpoint whose order is
// read after it holds every use journaled before it.
func (s *Store) UsesMark() UsesMark {
	s.uses.mu.Lock()
	defer s.uses.mu.Unlock()
	return UsesMark{s.uses.gen, s.uses.size}
}

// TrimUses drops the uses journaled before mark, once the checkpoint
// that holds them is written: the rest, journaled while it was taken,
// is kept for the next start. After a compaction since the mark it
// drops nothing: the uses before it are no longer apart, and a start
// from the checkpoint takes only those later than it.
func (s *Store) TrimUses(mark UsesMark) error {
	j := &s.uses
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil || mark.size == 0 || mark.gen != j.gen {
		return nil
	}
	rest := make([]byte, j.size-mark.size)
	if len(rest) > 0 {
		fd, err := unix.Openat(int(s.root.Fd()), UsesName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: UsesName, Err: err}
		}
		_, err = unix.Pread(fd, rest, mark.size)
		unix.Close(fd)
		if err != nil {
			return &os.PathError{Op: "read", Path: UsesName, Err: err}
		}
	}
	return s.rewriteUses(rest)
}

// readUses is the journal's last use of each stored inode, if there is
// one.
func (s *Store) readUses() map[uint64]int64 {
	b, err := readFileAt(s.root, UsesName)
	if err != nil || len(b) < useSize {
		return nil
	}
	last := make(map[uint64]int64, len(b)/useSize)
	for ; len(b) >= useSize; b = b[useSize:] {
		ino, at := binary.LittleEndian.Uint64(b), int64(binary.LittleEndian.Uint64(b[8:]))
		last[ino] = max(last[ino], at)
	}
	return last
}

// removeOldUses removes the journal by object ID that daemons before
// 2026-12-06 kept.
func (s *Store) removeOldUses() {
	unix.Unlinkat(int(s.root.Fd()), oldUsesName, 0)
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
