package blob

import (
	"os"

	"golang.org/x/sys/unix"
)

// Changes in phases. An owner that lets changes in different directories
// run at once makes each one in three steps: it plans the change from
// the index (the ...Path and Plan... methods, under its lock, shared),
// makes it in the store directory (the ...At methods, which never touch
// the index and so need no lock of the owner's), and commits it to the
// index (the Add..., Remove... and Commit... methods, under its lock,
// exclusively, with no syscall). Between plan and commit the owner keeps
// every other change of the same names out (package core orders them
// per directory, as the kernel does). The one-call methods (Create,
// Link, Unlink, Rename, Mkdir, Rmdir, Drop) run the three steps in a
// row, for owners that serialise everything.

// daemonUID and daemonGID own what the daemon creates: a new file owned
// by who needs no chown when they are who (files are born under writing/,
// which is never set-group-ID, so a new one takes the daemon's group;
// who's group is its directory's where that one is set-group-ID: in).
var daemonUID, daemonGID = os.Geteuid(), os.Getegid()

// chown says whether a new file must be given to who.
func (who Owner) chown() bool {
	return who.UID >= 0 && (who.UID != daemonUID || who.GID != daemonGID)
}

// in is who owns a new entry of directory dirfd: a directory with the
// set-group-ID bit gives its group, as every Unix file system does (the
// kernel leaves that to a FUSE daemon). One fstat, only where kvfs gives
// its files owners.
func (who Owner) in(dirfd int) Owner {
	var st unix.Stat_t
	if who.UID >= 0 && unix.Fstat(dirfd, &st) == nil && st.Mode&unix.S_ISGID != 0 {
		who.GID = int(st.Gid)
	}
	return who
}

// OwnerAt is who owns a new entry at rel (see in): for a create that
// links its file to its name apart from making it (LinkDetachedAt).
func (s *Store) OwnerAt(rel string, who Owner) Owner {
	if who.UID >= 0 {
		s.at(rel, func(dirfd int, _ string) error { who = who.in(dirfd); return nil })
	}
	return who
}

// FreePath is the path, relative to data/, of name in parent, which the
// index must not hold yet (EEXIST; ErrNotFound: no such directory). It
// plans a change that adds the name: a directory filling its file
// system's index is reported here (WatchDirs), under the owner's lock
// shared, never at the commit.
func (s *Store) FreePath(parent ID, name string) (string, error) {
	d, err := s.freeName(parent, name)
	if err != nil {
		return "", err
	}
	rel := s.childPath(parent, name)
	if len(rel) > MaxPath {
		return "", unix.ENAMETOOLONG
	}
	s.crowd.adding(s, d, len(name))
	return rel, nil
}

// MaxPath is the longest path, relative to data/, a stored name may
// have: every change reaches its file by that path in one system call,
// which takes at most PATH_MAX bytes with the NUL (ext4 itself has no
// limit on depth; a name that would pass it, or a directory moved where
// a name below it would, is refused with ENAMETOOLONG).
const MaxPath = unix.PathMax - 1

// deepest is the length of the longest path below directory d,
// relative to d (0: d is empty).
func (s *Store) deepest(d *dir) int {
	most := 0
	for name, id := range d.kids.all() {
		n := len(name)
		if sub, ok := s.dirs[id]; ok {
			if below := s.deepest(sub); below > 0 {
				n += 1 + below
			}
		}
		most = max(most, n)
	}
	return most
}

// fits says whether entry id can be at rel: rel, and for a directory
// every path below it, within MaxPath.
func (s *Store) fits(id ID, rel string) bool {
	if len(rel) > MaxPath {
		return false
	}
	d, ok := s.dirs[id]
	if !ok {
		return true
	}
	below := s.deepest(d)
	return below == 0 || len(rel)+1+below <= MaxPath
}

// CreateFor is CreateDetached of a file who owns; it returns the file's
// attributes after the chown, for the reply (inode 0 if they could not
// be read). LinkDetachedAt names it.
func (s *Store) CreateFor(id ID, mode uint32, who Owner) (*os.File, unix.Stat_t, error) {
	f, err := s.CreateDetached(id, mode)
	if err != nil {
		return nil, unix.Stat_t{}, err
	}
	return f, who.take(f), nil
}

