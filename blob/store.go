// Package blob is the store of object bytes on a local directory, and the
// in-memory index of its names. The store mirrors the mounted namespace
// one to one under data/, so its files are the objects, a hard link is a
// second name of one inode, and the bytes it holds are exactly the bytes
// kvfs charges. It never imports FUSE and knows nothing of charges.
//
// Layout of a store directory:
//
//	kvfs.format  what this directory is: "kvfs store v1"
//	kvfs.lock    flock(2)ed by the daemon that serves the store
//	data/        the namespace: directories and regular files
//	writing/     one extra hard link, named by object ID, per file that
//	             has a write handle open, in 16 subdirectories by ID;
//	             what is still here at start-up was being written at a
//	             crash and is reclaimed
//	remote/      the remote tier's upload journal, when one is configured
//	             (see RemoteName)
//	kvfs.index   the checkpoint of the index (see CheckpointName)
//	kvfs.hint    how many objects the last start found (see HintName)
//	kvfs.reads   the reads recorded since the checkpoint (see UsesName)
//
// A Store does no locking of its own. Its owner (package core) guards the
// index with its lock, and orders the changes of each name (see the
// phases in phases.go: a change is made in the store first, without the
// owner's lock, and committed to the index after); Load, the audit walk
// and the snapshot say what they need.
package blob

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// ID names an inode of the namespace, a file or a directory. IDs are made
// here (NewID), are never reused while a store is open, and are also the
// inode numbers the mount shows.
type ID uint64

// Names of the entries of a store directory.
const (
	LockName    = "kvfs.lock"
	DataName    = "data"
	WritingName = "writing"
)

// RootID is the ID of the namespace's root directory.
const RootID ID = 1

var (
	// ErrLocked means another live daemon serves the store.
	ErrLocked = errors.New("store is already served by another kvfs daemon")
	// ErrNotFound means the name is not in the namespace.
	ErrNotFound = errors.New("no such name")
)

// Store is one store directory and the index of its namespace. The index
// follows the directory: every change is made in the directory first and
// committed to the index after (phases.go), so a name the index holds is
// in the directory, but for one that vanished behind kvfs's back, which
// the audit finds.
type Store struct {
	dir string
	// resolved is dir with its symlinks resolved, as the store was
	// opened: what BackingPath names, so that a loader may refuse any
	// symlink on the way to a stored file (see gpudirect).
	resolved string
	lock     *os.File
	// root is the store directory, where its checkpoint and hint go:
	// held open, so they follow the store if it is moved.
	root    *os.File
	uses    usesJournal
	data    *os.File
	writing *os.File
	// shards are writing/'s subdirectories (see writing.go).
	shards [writingShards]*os.File
	nextID atomic.Uint64
	// changes counts the calls that may have changed data/ or writing/,
	// so the checkpointer knows when its last checkpoint is behind.
	changes atomic.Uint64
	// checkpointSize and checkpointObjects are the last checkpoint's (or
	// the start's), to size the next capture's buffers before it takes
	// the owner's lock, not while it holds it.
	checkpointSize, checkpointObjects atomic.Int64
	// racy is racyWindow and step cpStep; tests shorten them.
	racy time.Duration
	step int
	// verified: directories the last checkpoint, or the start before
	// any, found holding what the index said, by path; GUARDED_BY(the
	// owner's one checkpoint at a time, after Load).
	verified map[string]heldDir

	// GUARDED_BY(the owner's lock). INVARIANT: every directory and
	// regular file under data/ that kvfs made or loaded is in the index,
	// and nothing else is.
	dirs  map[ID]*dir
	files map[ID]*file
	// tree counts the changes of directories (one moved or removed, the
	// index reset or loaded): what every path of a Version rests on.
	tree atomic.Uint64

	// distrustIntact: see DistrustIntact; set before Load.
	distrustIntact bool
	// probeOnce and fine: fineTimes's probe and its answer.
	probeOnce sync.Once
	fine      bool

	progress reporter // of Load's walk (see ReportTo)
	crowd    *crowd   // see WatchDirs; nil: not watched
	// stopped is set by StopLoad: a Load under way ends with ErrStopped.
	stopped atomic.Bool
	// noted: the objects whose names or inode changed since Track (nil:
	// not tracking); GUARDED_BY(the owner's lock).
	noted map[ID]struct{}
	// kept: markers Load leaves alone (KeepMarkers), by path under
	// writing/.
	kept map[string]bool
	// startMarks: writing/ as WritingInodes read it, for the Load that
	// follows (nil: Load reads it).
	startMarks *marks
}

