package blob

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
		if err := unix.Mkdirat(int(s.writing.Fd()), name, 0o700); err != nil && err != unix.EEXIST {
			return &os.PathError{Op: "mkdir", Path: filepath.Join(WritingName, name), Err: err}
		}
		fd, err := unix.Openat(int(s.writing.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: filepath.Join(WritingName, name), Err: err}
		}
		s.shards[i] = os.NewFile(uintptr(fd), filepath.Join(s.writing.Name(), name))
		if err := private(s.shards[i]); err != nil {
			return err
		}
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

// An object that is complete when a writer opens it (no O_TRUNC) is
// marked as intact: its marker's name is "<id>@<mtime>", with the
// object's mtime in nanoseconds as it was marked. Every change of its
// bytes (write, truncate, fallocate, a write through a mapping) sets a
// new mtime, so a start after a crash that finds the mtime unchanged
// knows nothing was written and keeps the object; the guard leaves it
// whole too. Before, an object merely opened read-write (`exec 3<>f`,
// numpy's memmap r+, open(..., "r+b")) was reclaimed at a crash.
//
// That needs timestamps fine enough that a write microseconds after
// the marker gets another mtime: multigrain timestamps (Linux 6.13 and
// later, on ext4, XFS, btrfs, tmpfs) give a change after a stat a
// later time than the stat saw. The mtime is read before the marker is
// linked, and the link's own ctime update is what makes the next write
// later still. Where a probe (fineTimes) finds a store's timestamps
// coarser, objects are marked as MarkWriting marks them.

const (
	intactSep = "@"
	// closedTag ends the name of a marker a close recorded (Remark):
	// "<id>@<mtime>c"; vettedTag, once a dead daemon's guard vouched for
	// it (VetClosed). A kvfs before 2026-12 reads either as plain.
	closedTag = "c"
	vettedTag = "v"
)

// Mark is what a crash marker records: nothing (the zero Mark, a plain
// marker), or an mtime (an intact one), taken at a writer's open
// (MarkIntact) or at a close (Remark, Closed), and vouched for by a dead
// daemon's guard (Vetted).
type Mark struct {
	Mtime  int64
	Closed bool
	Vetted bool
}

// name is the name of id's marker that records m.
func (m Mark) name(id ID) string {
	name := writingName(id)
	if m.Mtime == 0 {
		return name
	}
	name += intactSep + strconv.FormatInt(m.Mtime, 10)
	switch {
	case m.Vetted:
		name += vettedTag
	case m.Closed:
		name += closedTag
	}
	return name
}

// IntactMark reads an intact marker's name: what it records, and
// whether it is one.
func IntactMark(name string) (Mark, bool) {
	_, m, ok := strings.Cut(filepath.Base(name), intactSep)
	if !ok {
		return Mark{}, false
	}
	m, closed := strings.CutSuffix(m, closedTag)
	m, vetted := strings.CutSuffix(m, vettedTag)
	mtime, err := strconv.ParseInt(m, 10, 64)
	if err != nil || mtime == 0 {
		return Mark{}, false
	}
	return Mark{Mtime: mtime, Closed: closed || vetted, Vetted: vetted}, true
}

// Unchanged says whether a file an intact marker recorded mtime of
// still has that mtime.
func Unchanged(st *unix.Stat_t, mtime int64) bool { return st.Mtim.Nano() == mtime }

// MarkIntact marks id, a complete object f is a writer of, as
// MarkWriting does, recording its mtime so that a crash before it
// changes keeps it. It returns what ClearIntact takes: the Mark, plain
// where it marked as MarkWriting does.
func (s *Store) MarkIntact(f *os.File, id ID) (Mark, error) {
	var st unix.Stat_t
	if !s.fineTimes() || unix.Fstat(int(f.Fd()), &st) != nil || st.Mtim.Nano() == 0 {
		return Mark{}, s.MarkWriting(f, id)
	}
	s.changes.Add(1)
	dirfd, _ := s.marker(id)
	m := Mark{Mtime: st.Mtim.Nano()}
	name := m.name(id)
	err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), dirfd, name, unix.AT_SYMLINK_FOLLOW)
	switch err {
	case nil:
		return m, nil
	case unix.ENOENT:
		return Mark{}, nil // the file has no name left to lose
	case unix.EEXIST:
		// An earlier writer's, whose clear failed: it records the same
		// mtime, and this writer's release removes it.
		return m, nil
	}
	return Mark{}, &os.PathError{Op: "mark writing", Path: filepath.Join(WritingName, shardName(id), name), Err: err}
}

// Remark records that a close of a writer of id returned, leaving its
// file with attributes st (read then: a change after gets a later mtime,
// see MarkIntact): id's marker records st's mtime, as closed. Writing
// ends at the RELEASE the kernel sends after the close returned, and a
// crash in between reclaimed an object its writer was told was stored
// (an outside tester: 6 of 25 stores under their final name, the daemon
// killed right after each close). Such a record is trusted once a dead
// daemon's guard vets it (VetClosed: nothing held the object as the
// daemon died, and the close was just before) and while the file keeps
// that mtime; a duplicate of the descriptor may write on. old is what
// id's marker records; Remark returns what it records now. An empty
// file is left as it was marked: a parent that hands its descriptor to a
// child (Popen's stdout) closes it before the child writes.
func (s *Store) Remark(id ID, st *unix.Stat_t, old Mark) (Mark, error) {
	if !s.fineTimes() || st.Size == 0 || st.Mtim.Nano() == 0 {
		return old, nil
	}
	m := Mark{Mtime: st.Mtim.Nano(), Closed: true}
	if m == old {
		return old, nil
	}
	s.changes.Add(1)
	dirfd, _ := s.marker(id)
	from, to := old.name(id), m.name(id)
	err := unix.Renameat2(dirfd, from, dirfd, to, unix.RENAME_NOREPLACE)
	if err == unix.EEXIST {
		// An earlier marker of the same mtime, whose clear failed: a
		// link of the same file, so the old name goes.
		err = unix.Unlinkat(dirfd, from, 0)
	}
	switch err {
	case nil:
		return m, nil
	case unix.ENOENT:
		return old, nil // not marked: the file had no name left to lose
	}
	return old, &os.PathError{Op: "remark writing", Path: filepath.Join(WritingName, shardName(id), from), Err: err}
}

