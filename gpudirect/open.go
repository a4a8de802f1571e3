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

// Align is the alignment of O_DIRECT offsets, lengths and buffers.
const Align = 4096

var (
	// ErrNotKVFS means the path is not a regular file on a kvfs mount.
	ErrNotKVFS = errors.New("not a file on a kvfs mount")
	// ErrChanged means the stored file found is not the object opened
	// through the mount (renamed or rewritten meanwhile); opening again
	// finds the new one.
	ErrChanged = errors.New("stored file does not match the object opened through the mount")
	// ErrWriteUnsupported is OpenFile's answer to a write mode, for now.
	ErrWriteUnsupported = errors.New("writes through the direct path are not supported yet")
)

// File is one object opened for the direct path: a handle through the
// mount, which pins the object, and its stored file.
type File struct {
	path    string
	pin     *os.File
	data    *os.File
	backing string
	size    int64
	direct  bool
	why     string // why data is not O_DIRECT, when it is not
}

// resolveTries bounds how often Open retries a stored file that changed
// under it (a rename replaced the name between the xattr and the open).
const resolveTries = 3

// Open opens an object for reading over the direct path.
func Open(path string) (*File, error) { return OpenFile(path, os.O_RDONLY) }

// OpenFile is Open with open(2) flags; only O_RDONLY is supported now.
// A direct writer will open the mount for writing (the reservation and
// the pin), write the stored file with O_DIRECT, and have its charge
// settled from the stored file's size when the mount handle closes.
func OpenFile(path string, flag int) (*File, error) {
	if flag&(os.O_WRONLY|os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_TRUNC) != 0 {
		return nil, &os.PathError{Op: "open", Path: path, Err: ErrWriteUnsupported}
	}
	pin, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	f := &File{path: path, pin: pin}
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

// kvfsFile requires st, of path, to be a regular file on a kvfs mount:
// its device must be a fuse.kvfs mount's.
func kvfsFile(path string, st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s: not a regular file: %w", path, ErrNotKVFS)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	fstype := "unknown"
	for _, m := range mountinfo.Read() {
		if m.Dev == dev {
			fstype = m.FSType
		}
	}
	if fstype != "fuse.kvfs" {
		return fmt.Errorf("%s: %w (its file system is %s)", path, ErrNotKVFS, fstype)
	}
	return nil
}

// resolve finds and opens the stored file of the pinned object.
func (f *File) resolve() error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.pin.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: f.path, Err: err}
	}
	if err := kvfsFile(f.path, &st); err != nil {
		return err
	}
	backing, err := backingPath(f.pin)
	if err != nil {
		return fmt.Errorf("%s: %w", f.path, err)
	}
	if f.data != nil {
		f.data.Close()
		f.data = nil
	}
	if err := f.openData(backing); err != nil {
		return err
	}
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
// ramfs, some network file systems).
func (f *File) openData(backing string) error {
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NOCTTY
	fd, err := unix.Open(backing, flags|unix.O_DIRECT, 0)
	f.direct = err == nil
	if err == unix.EINVAL {
		f.why = "the store's file system refuses O_DIRECT (EINVAL); reading through its page cache"
		fd, err = unix.Open(backing, flags, 0)
	}
	if err != nil {
		return fmt.Errorf("%s: opening its stored file: %w", f.path, &os.PathError{Op: "open", Path: backing, Err: err})
	}
	f.data, f.backing = os.NewFile(uintptr(fd), backing), backing
	return nil
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

// Backing is the stored file's path.
func (f *File) Backing() string { return f.backing }

// Direct reports whether the stored file is read with O_DIRECT and, if
// not, why.
func (f *File) Direct() (bool, string) { return f.direct, f.why }

// Fd is the stored file's descriptor (for cuFile, or a caller's own
// reads); it stays valid until Close.
func (f *File) Fd() int { return int(f.data.Fd()) }

// Close closes the stored file, then the handle on the mount, which
// releases the pin.
func (f *File) Close() error {
	err := f.data.Close()
	if perr := f.pin.Close(); err == nil {
		err = perr
	}
	return err
}
