package core

import (
	"os"

	"github.com/kvfs/kvfs/blob"
	"golang.org/x/sys/unix"
)

// Preview is a store's data/ as it lies, read while Open builds the
// index (a start that serves before its index is ready; see
// fusefs.Loading). It shows what a load keeps: directories, and regular
// files no writer had open at a crash (a marked file is half-written and
// the load deletes it). It changes nothing and records no use.
type Preview struct {
	store   *blob.Store
	writing map[uint64]bool // stored inodes marked in writing/
	early   early           // the stores it takes (see early.go)
}

// NewPreview reads which stored files were being written at a crash.
func NewPreview(store *blob.Store) (*Preview, error) {
	w, err := store.WritingInodes()
	if err != nil {
		return nil, err
	}
	p := &Preview{store: store, writing: w}
	p.early.ops.SetRank(rankEarlyOps)
	p.early.mu.SetRank(rankEarly)
	return p, nil
}

// Shown says whether an entry of type typ (S_IFMT bits, or a DT_ value
// shifted by 12) with stored inode ino is one the load keeps.
func (p *Preview) Shown(typ uint32, ino uint64) bool {
	switch typ & unix.S_IFMT {
	case unix.S_IFDIR:
		return true
	case unix.S_IFREG:
		return !p.writing[ino] || p.madeIno(ino)
	}
	return false
}

// Attr is the attributes of rel, relative to the store's data/ ("" is
// the root); ErrNotFound for a name the load would not keep.
func (p *Preview) Attr(rel string) (Attr, error) {
	st, err := p.store.StatPath(rel)
	if err != nil {
		if os.IsNotExist(err) {
			return Attr{}, ErrNotFound
		}
		return Attr{}, err
	}
	if !p.Shown(st.Mode, st.Ino) {
		return Attr{}, ErrNotFound
	}
	return StoredAttr(st), nil
}

// StoredAttr is the attributes of a stored file as its own stat gives
// them, before the index can say what it is charged and named.
func StoredAttr(st unix.Stat_t) Attr {
	return Attr{Stat_t: st, Charge: st.Blocks * 512, Links: int(st.Nlink)}
}

// Open opens rel for reading: a file the load keeps, or, with dir, a
// directory.
func (p *Preview) Open(rel string, dir bool) (*os.File, error) {
	flags := unix.O_RDONLY | unix.O_NONBLOCK // a FIFO planted in the store must not block the open
	if dir {
		flags |= unix.O_DIRECTORY
	}
	f, err := p.store.OpenPath(rel, flags)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, ErrNotFound
		}
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if !p.Shown(st.Mode, st.Ino) || (st.Mode&unix.S_IFMT == unix.S_IFDIR) != dir {
		f.Close()
		return nil, ErrNotFound
	}
	return f, nil
}

// Statfs is the figures of the disk that holds the store.
func (p *Preview) Statfs() (unix.Statfs_t, error) {
	var st unix.Statfs_t
	err := unix.Statfs(p.store.BackingPath(""), &st)
	return st, err
}
