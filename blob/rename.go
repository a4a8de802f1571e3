package blob

import (
	"os"

	"golang.org/x/sys/unix"
)

// Rename moves a name, atomically in the store and the index, with
// rename(2)'s flags (RENAME_NOREPLACE, RENAME_EXCHANGE). When it replaces
// a file, it returns that file's ID so the caller can uncharge the name.
func (s *Store) Rename(parent ID, name string, newParent ID, newName string, flags uint32) (replaced ID, err error) {
	s.changes.Add(1)
	from, to := s.dirs[parent], s.dirs[newParent]
	if from == nil || to == nil {
		return 0, ErrNotFound
	}
	src, ok := from.kids[name]
	if !ok {
		return 0, ErrNotFound
	}
	dst, exists := to.kids[newName]
	if err := s.checkRename(src, dst, exists, to, flags); err != nil {
		return 0, err
	}
	if exists && src == dst {
		return 0, nil
	}
	oldRel, newRel := s.childPath(parent, name), s.childPath(newParent, newName)
	err = s.at2(oldRel, newRel, func(da int, na string, db int, nb string) error {
		return unix.Renameat2(da, na, db, nb, uint(flags))
	})
	if err != nil {
		return 0, &os.LinkError{Op: "rename", Old: oldRel, New: newRel, Err: underlying(err)}
	}
	if flags&unix.RENAME_EXCHANGE != 0 {
		s.moveName(dst, to, newName, from, name)
		s.moveName(src, from, name, to, newName)
		return 0, nil
	}
	if exists {
		if _, isDir := s.dirs[dst]; isDir {
			delete(s.dirs, dst)
			delete(to.kids, newName)
		} else {
			s.dropName(dst, to, newName)
			replaced = dst
		}
	}
	delete(from.kids, name)
	s.moveName(src, from, name, to, newName)
	return replaced, nil
}

// checkRename applies rename(2)'s rules before the store is touched; mu
// held.
func (s *Store) checkRename(src, dst ID, exists bool, to *dir, flags uint32) error {
	if flags&^(unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE) != 0 ||
		flags == unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE {
		return unix.EINVAL
	}
	if flags&unix.RENAME_NOREPLACE != 0 && exists {
		return unix.EEXIST
	}
	if flags&unix.RENAME_EXCHANGE != 0 && !exists {
		return ErrNotFound
	}
	srcDir, isSrcDir := s.dirs[src]
	if isSrcDir {
		for d := to; d != nil; d = d.parent {
			if d == srcDir {
				return unix.EINVAL
			}
		}
	}
	if !exists || flags&unix.RENAME_EXCHANGE != 0 || src == dst {
		return nil
	}
	dstDir, isDstDir := s.dirs[dst]
	switch {
	case isSrcDir && !isDstDir:
		return unix.ENOTDIR
	case !isSrcDir && isDstDir:
		return unix.EISDIR
	case isDstDir && len(dstDir.kids) > 0:
		return unix.ENOTEMPTY
	}
	return nil
}

// moveName points to/newName at id, which was from/name.
func (s *Store) moveName(id ID, from *dir, name string, to *dir, newName string) {
	to.kids[newName] = id
	if d, ok := s.dirs[id]; ok {
		d.parent, d.name = to, newName
		return
	}
	for i, l := range s.files[id].links {
		if l.Parent == from.id && l.Name == name {
			s.files[id].links[i] = Name{to.id, newName}
			return
		}
	}
}