// Open takes the store directory for this process, creating its layout,
// and fails with ErrLocked if a live daemon already holds it. It adopts
// only an empty (or absent) directory or a store (see CheckDir), and
// writes nothing anywhere before that check has passed.
func Open(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	mark, err := CheckDir(abs)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, err
	}
	if err := checkOwner(abs); err != nil {
		return nil, err
	}
	lock, err := lockStore(abs)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: abs, lock: lock, racy: racyWindow, step: cpStep}
	if mark {
		err = writeFormat(abs)
	}
	if err == nil {
		err = s.openLayout()
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	s.resetIndex(0)
	s.nextID.Store(uint64(RootID))
	return s, nil
}

// OpenLocked takes over a store whose lock lock already holds: the lock
// file's descriptor, passed from the daemon that held it (a handover),
// so that the store is never unlocked in between. The store is the
// lock holder's, so it is adopted as it is.
func OpenLocked(dir string, lock *os.File) (*Store, error) {
	s, err := OpenBorrowed(dir)
	if err != nil {
		return nil, err
	}
	if err := s.TakeLock(lock); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// ClaimLock writes this process's ID in the lock file, as Open does: a
// successor (OpenLocked) once its predecessor has let the store go.
func (s *Store) ClaimLock() {
	s.lock.Truncate(0)
	s.lock.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
}

// Lock is the store's lock file, to pass to a successor (OpenLocked).
func (s *Store) Lock() *os.File { return s.lock }

// DistrustIntact has Load reclaim the objects of intact markers too
// (see MarkIntact), changed or not: a process still holds a file of the
// dead daemon's mount, and could change one after the start kept it
// (passthrough writes outlive the daemon).
func (s *Store) DistrustIntact() { s.distrustIntact = true }

// Dirs is how many directories the namespace holds, the root not
// counted; the owner's lock held.
func (s *Store) Dirs() int { return len(s.dirs) - 1 }

// KeepMarkers has Load leave the crash markers of ids (plain or intact),
// and their objects, alone: writers a predecessor handed over, still
// writing.
func (s *Store) KeepMarkers(ids []ID) {
	s.kept = map[string]bool{}
	for _, id := range ids {
		s.kept[filepath.Join(shardName(id), writingName(id))] = true
	}
}

func lockStore(dir string) (*os.File, error) {
	// Never through a symlink: a planted kvfs.lock would have kvfs
	// write its PID wherever it points. The daemon's alone (0600): flock
	// needs only a descriptor open for reading, so with 0644 any user
	// could hold the lock and keep every start of the store waiting (an
	// outside tester's finding); an older store's lock is mended here.
	f, err := os.OpenFile(filepath.Join(dir, LockName), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%s is a symbolic link, not the store's lock: remove it", filepath.Join(dir, LockName))
	case errors.Is(err, unix.EISDIR):
		// (an outside tester got "is a directory" with no word of what
		// to do, and fsck --repair left it)
		return nil, fmt.Errorf("%s is a directory, not the store's lock: move it away (kvfs makes the lock again)", filepath.Join(dir, LockName))
	}
	if err != nil {
		return nil, err
	}
	if err := private(f); err != nil {
		f.Close()
		return nil, err
	}
	if err := flockStore(f, dir); err != nil {
		return nil, err
	}
	f.Truncate(0)
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return f, nil
}

// lockToRead is lockStore for a check that writes nothing, of a store
// on a read-only file system (a damaged disk mounted ro to be looked at;
// an outside tester's fsck failed there on opening the lock to write):
// flock needs only a descriptor open for reading, and a store with no
// lock file has had no daemon since its file system went read-only.
func lockToRead(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, LockName), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := flockStore(f, dir); err != nil {
		return nil, err
	}
	return f, nil
}

