package tests

// TestModel's operations: each does one thing to the mount and the same
// to the model, and fails the run on any answer the model does not allow.

import (
	"bytes"
	"slices"

	"golang.org/x/sys/unix"
)

// target is a descriptor an operation works through: a held one, or one
// opened for the operation by a name (transient) and closed after it.
type target struct {
	fd        int
	ino       *mInode
	transient bool
	what      string
}

// openName opens a name the model holds; false if its object vanished
// (which gone has checked and recorded).
func (m *model) openName(name string, flags int) (int, bool) {
	fd, err := unix.Open(m.path(name), flags|unix.O_CLOEXEC, 0)
	switch {
	case err == unix.ENOENT:
		m.gone(name, "open")
		return -1, false
	case err != nil:
		m.failf("open(%s, %#x): %v", name, flags, err)
	}
	return fd, true
}

// transient opens a present name for one operation.
func (m *model) transient(flags int) (target, bool) {
	name := m.present()
	if name == "" {
		m.counts["skipped"]++
		return target{}, false
	}
	fd, ok := m.openName(name, flags)
	if !ok {
		return target{}, false
	}
	tg := target{fd: fd, ino: m.names[name], transient: true, what: name}
	m.opened = append(m.opened, tg.ino)
	return tg, true
}

// writable is a descriptor to write at offsets through: a held writer or,
// half the time or when none is held, a name opened read-write.
func (m *model) writable() (target, bool) {
	if h := m.pickHeld(func(h *mHandle) bool { return h.write && !h.append }); h != nil && m.r.IntN(2) == 0 {
		return target{fd: h.fd, ino: h.ino, what: "held writer"}, true
	}
	return m.transient(unix.O_RDWR)
}

// readable is a descriptor to read through.
func (m *model) readable() (target, bool) {
	if h := m.pickHeld(func(h *mHandle) bool { return h.read }); h != nil && m.r.IntN(2) == 0 {
		return target{fd: h.fd, ino: h.ino, what: "held reader"}, true
	}
	return m.transient(unix.O_RDONLY)
}

// done closes a transient descriptor.
func (m *model) done(tg target) {
	if !tg.transient {
		return
	}
	if i := slices.Index(m.opened, tg.ino); i >= 0 {
		m.opened = slices.Delete(m.opened, i, i+1)
	}
	if err := unix.Close(tg.fd); err != nil {
		m.failf("close(%s): %v", tg.what, err)
	}
}

