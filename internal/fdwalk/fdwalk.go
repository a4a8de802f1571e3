// Package fdwalk walks a directory tree by directory descriptors, not by
// paths: a tree whose paths, with the root's in front, pass PATH_MAX is
// walked too (kvfs's stores hold paths of up to 4,095 bytes beneath
// data/). fsck and the usage measures share it.
package fdwalk

import (
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Walk calls visit for root (rel "", typ fs.ModeDir) and every entry
// beneath it, a directory before its entries and each directory's
// entries in name order, with the entry's type as the directory listed
// it and its lstat. It follows no symlink. visit's fs.SkipDir for a
// directory skips what is beneath it; any other error, visit's or the
// walk's, ends the walk.
func Walk(root string, visit func(rel string, typ fs.FileMode, st *unix.Stat_t) error) error {
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: root, Err: err}
	}
	if err := visit("", fs.ModeDir, &st); err != nil {
		return err
	}
	fd, err := openDir(unix.AT_FDCWD, root)
	if err != nil {
		return &fs.PathError{Op: "open", Path: root, Err: err}
	}
	return walk(fd, "", visit)
}

// openDir opens directory name (in dirfd) to list it, leaving its atime
// as it is: a walk of a store (fsck's) moved every stored directory's
// atime, which the mount shows as the directory's (an outside tester:
// a directory atime set with touch -a, kept by the daemon across its
// starts, was gone after a kvfs fsck). O_NOATIME needs the directory's
// owner or CAP_FOWNER; without either it is listed as before.
func openDir(dirfd int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dirfd, name, flags|unix.O_NOATIME, 0)
	if err == unix.EPERM {
		fd, err = unix.Openat(dirfd, name, flags, 0)
	}
	return fd, err
}

// walk visits the entries of the directory open as dirfd (at rel) and
// below, and closes dirfd.
func walk(dirfd int, rel string, visit func(string, fs.FileMode, *unix.Stat_t) error) error {
	d := os.NewFile(uintptr(dirfd), rel)
	defer d.Close()
	ents, err := d.ReadDir(-1)
	if err != nil {
		return err
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range ents {
		p := path.Join(rel, e.Name())
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "lstat", Path: p, Err: err}
		}
		err := visit(p, e.Type(), &st)
		if err == fs.SkipDir && e.IsDir() {
			continue
		}
		if err != nil {
			return err
		}
		if !e.IsDir() {
			continue
		}
		fd, err := openDir(dirfd, e.Name())
		if err != nil {
			return &fs.PathError{Op: "open", Path: p, Err: err}
		}
		if err := walk(fd, p, visit); err != nil {
			return err
		}
	}
	return nil
}

// RemoveAt removes name in the directory open as dirfd, and everything
// beneath it when it is a directory, by descriptors: it works where the
// entries' paths pass PATH_MAX, as os.RemoveAll does not.
func RemoveAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err != unix.EISDIR && err != unix.EPERM {
		return err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fd), name)
	ents, err := d.ReadDir(-1)
	for _, e := range ents {
		if err == nil {
			err = RemoveAt(fd, e.Name())
		}
	}
	d.Close()
	if err != nil {
		return err
	}
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}
