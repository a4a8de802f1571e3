package blob

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// openFds counts this process's open descriptors.
func openFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Stores in a directory resolve it once: the changes of a hundred
// fs_native stores (create, link, unlink of the temp, the crash marker)
// leave one directory open and open no more descriptors.
func TestDirFdsKeepDirectoryOpen(t *testing.T) {
	s := newStore(t)
	d := mustMkdir(t, s, RootID, "d")
	mustCreate(t, s, d, "warm", nil)
	before := openFds(t)
	for i := range 100 {
		tmp := fmt.Sprintf("o%d.tmp", i)
		id := mustCreate(t, s, d, tmp, []byte("kv"))
		must(t, "Link", s.Link(id, d, fmt.Sprintf("o%d", i)))
		_, err := s.Unlink(d, tmp)
		must(t, "Unlink", err)
	}
	if n := s.dirfds.kept(); n != 1 {
		t.Errorf("%d directories kept open, want 1", n)
	}
	if after := openFds(t); after != before {
		t.Errorf("open descriptors %d before the stores, %d after", before, after)
	}
	checkIndex(t, s)
}

// A directory renamed keeps its descriptor, which must no longer serve
// its old path: a new directory there gets the new names.
func TestDirFdsFollowRenamedDirectories(t *testing.T) {
	s := newStore(t)
	data := filepath.Join(s.Dir(), DataName)
	a := mustMkdir(t, s, RootID, "a")
	sub := mustMkdir(t, s, a, "sub")
	mustCreate(t, s, a, "x", []byte("1"))
	mustCreate(t, s, sub, "y", []byte("2"))
	c := mustMkdir(t, s, RootID, "c")
	csub := mustMkdir(t, s, c, "sub")
	mustCreate(t, s, csub, "z", nil)
	_, err := s.Rename(RootID, "a", RootID, "b", 0)
	must(t, "Rename", err)
	// The directory moved in under the old path is the one it names.
	_, err = s.Rename(RootID, "c", RootID, "a", 0)
	must(t, "Rename", err)
	mustCreate(t, s, c, "new", []byte("3"))
	mustCreate(t, s, csub, "new", []byte("4"))
	for _, p := range []string{"a/new", "a/sub/new", "b/x", "b/sub/y"} {
		if !exists(filepath.Join(data, p)) {
			t.Errorf("data/%s missing", p)
		}
	}
	for _, p := range []string{"b/new", "b/sub/new"} {
		if exists(filepath.Join(data, p)) {
			t.Errorf("data/%s: a new name went to the renamed directory", p)
		}
	}

	// An exchange moves both.
	_, err = s.Rename(RootID, "a", RootID, "b", unix.RENAME_EXCHANGE)
	must(t, "exchange", err)
	bid, err := s.Lookup(RootID, "b")
	must(t, "Lookup", err)
	mustCreate(t, s, bid.ID, "after", nil)
	if !exists(filepath.Join(data, "b", "new")) || !exists(filepath.Join(data, "b", "after")) {
		t.Error("a name created after the exchange is not beside the exchanged directory's files")
	}
	checkIndex(t, s)
}

// A directory removed and made again, by kvfs or behind its back, gets
// the names created after.
func TestDirFdsForgetRemovedDirectories(t *testing.T) {
	s := newStore(t)
	data := filepath.Join(s.Dir(), DataName)
	d := mustMkdir(t, s, RootID, "d")
	mustCreate(t, s, d, "x", nil)
	_, err := s.Unlink(d, "x")
	must(t, "Unlink", err)
	_, err = s.Rmdir(RootID, "d")
	must(t, "Rmdir", err)
	d = mustMkdir(t, s, RootID, "d")
	mustCreate(t, s, d, "again", nil)
	if !exists(filepath.Join(data, "d", "again")) {
		t.Fatal("a name created in a directory made again is not there")
	}

	// Behind kvfs's back: the kept descriptor is of a removed
	// directory, which refuses every change with ENOENT.
	must(t, "remove", os.RemoveAll(filepath.Join(data, "d")))
	must(t, "mkdir", os.Mkdir(filepath.Join(data, "d"), 0o755))
	mustCreate(t, s, d, "behind", []byte("z"))
	if !exists(filepath.Join(data, "d", "behind")) {
		t.Fatal("a create in a directory made again behind kvfs's back went elsewhere")
	}
}

// A walk of the store (the audit) forgets every kept directory, as one
// may have been moved behind kvfs's back.
func TestDirFdsForgottenByWalk(t *testing.T) {
	s := newStore(t)
	data := filepath.Join(s.Dir(), DataName)
	d := mustMkdir(t, s, RootID, "d")
	mustCreate(t, s, d, "x", nil)
	must(t, "rename", os.Rename(filepath.Join(data, "d"), filepath.Join(data, "moved")))
	must(t, "mkdir", os.Mkdir(filepath.Join(data, "d"), 0o755))
	must(t, "walk", s.WalkDirs(nil, func(string, []WalkedName) {}, func(string) {}))
	if n := s.dirfds.kept(); n != 0 {
		t.Fatalf("%d directories kept after a walk", n)
	}
	mustCreate(t, s, d, "after", nil)
	if !exists(filepath.Join(data, "d", "after")) || exists(filepath.Join(data, "moved", "after")) {
		t.Fatal("a create after the walk went to the directory moved behind kvfs's back")
	}
}

// Many directories keep at most maxDirFds open, and changes in them
// from many goroutines, with directories renamed and removed beside
// them, close every descriptor they do not keep.
func TestDirFdsBoundedUnderChanges(t *testing.T) {
	s := newStore(t)
	base := openFds(t)
	dirs := make([]ID, maxDirFds+100)
	for i := range dirs {
		dirs[i] = mustMkdir(t, s, RootID, fmt.Sprintf("d%04d", i))
	}
	var mu sync.Mutex // the owner's lock: the index is not concurrent
	// The owner's order: a directory's rename waits for the changes
	// under way, from plan to commit.
	var tree sync.RWMutex
	var wg sync.WaitGroup
	store := func(parent ID, name string) error {
		tree.RLock()
		defer tree.RUnlock()
		id := s.NewID()
		mu.Lock()
		rel, err := s.FreePath(parent, name)
		mu.Unlock()
		if err != nil {
			return err
		}
		f, _, err := s.CreateAt(rel, id, 0o644, nobody)
		if err != nil {
			return err
		}
		f.Close()
		s.ClearWriting(id)
		mu.Lock()
		defer mu.Unlock()
		return s.AddFile(parent, name, id, 0)
	}
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(dirs); i += 4 {
				if err := store(dirs[i], fmt.Sprintf("o%d", i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 50 {
			tree.Lock()
			_, err := s.Rename(RootID, fmt.Sprintf("d%04d", i*7), RootID, fmt.Sprintf("r%04d", i), 0)
			tree.Unlock()
			if err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	if n := s.dirfds.kept(); n > maxDirFds {
		t.Errorf("%d directories kept, want at most %d", n, maxDirFds)
	}
	if n := openFds(t) - base; n > maxDirFds {
		t.Errorf("%d more descriptors open, want at most %d", n, maxDirFds)
	}
	checkIndex(t, s)
	s.dirfds.close()
	if n := openFds(t); n != base {
		t.Errorf("%d descriptors open after forgetting every directory, %d before", n, base)
	}
}