// take gives a new file to who and returns its attributes after that
// (inode 0 if they could not be read).
func (who Owner) take(f *os.File) unix.Stat_t {
	if who.chown() {
		f.Chown(who.UID, who.GID)
	}
	var st unix.Stat_t
	unix.Fstat(int(f.Fd()), &st)
	return st
}

// CreateAt makes a new empty file id at rel, exclusively, and opens it
// read-write; it returns the new file's attributes. The file is born
// under writing/ and only then linked to its name, so a crash at any
// point leaves it marked incomplete until its writer finishes
// (ClearWriting).
func (s *Store) CreateAt(rel string, id ID, mode uint32, who Owner) (*os.File, unix.Stat_t, error) {
	s.changes.Add(1)
	var st unix.Stat_t
	f, err := s.CreateDetached(id, mode)
	if err != nil {
		return nil, st, err
	}
	// Given to its owner in the name's directory, which it may take its
	// group from, before the name shows it.
	wfd, wname := s.marker(id)
	err = s.at(rel, func(dirfd int, name string) error {
		st = who.in(dirfd).take(f)
		return unix.Linkat(wfd, wname, dirfd, name, 0)
	})
	if err != nil {
		s.ClearWriting(id)
		f.Close()
		return nil, st, s.nameErr("create", rel, err)
	}
	return f, st, nil
}

// linkMarkedAt gives the file marked under writing/ as id the name rel;
// op names the failure.
func (s *Store) linkMarkedAt(op, rel string, id ID) error {
	wfd, wname := s.marker(id)
	err := s.at(rel, func(dirfd int, name string) error { return unix.Linkat(wfd, wname, dirfd, name, 0) })
	if err != nil {
		return s.nameErr(op, rel, err)
	}
	return nil
}

// AddFile indexes a new file id, stored inode ino (0: not known), as
// name in parent.
func (s *Store) AddFile(parent ID, name string, id ID, ino uint64) error {
	d, err := s.freeName(parent, name)
	if err != nil {
		return err
	}
	d.kids.set(name, id)
	s.files[id] = newFile(ino, Name{d.id, name})
	s.note(id)
	return nil
}

// LinkPaths plans a link of file id as name in parent: the path of a
// name it has, the directory that name is in, and the new name's path.
func (s *Store) LinkPaths(id, parent ID, name string) (old, rel string, from ID, err error) {
	f, ok := s.files[id]
	if !ok || len(f.links()) == 0 {
		return "", "", 0, ErrNotFound
	}
	first := f.links()[0]
	if rel, err = s.FreePath(parent, name); err != nil {
		return "", "", 0, err
	}
	return s.childPath(first.Parent, first.Name), rel, first.Parent, nil
}

// LinkAt links the stored file at old to rel, and returns its
// attributes as the new name reaches them (inode 0: not read).
func (s *Store) LinkAt(old, rel string) (unix.Stat_t, error) {
	s.changes.Add(1)
	var st unix.Stat_t
	err := s.at2(old, rel, func(da int, na string, db int, nb string) error {
		if err := unix.Linkat(da, na, db, nb, 0); err != nil {
			return err
		}
		// Inode 0 if this fails: the caller reads them again.
		unix.Fstatat(db, nb, &st, unix.AT_SYMLINK_NOFOLLOW)
		return nil
	})
	if err != nil {
		return st, s.nameErr("link", rel, err)
	}
	return st, nil
}

// AddLink indexes another name of file id (ErrNotFound: id has no name
// left in the index).
func (s *Store) AddLink(id, parent ID, name string) error {
	f, ok := s.files[id]
	if !ok || len(f.links()) == 0 {
		return ErrNotFound
	}
	d, err := s.freeName(parent, name)
	if err != nil {
		return err
	}
	d.kids.set(name, id)
	f.addLink(Name{parent, name})
	s.note(id)
	return nil
}