func (m *model) create() {
	name := m.absent()
	if name == "" {
		m.counts["skipped"]++
		return
	}
	data := m.randomBytes(m.r.IntN(modelMaxSize + 1))
	m.note("create %s, %d bytes", name, len(data))
	fd, err := unix.Open(m.path(name), unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
	if err != nil {
		m.failf("create %s (absent in the model): %v", name, err)
	}
	for off := 0; off < len(data); {
		n := min(len(data)-off, 1+m.r.IntN(128<<10))
		if _, err := unix.Pwrite(fd, data[off:off+n], int64(off)); err != nil {
			m.failf("writing new %s at %d: %v", name, off, err)
		}
		off += n
	}
	m.nextID++
	o := &mInode{id: m.nextID, data: data, names: map[string]bool{name: true}}
	m.names[name] = o
	if len(m.held) < modelMaxHeld && m.r.IntN(4) == 0 {
		m.held = append(m.held, &mHandle{fd: fd, ino: o, read: true, write: true})
	} else if err := unix.Close(fd); err != nil {
		m.failf("close of new %s: %v", name, err)
	}
	m.counts["create"]++
}

func (m *model) pwrite() {
	tg, ok := m.writable()
	if !ok {
		return
	}
	defer m.done(tg)
	off, n := m.span(len(tg.ino.data))
	b := m.randomBytes(n)
	m.note("pwrite %s (#%d) %d bytes at %d", tg.what, tg.ino.id, n, off)
	if got, err := unix.Pwrite(tg.fd, b, int64(off)); err != nil || got != n {
		m.failf("pwrite of %d bytes at %d through %s: %d, %v", n, off, tg.what, got, err)
	}
	tg.ino.write(off, b)
	m.counts["pwrite"]++
}

func (m *model) read() {
	tg, ok := m.readable()
	if !ok {
		return
	}
	defer m.done(tg)
	m.note("read %s (#%d)", tg.what, tg.ino.id)
	m.verify(tg.fd, tg.ino, tg.what)
	m.counts["read"]++
}

func (m *model) truncate() {
	size := m.r.IntN(modelMaxSize + 1)
	if h := m.pickHeld(func(h *mHandle) bool { return h.write }); h != nil && m.r.IntN(2) == 0 {
		m.note("ftruncate held writer (#%d) to %d", h.ino.id, size)
		if err := unix.Ftruncate(h.fd, int64(size)); err != nil {
			m.failf("ftruncate of a held writer to %d: %v", size, err)
		}
		h.ino.resize(size)
		m.counts["truncate"]++
		return
	}
	name := m.present()
	if name == "" {
		m.counts["skipped"]++
		return
	}
	m.note("truncate %s (#%d) to %d", name, m.names[name].id, size)
	switch err := unix.Truncate(m.path(name), int64(size)); err {
	case nil:
		m.names[name].resize(size)
		m.counts["truncate"]++
	case unix.ENOENT:
		m.gone(name, "truncate")
	default:
		m.failf("truncate(%s, %d): %v", name, size, err)
	}
}

func (m *model) fallocate() {
	tg, ok := m.writable()
	if !ok {
		return
	}
	defer m.done(tg)
	o, size := tg.ino, len(tg.ino.data)
	var mode uint32
	var off, n int
	switch m.r.IntN(3) {
	case 0: // allocate, growing the size: charged like a write
		off, n = m.span(size)
	case 1: // punch a hole: zeros, same size
		if size == 0 {
			m.counts["skipped"]++
			return
		}
		mode = unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE
		off = m.r.IntN(size)
		n = 1 + m.r.IntN(size-off)
	default: // allocate within the blocks already charged
		charge := int(ceil4096(int64(size)))
		if charge == 0 {
			m.counts["skipped"]++
			return
		}
		mode = unix.FALLOC_FL_KEEP_SIZE
		off = m.r.IntN(charge)
		n = 1 + m.r.IntN(charge-off)
	}
	m.note("fallocate %s (#%d) mode %#x, %d bytes at %d", tg.what, o.id, mode, n, off)
	if err := unix.Fallocate(tg.fd, mode, int64(off), int64(n)); err != nil {
		m.failf("fallocate(mode %#x, off %d, len %d) through %s (size %d): %v", mode, off, n, tg.what, size, err)
	}
	switch {
	case mode&unix.FALLOC_FL_PUNCH_HOLE != 0:
		clear(o.data[off:min(off+n, size)])
	case mode == 0 && off+n > size:
		o.resize(off + n)
	}
	m.counts["fallocate"]++
}

// mmapWrite maps an object shared and writable, checks what the mapping
// shows, writes through it and syncs.
func (m *model) mmapWrite() {
	tg, ok := m.writable()
	if !ok {
		return
	}
	defer m.done(tg)
	o := tg.ino
	if len(o.data) == 0 {
		m.counts["skipped"]++
		return
	}
	off := m.r.IntN(len(o.data))
	b := m.randomBytes(1 + m.r.IntN(min(len(o.data)-off, 64<<10)))
	m.note("mmap %s (#%d), %d bytes at %d", tg.what, o.id, len(b), off)
	mem, err := unix.Mmap(tg.fd, 0, len(o.data), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		m.failf("mmap of %d bytes through %s: %v", len(o.data), tg.what, err)
	}
	defer unix.Munmap(mem)
	if i := firstDiff(mem, o.data); i >= 0 {
		m.failf("the mapping of %s (#%d) differs from the model at byte %d of %d", tg.what, o.id, i, len(o.data))
	}
	copy(mem[off:], b)
	if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
		m.failf("msync: %v", err)
	}
	o.write(off, b)
	m.counts["mmap"]++
}

// appendWrite writes at the end through O_APPEND: a held appender or a
// name opened so.
func (m *model) appendWrite() {
	tg := target{}
	if h := m.pickHeld(func(h *mHandle) bool { return h.append }); h != nil && m.r.IntN(2) == 0 {
		tg = target{fd: h.fd, ino: h.ino, what: "held appender"}
	} else {
		var ok bool
		if tg, ok = m.transient(unix.O_WRONLY | unix.O_APPEND); !ok {
			return
		}
	}
	defer m.done(tg)
	o := tg.ino
	if len(o.data) >= modelMaxSize {
		m.counts["skipped"]++
		return
	}
	b := m.randomBytes(1 + m.r.IntN(min(32<<10, modelMaxSize-len(o.data))))
	m.note("append %d bytes to %s (#%d, size %d)", len(b), tg.what, o.id, len(o.data))
	if n, err := unix.Write(tg.fd, b); err != nil || n != len(b) {
		m.failf("O_APPEND write of %d bytes through %s: %d, %v", len(b), tg.what, n, err)
	}
	o.write(len(o.data), b)
	m.counts["append"]++
}

// copyRange copies a range of one object into another.
func (m *model) copyRange() {
	src, ok := m.readable()
	if !ok {
		return
	}
	defer m.done(src)
	dst, ok := m.writable()
	if !ok {
		return
	}
	defer m.done(dst)
	if dst.ino == src.ino || len(src.ino.data) == 0 {
		m.counts["skipped"]++
		return
	}
	offIn := m.r.IntN(len(src.ino.data))
	n := 1 + m.r.IntN(min(64<<10, len(src.ino.data)-offIn))
	offOut := m.r.IntN(min(len(dst.ino.data)+16<<10, modelMaxSize-n) + 1)
	m.note("copy_file_range %d bytes from %s (#%d) at %d to %s (#%d) at %d", n, src.what, src.ino.id, offIn, dst.what, dst.ino.id, offOut)
	in, out := int64(offIn), int64(offOut)
	got, err := unix.CopyFileRange(src.fd, &in, dst.fd, &out, n, 0)
	if err != nil || got <= 0 || got > n {
		m.failf("copy_file_range of %d bytes: %d, %v", n, got, err)
	}
	dst.ino.write(offOut, slices.Clone(src.ino.data[offIn:offIn+got]))
	m.counts["copy_file_range"]++
}

