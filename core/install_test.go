package core

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/ledger"
)

// fetchOf is a FetchFunc that stores data, as a download would.
func fetchOf(data []byte) FetchFunc {
	return func(create func(int64) (*os.File, error)) error {
		f, err := create(int64(len(data)))
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		return err
	}
}

// writingLeft lists what the store's writing/ holds.
func (tc *testCore) writingLeft() []string {
	names, err := blob.ReadMarkers(filepath.Join(tc.store.Dir(), blob.WritingName))
	if err != nil {
		tc.t.Fatal(err)
	}
	return names
}

// readName reads an object's bytes through the store.
func (tc *testCore) readName(name string) []byte {
	tc.t.Helper()
	b, err := os.ReadFile(filepath.Join(tc.store.Dir(), blob.DataName, name))
	if err != nil {
		tc.t.Fatal(err)
	}
	return b
}

func TestInstall(t *testing.T) {
	var published []string
	tc := newTestCore(t, Config{Capacity: 8 * mib, Published: func(p string) { published = append(published, p) }})
	data := bytes.Repeat([]byte("kv"), 3*mib/4)
	id := tc.NewID()
	h, err := tc.Install(blob.RootID, "remote.data", id, fetchOf(data))
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	st := tc.Stats()
	if st.UsedBytes != ledger.Charge(int64(len(data))) || st.Objects != 1 || st.PinnedObjects != 1 || st.ReservedBytes != 0 {
		t.Errorf("while held: %+v", st.Stats)
	}
	h.Release()
	e, a, err := tc.Lookup(blob.RootID, "remote.data")
	if err != nil || e.ID != id || a.Size != int64(len(data)) || a.Charge != ledger.Charge(int64(len(data))) {
		t.Fatalf("lookup after install: %+v %+v %v", e, a, err)
	}
	if !bytes.Equal(tc.readName("remote.data"), data) {
		t.Error("installed bytes differ")
	}
	if st := tc.Stats(); st.PinnedObjects != 0 || st.Loads != 0 || st.Stores != 0 {
		t.Errorf("after release: %+v", st)
	}
	if left := tc.writingLeft(); len(left) != 0 {
		t.Errorf("writing/ holds %v after an install", left)
	}
	if len(published) != 0 {
		t.Errorf("an install was reported published: %v", published)
	}
}

// TestInstallNameTaken: a name stored locally while the fetch ran wins;
// the fetched bytes go, and the ledger holds only the local object.
func TestInstallNameTaken(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 8 * mib})
	_, err := tc.Install(blob.RootID, "x", tc.NewID(), func(create func(int64) (*os.File, error)) error {
		f, err := create(mib)
		if err != nil {
			return err
		}
		tc.put("x", 100)
		_, err = f.Write(make([]byte, mib))
		return err
	})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("install over a name stored meanwhile: %v, want ErrExists", err)
	}
	if st := tc.Stats(); st.UsedBytes != ledger.Charge(100) || st.Objects != 1 || st.PinnedObjects != 0 || st.ReservedBytes != 0 {
		t.Errorf("ledger after the lost install: %+v", st.Stats)
	}
	if got := tc.readName("x"); len(got) != 100 {
		t.Errorf("the local object holds %d bytes, want its own 100", len(got))
	}
	if left := tc.writingLeft(); len(left) != 0 {
		t.Errorf("writing/ holds %v", left)
	}
	if _, err := tc.Install(blob.RootID, "x", tc.NewID(), fetchOf([]byte("y"))); !errors.Is(err, ErrExists) {
		t.Errorf("install of a local name: %v, want ErrExists", err)
	}
}

// TestInstallFailed: a fetch that fails half-way (a corrupt download)
// leaves nothing: no name, no charge, no marker.
func TestInstallFailed(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 8 * mib})
	bad := errors.New("checksum mismatch")
	_, err := tc.Install(blob.RootID, "x", tc.NewID(), func(create func(int64) (*os.File, error)) error {
		f, err := create(2 * mib)
		if err != nil {
			return err
		}
		f.Write(make([]byte, mib))
		return bad
	})
	if !errors.Is(err, bad) {
		t.Fatalf("install: %v, want the fetch's error", err)
	}
	if tc.exists("x") {
		t.Error("a failed install left its name")
	}
	if st := tc.Stats(); st.UsedBytes != 0 || st.Objects != 0 || st.PinnedObjects != 0 || st.ReservedBytes != 0 {
		t.Errorf("ledger after a failed install: %+v", st.Stats)
	}
	if left := tc.writingLeft(); len(left) != 0 {
		t.Errorf("writing/ holds %v", left)
	}
}