// RemoveName takes a file's name out of the index and returns the file
// and the name's path; the stored name stays for UnlinkAt. first says
// whether it was the file's oldest name (names keep the order they were
// made in: a new object's first is the one it was created under).
func (s *Store) RemoveName(parent ID, name string) (id ID, rel string, first bool, err error) {
	if id, rel, err = s.UnlinkPath(parent, name); err != nil {
		return 0, "", false, err
	}
	if ls := s.files[id].links(); len(ls) > 0 {
		first = ls[0] == Name{parent, name}
	}
	s.dropName(id, s.dirs[parent], name)
	return id, rel, first, nil
}

// UnlinkAt removes the stored name rel; one already gone is not an
// error.
func (s *Store) UnlinkAt(rel string) error {
	s.changes.Add(1)
	if err := s.unlinkAt(rel, 0); err != nil {
		return &os.PathError{Op: "unlink", Path: rel, Err: err}
	}
	return nil
}

// Forget takes every name of file id out of the index and returns them;
// the stored names stay for UnlinkAt.
func (s *Store) Forget(id ID) []Name {
	f, ok := s.files[id]
	if !ok {
		return nil
	}
	names := append([]Name(nil), f.links()...)
	for _, n := range names {
		s.dropName(id, s.dirs[n.Parent], n.Name)
	}
	return names
}

// MkdirAt makes the stored directory rel.
func (s *Store) MkdirAt(rel string, mode uint32, who Owner) error {
	s.changes.Add(1)
	err := s.at(rel, func(dirfd int, name string) error {
		if err := unix.Mkdirat(dirfd, name, mode); err != nil {
			return err
		}
		if who.UID >= 0 {
			// A set-group-ID parent gave the new directory its group
			// and its bit already (mkdir(2)); the chown keeps both.
			who = who.in(dirfd)
			unix.Fchownat(dirfd, name, who.UID, who.GID, unix.AT_SYMLINK_NOFOLLOW)
		}
		return nil
	})
	if err != nil {
		return s.nameErr("mkdir", rel, err)
	}
	return nil
}

// AddDir indexes a new directory name in parent and returns its ID.
func (s *Store) AddDir(parent ID, name string) (ID, error) {
	d, err := s.freeName(parent, name)
	if err != nil {
		return 0, err
	}
	id := s.NewID()
	d.kids.set(name, id)
	s.dirs[id] = &dir{id: id, parent: d, name: name, kids: newKids(0)}
	return id, nil
}

// UnlinkPath plans the removal of file name in parent: its ID and path.
func (s *Store) UnlinkPath(parent ID, name string) (ID, string, error) {
	_, id, err := s.child(parent, name)
	if err != nil {
		return 0, "", err
	}
	if _, isDir := s.dirs[id]; isDir {
		return 0, "", unix.EISDIR
	}
	return id, s.childPath(parent, name), nil
}

// RmdirPath plans the removal of directory name in parent: its ID and
// path, if it is an empty directory.
func (s *Store) RmdirPath(parent ID, name string) (ID, string, error) {
	_, id, err := s.child(parent, name)
	if err != nil {
		return 0, "", err
	}
	child, isDir := s.dirs[id]
	if !isDir {
		return 0, "", unix.ENOTDIR
	}
	if child.kids.len() > 0 {
		return 0, "", unix.ENOTEMPTY
	}
	return id, s.childPath(parent, name), nil
}

// RmdirAt removes the stored, empty directory rel.
func (s *Store) RmdirAt(rel string) error {
	s.changes.Add(1)
	if err := s.unlinkAt(rel, unix.AT_REMOVEDIR); err != nil {
		return &os.PathError{Op: "rmdir", Path: rel, Err: err}
	}
	return nil
}

// RemoveDir takes directory id, named name in parent, out of the index.
func (s *Store) RemoveDir(parent ID, name string, id ID) {
	if d, ok := s.dirs[parent]; ok && d.kids.get(name) == id {
		d.kids.del(name)
	}
	delete(s.dirs, id)
	s.dirsChanged()
}

// IsDir says whether id is a directory of the index.
func (s *Store) IsDir(id ID) bool {
	_, ok := s.dirs[id]
	return ok
}