// flockStore takes the store's lock through f, its lock file, without
// waiting: ErrLocked while a daemon holds it. f is closed on an error.
func flockStore(f *os.File, dir string) error {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		return nil
	}
	f.Close()
	if errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("%s: %w", dir, ErrLocked)
	}
	return err
}

func (s *Store) openLayout() error {
	var err error
	if s.root, err = os.OpenFile(s.dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return err
	}
	if s.data, err = openDir(filepath.Join(s.dir, DataName), 0o755); err != nil {
		return err
	}
	if err := checkOwnFiles(s.dir); err != nil {
		return err
	}
	if s.resolved, err = filepath.EvalSymlinks(s.dir); err != nil {
		return err
	}
	if s.writing, err = openDir(filepath.Join(s.dir, WritingName), 0o700); err != nil {
		return err
	}
	if err := private(s.writing); err != nil {
		return err
	}
	return s.openShards()
}

// ownFiles are the files kvfs rewrites in the store directory, each by
// way of its temporary (writeDurablyIn).
var ownFiles = []string{CheckpointName, CheckpointName + ".tmp", HintName, HintName + ".tmp"}

// checkOwnFiles refuses a store whose checkpoint or hint is a directory
// or a special file: a directory there failed every checkpoint, each
// logged, for as long as the daemon ran, and a FIFO would hold the
// start's read of it for ever (an outside tester's directory at
// kvfs.index mounted, then warned at every --checkpoint-interval). The
// error is an ENOTDIR, which the mount answers with `kvfs fsck`.
func checkOwnFiles(dir string) error {
	for _, n := range ownFiles {
		p := filepath.Join(dir, n)
		// A symlink is replaced at the next write, and never read
		// through (O_NOFOLLOW).
		if st, err := os.Lstat(p); err == nil && !st.Mode().IsRegular() && st.Mode()&os.ModeSymlink == 0 {
			return misplaced(fmt.Sprintf("%s is a %s, not kvfs's file", p, kindOf(st.Mode())))
		}
	}
	return nil
}

// misplaced is what a store holds in place of a file of kvfs's: an
// ENOTDIR, as where data/ is a file, without that errno's words.
type misplaced string

func (m misplaced) Error() string        { return string(m) }
func (m misplaced) Is(target error) bool { return target == unix.ENOTDIR }

func openDir(path string, mode os.FileMode) (*os.File, error) {
	if err := os.Mkdir(path, mode); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	return os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
}

// private takes every permission from group and others on d: the store
// of a mount for its mounter alone (Confine); writing/ and its shards,
// which a store made before 2026-12-04 has 0755 (a marker is a hard
// link to an object being written, and through it anyone could read,
// and as its mode allowed write, an object in a directory they may not
// search); and the lock (see lockStore).
func private(d *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return &os.PathError{Op: "stat", Path: d.Name(), Err: err}
	}
	if st.Mode&0o077 == 0 {
		return nil
	}
	if err := unix.Fchmod(int(d.Fd()), st.Mode&0o700); err != nil {
		return &os.PathError{Op: "chmod", Path: d.Name(), Err: err}
	}
	return nil
}