// TestInstallAdmission: an install is admitted like a store: it evicts
// what is cold to fit, and one that can never fit is refused (ENOSPC)
// without evicting anything.
func TestInstallAdmission(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib})
	tc.put("cold", 2*mib)
	tc.put("warm", mib)
	tc.clock.Skip(time.Second)
	if _, err := tc.Install(blob.RootID, "huge", tc.NewID(), fetchOf(make([]byte, 5*mib))); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("install larger than the capacity: %v, want ErrNoSpace", err)
	}
	if st := tc.Stats(); st.Evictions != 0 || st.Objects != 2 {
		t.Fatalf("a doomed install evicted: %+v", st.Stats)
	}
	h, err := tc.Install(blob.RootID, "fetched", tc.NewID(), fetchOf(make([]byte, 2*mib)))
	if err != nil {
		t.Fatalf("install that fits after eviction: %v", err)
	}
	h.Release()
	if tc.exists("cold") || !tc.exists("warm") || !tc.exists("fetched") {
		t.Errorf("after install: cold %v warm %v fetched %v; want only cold evicted", tc.exists("cold"), tc.exists("warm"), tc.exists("fetched"))
	}
	if left := tc.writingLeft(); len(left) != 0 {
		t.Errorf("writing/ holds %v", left)
	}
}

// TestInstallOnce: concurrent installs of one name run one fetch; the
// others wait for it and learn that the name exists. The leader's fetch
// is released only once every follower is parked waiting for it (read
// from the followers' stacks) or has returned or run a fetch of its own
// (failures), so "followers wait" is forced, not left to timing.
func TestInstallOnce(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 8 * mib})
	started, release := make(chan struct{}), make(chan struct{})
	var fetches sync.WaitGroup
	fetches.Add(1)
	go func() {
		defer fetches.Done()
		h, err := tc.Install(blob.RootID, "x", tc.NewID(), func(create func(int64) (*os.File, error)) error {
			close(started)
			<-release
			return fetchOf([]byte("bytes"))(create)
		})
		if err != nil {
			t.Errorf("leader: %v", err)
			return
		}
		h.Release()
	}()
	<-started
	const followers = 4
	errs := make(chan error, followers)
	ids := make(chan uint64, followers)
	var second, returned atomic.Int64
	for range followers {
		go func() {
			ids <- goid()
			_, err := tc.Install(blob.RootID, "x", tc.NewID(), func(func(int64) (*os.File, error)) error {
				second.Add(1)
				return errors.New("a second fetch ran")
			})
			returned.Add(1)
			errs <- err
		}()
	}
	for range followers {
		g := <-ids
		for !parked(g, "core.(*Core).Install", "chan receive") && second.Load() == 0 && returned.Load() == 0 {
			runtime.Gosched()
		}
	}
	if n := second.Load(); n != 0 {
		t.Errorf("%d fetches ran while the first was in progress", n)
	}
	if n := returned.Load(); n != 0 {
		t.Errorf("%d followers returned before the install they wait for ended", n)
	}
	close(release)
	for range followers {
		if err := <-errs; !errors.Is(err, ErrExists) {
			t.Errorf("follower: %v, want ErrExists", err)
		}
	}
	fetches.Wait()
	if got := tc.readName("x"); string(got) != "bytes" {
		t.Errorf("x holds %q", got)
	}
}

