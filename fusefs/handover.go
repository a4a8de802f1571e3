package fusefs

import (
	"fmt"
	"os"
	"time"

	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/remote"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// A handover (package mount) passes the live FUSE connection to a new
// daemon. The kernel's view of the mount is node IDs (the core's IDs,
// which the checkpoint keeps), open file and directory handles by
// number, passthrough backing IDs (registered on the connection, which
// outlives this process) and the remote tier's placeholders. The old
// FS quiesces (its gate holds every new request, and what it let in
// finishes), exports that view with the handles' stored files, and its
// successor imports it before it serves.

// HandleRecord is an open file handle as the kernel numbered it.
type HandleRecord struct {
	Fh uint64 `json:"fh"`
	core.HandleState
	Passthrough bool `json:"passthrough,omitempty"`
	Backed      bool `json:"backed,omitempty"`
	Existing    bool `json:"existing,omitempty"`
}

// ObjectRecord is what an object's handles share.
type ObjectRecord struct {
	ID          core.ID `json:"id"`
	Backing     int32   `json:"backing,omitempty"`
	BackingRefs int     `json:"backing_refs,omitempty"`
	Cached      bool    `json:"cached,omitempty"`
}

// DirRecord is an open directory handle.
type DirRecord struct {
	Fh uint64  `json:"fh"`
	ID core.ID `json:"id"`
}

// GoneRecord is a directory removed while the kernel still holds it
// (goneDirs), with the attributes it answers with.
type GoneRecord struct {
	ID core.ID     `json:"id"`
	St unix.Stat_t `json:"st"`
}

// PlaceholderRecord is a remote name the kernel has looked up and not
// forgotten, not installed yet.
type PlaceholderRecord struct {
	ID      core.ID     `json:"id"`
	Parent  core.ID     `json:"parent"`
	Name    string      `json:"name"`
	Path    string      `json:"path"`
	Info    remote.Info `json:"info"`
	Lookups uint64      `json:"lookups"`
}

// State is the kernel's view of the mount, as a successor takes it.
type State struct {
	Handles      []HandleRecord      `json:"handles,omitempty"`
	Objects      []ObjectRecord      `json:"objects,omitempty"`
	Dirs         []DirRecord         `json:"dirs,omitempty"`
	Gone         []GoneRecord        `json:"gone,omitempty"`
	Placeholders []PlaceholderRecord `json:"placeholders,omitempty"`
	NoBacking    bool                `json:"no_backing,omitempty"`
	// Rewritten are the objects changed in place (see rewrites).
	Rewritten []core.ID `json:"rewritten,omitempty"`
	// Notices are the kernel notices queued and not sent, in order.
	Notices []NoticeRecord `json:"notices,omitempty"`
	// Mapped are the objects the core keeps for mappings (core.Mapped);
	// their stored files follow the handles'.
	Mapped []core.ID `json:"mapped,omitempty"`
}

// Quiesce pauses the kernel notices (the one in the kernel, if any, goes
// through first: the gate is still open), then closes the gate every
// request passes and waits, up to limit, until each request let in has
// finished, its reply written (outstanding: the server's count of
// requests read and not finished). Requests that come meanwhile wait at
// the gate: the successor has the kernel send them again. Notices queued
// from now on wait for the successor (Export), which sends them once it
// serves: one sent now could wait forever for a directory that a held
// request keeps locked (see notify.go). waiting says whether a request
// let in waits for room in a full cache: then Quiesce fails at once with
// ErrWaitingForRoom, since what would make the room may be a request the
// gate holds, and the grace of the temp files waiting to be linked runs
// on meanwhile (an outside tester: pauses of 2 s, and temp files
// evicted before their links). On an error the caller Resumes.
func (f *FS) Quiesce(outstanding func() int, limit time.Duration, waiting func() bool) error {
	if err := f.notices.pause(limit, waiting); err != nil {
		return err
	}
	return f.reqs.gate.close(outstanding, limit, waiting)
}

// Resume lets requests in again after a Quiesce whose handover failed,
// and the notices out.
func (f *FS) Resume() {
	f.reqs.gate.open()
	f.notices.resume()
}

// Serving is told by a successor once it serves the mount: the notices
// its predecessor left (Import) go to the kernel from then on.
func (f *FS) Serving() { f.notices.resume() }

// Export describes the kernel's view of a quiesced FS, with the stored
// file of each handle, in the order of State.Handles, then of each
// object kept for a mapping, in the order of State.Mapped.
func (f *FS) Export() (State, []*os.File) {
	var st State
	var files []*os.File
	st.NoBacking = f.noBacking.Load()
	f.files.each(func(fh uint64, h *handle) {
		st.Handles = append(st.Handles, HandleRecord{Fh: fh, HandleState: h.State(),
			Passthrough: h.passthrough, Backed: h.backed, Existing: h.existing})
		files = append(files, h.File())
	})
	f.dirs.each(func(fh uint64, d *dirStream) { st.Dirs = append(st.Dirs, DirRecord{Fh: fh, ID: d.id}) })
	st.Rewritten = f.rewritten.all()
	f.gone.mu.Lock()
	for id, s := range f.gone.m {
		st.Gone = append(st.Gone, GoneRecord{ID: id, St: s})
	}
	f.gone.mu.Unlock()
	f.objects.mu.RLock()
	for _, ob := range f.objects.m {
		ob.mu.Lock()
		st.Objects = append(st.Objects, ObjectRecord{ID: ob.id, Backing: ob.backing, BackingRefs: ob.backingRefs, Cached: ob.cached.Load()})
		ob.mu.Unlock()
	}
	f.objects.mu.RUnlock()
	f.remotes.mu.Lock()
	for _, r := range f.remotes.byID {
		if !r.installed.Load() {
			st.Placeholders = append(st.Placeholders, PlaceholderRecord{ID: r.id, Parent: r.parent, Name: r.name,
				Path: r.path, Info: r.info, Lookups: r.lookups})
		}
	}
	f.remotes.mu.Unlock()
	for _, n := range f.notices.take() {
		st.Notices = append(st.Notices, NoticeRecord{Node: n.node, Name: n.name, Content: n.content})
	}
	mapped, kept := f.core.Mapped()
	st.Mapped = mapped
	return st, append(files, kept...)
}

// Import takes a predecessor's view over, before the FS serves: each
// handle is made again over its stored file (files, in the order of
// st.Handles) under the number the kernel knows it by. The core has
// loaded the predecessor's checkpoint; call core.EndHandover after.
func (f *FS) Import(st State, files []*os.File) error {
	if len(files) != len(st.Handles)+len(st.Mapped) {
		return fmt.Errorf("import: %d stored files for %d handles and %d mapped objects", len(files), len(st.Handles), len(st.Mapped))
	}
	mapped := files[len(st.Handles):]
	f.noBacking.Store(st.NoBacking)
	for _, id := range st.Rewritten {
		f.rewritten.mark(id)
	}
	for i, r := range st.Handles {
		ch, err := f.core.AdoptHandle(r.HandleState, files[i])
		if err != nil {
			return fmt.Errorf("import of handle %d (object %d): %w", r.Fh, r.ID, err)
		}
		h := f.adopt(ch, r.Existing, 0) // its mode is the record's
		h.passthrough, h.backed = r.Passthrough, r.Backed
		f.files.putAt(r.Fh, h)
	}
	for i, id := range st.Mapped {
		if err := f.core.AdoptMapped(id, mapped[i]); err != nil {
			// Not worth the handover: the object is as a stop leaves it.
			f.log.Warn("an object kept for a mapping is not kept by the new daemon", zap.Uint64("id", uint64(id)), zap.Error(err))
			mapped[i].Close()
		}
	}
	for _, r := range st.Objects {
		ob := f.objects.get(r.ID)
		if ob == nil {
			return fmt.Errorf("import: object %d has no handle", r.ID)
		}
		ob.mu.Lock()
		ob.backing, ob.backingRefs = r.Backing, r.BackingRefs
		ob.mu.Unlock()
		ob.cached.Store(r.Cached)
	}
	for _, d := range st.Dirs {
		f.dirs.putAt(d.Fh, &dirStream{id: d.ID, pos: ^uint64(0)})
	}
	for _, g := range st.Gone {
		f.gone.add(g.ID, g.St)
	}
	for _, p := range st.Placeholders {
		if f.remote == nil {
			// Mounted without the remote tier now: the kernel's lookups
			// of these names find nothing and ask again.
			break
		}
		r := &remoteNode{fs: f, id: p.ID, parent: p.Parent, name: p.Name, path: p.Path, info: p.Info, lookups: p.Lookups}
		f.remotes.mu.Lock()
		f.remotes.byID[r.id], f.remotes.byName[nameKey{r.parent, r.name}] = r, r
		f.remotes.n.Add(1)
		f.remotes.mu.Unlock()
	}
	// Sent once this FS serves (Serving): the kernel may hold a
	// directory's lock for a request only the server can answer.
	f.notices.pause(0, nil)
	pending := make([]notice, 0, len(st.Notices))
	for _, n := range st.Notices {
		pending = append(pending, notice{node: n.Node, name: n.Name, content: n.Content})
	}
	f.notices.add(pending...)
	f.files.reindex()
	f.dirs.reindex()
	return nil
}
