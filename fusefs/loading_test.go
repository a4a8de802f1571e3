package fusefs

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/core"
)

// TestCreateWhileTheIndexIsTaken: a create while loading that the
// Preview made just before the switch, whose writer is not yet in
// Loading.writers when Ready takes the Preview's stores, is still handed
// on: Ready waits for the create to finish, and the writer becomes an
// FS handle that goes on writing. Before, Ready released the writer's
// core handle as one it could not find, and the writer's next write
// past the loading budget answered EIO.
func TestCreateWhileTheIndexIsTaken(t *testing.T) {
	store, err := blob.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, l := newLoading(t, store)

	created, proceed := make(chan struct{}), make(chan struct{})
	testHookEarlyCreated = func() { close(created); <-proceed }
	taking := make(chan struct{})
	testHookTakingEarly = func() { close(taking) }
	t.Cleanup(func() { testHookEarlyCreated, testHookTakingEarly = nil, nil })

	var out fuse.CreateOut
	createDone := make(chan fuse.Status)
	go func() {
		in := &fuse.CreateIn{InHeader: fuse.InHeader{NodeId: uint64(core.RootID)}, Flags: syscall.O_WRONLY, Mode: syscall.S_IFREG | 0o644}
		createDone <- l.Create(nil, in, "obj.tmp", &out)
	}()
	<-created

	fs := loadedFS(t, store)
	readyDone := make(chan struct{})
	go func() { l.Ready(fs); close(readyDone) }()
	<-taking
	// Ready either finishes without the create (the defect) or waits
	// for it; let it run as far as it goes.
	for range 1000 {
		runtime.Gosched()
	}
	select {
	case <-readyDone:
		t.Error("Ready took the Preview's stores while a create it had made was not yet a writer of the load's")
	default:
	}
	close(proceed)
	if st := <-createDone; !st.Ok() {
		t.Fatalf("create while loading: %v", st)
	}
	<-readyDone

	lf, put, ok := l.files.get(out.Fh - LoadBase)
	if !ok {
		t.Fatal("the create's handle is not the load's")
	}
	defer put()
	if lf.early.fh == 0 {
		t.Fatal("the writer open at the switch became no FS handle")
	}
	if st := fs.core.Stats(); st.PinnedObjects != 1 {
		t.Fatalf("%d objects pinned after the switch, want the open writer's", st.PinnedObjects)
	}
}

// TestLoadingReadsNotedFromTheIndex: the objects read while loading are
// noted as used at the switch from the index alone. They were looked up
// through the core, which stat'ed each stored name: one renamed or
// removed while loading, after the load had indexed it, was taken for
// an object vanished behind kvfs's back (a warning, a reconciliation
// counted) before the switch settled the rename, and each counted as a
// lookup no client made (an outside tester: 4 starts in 10 warned).
func TestLoadingReadsNotedFromTheIndex(t *testing.T) {
	dir := t.TempDir()
	store, err := blob.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, "data", name), []byte(name+" bytes"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pre, l := newLoading(t, store)
	for _, name := range []string{"a", "b"} { // read while loading
		var e fuse.EntryOut
		if st := l.Lookup(nil, &fuse.InHeader{NodeId: uint64(core.RootID)}, name, &e); !st.Ok() {
			t.Fatalf("lookup of %s while loading: %v", name, st)
		}
		var o fuse.OpenOut
		if st := l.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: e.NodeId}, Flags: syscall.O_RDONLY}, &o); !st.Ok() {
			t.Fatalf("open of %s while loading: %v", name, st)
		}
	}
	c, _, err := core.Open(store, core.Config{Capacity: 64 << 20}) // the load indexes a and b
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := pre.Rename("a", "a.moved", 0); err != nil { // then a client moves a
		t.Fatal(err)
	}
	c.AwaitEarly()
	c.Start(func(core.Drop) {})
	l.Ready(New(c, Config{}))
	st := c.Stats()
	if st.Reconciliations != 0 || st.LookupHits != 0 || st.LookupMisses != 0 {
		t.Errorf("after the switch: %d reconciliations, %d lookups found, %d missed; want none: the reads and the move were kvfs's own",
			st.Reconciliations, st.LookupHits, st.LookupMisses)
	}
	if st.Objects != 2 {
		t.Errorf("%d objects after the switch, want a (moved) and b", st.Objects)
	}
	if _, _, err := c.Lookup(core.RootID, "a.moved"); err != nil {
		t.Errorf("a's new name after the switch: %v", err)
	}
}

