package tests

// TestModel's checks: what a vanished object must look like, what a read
// must return, what the ledger's stats may say after each step, and what
// the whole mount must hold at rest.

import (
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// gone handles an ENOENT for a name the model holds: kvfs evicted its
// object. That is allowed only for an object no descriptor holds, and
// only whole: every other name of it must be gone too (an open asks the
// daemon; a stat may answer from the kernel's cache).
func (m *model) gone(name, op string) {
	o := m.names[name]
	m.note("%s of %s (#%d): ENOENT, evicted", op, name, o.id)
	if m.isHeld(o) || slices.Contains(m.opened, o) {
		m.failf("%s of %s answered ENOENT, but a descriptor holds its object (#%d): evicted while held", op, name, o.id)
	}
	for _, other := range o.sortedNames() {
		fd, err := unix.Open(m.path(other), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
			m.failf("%s of %s answered ENOENT, but %s, another name of the object (#%d), still opens: evicted in part", op, name, other, o.id)
		}
		if err != unix.ENOENT {
			m.failf("open(%s) of an object seen evicted: %v", other, err)
		}
	}
	m.forget(o)
}

// forget drops every name of an object that vanished.
func (m *model) forget(o *mInode) {
	for n := range o.names {
		delete(m.names, n)
	}
	clear(o.names)
	m.vanished++
}

// verify reads an object through fd: its size, its charge (st_blocks)
// and every byte must be the model's.
func (m *model) verify(fd int, o *mInode, what string) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		m.failf("fstat through %s: %v", what, err)
	}
	if st.Size != int64(len(o.data)) {
		m.failf("%s (#%d): fstat says %d bytes, the model %d", what, o.id, st.Size, len(o.data))
	}
	// An open writer's charge is at least its reservation.
	writer := slices.ContainsFunc(m.held, func(h *mHandle) bool { return h.ino == o && h.write })
	if got := st.Blocks * 512; got != ceil4096(st.Size) && !(writer && got > ceil4096(st.Size)) {
		m.failf("%s (#%d): st_blocks says %d bytes for a size of %d, want its charge %d", what, o.id, got, st.Size, ceil4096(st.Size))
	}
	data, err := readAll(fd, len(o.data))
	if err != nil {
		m.failf("reading through %s: %v", what, err)
	}
	if len(data) != len(o.data) {
		m.failf("%s (#%d): read %d bytes, the model has %d", what, o.id, len(data), len(o.data))
	}
	if i := firstDiff(data, o.data); i >= 0 {
		m.failf("%s (#%d): byte %d of %d differs from the model", what, o.id, i, len(o.data))
	}
}

// checkStats reads the ledger (the root's user.kvfs.stats, what kvfs
// stats reads, without a process per step) and checks it is sane: within
// the capacity (strict: always; passthrough: all but what a writer wrote
// past its admission), every held object pinned and charged.
func (m *model) checkStats() {
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(m.d.mp, "user.kvfs.stats", buf)
	if err != nil {
		m.failf("reading the stats: %v", err)
	}
	var st kvfsStats
	if err := json.Unmarshal(buf[:n], &st); err != nil {
		m.failf("stats: %v in %q", err, buf[:n])
	}
	heldObjs, heldBytes := 0, int64(0)
	seen := map[*mInode]bool{}
	for _, h := range m.held {
		if !seen[h.ino] {
			seen[h.ino] = true
			heldObjs++
			heldBytes += ceil4096(int64(len(h.ino.data)))
		}
	}
	switch {
	case st.UsedBytes < 0, st.ReservedBytes < 0, st.UnadmittedBytes < 0, st.ShadowBytes < 0, st.PinnedBytes < 0, st.Objects < 0:
	case st.UsedBytes-st.UnadmittedBytes > st.CapacityBytes:
	case m.strict && (st.UsedBytes > st.CapacityBytes || st.UnadmittedBytes != 0):
	case st.ReservedBytes > st.UsedBytes, st.PinnedBytes > st.UsedBytes, st.ShadowBytes > st.UsedBytes:
	case st.PinnedObjects < int64(heldObjs), st.Objects < int64(heldObjs):
	case m.strict && st.PinnedBytes < heldBytes:
	default:
		return
	}
	m.failf("stats not sane with %d objects held (%d bytes by the model): %+v", heldObjs, heldBytes, st)
}

