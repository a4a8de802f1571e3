package fusefs

import (
	"errors"
	"os"
	"path"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/internal/failpoint"
)

// Stores while loading (see core/early.go): a create of a new name, its
// writer's requests, link, rename and unlink of names made so, unlink
// and rename of stored files' names, and mkdir are served before the
// index exists; each answers errWaitIndex (not served: wait for the index and
// hand it to the FS) when the core's Preview says ErrWait. A writer the
// kernel still has open when the index is built is a core handle from
// then on (early.Handle), numbered in the FS's table (fh), to which its
// requests go.

// Test hooks: a create while loading between the Preview's create and
// its writer's entry in Loading.writers; takeEarly as it begins.
var testHookEarlyCreated, testHookTakingEarly func()

// early is a store's file while loading: what a loadFile of a writer
// holds besides the file.
type early struct {
	*core.EarlyFile
	// fh and id: its FS handle and object once the index is built (0:
	// none); set before Ready lets any request through.
	fh uint64
	id core.ID
}

// rel is the path of name in the load's directory node parent.
func (l *Loading) rel(parent uint64, name string) (string, fuse.Status) {
	if err := checkName(name); err != nil {
		return "", l.errno("lookup", err)
	}
	dir, ok := l.path(parent)
	if !ok {
		return "", fuse.Status(syscall.ESTALE)
	}
	return path.Join(dir, name), fuse.OK
}

// waits says whether err sends the request to wait for the index.
func waits(err error) bool { return errors.Is(err, core.ErrWait) }

// createEarly is Create while loading; false: it waits for the index.
func (l *Loading) createEarly(in *fuse.CreateIn, name string, out *fuse.CreateOut) (fuse.Status, bool) {
	if t := in.Mode & syscall.S_IFMT; t != 0 && t != syscall.S_IFREG {
		return 0, false
	}
	rel, st := l.rel(in.NodeId, name)
	if !st.Ok() {
		return st, true
	}
	l.creates.RLock()
	defer l.creates.RUnlock()
	f, a, err := l.pre.Create(rel, fileMode(in.Mode), ownerOf(&in.Caller, os.Geteuid() == 0))
	if waits(err) {
		return 0, false
	}
	if err != nil {
		return l.errno("create", err), true
	}
	if testHookEarlyCreated != nil {
		testHookEarlyCreated()
	}
	l.entry(core.ID(in.NodeId), name, a, &out.EntryOut)
	lf := &loadFile{File: f.File(), node: core.ID(out.NodeId), early: &early{EarlyFile: f}}
	l.mu.Lock()
	l.open[lf.node]++
	l.writers[f] = lf.early
	l.mu.Unlock()
	out.Fh = LoadBase + l.files.add(lf)
	// Every byte passes the budget (no passthrough, no page cache), as
	// the FS's writers without passthrough.
	out.OpenFlags = fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES
	return fuse.OK, true
}

// mkdirEarly is Mkdir while loading; false: it waits for the index.
func (l *Loading) mkdirEarly(in *fuse.MkdirIn, name string, out *fuse.EntryOut) (fuse.Status, bool) {
	rel, st := l.rel(in.NodeId, name)
	if !st.Ok() {
		return st, true
	}
	a, err := l.pre.Mkdir(rel, in.Mode&07777, ownerOf(&in.Caller, os.Geteuid() == 0))
	if waits(err) {
		return 0, false
	}
	if err != nil {
		return l.errno("mkdir", err), true
	}
	l.entry(core.ID(in.NodeId), name, a, out)
	return fuse.OK, true
}

// linkEarly is Link while loading; false: it waits for the index.
func (l *Loading) linkEarly(in *fuse.LinkIn, name string, out *fuse.EntryOut) (fuse.Status, bool) {
	old, ok := l.path(in.Oldnodeid)
	if !ok {
		return 0, false
	}
	rel, st := l.rel(in.NodeId, name)
	if !st.Ok() {
		return st, true
	}
	a, err := l.pre.Link(old, rel)
	if waits(err) {
		return 0, false
	}
	if err != nil {
		return l.errno("link", err), true
	}
	l.entry(core.ID(in.NodeId), name, a, out)
	return fuse.OK, true
}

// unlinkEarly is Unlink while loading; false: it waits for the index.
func (l *Loading) unlinkEarly(header *fuse.InHeader, name string) (fuse.Status, bool) {
	rel, st := l.rel(header.NodeId, name)
	if !st.Ok() {
		return st, true
	}
	if err := l.pre.Unlink(rel); waits(err) {
		return 0, false
	} else if err != nil {
		return l.errno("unlink", err), true
	}
	// The name may be made again: the node of the file removed, which
	// the kernel may still hold open, has no path from now on (ESTALE),
	// not the path of whatever holds the name next.
	l.nodes.removed(nameKey{core.ID(header.NodeId), name}, func(n *loadNode) {
		n.at.Store(&nameKey{parent: noParent, name: name})
	})
	return fuse.OK, true
}

// renameEarly is Rename while loading; false: it waits for the index.
func (l *Loading) renameEarly(in *fuse.RenameIn, oldName, newName string) (fuse.Status, bool) {
	old, st := l.rel(in.NodeId, oldName)
	if !st.Ok() {
		return st, true
	}
	rel, st := l.rel(in.Newdir, newName)
	if !st.Ok() {
		return st, true
	}
	if err := l.pre.Rename(old, rel, in.Flags); waits(err) {
		return 0, false
	} else if err != nil {
		return l.errno("rename", err), true
	}
	l.nodes.moved(nameKey{core.ID(in.NodeId), oldName}, nameKey{core.ID(in.Newdir), newName},
		func(n *loadNode, at nameKey) { n.at.Store(&at) })
	return fuse.OK, true
}