// TestPublished: the hook hears of every name that holds a complete
// object, and of nothing else.
func TestPublished(t *testing.T) {
	var mu sync.Mutex
	var got []string
	tc := newTestCore(t, Config{Capacity: 4 * mib, WaitLimit: 0, Published: func(p string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, p)
	}})
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := got
		got = nil
		return out
	}
	want := func(what string, paths ...string) {
		t.Helper()
		if g := take(); !slices.Equal(g, paths) {
			t.Errorf("%s published %q, want %q", what, g, paths)
		}
	}
	dir, _, err := tc.Mkdir(blob.RootID, "d", 0o755, blob.Owner{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	want("mkdir")
	id := tc.put("tmp", 100)
	want("a writer's close", "tmp")
	if _, err := tc.Link(id, dir, "final"); err != nil {
		t.Fatal(err)
	}
	want("link", "d/final")
	if err := tc.Rename(blob.RootID, "tmp", dir, "moved", 0); err != nil {
		t.Fatal(err)
	}
	want("rename", "d/moved")
	if err := tc.Rename(blob.RootID, "d", blob.RootID, "e", 0); err != nil {
		t.Fatal(err)
	}
	want("rename of a directory")
	r, err := tc.Open(id, os.O_RDONLY, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Release()
	want("a reader's close")
	h, err := tc.Create(blob.RootID, "big", 0o644, blob.Owner{UID: -1, GID: -1}, true)
	if err != nil {
		t.Fatal(err)
	}
	h.File().Write(make([]byte, 5*mib))
	if err := h.Flush(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("flush of an object over the capacity: %v", err)
	}
	h.Release()
	want("a refused store")
	hold, err := tc.Install(blob.RootID, "fetched", tc.NewID(), fetchOf([]byte("z")))
	if err != nil {
		t.Fatal(err)
	}
	hold.Release()
	want("an install")
}

// TestOpenPath: the remote tier reads objects by path, pinned, without
// counting a load.
func TestOpenPath(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib})
	dir, _, err := tc.Mkdir(blob.RootID, "d", 0o755, blob.Owner{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	h, err := tc.Create(dir, "o", 0o644, blob.Owner{UID: -1, GID: -1}, true)
	if err != nil {
		t.Fatal(err)
	}
	h.Write(Interrupt{}, []byte("payload"), 0)
	h.Flush()
	h.Release()
	r, err := tc.OpenPath("d/o")
	if err != nil {
		t.Fatalf("OpenPath: %v", err)
	}
	b, _ := io.ReadAll(r.File())
	if string(b) != "payload" {
		t.Errorf("read %q", b)
	}
	if st := tc.Stats(); st.PinnedObjects != 1 || st.Loads != 0 {
		t.Errorf("while open: %+v", st)
	}
	r.Release()
	for _, p := range []string{"d", "d/x", "x", "d/o/x", ""} {
		if _, err := tc.OpenPath(p); !errors.Is(err, ErrNotFound) {
			t.Errorf("OpenPath(%q): %v, want ErrNotFound", p, err)
		}
	}
}

// TestReleasingCoversThePublish: a writer's release drops its pin before
// it publishes, so "nothing pinned" alone does not mean "everything
// published"; Releasing counts the release until its publish is done.
func TestReleasingCoversThePublish(t *testing.T) {
	var tc *testCore
	type seen struct{ pinned, releasing int64 }
	var during []seen
	tc = newTestCore(t, Config{Capacity: 4 * mib, Published: func(string) {
		during = append(during, seen{tc.Stats().PinnedObjects, tc.Releasing()})
	}})
	tc.put("k", 100)
	if len(during) != 1 || during[0] != (seen{0, 1}) {
		t.Fatalf("while the publish ran: %+v, want nothing pinned and one release under way", during)
	}
	if n := tc.Releasing(); n != 0 {
		t.Errorf("%d releases under way after the last one returned", n)
	}
}

// TestOpenDuringRenameFindsTheObject: between a rename's syscall and its
// commit the index still names the old path, which is gone. An open and
// a stat by ID in that window wait for the commit and find the object
// under its new name; they used to take the ENOENT for a vanished object
// and drop it, its stored file with it (a fusefs upload racing a rename
// lost both names' uploads in a make test run).
func TestOpenDuringRenameFindsTheObject(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib})
	id := tc.put("tmp", 100)
	hit := make(chan string, 4)
	type result struct {
		h   *Handle
		err error
	}
	opened, statted := make(chan result, 1), make(chan error, 1)
	testHookMoved = func() {
		select {
		case hit <- "retried":
		default: // the hook below has stopped counting
		}
	}
	testHookRenamed = func() {
		testHookRenamed = nil
		go func() {
			h, err := tc.Open(id, os.O_RDONLY, false, nil)
			opened <- result{h, err}
			hit <- "open returned"
		}()
		go func() { _, err := tc.Getattr(id, nil); statted <- err; hit <- "stat returned" }()
		// Both have met the moved path (or, without the wait, given up).
		for range 2 {
			select {
			case <-hit:
			case <-time.After(10 * time.Second):
				t.Error("neither an open nor a stat during the rename came back")
				return
			}
		}
	}
	defer func() { testHookMoved, testHookRenamed = nil, nil }()
	if err := tc.Rename(blob.RootID, "tmp", blob.RootID, "final", 0); err != nil {
		t.Fatal(err)
	}
	r := <-opened
	if r.err != nil {
		t.Errorf("open by ID during the rename: %v", r.err)
	} else {
		r.h.Release()
	}
	if err := <-statted; err != nil {
		t.Errorf("stat by ID during the rename: %v", err)
	}
	if st := tc.Stats(); st.Objects != 1 {
		t.Errorf("%d objects after the rename, want 1: the object was dropped as vanished", st.Objects)
	}
	if got := tc.readName("final"); len(got) != 100 {
		t.Errorf("final holds %d bytes, want 100", len(got))
	}
}