// rest closes every held descriptor and checks the mount at rest: df ==
// du == used_bytes == the store's bytes, and the tree is the model's.
func (m *model) rest() {
	for len(m.held) > 0 {
		m.release(m.held[0])
	}
	m.note("rest")
	st := assertQuietEqual(m.t, m.d)
	m.compareTree(st, true)
	m.rests++
}

// restart stops the daemon cleanly, mounts the store again and requires
// exactly the tree it left.
func (m *model) restart() {
	m.note("restart")
	m.d.stop()
	m.d = startDaemon(m.t, m.d.mp, append([]string{"--store", m.d.store}, m.flags...)...)
	m.compareTree(assertQuietEqual(m.t, m.d), false)
}

// walked is a file found in the mount.
type walked struct {
	ino   uint64
	nlink uint64
	data  []byte
}

// compareTree walks the mount and requires the model's tree: every file a
// name the model holds, with its object's bytes, one inode per object,
// as many links as names; a name the model holds may be missing only
// with every other name of its object (evicted whole), if evicted.
func (m *model) compareTree(st kvfsStats, evicted bool) {
	found := m.walk()
	inodes, objInode := map[uint64]*mInode{}, map[*mInode]uint64{}
	for _, name := range m.all {
		o := m.names[name]
		if o == nil {
			if _, ok := found[name]; ok {
				m.failf("at rest: %s is in the mount but not in the model", name)
			}
			continue
		}
		f, ok := found[name]
		if !ok {
			m.restGone(o, name, found, evicted)
			continue
		}
		if prev, ok := inodes[f.ino]; ok && prev != o {
			m.failf("at rest: %s is inode %d, which is another object's (#%d, not #%d)", name, f.ino, prev.id, o.id)
		}
		if prev, ok := objInode[o]; ok && prev != f.ino {
			m.failf("at rest: the names of one object (#%d) are inodes %d and %d", o.id, prev, f.ino)
		}
		inodes[f.ino], objInode[o] = o, f.ino
		if f.nlink != uint64(len(o.names)) {
			m.failf("at rest: %s (#%d) has %d links, the model %d names", name, o.id, f.nlink, len(o.names))
		}
		if len(f.data) != len(o.data) || firstDiff(f.data, o.data) >= 0 {
			m.failf("at rest: %s (#%d) holds %d bytes that differ from the model's %d", name, o.id, len(f.data), len(o.data))
		}
	}
	for name := range found {
		if m.names[name] == nil {
			m.failf("at rest: %s is in the mount but not in the model", name)
		}
	}
	if st.Objects != int64(len(inodes)) {
		m.failf("at rest: the ledger holds %d objects, the mount shows %d", st.Objects, len(inodes))
	}
}

// restGone is a name missing at rest: its object must be missing whole.
func (m *model) restGone(o *mInode, name string, found map[string]walked, evicted bool) {
	if !evicted {
		m.failf("after a clean restart %s (#%d) is missing", name, o.id)
	}
	for other := range o.names {
		if _, ok := found[other]; ok {
			m.failf("at rest: %s is missing but %s, another name of the object (#%d), is there: evicted in part", name, other, o.id)
		}
	}
	m.note("rest: #%d evicted", o.id)
	m.forget(o)
}

// walk reads every file in the mount by its name relative to the mount.
func (m *model) walk() map[string]walked {
	found := map[string]walked{}
	err := filepath.WalkDir(m.d.mp, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return errors.New(p + " is not a regular file")
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		data, err := readAll(fd, int(st.Size))
		rel, _ := filepath.Rel(m.d.mp, p)
		found[rel] = walked{ino: st.Ino, nlink: uint64(st.Nlink), data: data}
		return err
	})
	if err != nil {
		m.failf("walking the mount at rest: %v", err)
	}
	return found
}
