package remote

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/internal/s3test"
	"github.com/minio/minio-go/v7"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Environment of the crash child (see TestMain).
const (
	childEnv     = "KVFS_REMOTE_CRASH_CHILD"
	childURL     = "KVFS_REMOTE_CHILD_URL"
	childJournal = "KVFS_REMOTE_CHILD_JOURNAL"
	childStore   = "KVFS_REMOTE_CHILD_STORE"
	childNames   = "KVFS_REMOTE_CHILD_NAMES"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		crashChild()
	}
	os.Exit(m.Run())
}

// crashChild is the daemon a test kills: it queues the names, says so,
// and waits for SIGKILL.
func crashChild() {
	cfg := Config{URL: os.Getenv(childURL)}
	if err := cfg.Finish(os.Getenv); err != nil {
		fmt.Println("config:", err)
		os.Exit(2)
	}
	n := &node{store: os.Getenv(childStore)}
	tier, err := New(cfg, Deps{JournalDir: os.Getenv(childJournal), Open: n.open})
	if err != nil {
		fmt.Println("new:", err)
		os.Exit(1)
	}
	names := strings.Split(os.Getenv(childNames), ",")
	for _, name := range names {
		if !tier.Enqueue(name) {
			fmt.Println("refused", name)
			os.Exit(1)
		}
	}
	fmt.Printf("queued %d\n", len(names))
	select {}
}

// TestJournalAfterKill: a daemon killed with SIGKILL while uploads are
// pending (server down) leaves them in its journal; a new tier on that
// journal uploads them once the server is back, and empties it.
func TestJournalAfterKill(t *testing.T) {
	srv := s3test.New(t)
	store, journal := t.TempDir(), t.TempDir()
	seed := &node{store: store}
	var names []string
	for i := range 5 {
		name := fmt.Sprintf("d/k%d.data", i)
		seed.write(t, name, randBytes(t, 32<<10))
		names = append(names, name)
	}
	srv.Stop()
	out := runChild(t, srv, journal, store, names)
	if ents, _ := os.ReadDir(journal); len(ents) != len(names) {
		t.Fatalf("journal holds %d entries after the kill, want %d (child said %q)", len(ents), len(names), out)
	}
	srv.Start()
	n := newNode(t, srv, "p", nodeOpts{journal: journal, store: store})
	n.waitUploads(t)
	if st := n.Stats(); st.Uploads != int64(len(names)) {
		t.Fatalf("after restart: %+v, want %d uploads", st, len(names))
	}
	if ents, _ := os.ReadDir(journal); len(ents) != 0 {
		t.Fatalf("journal holds %d entries after the uploads", len(ents))
	}
	for _, name := range names {
		getRaw(t, srv.Client(), srv.Bucket, "p/"+name)
	}
}

// runChild starts the crash child, waits for it to queue names, and
// kills it with SIGKILL.
func runChild(t *testing.T, srv *s3test.Server, journal, store string, names []string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), srv.Env()...)
	cmd.Env = append(cmd.Env, childEnv+"=1", childURL+"="+srv.URL("p"), childJournal+"="+journal,
		childStore+"="+store, childNames+"="+strings.Join(names, ","))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if want := fmt.Sprintf("queued %d\n", len(names)); line != want {
		t.Fatalf("child said %q, want %q", line, want)
	}
	return line
}