// newLoading is a Loading over store's Preview, which takes stores of up
// to 1 MiB.
func newLoading(t *testing.T, store *blob.Store) (*core.Preview, *Loading) {
	t.Helper()
	pre, err := core.NewPreview(store)
	if err != nil {
		t.Fatal(err)
	}
	pre.AllowStores(1 << 20)
	return pre, NewLoading(pre, LoadingConfig{})
}

// TestLoadingLookupAcrossTheSwitch: a lookup while loading whose node is
// made after Ready listed the load's names to drop has the kernel told to
// forget its name too. Before, nothing did: the kernel held that name of
// the load's until a client looked it up again, and every handover was
// refused meanwhile (an outside tester: "2 names" still in use 38 s after
// the load, 1 start in 5 under lookups from 6 threads).
func TestLoadingLookupAcrossTheSwitch(t *testing.T) {
	dir := t.TempDir()
	store, err := blob.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, blob.DataName, "obj"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, l := newLoading(t, store)
	looked, proceed := make(chan struct{}), make(chan struct{})
	testHookLoadLookup = func() { close(looked); <-proceed }
	t.Cleanup(func() { testHookLoadLookup = nil })
	var out fuse.EntryOut
	done := make(chan fuse.Status)
	go func() {
		done <- l.Lookup(nil, &fuse.InHeader{NodeId: uint64(core.RootID)}, "obj", &out)
	}()
	<-looked

	fs := loadedFS(t, store)
	l.Ready(fs)
	close(proceed)
	if st := <-done; !st.Ok() || out.NodeId < LoadBase {
		t.Fatalf("the lookup across the switch: %v, node %d; want a node of the load's", st, out.NodeId)
	}
	if names, _ := l.Held(); names != 1 {
		t.Fatalf("%d names of the load's held, want the lookup's", names)
	}
	pending := pendingNotices(fs)
	if !slices.Contains(pending, notice{node: core.RootID, name: "obj"}) {
		t.Errorf("notices pending %+v; want the kernel told to forget obj", pending)
	}
}

// TestLoadingDirectoryUsedAfterTheSwitch: once loaded, a request made
// through a directory node of the load's (a path walk that reached it
// before the switch, which goes on through it) has the kernel forget
// the name it found or made there: each such name keeps that directory
// in the kernel, unreachable by any new walk, so never looked up again,
// and every handover was refused for it (an outside tester: 5 starts in
// 6, "1 names"/"2 names", past 100 s). Absent names are names there too.
func TestLoadingDirectoryUsedAfterTheSwitch(t *testing.T) {
	dir := t.TempDir()
	store, err := blob.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, blob.DataName, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, blob.DataName, "d", "obj"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, l := newLoading(t, store)
	var d fuse.EntryOut
	if st := l.Lookup(nil, &fuse.InHeader{NodeId: uint64(core.RootID)}, "d", &d); !st.Ok() || d.NodeId < LoadBase {
		t.Fatalf("lookup of d while loading: %v, node %d", st, d.NodeId)
	}
	fs := loadedFS(t, store)
	l.Ready(fs)
	for _, name := range []string{"obj", "absent"} {
		var out fuse.EntryOut
		if st := l.Lookup(nil, &fuse.InHeader{NodeId: d.NodeId}, name, &out); !st.Ok() && st != fuse.ENOENT {
			t.Fatalf("lookup of d/%s through the load's node, once loaded: %v", name, st)
		}
	}
	pending := pendingNotices(fs)
	for _, name := range []string{"obj", "absent"} {
		if !slices.Contains(pending, notice{node: core.ID(d.NodeId), name: name}) {
			t.Errorf("notices pending %+v; want the kernel told to forget d/%s under the load's node", pending, name)
		}
	}
}

// loadedFS is the FS a load switches to, over store's core, its notices
// kept pending for the test to read (with no kernel, its sender would
// take and drop them, at a moment of its own).
func loadedFS(t *testing.T, store *blob.Store) *FS {
	t.Helper()
	c, _, err := core.Open(store, core.Config{Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.AwaitEarly()
	c.Start(func(core.Drop) {})
	fs := New(c, Config{})
	fs.notices.mu.Lock()
	fs.notices.paused = true
	fs.notices.mu.Unlock()
	return fs
}

// pendingNotices are the kernel notices fs has queued and not sent.
func pendingNotices(fs *FS) []notice {
	fs.notices.mu.Lock()
	defer fs.notices.mu.Unlock()
	return slices.Clone(fs.notices.pending)
}
