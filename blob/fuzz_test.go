package blob

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzCheckpointEqualsWalk: a store changed by kvfs (creates, links,
// renames, unlinks) and behind its back (files added, removed, renamed
// and linked in data/ directly), checkpointed and restarted in an order
// the input decides, with no racy window (every directory can be
// vouched for), serves after each start from its checkpoint exactly
// what a walk that stats every file finds. This is the checkpoint's
// whole trust chain: a directory a checkpoint vouches for, or a start
// found unchanged or listed (Store.verified), must hold what the index
// says, or be listed at the next start.
//
// Sizes changed in place behind kvfs's back are left out: no checkpoint
// sees them (the start-up audit does; see docs/restart.md). So is a file
// made under a name whose last file's inode number it reuses (a start
// takes the checkpoint's size for it, as the audit's to correct): the
// test holds every file it makes open, so no number is reused.
func FuzzCheckpointEqualsWalk(f *testing.F) {
	for _, seed := range []string{
		// created, checkpointed, a file added behind kvfs's back to a
		// vouched-for directory, checkpointed, restarted
		"\x00\x00\x00\x11\x09\x00\x04\x02\x09\x00\x08\x00",
		// a start, a file added behind kvfs's back, a checkpoint, a start
		"\x00\x05\x09\x00\x08\x00\x04\x05\x09\x00\x08\x00",
		// removed and renamed behind kvfs's back, then kvfs's own changes
		"\x00\x00\x00\x01\x00\x02\x09\x00\x05\x00\x06\x01\x01\x04\x02\x02\x03\x05\x09\x00\x08\x00",
		// linked behind kvfs's back, restarted without a checkpoint since
		"\x00\x00\x09\x00\x07\x03\x08\x00\x08\x00\x09\x00\x08\x00",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 96 {
			ops = ops[:96]
		}
		m := &cpFuzz{t: t}
		m.dir, m.s = openUnracy(t)
		a := mustMkdir(t, m.s, RootID, "a")
		mustMkdir(t, m.s, a, "b")
		for i := 0; i+1 < len(ops); i += 2 {
			t.Logf("op %d: %s", i/2, m.step(ops[i], ops[i+1]))
		}
		m.restart()
	})
}

// cpFuzz is a store under FuzzCheckpointEqualsWalk.
type cpFuzz struct {
	t   *testing.T
	dir string
	s   *Store
	n   int // files made so far, for their contents
}

var (
	cpFuzzDirs  = []string{".", "a", "a/b"}
	cpFuzzFiles = []string{"x", "y", "z"}
)

// at is the directory and name arg picks.
func (m *cpFuzz) at(arg byte) (dir, name string) {
	return cpFuzzDirs[int(arg)%len(cpFuzzDirs)], cpFuzzFiles[int(arg/3)%len(cpFuzzFiles)]
}

// disk is the path in data/ of name in dir.
func (m *cpFuzz) disk(dir, name string) string {
	return filepath.Join(m.dir, DataName, dir, name)
}

// hold keeps f open until the test ends, and its inode number taken.
func (m *cpFuzz) hold(f *os.File) {
	m.t.Cleanup(func() { f.Close() })
}

// dirID is the index's directory at rel.
func (m *cpFuzz) dirID(rel string) ID {
	if rel == "." {
		return RootID
	}
	return lookupPath(m.t, m.s, rel)
}

func (m *cpFuzz) step(op, arg byte) string {
	dir, name := m.at(arg)
	toDir, toName := m.at(arg >> 4)
	switch op % 10 {
	case 0: // a store through kvfs
		m.n++
		id, f, err := create(m.s, m.dirID(dir), name, 0o644, nobody)
		if err != nil {
			return fmt.Sprintf("create %s/%s: %v", dir, name, err)
		}
		f.Write(make([]byte, 100*m.n))
		m.hold(f)
		must(m.t, "ClearWriting", m.s.ClearWriting(id))
		return fmt.Sprintf("create %s/%s", dir, name)
	case 1:
		_, err := m.s.Unlink(m.dirID(dir), name)
		return fmt.Sprintf("unlink %s/%s: %v", dir, name, err)
	case 2:
		e, err := m.s.Lookup(m.dirID(dir), name)
		if err == nil {
			if e.Dir {
				return "link of a directory"
			}
			err = m.s.Link(e.ID, m.dirID(toDir), toName)
		}
		return fmt.Sprintf("link %s/%s to %s/%s: %v", dir, name, toDir, toName, err)
	case 3:
		_, err := m.s.Rename(m.dirID(dir), name, m.dirID(toDir), toName, 0)
		return fmt.Sprintf("rename %s/%s to %s/%s: %v", dir, name, toDir, toName, err)
	case 4: // behind kvfs's back from here
		m.n++
		f, err := os.OpenFile(m.disk(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			f.Write(make([]byte, 100*m.n))
			m.hold(f)
		}
		return fmt.Sprintf("behind kvfs's back: add %s/%s: %v", dir, name, err)
	case 5:
		return fmt.Sprintf("behind kvfs's back: remove %s/%s: %v", dir, name, os.Remove(m.disk(dir, name)))
	case 6:
		if st, err := os.Lstat(m.disk(dir, name)); err != nil || !st.Mode().IsRegular() {
			return "behind kvfs's back: no file to rename"
		}
		err := os.Rename(m.disk(dir, name), m.disk(toDir, toName))
		return fmt.Sprintf("behind kvfs's back: rename %s/%s to %s/%s: %v", dir, name, toDir, toName, err)
	case 7:
		err := os.Link(m.disk(dir, name), m.disk(toDir, toName))
		return fmt.Sprintf("behind kvfs's back: link %s/%s to %s/%s: %v", dir, name, toDir, toName, err)
	case 8:
		return "start, compared with a walk: " + m.restart()
	}
	cp := saveCheckpoint(m.t, m.s, ids(m.s))
	return fmt.Sprintf("checkpoint: %d objects, %d directories listed, %d distrusted", cp.Objects, cp.Listed, cp.Distrusted)
}

// restart starts from the checkpoint, if any, and compares what that
// serves with what a walk of the store finds; it goes on from the start
// from the checkpoint (whose vouching the next checkpoint takes).
func (m *cpFuzz) restart() string {
	s, objs, rep := reload(m.t, m.dir, m.s)
	got, gotSizes := namespace(s), sizes(s, objs)
	cp := filepath.Join(m.dir, CheckpointName)
	saved := filepath.Join(m.dir, "saved.index")
	hasCP := os.Rename(cp, saved) == nil
	w, wobjs, wrep := reload(m.t, m.dir, s)
	if wrep.FromSnapshot {
		m.t.Fatal("walked from a checkpoint")
	}
	if want, wantSizes := namespace(w), sizes(w, wobjs); !slices.Equal(got, want) || !mapsEqual(gotSizes, wantSizes) {
		m.t.Fatalf("a start (%+v) serves %v %v\na walk finds %v %v", rep, got, gotSizes, want, wantSizes)
	}
	if !hasCP {
		m.s = w
		return fmt.Sprintf("%+v (no checkpoint)", rep)
	}
	must(m.t, "restore the checkpoint", os.Rename(saved, cp))
	m.s, _, rep = reload(m.t, m.dir, w)
	return fmt.Sprintf("%+v", rep)
}
