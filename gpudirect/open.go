package gpudirect

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvfs/kvfs/internal/mountinfo"
	"golang.org/x/sys/unix"
)

// BackingXattr is the extended attribute of an object on a kvfs mount
// that names its stored file (kvfs's fusefs.BackingXattr).
const BackingXattr = "user.kvfs.backing"

// WritesXattr is the attribute of every directory on a kvfs mount that
// says how writers' bytes reach the store (kvfs's fusefs.WritesXattr):
// WritesPassthrough, where direct writes are admitted like any writer's,
// or WritesDaemon, where every byte must pass through the daemon.
const (
	WritesXattr       = "user.kvfs.writes"
	WritesPassthrough = "passthrough"
	WritesDaemon      = "daemon"
)

// Align is the alignment of O_DIRECT offsets, lengths and buffers.
const Align = 4096

var (
	// ErrNotKVFS means the path is not a regular file on a kvfs mount.
	ErrNotKVFS = errors.New("not a file on a kvfs mount")
	// ErrChanged means the stored file found is not the object opened
	// through the mount (renamed or rewritten meanwhile); opening again
	// finds the new one.
	ErrChanged = errors.New("stored file does not match the object opened through the mount")
	// ErrMode is OpenFile's answer to flags the direct path does not
	// take: O_RDWR, O_APPEND.
	ErrMode = errors.New("the direct path opens an object either read-only or write-only, without O_APPEND")
	// ErrStrictCapacity means the mount passes every written byte
	// through its daemon (kvfs mount --strict-capacity, --no-passthrough,
	// or not root), so it allows no direct writes: write through the
	// mount instead.
	ErrStrictCapacity = errors.New("the kvfs mount passes every written byte through its daemon (--strict-capacity or no passthrough): no direct writes; write through the mount")
)

// File is one object opened for the direct path: a handle through the
// mount, which pins the object (and, for a writer, holds its reservation
// and is what publishes it at Close), and its stored file.
type File struct {
	path    string
	pin     *os.File
	data    *os.File
	backing string
	size    int64
	direct  bool
	why     string // why data is not O_DIRECT, when it is not
	write   *writeState
	// dev is a device found to be a kvfs mount's before the open (a
	// writer's directory's), so that the open file on it needs no
	// second look at the mount table.
	dev uint64
}

// resolveTries bounds how often Open retries a stored file that changed
// under it (a rename replaced the name between the xattr and the open).
const resolveTries = 3

// Open opens an object for reading over the direct path.
func Open(path string) (*File, error) { return OpenFile(path, os.O_RDONLY, 0) }

// Create creates or truncates an object for writing over the direct path
// (see OpenFile), with mode 0644 before the umask.
func Create(path string) (*File, error) {
	return OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
}

// OpenFile opens an object over the direct path, with the flags and
// permissions of os.OpenFile: os.O_RDONLY to read, or os.O_WRONLY with
// any of os.O_CREATE, os.O_EXCL, os.O_TRUNC to write. A writer's handle
// on the mount admits its reservation when it opens, and its Close
// publishes the object at the size written, or refuses it (ENOSPC) and
// removes it; see Writer.
func OpenFile(path string, flag int, perm os.FileMode) (*File, error) {
	if flag&(os.O_RDWR|os.O_APPEND) != 0 || flag&(os.O_WRONLY|os.O_RDWR) == 0 && flag&(os.O_CREATE|os.O_TRUNC|os.O_EXCL) != 0 {
		return nil, &os.PathError{Op: "open", Path: path, Err: ErrMode}
	}
	write := flag&os.O_WRONLY != 0
	var dev uint64
	if write {
		var err error
		if dev, err = directWrites(path); err != nil {
			return nil, err
		}
	}
	pin, err := os.OpenFile(path, flag|unix.O_NOCTTY, perm)
	if err != nil {
		return nil, err
	}
	f := &File{path: path, pin: pin, dev: dev}
	if write {
		f.write = &writeState{}
	}
	for try := 1; ; try++ {
		err = f.resolve()
		if err == nil || !errors.Is(err, ErrChanged) || try == resolveTries {
			break
		}
	}
	if err != nil {
		pin.Close()
		return nil, err
	}
	if write {
		f.write.openSize = f.size
	}
	return f, nil
}

// Check says whether path names a regular file on a kvfs mount, without
// opening it (so without pinning it).
func Check(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return kvfsFile(path, &st)
}

// kvfsFile requires st, of path, to be a regular file on a kvfs mount.
func kvfsFile(path string, st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return notRegular{path, st.Mode & unix.S_IFMT}
	}
	return kvfsMount(path, st)
}