// TestJournalAfterClose: Close uploads nothing more and leaves the
// journal; the next tier on it uploads what was pending. A torn or
// foreign file in the journal is discarded.
func TestJournalAfterClose(t *testing.T) {
	srv := s3test.New(t)
	a := newNode(t, srv, "p", nodeOpts{cfg: func(c *Config) { c.BreakerFailures = 1 }})
	srv.Stop()
	a.Lookup(context.Background(), "open-the-breaker.data")
	for i := range 3 {
		name := fmt.Sprintf("k%d.data", i)
		a.write(t, name, randBytes(t, 4096))
		a.Enqueue(name)
	}
	a.Close()
	if a.Enqueue("late.data") {
		t.Fatal("Enqueue after Close queued")
	}
	os.WriteFile(filepath.Join(a.journal, journalName("torn.data")), []byte("tor"), 0o644)
	os.WriteFile(filepath.Join(a.journal, "junk"), []byte("junk"), 0o644)
	if ents, _ := os.ReadDir(a.journal); len(ents) != 5 {
		t.Fatalf("journal holds %d entries, want 3 pending and 2 bad", len(ents))
	}
	srv.Start()
	core, logs := observer.New(zap.WarnLevel)
	b := newNode(t, srv, "p", nodeOpts{journal: a.journal, store: a.store, log: zap.New(core)})
	b.waitUploads(t)
	if said := logs.FilterMessage("removed from the upload journal what is no entry of it").All(); len(said) != 1 || said[0].ContextMap()["count"] != int64(2) {
		t.Errorf("the replay said %v of the 2 bad entries it removed; want one warning counting them", said)
	}
	if st := b.Stats(); st.Uploads != 3 || a.reqs.count("PUT") != 0 {
		t.Fatalf("after reopening: %+v; A sent %d PUTs", st, a.reqs.count("PUT"))
	}
	if ents, _ := os.ReadDir(a.journal); len(ents) != 0 {
		t.Fatalf("journal holds %d entries after the uploads", len(ents))
	}
}

// TestJournalIsPrivate: the upload queue's entries name objects, those
// below directories other users may not list too, so its directory is
// the daemon's alone (0700), also where an older kvfs made it 0755.
func TestJournalIsPrivate(t *testing.T) {
	srv := s3test.New(t)
	journal := filepath.Join(t.TempDir(), "remote")
	if err := os.Mkdir(journal, 0o755); err != nil {
		t.Fatal(err)
	}
	a := newNode(t, srv, "p", nodeOpts{journal: journal})
	a.write(t, "k.data", randBytes(t, 4096))
	a.Enqueue("k.data")
	st, err := os.Stat(journal)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("the journal directory's mode is %v, want 0700", st.Mode().Perm())
	}
}

// TestJournalReplayKeepsUploadsBesideDeletes: uploads accepted within the
// bound and rms pending beside them (the server down) are all done by
// the next tier on the journal, with the same bound: the rms take none
// of the uploads' room, and the replay drops nothing it journaled (an
// outside tester: with --remote-queue 2, two stores and an rm pending,
// the restart dropped a store, which never reached the bucket).
func TestJournalReplayKeepsUploadsBesideDeletes(t *testing.T) {
	srv := s3test.New(t)
	bound := func(c *Config) { c.QueueMax, c.BreakerFailures = 2, 1 }
	a := newNode(t, srv, "p", nodeOpts{cfg: bound})
	ctx := context.Background()
	olds := []string{"old0.data", "old1.data", "old2.data", "old3.data"}
	for _, name := range olds {
		if err := a.Put(ctx, name, strings.NewReader("old bytes of "+name)); err != nil {
			t.Fatal(err)
		}
	}
	srv.Stop()
	a.Lookup(ctx, "open-the-breaker.data")
	for _, name := range olds {
		if !a.Delete(name) {
			t.Fatalf("the rm of %s was dropped", name)
		}
	}
	news := []string{"new0.data", "new1.data"}
	for _, name := range news {
		a.write(t, name, randBytes(t, 4096))
		if !a.Enqueue(name) {
			t.Fatalf("the upload of %s, within the bound of 2 beside 4 rms, was dropped", name)
		}
	}
	a.Close()
	srv.Start()
	b := newNode(t, srv, "p", nodeOpts{journal: a.journal, store: a.store, cfg: bound})
	b.waitUploads(t)
	if st := b.Stats(); st.UploadDropped != 0 || st.Uploads != int64(len(news)) {
		t.Fatalf("after the replay: %+v; want both uploads done, none dropped", st)
	}
	for _, name := range news {
		getRaw(t, srv.Client(), srv.Bucket, "p/"+name)
	}
	for _, name := range olds {
		if _, err := srv.Client().StatObject(ctx, srv.Bucket, "p/"+name, minio.StatObjectOptions{}); minio.ToErrorResponse(err).StatusCode != http.StatusNotFound {
			t.Errorf("%s after the replay: %v; want it deleted", name, err)
		}
	}
}
