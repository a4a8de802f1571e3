package fusefs

import (
	"runtime"
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
	pre, err := core.NewPreview(store)
	if err != nil {
		t.Fatal(err)
	}
	pre.AllowStores(1 << 20)
	l := NewLoading(pre, LoadingConfig{})

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

	c, _, err := core.Open(store, core.Config{Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.AwaitEarly()
	c.Start(func(core.Drop) {})
	fs := New(c, Config{})
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
	if st := c.Stats(); st.PinnedObjects != 1 {
		t.Fatalf("%d objects pinned after the switch, want the open writer's", st.PinnedObjects)
	}
}
