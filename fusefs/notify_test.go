package fusefs

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/core"
	"golang.org/x/sys/unix"
)

// TestQuiesceHoldsNotices: a kernel notice must not be sent while the
// gate holds a request in the notice's directory. Here a link(2) waits
// at the closed gate of a quiesced FS, holding its directory's lock in
// the kernel: an entry notice for that directory sent then does not
// return until the gate opens (the kernel fact: shown with a deliver of
// the test's own), and the old Quiesce, which sent the queued notices
// after it closed the gate, hung there, with the whole mount, in an
// outside tester's handovers under load (2 of 4). A notice queued now
// stays queued, unsent, and Export passes it to the successor.
func TestQuiesceHoldsNotices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE takes root")
	}
	dir := t.TempDir()
	mp := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	store, err := blob.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := core.Open(store, core.Config{Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	f := New(c, Config{CacheTimeout: time.Minute}) // d/a stays known: the held request is one under d's lock
	server, err := fuse.NewServer(f.Instrument(nil), mp, &fuse.MountOptions{Name: "kvfs", FsName: "kvfs-test", DirectMount: true})
	if err != nil {
		t.Fatal(err)
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		t.Fatal(err)
	}
	c.Start(f.Dropped)
	defer func() {
		server.Unmount()
		f.Close()
		c.Close()
	}()
	if err := os.Mkdir(filepath.Join(mp, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mp, "d", "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, _, err := c.Lookup(core.RootID, "d")
	if err != nil {
		t.Fatal(err)
	}

	if err := f.Quiesce(server.Outstanding, 5*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	linked := make(chan error, 1)
	go func() { linked <- unix.Link(filepath.Join(mp, "d", "a"), filepath.Join(mp, "d", "b")) }()
	deadline := time.Now().Add(10 * time.Second)
	for f.reqs.gate.held.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the link never reached the closed gate")
		}
		runtime.Gosched()
	}
	// What the old Quiesce did after closing the gate: send a notice.
	sent := make(chan struct{})
	go func() { f.deliver(notice{node: d.ID, name: "gone"}); close(sent) }()
	select {
	case <-sent:
		t.Log("the kernel took an entry notice for a directory a held request keeps locked (a kernel that does not lock there)")
	case <-time.After(200 * time.Millisecond):
	}
	// What the FS does now: queue it; it is not sent, and goes with
	// the state a successor takes.
	f.queue(notice{node: d.ID, name: "evicted"})
	f.notices.mu.Lock()
	pending, sending := len(f.notices.pending), f.notices.sending
	f.notices.mu.Unlock()
	if pending != 1 || sending {
		t.Fatalf("after a notice was queued at the closed gate: %d pending, sending %v; want it held", pending, sending)
	}
	st, files := f.Export()
	for _, file := range files {
		file.Close()
	}
	if len(st.Notices) != 1 || st.Notices[0].Node != d.ID || st.Notices[0].Name != "evicted" {
		t.Fatalf("exported notices %+v, want the queued one", st.Notices)
	}
	f.Resume()
	if err := <-linked; err != nil {
		t.Fatalf("the held link, once the gate opened: %v", err)
	}
	<-sent
}