// notRegular is ErrNotKVFS for a path that is no regular file, saying
// what it is (a directory said "not a regular file: not a file on a
// kvfs mount", though it was on one: an outside tester).
type notRegular struct {
	path string
	kind uint32
}

func (e notRegular) Error() string {
	what := map[uint32]string{unix.S_IFDIR: "a directory", unix.S_IFLNK: "a symbolic link", unix.S_IFIFO: "a fifo",
		unix.S_IFSOCK: "a socket", unix.S_IFCHR: "a device", unix.S_IFBLK: "a device"}[e.kind]
	if what == "" {
		what = "something else"
	}
	return e.path + " is " + what + ", not a regular file"
}

func (e notRegular) Is(target error) bool { return target == ErrNotKVFS }

// kvfsMount requires st, of path, to be on a kvfs mount: its device
// must be a fuse.kvfs mount's.
func kvfsMount(path string, st *unix.Stat_t) error {
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	var found mountinfo.Entry
	for _, m := range mountinfo.Read() {
		if m.Dev == dev {
			found = m
		}
	}
	if found.FSType != "fuse.kvfs" {
		fstype := found.FSType
		if fstype == "" {
			fstype = "unknown"
		}
		return fmt.Errorf("%s: %w (its file system is %s)", path, ErrNotKVFS, fstype)
	}
	return nil
}

// directWrites checks, before anything is created, that path's directory
// is on a kvfs mount that takes direct writes: kvfs answers WritesXattr
// on every directory. The daemon enforces the rule itself (it names no
// stored file to a writer on a mount that passes every byte through
// it); asking first creates no empty object and takes no reservation for
// nothing. It returns the mount's device.
func directWrites(path string) (uint64, error) {
	dir := filepath.Dir(path)
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return 0, &os.PathError{Op: "open", Path: path, Err: unix.ENOTDIR}
	}
	buf := make([]byte, 64)
	n, err := unix.Getxattr(dir, WritesXattr, buf)
	switch {
	case err == nil && string(buf[:n]) == WritesDaemon:
		return 0, fmt.Errorf("%s: %w", path, ErrStrictCapacity)
	case err == nil && string(buf[:n]) == WritesPassthrough:
		return st.Dev, nil
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs // named as a place, not as "." (an outside tester's m/../f)
	}
	if err := kvfsMount(dir, &st); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return st.Dev, nil // a kvfs that does not say: its answer for the stored file decides
}

// resolve finds and opens the stored file of the pinned object.
func (f *File) resolve() error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.pin.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: f.path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != f.dev {
		if err := kvfsFile(f.path, &st); err != nil {
			return err
		}
	}
	backing, err := backingPath(f.pin)
	if errors.Is(err, ErrStrictCapacity) && f.write == nil {
		return fmt.Errorf("%s: open for writing on a mount that names no stored file while it is (%w)", f.path, err)
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", f.path, err)
	}
	if f.data != nil {
		f.data.Close()
		f.data = nil
	}
	if err == nil {
		err = f.openData(backing)
	}
	if err != nil && f.write == nil && unlinked(f.pin) {
		// The object's last name went (an rm, a rename over it)
		// while pinned: its stored file has no name left to open (no
		// backing, or ENOENT), but the pin holds the object, whole. A
		// loader racing a connector's deletes got a miss, or an error,
		// for an object it held (an outside tester: 13-65 of about
		// 3,000 direct loads).
		return f.readThroughPin()
	}
	if err != nil {
		return err
	}
	return f.sameObject()
}

// unlinked says whether the pinned object has no name left.
func unlinked(pin *os.File) bool {
	var st unix.Stat_t
	return unix.Fstat(int(pin.Fd()), &st) == nil && st.Nlink == 0
}

// readThroughPin reads the object through a duplicate of its pin, its
// page cache, not O_DIRECT: the stored file it was named by is gone.
func (f *File) readThroughPin() error {
	fd, err := unix.Dup(int(f.pin.Fd()))
	if err != nil {
		return &os.PathError{Op: "dup", Path: f.path, Err: err}
	}
	f.data, f.backing, f.direct = os.NewFile(uintptr(fd), f.path), "", false
	f.why = "its name was removed while it was pinned: reading through the mount"
	return f.sameObject()
}

// backingPath asks the mount, through the pinned handle, where the
// object's bytes are.
func backingPath(pin *os.File) (string, error) {
	buf := make([]byte, 4096)
	for {
		n, err := unix.Fgetxattr(int(pin.Fd()), BackingXattr, buf)
		switch {
		case err == unix.ERANGE:
			buf = make([]byte, 2*len(buf))
			continue
		case err == unix.EPERM:
			return "", ErrStrictCapacity
		case err == unix.ENODATA || err == unix.ENOTSUP:
			return "", fmt.Errorf("kvfs names no stored file for it (%s: %v): %w", BackingXattr, err, ErrNotKVFS)
		case err != nil:
			return "", fmt.Errorf("reading %s: %w", BackingXattr, err)
		}
		p := string(buf[:n])
		if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
			return "", fmt.Errorf("%s is %q, not an absolute path: %w", BackingXattr, p, ErrNotKVFS)
		}
		return p, nil
	}
}