// Confine takes every permission from group and others on the store
// directory itself: for a mount that lets only its mounter in (no
// --allow-other). data/ carries the mount's modes, which such a mount
// does not enforce for others because it refuses them outright, so a
// store others could enter gave them directly what the mount refuses
// (an outside tester: any user read every object the modes let them, and
// wrote past the capacity into a directory of mode 0777).
func (s *Store) Confine() error {
	d, err := os.OpenFile(s.dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	return private(d)
}

// Close releases the store and its lock.
func (s *Store) Close() error {
	for _, f := range append([]*os.File{s.uses.f, s.root, s.data, s.writing, s.lock}, s.shards[:]...) {
		if f != nil {
			f.Close()
		}
	}
	return nil
}

// Dir is the store directory.
func (s *Store) Dir() string { return s.dir }

// Changes counts the calls that may have changed the store so far.
func (s *Store) Changes() uint64 { return s.changes.Load() }

// NewID hands out a fresh inode ID.
func (s *Store) NewID() ID { return ID(s.nextID.Add(1)) }

// BackingPath is the absolute path of a name relative to data/, with
// no symlink in it but one planted since the store was opened.
func (s *Store) BackingPath(rel string) string {
	return filepath.Join(s.resolved, DataName, rel)
}

// openBeneath opens a path relative to data/ without following any
// symlink and without leaving data/, whatever a name or the store holds.
func (s *Store) openBeneath(rel string, flags int, mode uint32) (*os.File, error) {
	fd, err := s.openBeneathFd(rel, flags, mode)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), s.BackingPath(rel)), nil
}

// openListing opens the stored directory rel to list it, leaving its
// atime as it is: the atime a client sees is the stored directory's,
// and the daemon's own listings (the start's, the audit's, a
// checkpoint's) moved it, so every directory of a store read one time
// after each start (an outside tester: an atime set with touch -a was
// gone at the next mount). O_NOATIME needs the directory's owner or
// CAP_FOWNER; a daemon that has neither lists it as before.
func (s *Store) openListing(rel string) (*os.File, error) {
	f, err := s.openBeneath(rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) {
		f, err = s.openBeneath(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	}
	return f, err
}

// openBeneathFd is openBeneath for a raw descriptor: a directory a change
// is made in needs no *os.File (whose making costs a fcntl).
func (s *Store) openBeneathFd(rel string, flags int, mode uint32) (int, error) {
	how := unix.OpenHow{
		Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
		Mode:  uint64(mode),
		// RESOLVE_NO_XDEV: never into a file system mounted beneath
		// data/ (a user may mount a FUSE server on a stored directory
		// they own): the daemon would wait on it, or be refused by it.
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	for {
		fd, err := unix.Openat2(int(s.data.Fd()), rel, &how)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: rel, Err: err}
		}
		return fd, nil
	}
}

// at runs op on the directory holding rel, resolved beneath data/
// without following symlinks, and rel's last name, so a symlink planted
// in the store in place of a directory never leads a change outside it.
// Names directly under data/ need no resolving.
func (s *Store) at(rel string, op func(dirfd int, name string) error) error {
	if len(rel) > MaxPath {
		return unix.ENAMETOOLONG // no stored path is longer (see MaxPath)
	}
	dir, name := path.Split(rel)
	if dir == "" {
		return op(int(s.data.Fd()), name)
	}
	d, err := s.openBeneathFd(strings.TrimSuffix(dir, "/"), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	return op(d, name)
}

// at2 is at for operations on two names; two in one directory resolve
// it once.
func (s *Store) at2(a, b string, op func(dirA int, nameA string, dirB int, nameB string) error) error {
	if dirA, dirB := path.Dir(a), path.Dir(b); dirA == dirB {
		nameB := path.Base(b)
		return s.at(a, func(dir int, nameA string) error { return op(dir, nameA, dir, nameB) })
	}
	return s.at(a, func(dirA int, nameA string) error {
		return s.at(b, func(dirB int, nameB string) error { return op(dirA, nameA, dirB, nameB) })
	})
}

// stat reads the attributes of a path relative to data/.
func (s *Store) stat(rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := s.at(rel, func(dirfd int, name string) error {
		return statAt(dirfd, name, &st)
	})
	if err != nil {
		return st, &os.PathError{Op: "stat", Path: rel, Err: underlying(err)}
	}
	return st, nil
}

// underlying unwraps a PathError so callers can wrap with their own op.
func underlying(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