// TestStatDuringRenameOver: a stat of a name, by its node (getattr) or
// by the name (lookup), between a rename over it (os.replace, SGLang's
// publish) and the rename's commit finds the new file at the old
// object's stored path. That is kvfs's own change, not one behind its
// back: nothing is reconciled, no charge moves, and the lookup answers
// the new object once the rename commits. Before, each such stat counted
// a reconciliation and set the old object's charge to the new file's
// size (an outside tester: 4 warnings in 15 s of stat loops). The
// getattr of the old object, which waits for the commit, answers that
// it is gone (it has no name left), never with the new file's size (an
// outside tester again: an open racing os.replace got the new file's
// bytes under the old object's size).
func TestStatDuringRenameOver(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 64 * mib})
	old := tc.put("t", 300*kib)
	tc.put(".w", 100*kib)
	before := tc.Stats().UsedBytes
	looked, statted := make(chan error, 1), make(chan error, 1)
	var got blob.Entry
	var gotAttr, oldAttr Attr
	testHookRenamed = func() {
		testHookRenamed = nil
		go func() {
			var err error
			oldAttr, err = tc.Getattr(old, nil)
			statted <- err
		}()
		go func() {
			var err error
			got, gotAttr, err = tc.Lookup(blob.RootID, "t")
			looked <- err
		}()
	}
	defer func() { testHookRenamed = nil }()
	if err := tc.Rename(blob.RootID, ".w", blob.RootID, "t", 0); err != nil {
		t.Fatal(err)
	}
	if err := <-looked; err != nil {
		t.Fatal(err)
	}
	if err := <-statted; !errors.Is(err, ErrStale) && (err != nil || oldAttr.Size != 300*kib) {
		t.Errorf("getattr of the object renamed over, mid-rename: %v, %d bytes; want ErrStale, or its own 300 KiB", err, oldAttr.Size)
	}
	if gotAttr.Size != 100*kib || got.ID == old {
		t.Errorf("lookup during the rename: id %d size %d, want the renamed object's %d bytes", got.ID, gotAttr.Size, 100*kib)
	}
	if st := tc.Stats(); st.Reconciliations != 0 || st.UsedBytes != before-300*kib {
		t.Errorf("after the rename: %d reconciliations, used %d; want none and %d", st.Reconciliations, st.UsedBytes, before-300*kib)
	}
}

// TestInstalledObjectsHaveNoGrace: an object fetched from the remote
// tier is named complete, with no publish step to protect, so a fetch
// into a full cache evicts the last one at once: each kept --grace from
// its download, and a small cache's cold hits waited for it or failed
// with ENOSPC (an outside tester).
func TestInstalledObjectsHaveNoGrace(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 8 * mib, Grace: time.Hour})
	tc.clock.Freeze()
	for i, name := range []string{"a", "b", "c"} {
		h, err := tc.Install(blob.RootID, name, tc.NewID(), fetchOf(make([]byte, 5*mib)))
		if err != nil {
			t.Fatalf("install %d of 5 MiB into 8 MiB: %v", i, err)
		}
		h.Release()
	}
	if tc.exists("a") || tc.exists("b") || !tc.exists("c") {
		t.Errorf("after three installs of 5 MiB into 8 MiB: a %v, b %v, c %v; want c alone", tc.exists("a"), tc.exists("b"), tc.exists("c"))
	}
}

// TestFetchWaitsLittleForRoom: an install (a reader's fetch) that finds
// no room waits for it at most fetchWait, not the wait limit a store
// waits (an outside tester's read waited 5 s for room, then failed), and
// room that comes within it is taken. In a synctest bubble: its clock
// moves only when every goroutine waits.
func TestFetchWaitsLittleForRoom(t *testing.T) {
	for _, freed := range []bool{false, true} {
		t.Run(map[bool]string{false: "held", true: "freed"}[freed], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tc := newTestCore(t, Config{Capacity: 4 * mib, WaitLimit: time.Hour})
				id := tc.put("held", 3*mib)
				r, err := tc.Open(id, os.O_RDONLY, false, nil)
				if err != nil {
					t.Fatal(err)
				}
				if freed {
					go func() {
						time.Sleep(fetchWait / 2)
						r.Release()
					}()
				} else {
					defer r.Release()
				}
				start := time.Now()
				h, err := tc.Install(blob.RootID, "fetched", tc.NewID(), fetchOf(make([]byte, 2*mib)))
				waited := time.Since(start)
				if waited > fetchWait {
					t.Errorf("the fetch waited %v for room; want at most %v", waited, fetchWait)
				}
				if !freed {
					if !errors.Is(err, ErrNoSpace) || tc.exists("fetched") || !tc.exists("held") {
						t.Fatalf("fetch with the cache held: %v; want ErrNoSpace, nothing installed, nothing evicted", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("fetch with room freed after %v: %v", fetchWait/2, err)
				}
				h.Release()
				if tc.exists("held") || !tc.exists("fetched") {
					t.Errorf("after the fetch: held %v, fetched %v; want held evicted for it", tc.exists("held"), tc.exists("fetched"))
				}
			})
		})
	}
}