// openData opens the stored file with O_DIRECT, or plain where the
// store's file system refuses O_DIRECT (EINVAL: tmpfs before Linux 6.6,
// ramfs, some network file systems). A writer's is opened write-only,
// never truncated or created: the open through the mount did that.
func (f *File) openData(backing string) error {
	flags, verb := unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, "reading"
	if f.write != nil {
		flags, verb = flags&^unix.O_RDONLY|unix.O_WRONLY, "writing"
	}
	fd, err := openNoFollow(backing, flags|unix.O_DIRECT)
	f.direct = err == nil
	if err == unix.EINVAL {
		f.why = "the store's file system refuses O_DIRECT (EINVAL); " + verb + " through its page cache"
		fd, err = openNoFollow(backing, flags)
	}
	if err != nil {
		return fmt.Errorf("%s: opening its stored file: %w", f.path, &os.PathError{Op: "open", Path: backing, Err: err})
	}
	f.data, f.backing = os.NewFile(uintptr(fd), backing), backing
	return nil
}

// openNoFollow opens path, refusing a symbolic link anywhere in it
// (ELOOP): kvfs names the stored file by its store's path with the
// store's own symlinks resolved, so a link on the way is one planted in
// the store, where a user who owns a directory on the mount owns its
// stored directory too and could swap it for a link out of the store
// between the pin and this open. The descriptor's flags hold no
// O_NOFOLLOW, which cuFile refuses to register ("unsupported file open
// flags", CUfileOpError 5019; libcufile 1.15, CUDA 13): openat2's
// RESOLVE_NO_SYMLINKS refuses the links instead. Before Linux 5.6 (no
// openat2) it is O_NOFOLLOW, the last name alone, and cuFile's refusal.
func openNoFollow(path string, flags int) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_NO_SYMLINKS})
	if err == unix.ENOSYS {
		return unix.Open(path, flags|unix.O_NOFOLLOW, 0)
	}
	return fd, err
}

// sameObject checks that the stored file opened is the pinned object: a
// stat of the handle that goes to the daemon (not the kernel's cached
// attributes) gives the same size and modification time. kvfs reports
// both from the stored file itself, to the nanosecond.
func (f *File) sameObject() error {
	var mnt unix.Statx_t
	flags := unix.AT_EMPTY_PATH | unix.AT_STATX_FORCE_SYNC
	if err := unix.Statx(int(f.pin.Fd()), "", flags, unix.STATX_SIZE|unix.STATX_MTIME, &mnt); err != nil {
		return &os.PathError{Op: "statx", Path: f.path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.data.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: f.backing, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int64(mnt.Size) != st.Size ||
		mnt.Mtime.Sec != st.Mtim.Sec || int64(mnt.Mtime.Nsec) != st.Mtim.Nsec {
		return fmt.Errorf("%s: %w (mount: %d bytes, mtime %d.%09d; %s: %d bytes, mtime %d.%09d)", f.path, ErrChanged,
			mnt.Size, mnt.Mtime.Sec, mnt.Mtime.Nsec, f.backing, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
	}
	f.size = st.Size
	return nil
}

// Size is the object's size in bytes, as of Open.
func (f *File) Size() int64 { return f.size }

// Path is the object's path on the mount.
func (f *File) Path() string { return f.path }

// Backing is the stored file's path; "" where the object is read
// through its pin (its name was removed while it was pinned).
func (f *File) Backing() string { return f.backing }

// Direct reports whether the stored file is read with O_DIRECT and, if
// not, why.
func (f *File) Direct() (bool, string) { return f.direct, f.why }

// Fd is the stored file's descriptor (for cuFile, or a caller's own
// reads); it stays valid until Close.
func (f *File) Fd() int { return int(f.data.Fd()) }

// Writable reports whether f was opened for writing.
func (f *File) Writable() bool { return f.write != nil }

// Close closes the stored file, then the handle on the mount, which
// releases the pin. A writer's close is where kvfs admits the object at
// the size written: an error wrapping syscall.ENOSPC means it could not
// be, and kvfs removed it (nothing over the capacity is published).
func (f *File) Close() error {
	err := f.data.Close()
	if f.write != nil {
		err = errors.Join(err, f.refreshAttrs())
	}
	if perr := f.pin.Close(); perr != nil {
		return errors.Join(perr, err)
	}
	return err
}
