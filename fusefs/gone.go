package fusefs

import (
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
	"golang.org/x/sys/unix"
)

// goneDirs are the directories removed through the mount that the kernel
// still holds: a process's working directory, an open descriptor. As on a
// local file system they go on answering, as empty directories with no
// link left (stat, opendir, fsync, chmod), not as stale handles, until the
// kernel forgets them, which it does once nothing holds them.
type goneDirs struct {
	mu sync.Mutex
	m  map[core.ID]unix.Stat_t // GUARDED_BY(mu)
}

func (g *goneDirs) add(id core.ID, st unix.Stat_t) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = make(map[core.ID]unix.Stat_t)
	}
	g.m[id] = st
}

// get is a removed directory's attributes.
func (g *goneDirs) get(id core.ID) (unix.Stat_t, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, ok := g.m[id]
	return st, ok
}

func (g *goneDirs) forget(id core.ID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.m, id)
}

// set carries out a SETATTR on a removed directory: its mode, owner and
// times, which nothing stores any more; false if id is no such directory.
func (g *goneDirs) set(id core.ID, in *fuse.SetAttrIn) (bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, ok := g.m[id]
	if !ok {
		return false, nil
	}
	if _, ok := in.GetSize(); ok {
		return true, core.ErrIsDir
	}
	if mode, ok := in.GetMode(); ok {
		st.Mode = st.Mode&unix.S_IFMT | mode&07777
	}
	if uid, ok := in.GetUID(); ok {
		st.Uid = uid
	}
	if gid, ok := in.GetGID(); ok {
		st.Gid = gid
	}
	if t, ok := in.GetATime(); ok {
		st.Atim = timespec(t)
	}
	if t, ok := in.GetMTime(); ok {
		st.Mtim = timespec(t)
	}
	st.Ctim = timespec(time.Now())
	g.m[id] = st
	return true, nil
}