// handedOn waits for the index and points in at the FS's handle that
// lf's writer became. A writer that became none (its object was
// refused at the switch, or it had lost its names) gets no FS and OK:
// its early file answers (see core.EarlyFile.Refused).
func (l *Loading) handedOn(lf *loadFile, fh *uint64, node *uint64) (*FS, fuse.Status) {
	fs, st := l.wait()
	if !st.Ok() {
		return nil, st
	}
	if lf.early.fh == 0 {
		return nil, fuse.OK
	}
	*fh, *node = lf.early.fh, uint64(lf.early.id)
	return fs, fuse.OK
}

// takeEarly ends the stores of the load and makes the FS's handles of
// the writers still open, before Ready lets a request reach fs.
func (l *Loading) takeEarly(fs *FS) {
	if testHookTakingEarly != nil {
		testHookTakingEarly()
	}
	l.creates.Lock()
	defer l.creates.Unlock()
	for _, f := range fs.core.TakeEarly(l.pre) {
		l.mu.Lock()
		e := l.writers[f] // there from its create until its release is handed on
		l.mu.Unlock()
		if e == nil {
			f.Handle().Release() // cannot be: no release of it is under way
			continue
		}
		h := fs.adopt(f.Handle(), false, 0)
		h.passthrough = false // the kernel writes through the daemon
		e.id, e.fh = h.ID(), fs.files.add(h)
	}
}

// held is the load's handle fh, held until put; EBADF for none.
func (l *Loading) held(fh uint64) (lf *loadFile, put func(), st fuse.Status) {
	lf, put, ok := l.files.get(fh - LoadBase)
	if !ok {
		return nil, nil, fuse.EBADF
	}
	return lf, put, fuse.OK
}

// writeEarly is a WRITE to a handle of the load's: a store's writer's,
// within its budget while loading, else handed on once the index is
// built.
func (l *Loading) writeEarly(cancel <-chan struct{}, in *fuse.WriteIn, data ...[]byte) (uint32, fuse.Status) {
	lf, put, st := l.held(in.Fh)
	if !st.Ok() {
		return 0, st
	}
	defer put()
	if lf.early == nil {
		return 0, fuse.EBADF // opened for reading
	}
	if len(data) != 1 {
		return 0, fuse.ENOSYS // as FS.Writev: the server joins the pieces
	}
	n, err := lf.early.Write(data[0], int64(in.Offset))
	if !waits(err) {
		return uint32(n), l.errno("write", err)
	}
	fs, st := l.handedOn(lf, &in.Fh, &in.NodeId)
	switch {
	case !st.Ok():
		return 0, st
	case fs == nil:
		// Past the budget while loading, no handle since: the index is
		// built, so the early file answers (it no longer waits).
		n, err := lf.early.Write(data[0], int64(in.Offset))
		return uint32(n), l.errno("write", err)
	}
	return fs.Write(cancel, in, data[0])
}

// flushEarly is a FLUSH of a handle of the load's: nothing to do for a
// reader's or a store's within its budget; handed on once its writer
// is the FS's.
func (l *Loading) flushEarly(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	lf, put, st := l.held(in.Fh)
	if !st.Ok() {
		return st
	}
	defer put()
	if lf.early == nil {
		return fuse.OK
	}
	if err := lf.early.Flush(); !waits(err) {
		return l.errno("flush", err)
	}
	fs, st := l.handedOn(lf, &in.Fh, &in.NodeId)
	if fs == nil {
		return st
	}
	return fs.Flush(cancel, in)
}

// fsyncEarly is an FSYNC of a handle of the load's.
func (l *Loading) fsyncEarly(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	lf, put, st := l.held(in.Fh)
	if !st.Ok() {
		return st
	}
	defer put()
	if lf.early == nil {
		return fuse.OK
	}
	err := lf.early.Fsync(in.FsyncFlags&fsyncDataOnly != 0)
	if !waits(err) {
		return l.errno("fsync", err)
	}
	fs, st := l.handedOn(lf, &in.Fh, &in.NodeId)
	switch {
	case !st.Ok():
		return st
	case fs == nil:
		return l.errno("fsync", lf.early.Fsync(in.FsyncFlags&fsyncDataOnly != 0))
	}
	return fs.Fsync(cancel, in)
}

// fallocateEarly is a FALLOCATE of a handle of the load's: a store's
// writer's waits for the index, which admits it.
func (l *Loading) fallocateEarly(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	lf, put, st := l.held(in.Fh)
	if !st.Ok() {
		return st
	}
	defer put()
	if lf.early == nil {
		return fuse.EBADF
	}
	fs, st := l.handedOn(lf, &in.Fh, &in.NodeId)
	switch {
	case !st.Ok():
		return st
	case fs == nil && lf.early.Refused():
		return fuse.Status(syscall.ENOSPC)
	case fs == nil:
		// An unlinked writer's: its writes go on within the budget,
		// which an allocation is not charged to. (Never ENOSYS: the
		// kernel would take it for the whole mount.)
		return fuse.Status(syscall.EOPNOTSUPP)
	}
	return fs.Fallocate(cancel, in)
}

// releaseEarly ends a store's writer: complete now while loading, or
// handed on to the FS's handle it became.
func (l *Loading) releaseEarly(cancel <-chan struct{}, e *early) {
	failpoint.Hit("writer-release")
	if waits(e.Release()) {
		if fs, st := l.wait(); st.Ok() && e.fh != 0 {
			fs.Release(cancel, &fuse.ReleaseIn{Fh: e.fh})
		}
	}
	l.mu.Lock()
	delete(l.writers, e.EarlyFile)
	l.mu.Unlock()
}