func (m *model) rename() {
	src := m.present()
	if src == "" {
		m.counts["skipped"]++
		return
	}
	dst := m.all[m.r.IntN(len(m.all))]
	if dst == src {
		m.counts["skipped"]++
		return
	}
	o, old := m.names[src], m.names[dst]
	m.note("rename %s (#%d) over %s", src, o.id, dst)
	switch err := unix.Rename(m.path(src), m.path(dst)); {
	case err == unix.ENOENT:
		m.gone(src, "rename")
		return
	case err != nil:
		m.failf("rename(%s, %s): %v", src, dst, err)
	}
	m.counts["rename"]++
	if old == o {
		return // two names of one inode: rename(2) does nothing
	}
	if old != nil {
		delete(old.names, dst)
	}
	delete(o.names, src)
	delete(m.names, src)
	o.names[dst] = true
	m.names[dst] = o
}

func (m *model) link() {
	src, dst := m.present(), m.absent()
	if src == "" || dst == "" {
		m.counts["skipped"]++
		return
	}
	o := m.names[src]
	m.note("link %s (#%d) as %s", src, o.id, dst)
	switch err := unix.Link(m.path(src), m.path(dst)); {
	case err == unix.ENOENT:
		m.gone(src, "link")
		return
	case err != nil:
		m.failf("link(%s, %s) to a name absent in the model: %v", src, dst, err)
	}
	o.names[dst] = true
	m.names[dst] = o
	m.counts["link"]++
}

func (m *model) unlink() {
	name := m.present()
	if name == "" {
		m.counts["skipped"]++
		return
	}
	o := m.names[name]
	m.note("unlink %s (#%d)", name, o.id)
	switch err := unix.Unlink(m.path(name)); {
	case err == unix.ENOENT:
		m.gone(name, "unlink")
		return
	case err != nil:
		m.failf("unlink(%s): %v", name, err)
	}
	delete(o.names, name)
	delete(m.names, name)
	m.counts["unlink"]++
}

// hold opens a name and keeps the descriptor: a reader, a writer or an
// appender.
func (m *model) hold() {
	if len(m.held) >= modelMaxHeld {
		m.counts["skipped"]++
		return
	}
	name := m.present()
	if name == "" {
		m.counts["skipped"]++
		return
	}
	h := &mHandle{ino: m.names[name]}
	flags := unix.O_RDONLY
	switch m.r.IntN(3) {
	case 0:
		h.read = true
	case 1:
		flags, h.read, h.write = unix.O_RDWR, true, true
	default:
		flags, h.write, h.append = unix.O_WRONLY|unix.O_APPEND, true, true
	}
	m.note("hold %s (#%d) with flags %#x", name, h.ino.id, flags)
	fd, ok := m.openName(name, flags)
	if !ok {
		return
	}
	h.fd = fd
	m.held = append(m.held, h)
	m.counts["hold"]++
}

func (m *model) closeHeld() {
	h := m.pickHeld(func(*mHandle) bool { return true })
	if h == nil {
		m.counts["skipped"]++
		return
	}
	m.note("close held (#%d)", h.ino.id)
	m.release(h)
	m.counts["close"]++
}

// release closes a held descriptor; a writer's close is where kvfs
// admits its object, and the model never asks for more than fits.
func (m *model) release(h *mHandle) {
	m.held = slices.DeleteFunc(m.held, func(x *mHandle) bool { return x == h })
	if err := unix.Close(h.fd); err != nil {
		m.failf("close of a held descriptor (#%d, %d bytes): %v", h.ino.id, len(h.ino.data), err)
	}
}

func (m *model) fsync() {
	h := m.pickHeld(func(h *mHandle) bool { return h.write })
	if h == nil {
		m.counts["skipped"]++
		return
	}
	m.note("fsync held writer (#%d)", h.ino.id)
	if err := unix.Fsync(h.fd); err != nil {
		m.failf("fsync: %v", err)
	}
	m.counts["fsync"]++
}

// readAll reads a descriptor from offset 0 to its end.
func readAll(fd int, sizeHint int) ([]byte, error) {
	var out bytes.Buffer
	buf := make([]byte, max(sizeHint+1, 64<<10))
	for off := int64(0); ; {
		n, err := unix.Pread(fd, buf, off)
		if err != nil {
			return out.Bytes(), err
		}
		if n == 0 {
			return out.Bytes(), nil
		}
		out.Write(buf[:n])
		off += int64(n)
	}
}
