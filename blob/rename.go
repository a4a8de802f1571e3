package blob

import (
	"os"

	"golang.org/x/sys/unix"
)

// Rename moves a name, atomically in the store and the index, with
// rename(2)'s flags (RENAME_NOREPLACE, RENAME_EXCHANGE). When it replaces
// a file, it returns that file's ID so the caller can uncharge the name.
func (s *Store) Rename(parent ID, name string, newParent ID, newName string, flags uint32) (replaced ID, err error) {
	p, err := s.PlanRename(parent, name, newParent, newName, flags)
	if err != nil || p.Noop {
		return 0, err
	}
	if err := s.RenameAt(p); err != nil {
		return 0, err
	}
	replaced, _ = s.CommitRename(p)
	return replaced, nil
}

// RenamePlan is a rename planned from the index (see PlanRename).
type RenamePlan struct {
	From, To Name
	Flags    uint32
	// Src is what From names; Dst what To names (0: nothing).
	Src, Dst ID
	// SrcDir: Src is a directory, so the paths of everything under it
	// move too.
	SrcDir bool
	// Noop: To already names Src; nothing to do.
	Noop     bool
	Old, New string
}

// PlanRename applies rename(2)'s rules to a rename from the index.
func (s *Store) PlanRename(parent ID, name string, newParent ID, newName string, flags uint32) (RenamePlan, error) {
	p := RenamePlan{From: Name{parent, name}, To: Name{newParent, newName}, Flags: flags}
	from, to := s.dirs[parent], s.dirs[newParent]
	if from == nil || to == nil {
		return p, ErrNotFound
	}
	src, ok := from.kids.lookup(name)
	if !ok {
		return p, ErrNotFound
	}
	dst, exists := to.kids.lookup(newName)
	if err := s.checkRename(src, dst, exists, to, flags); err != nil {
		return p, err
	}
	p.Src, p.Dst, p.SrcDir = src, dst, s.IsDir(src)
	p.Noop = exists && src == dst
	p.Old, p.New = s.childPath(parent, name), s.childPath(newParent, newName)
	if !s.fits(src, p.New) || (flags&unix.RENAME_EXCHANGE != 0 && !s.fits(dst, p.Old)) {
		return p, unix.ENAMETOOLONG
	}
	if !exists {
		s.crowd.adding(s, to, len(newName))
	}
	return p, nil
}

// RenameAt makes a planned rename in the store.
func (s *Store) RenameAt(p RenamePlan) error {
	s.changes.Add(1)
	err := s.at2(p.Old, p.New, func(da int, na string, db int, nb string) error {
		return unix.Renameat2(da, na, db, nb, uint(p.Flags))
	})
	if err != nil {
		if underlying(err) == unix.ENOSPC {
			return s.nameErr("rename", p.New, err)
		}
		return &os.LinkError{Op: "rename", Old: p.Old, New: p.New, Err: underlying(err)}
	}
	return nil
}

// CommitRename commits a rename made in the store to the index, and
// returns the file it replaced (0: none). Between plan and commit the
// owner may have dropped Src or Dst from the index (an eviction): the
// store's rename moved the dropped file's bytes all the same, so lost
// are the names that now hold bytes the index no longer has, for the
// owner to unlink.
func (s *Store) CommitRename(p RenamePlan) (replaced ID, lost []Name) {
	from, to := s.dirs[p.From.Parent], s.dirs[p.To.Parent]
	srcHere := from != nil && from.kids.get(p.From.Name) == p.Src
	dstHere := p.Dst != 0 && to != nil && to.kids.get(p.To.Name) == p.Dst
	if p.Flags&unix.RENAME_EXCHANGE != 0 {
		switch {
		case srcHere && dstHere:
			s.moveName(p.Dst, to, p.To.Name, from, p.From.Name)
			s.moveName(p.Src, from, p.From.Name, to, p.To.Name)
		case srcHere:
			from.kids.del(p.From.Name)
			s.moveName(p.Src, from, p.From.Name, to, p.To.Name)
			lost = append(lost, p.From)
		case dstHere:
			to.kids.del(p.To.Name)
			s.moveName(p.Dst, to, p.To.Name, from, p.From.Name)
			lost = append(lost, p.To)
		default:
			lost = append(lost, p.From, p.To)
		}
		return 0, lost
	}
	if dstHere {
		if _, isDir := s.dirs[p.Dst]; isDir {
			delete(s.dirs, p.Dst)
			s.dirsChanged()
			to.kids.del(p.To.Name)
		} else {
			s.dropName(p.Dst, to, p.To.Name)
			replaced = p.Dst
		}
	}
	if !srcHere {
		return replaced, append(lost, p.To)
	}
	from.kids.del(p.From.Name)
	s.moveName(p.Src, from, p.From.Name, to, p.To.Name)
	return replaced, nil
}

// checkRename applies rename(2)'s rules before the store is touched; mu
// held.
func (s *Store) checkRename(src, dst ID, exists bool, to *dir, flags uint32) error {
	if flags&unix.RENAME_WHITEOUT != 0 {
		// A whiteout is a character device left in the old name's
		// place: kvfs stores directories and regular files only, and
		// refuses mknod of one with EPERM too.
		return unix.EPERM
	}
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
	case isDstDir && dstDir.kids.len() > 0:
		return unix.ENOTEMPTY
	}
	return nil
}

// moveName points to/newName at id, which was from/name.
func (s *Store) moveName(id ID, from *dir, name string, to *dir, newName string) {
	to.kids.set(newName, id)
	if d, ok := s.dirs[id]; ok {
		d.parent, d.name = to, newName
		s.dirsChanged()
		return
	}
	s.note(id)
	for i, l := range s.files[id].links() {
		if l.Parent == from.id && l.Name == name {
			s.files[id].links()[i] = Name{to.id, newName}
			return
		}
	}
}