// ClearIntact removes id's marker, which records m (ClearWriting's, for
// a plain one).
func (s *Store) ClearIntact(id ID, m Mark) error {
	if m.Mtime == 0 {
		return s.ClearWriting(id)
	}
	s.changes.Add(1)
	dirfd, _ := s.marker(id)
	name := m.name(id)
	if err := unix.Unlinkat(dirfd, name, 0); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "clear writing", Path: filepath.Join(WritingName, shardName(id), name), Err: err}
	}
	return nil
}

// Demote makes id's intact marker, which records m, a plain one (see
// MarkIntact): its object's mtime is about to be set by a client, so it
// no longer tells whether the bytes changed.
func (s *Store) Demote(id ID, m Mark) error {
	s.changes.Add(1)
	dirfd, plain := s.marker(id)
	return demote(dirfd, m.name(id), plain, filepath.Join(WritingName, shardName(id)))
}

// demote renames the intact marker intact in directory dirfd (at, for
// messages) to plain: its plain name, or another intact one.
func demote(dirfd int, intact, plain, at string) error {
	// Both names of one inode: rename does nothing (POSIX), so the
	// intact one is unlinked after.
	if err := unix.Renameat(dirfd, intact, dirfd, plain); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "demote marker", Path: filepath.Join(at, intact), Err: err}
	}
	if err := unix.Unlinkat(dirfd, intact, 0); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "demote marker", Path: filepath.Join(at, intact), Err: err}
	}
	return nil
}

// VetClosed settles the markers a close recorded (Remark) under the
// writing/ directory writing, for a start after the daemon died; a dead
// daemon's guard does it as the daemon dies. A marker of an object held
// says a process still holds (a duplicate of the closed descriptor, a
// forked child, a mapping may write on), or one recorded before cutoff
// (unix nanoseconds: its RELEASE, which follows a close by
// milliseconds, never came, so something held it), is made plain: the
// start reclaims the object. The others are marked vetted, which the
// start trusts while the object's mtime holds, whatever holds other
// files of the dead mount by then (none held these as it died, and none
// can open them since). It says how many of each.
func VetClosed(writing string, held func(ID) bool, cutoff int64) (plain, trusted int) {
	names, _ := ReadMarkers(writing)
	for _, name := range names {
		m, ok := IntactMark(name)
		base := filepath.Base(name)
		id, _, _ := strings.Cut(base, intactSep)
		n, err := strconv.ParseUint(id, 16, 64)
		if !ok || !m.Closed || m.Vetted || err != nil {
			continue
		}
		dir := filepath.Join(writing, filepath.Dir(name))
		d, err := os.Open(dir)
		if err != nil {
			continue
		}
		to := Mark{Mtime: m.Mtime, Closed: true, Vetted: true}.name(ID(n))
		if held(ID(n)) || m.Mtime < cutoff {
			to = id
		}
		if demote(int(d.Fd()), base, to, dir) == nil {
			if to == id {
				plain++
			} else {
				trusted++
			}
		}
		d.Close()
	}
	return plain, trusted
}

// fineTimes probes, once, whether the store's file system gives a write
// just after a stat and a link a new mtime (see MarkIntact), on a file
// with no name (O_TMPFILE), so that a crash leaves nothing behind.
func (s *Store) fineTimes() bool {
	s.probeOnce.Do(func() {
		fd, err := unix.Open(s.writing.Name(), unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		for range 64 {
			var before, after unix.Stat_t
			if _, err := unix.Pwrite(fd, []byte{0}, 0); err != nil {
				return
			}
			if unix.Fstat(fd, &before) != nil || unix.Fchmod(fd, 0o600) != nil {
				return
			}
			if _, err := unix.Pwrite(fd, []byte{1}, 0); err != nil {
				return
			}
			if unix.Fstat(fd, &after) != nil || after.Mtim == before.Mtim {
				return
			}
		}
		s.fine = true
	})
	return s.fine
}

// DropSetID clears the set-user-ID and set-group-ID bits of the stored
// file f, opened to be written or cut. The mount never keeps them (its
// creates and chmods drop them), but a file's owner may set them on the
// stored copy directly; the daemon holds CAP_FSETID, so the kernel keeps
// them through the writes it makes, or lets through, for other users,
// where ext4 clears them on a write by anyone but their owner (an
// outside tester: a 04777 stored copy kept its bit through another
// user's write through the mount, and ran that user's program with the
// owner's rights).
func DropSetID(f *os.File) error {
	var st unix.Stat_t
	fd := int(f.Fd())
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	const setID = unix.S_ISUID | unix.S_ISGID
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&setID == 0 {
		return nil
	}
	return unix.Fchmod(fd, st.Mode&07777&^setID)
}
