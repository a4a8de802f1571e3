package tests

// The shared remote tier (issue 12), end to end: kvfs daemons with
// separate stores share one bucket of a real S3 server (versitygw, see
// internal/s3test), driven the way LMCache's fs_native drives a mount.
// One test per scenario of the issue; the expiry of the negative cache
// needs a clock the test moves, so it is proven in process, in
// fusefs.TestRemoteNegativeCache.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/s3test"
	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"
)

// 1. Node B loads an object node A stored: byte-identical, counted in
// B's ledger, not uploaded again.
func TestRemoteLoadFromAnotherNode(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a")
	b := startRemoteNode(t, srv, dir, "b")
	data := objectBytes("shared", 5*MiB+123)
	a.put("shared", data)
	if f := a.uploaded(); f.Uploads != 1 || f.UploadedBytes != int64(len(data)) {
		t.Fatalf("A's uploads: %+v", f)
	}
	b.mustLoad("shared", data)
	st := assertQuietEqual(t, b.daemon)
	if st.Objects != 1 || st.UsedBytes != ceil4096(int64(len(data))) || st.Loads < 1 {
		t.Errorf("B's ledger after the load: %+v", st)
	}
	f := b.remote()
	if f.Hits != 1 || f.Fetches != 1 || f.FetchedBytes != int64(len(data)) || f.Corrupt != 0 {
		t.Errorf("B's remote figures: %+v", f)
	}
	if f.Uploads != 0 || f.UploadSkipped != 0 || *f.QueueDepth != 0 {
		t.Errorf("B queued the object it fetched for upload: %+v", f)
	}
	if n := srv.Requests("PUT", remoteKey("shared")); n != 1 {
		t.Errorf("%d PUTs of the object, want A's one", n)
	}
	b.stop()
	a.stop()
}

// 2. A and B store one name with different bytes at once: neither sees
// an error, the bucket keeps one of the two (first writer wins), intact,
// and C loads it.
func TestRemoteSameNameAtOnce(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	nodes := []*remoteNode{startRemoteNode(t, srv, dir, "a"), startRemoteNode(t, srv, dir, "b")}
	versions := [][]byte{objectBytes("race-a", 4*MiB), objectBytes("race-b", 4*MiB)}
	// Each node has looked the name up (absent) before either stores: a
	// store's own stat is then answered from the node's memory of it, so
	// both store their bytes however late one starts, and the race is
	// the uploads' (otherwise a node that starts after the other's upload
	// finds the object and rightly stores nothing).
	for _, n := range nodes {
		if _, err := os.Stat(finalPath(n.mp, "race")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("race on %s before the stores: %v", n.mp, err)
		}
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, n := range nodes {
		wg.Go(func() {
			<-start
			if _, err := n.fs.store("race", versions[i]); err != nil {
				t.Errorf("store on %s: %v", n.mp, err)
			}
		})
	}
	close(start)
	wg.Wait()
	var uploads, present int64
	for i, n := range nodes {
		f := n.uploaded()
		uploads, present = uploads+f.Uploads, present+f.AlreadyPresent
		if f.UploadDropped != 0 {
			t.Errorf("node %d: upload dropped %+v", i, f)
		}
		n.mustLoad("race", versions[i]) // each keeps its own bytes locally
	}
	if uploads != 1 || present != 1 {
		t.Errorf("%d uploads, %d already present; want one winner and one loser", uploads, present)
	}
	got, _ := remoteObject(t, srv, "race")
	if !bytes.Equal(got, versions[0]) && !bytes.Equal(got, versions[1]) {
		t.Fatalf("the bucket holds %d bytes equal to neither version", len(got))
	}
	c := startRemoteNode(t, srv, dir, "c")
	c.mustLoad("race", got)
	if f := c.remote(); f.Fetches != 1 || f.Corrupt != 0 {
		t.Errorf("C's fetch: %+v", f)
	}
	for _, n := range append(nodes, c) {
		n.stop()
	}
}

// 3. The server stops: local work goes on, lookups of absent names
// answer ENOENT (then without asking the server, once the breaker is
// open), uploads queue to the bound and then drop; when the server is
// back, the queued ones upload.
func TestRemoteServerDown(t *testing.T) {
	waitsOnTimers(t)
	srv := s3test.New(t)
	a := startRemoteNode(t, srv, t.TempDir(), "a", "--remote-queue", "3", "--remote-breaker-failures", "2",
		"--remote-breaker-cooldown", "5s", "--remote-timeout", "1s")
	srv.Stop()
	data := map[string][]byte{}
	for _, key := range []string{"q1", "q2", "q3", "q4", "q5"} {
		data[key] = objectBytes(key, MiB)
		a.put(key, data[key])
		a.mustLoad(key, data[key])
	}
	f := a.waitRemote("breaker to open", func(f remoteFigures) bool { return f.BreakerState == "open" })
	if *f.QueueDepth != 3 || f.UploadDropped != 2 || f.Uploads != 0 {
		t.Errorf("with the server down: %+v (queue %d); want 3 queued, 2 dropped", f, *f.QueueDepth)
	}
	for i := range 20 {
		if _, err := os.Stat(filepath.Join(a.mp, fmt.Sprintf("absent-%d.data", i))); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("lookup of an absent name with the server down: %v", err)
		}
	}
	if g := a.remote(); g.Heads > f.Heads+1 {
		t.Errorf("the open breaker let %d HEADs through for 20 lookups (one probe at most)", g.Heads-f.Heads)
	}
	srv.Start()
	f = a.waitRemote("queued uploads after the server returned", func(f remoteFigures) bool {
		return *f.QueueDepth == 0 && f.Uploads == 3
	})
	var inBucket []string
	for _, key := range []string{"q1", "q2", "q3", "q4", "q5"} {
		if got, _ := remoteObject(t, srv, key); got != nil {
			if !bytes.Equal(got, data[key]) {
				t.Errorf("%s: the bucket's bytes differ", key)
			}
			inBucket = append(inBucket, key)
		}
	}
	if !slices.Equal(inBucket, []string{"q1", "q2", "q3"}) {
		t.Errorf("the bucket holds %v, want the three queued first", inBucket)
	}
	assertQuietEqual(t, a.daemon)
	a.stop()
}

// 4. Eviction is local: the remote copy stays, and an evicted name is
// fetched again on its next lookup.
func TestRemoteEvictionKeepsRemoteCopy(t *testing.T) {
	srv := s3test.New(t)
	a := startRemoteNode(t, srv, t.TempDir(), "a", "--capacity", "8MiB")
	keys := []string{"e0", "e1", "e2", "e3", "e4"}
	for _, key := range keys {
		// An upload pins its object while it runs: one at a time, so
		// that e0, the coldest, is the one evicted.
		a.put(key, objectBytes(key, 2*MiB))
		a.uploaded()
	}
	if st := stats(t, a.mp); st.Evictions == 0 {
		t.Fatalf("no eviction: %+v", st)
	}
	if _, err := os.Stat(filepath.Join(a.store, "data", "e0.data")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("e0 is still in the store (%v); the test needs it evicted", err)
	}
	for _, key := range keys {
		if got, _ := remoteObject(t, srv, key); !bytes.Equal(got, objectBytes(key, 2*MiB)) {
			t.Errorf("%s: the remote copy is gone or differs after local eviction", key)
		}
	}
	fetches := a.remote().Fetches
	a.mustLoad("e0", objectBytes("e0", 2*MiB))
	if f := a.remote(); f.Fetches != fetches+1 {
		t.Errorf("e0 loaded with %d fetches, want one", f.Fetches-fetches)
	}
	assertQuietEqual(t, a.daemon)
	a.stop()
}

// 5. A damaged or truncated remote object is a miss: ENOENT, nothing
// published locally, remote_corrupt counts it.
func TestRemoteCorruptObject(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a")
	b := startRemoteNode(t, srv, dir, "b")
	data := objectBytes("good", 2*MiB)
	a.put("good", data)
	a.uploaded()
	// kvfs's size and checksum of the good bytes, as user metadata (the
	// form older versions wrote, which still wins over the server's).
	meta := map[string]string{"kvfs-size": fmt.Sprint(len(data)),
		"kvfs-crc32c": fmt.Sprintf("%08x", crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))}
	flipped := bytes.Clone(data)
	flipped[MiB] ^= 0x01
	putRemote(t, srv, "flipped", flipped, meta)
	putRemote(t, srv, "short", data[:MiB], meta)
	for i, key := range []string{"flipped", "short"} {
		path := finalPath(b.mp, key)
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("%s: lookup before the fetch: %v", key, err)
		}
		if _, err := os.ReadFile(path); !errors.Is(err, unix.ENOENT) {
			t.Errorf("%s: open of a damaged object: %v, want ENOENT", key, err)
		}
		if f := b.remote(); f.Corrupt != int64(i+1) {
			t.Errorf("%s: remote_corrupt %d, want %d", key, f.Corrupt, i+1)
		}
		if !waitFor(func() bool { _, err := os.Stat(path); return errors.Is(err, os.ErrNotExist) }) {
			t.Errorf("%s: still looked up after the failed fetch", key)
		}
	}
	st := assertQuietEqual(t, b.daemon)
	if st.Objects != 0 || st.UsedBytes != 0 || len(b.writingEntries()) != 0 {
		t.Errorf("B after two corrupt fetches: %+v, writing/ %v", st, b.writingEntries())
	}
	if ents, _ := os.ReadDir(filepath.Join(b.store, "data")); len(ents) != 0 {
		t.Errorf("B's store holds %d names", len(ents))
	}
	b.mustLoad("good", data)
	b.stop()
	a.stop()
}

// 5b. A fetch that finds no room (a reader holds the cache) is a miss:
// the open answers ENOENT after a short wait, as connectors' loads take
// a miss, not ENOSPC after the wait limit (an outside tester: 5 s, then
// an error on a read); once the reader closes, the object is fetched.
func TestRemoteFetchWithNoRoomIsAMiss(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a")
	b := startRemoteNode(t, srv, dir, "b", "--capacity", "6MiB")
	data := objectBytes("big", 3*MiB)
	a.put("big", data)
	a.uploaded()
	b.put("local", objectBytes("local", 4*MiB))
	b.uploaded()
	held, err := os.Open(finalPath(b.mp, "local"))
	if err != nil {
		t.Fatal(err)
	}
	refused := stats(t, b.mp).AdmissionFailures
	if _, err := os.ReadFile(finalPath(b.mp, "big")); !errors.Is(err, unix.ENOENT) {
		t.Errorf("open of a remote object with the cache held by a reader: %v, want ENOENT (a miss)", err)
	}
	if st := stats(t, b.mp); st.AdmissionFailures != refused+1 || st.Objects != 1 {
		t.Errorf("after the fetch with no room: %+v; want one admission failure counted and the held object kept", st)
	}
	// Openers of the name at once share a try's miss, not each waiting
	// for room in turn behind the others (an outside tester: 8 openers,
	// the last after 2 s): fewer tries than openers.
	const openers = 8
	refused = stats(t, b.mp).AdmissionFailures
	start := make(chan struct{})
	errs := make(chan error, openers)
	for range openers {
		go func() {
			<-start
			_, err := os.ReadFile(finalPath(b.mp, "big"))
			errs <- err
		}()
	}
	close(start)
	for range openers {
		if err := <-errs; !errors.Is(err, unix.ENOENT) {
			t.Errorf("one of %d openers at once: %v, want ENOENT (a miss)", openers, err)
		}
	}
	if tries := stats(t, b.mp).AdmissionFailures - refused; tries >= openers {
		t.Errorf("%d openers at once made %d fetches that waited for room; want them to share", openers, tries)
	}
	held.Close()
	waitReleased(t, b.mp)
	b.mustLoad("big", data)
	assertQuietEqual(t, b.daemon)
	b.stop()
	a.stop()
}

// 6. An object deleted remotely after a positive lookup: the open
// answers ENOENT and the name leaves the kernel.
func TestRemoteDeletedAfterLookup(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a")
	b := startRemoteNode(t, srv, dir, "b")
	a.put("doomed", objectBytes("doomed", MiB))
	a.uploaded()
	path := finalPath(b.mp, "doomed")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("lookup on B: %v", err)
	}
	if err := srv.Client().RemoveObject(t.Context(), srv.Bucket, remoteKey("doomed"), minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Open(path); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("open of an object deleted remotely: %v, want ENOENT", err)
	}
	if !waitFor(func() bool { _, err := os.Stat(path); return errors.Is(err, os.ErrNotExist) }) {
		t.Error("the kernel still has the name after the miss")
	}
	if st := assertQuietEqual(t, b.daemon); st.Objects != 0 {
		t.Errorf("B holds %d objects", st.Objects)
	}
	a.mustLoad("doomed", objectBytes("doomed", MiB)) // A's copy is A's
	b.stop()
	a.stop()
}

// TestRemoteOverwriteOfADeletedKey: B knows a name from the bucket (a
// lookup), then A deletes the key; B's overwrites of it (open with
// O_TRUNC, a shell's `>`, and a truncate to 0 by path) store the new
// bytes, with the server up or down: the old bytes were to be
// discarded, so nothing is fetched. Each failed with ENOENT at the first
// try, the fetch of the gone key being a miss (an outside tester: 7 of
// 7; 6 of 6 with the server down).
func TestRemoteOverwriteOfADeletedKey(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a")
	b := startRemoteNode(t, srv, dir, "b")
	keys := []string{"wb", "shell", "truncate", "wb-server-down"}
	for _, k := range keys {
		a.put(k, objectBytes(k, MiB))
	}
	a.uploaded()
	for _, k := range keys {
		if _, err := os.Stat(finalPath(b.mp, k)); err != nil {
			t.Fatalf("lookup of %s on B: %v", k, err)
		}
		if err := os.Remove(finalPath(a.mp, k)); err != nil {
			t.Fatal(err)
		}
	}
	a.waitRemote("the deletes", func(r remoteFigures) bool { return r.Deletes == int64(len(keys)) && *r.QueueDepth == 0 })
	overwrite := func(k string) {
		t.Helper()
		want := objectBytes(k+"-new", 300000)
		path := finalPath(b.mp, k)
		var err error
		switch k {
		case "shell":
			src := filepath.Join(t.TempDir(), "src")
			if err := os.WriteFile(src, want, 0o644); err != nil {
				t.Fatal(err)
			}
			var out []byte
			if out, err = exec.Command("sh", "-c", `cat "$1" > "$2"`, "sh", src, path).CombinedOutput(); err != nil {
				err = fmt.Errorf("%v: %s", err, out)
			}
		case "truncate":
			want = nil
			err = os.Truncate(path, 0)
		default:
			err = os.WriteFile(path, want, 0o644)
		}
		if err != nil {
			t.Errorf("overwrite of %s, deleted by A, on B: %v", k, err)
			return
		}
		b.mustLoad(k, want)
	}
	for _, k := range keys[:3] {
		overwrite(k)
	}
	srv.Stop()
	overwrite("wb-server-down")
	srv.Start()
	b.uploaded()
	for _, k := range []string{"wb", "wb-server-down"} {
		if info, err := srv.Client().StatObject(t.Context(), srv.Bucket, remoteKey(k), minio.StatObjectOptions{}); err != nil || info.Size != 300000 {
			t.Errorf("the bucket's %s after B's overwrite: %d bytes, %v; want B's 300000", k, info.Size, err)
		}
	}
	assertQuietEqual(t, b.daemon)
	b.stop()
	a.stop()
}

// 7. Lookups of an absent name within the negative TTL cost one HEAD,
// however many reach the daemon; a publish elsewhere meanwhile stays
// unseen until the TTL ends (its end: fusefs.TestRemoteNegativeCache).
func TestRemoteNegativeTTL(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a")
	b := startRemoteNode(t, srv, dir, "b", "--remote-negative-ttl", "10m", "--cache-timeout", "10m")
	path := finalPath(b.mp, "late")
	misses := stats(t, b.mp).LookupMisses
	for range 50 {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stat of an absent name: %v", err)
		}
	}
	reached := stats(t, b.mp).LookupMisses - misses
	heads := srv.Requests("HEAD", remoteKey("late"))
	if heads != 1 || reached < 2 {
		t.Fatalf("%d of 50 lookups reached B and sent %d HEADs; want several, and one HEAD", reached, heads)
	}
	a.put("late", objectBytes("late", MiB))
	a.uploaded()
	bHeads := b.remote().Heads
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("within the negative TTL B sees the new object (%v)", err)
	}
	if f := b.remote(); f.Heads != bHeads {
		t.Errorf("B sent %d HEADs for a name it remembers absent", f.Heads-bHeads)
	}
	b.stop()
	a.stop()
}

// 8. kvfs killed with uploads pending: they resume after the restart,
// the ledger is exact, and no fetch or write leftovers remain.
func TestRemoteKill9WithUploadsPending(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a")
	b := startRemoteNode(t, srv, dir, "b")
	a.put("before", objectBytes("before", MiB))
	a.uploaded()
	b.mustLoad("before", objectBytes("before", MiB))
	srv.Stop()
	keys := []string{"p1", "p2", "p3"}
	for _, key := range keys {
		a.put(key, objectBytes(key, 3*MiB))
	}
	if f := a.remote(); *f.QueueDepth != 3 {
		t.Fatalf("queue before the kill: %d, want 3", *f.QueueDepth)
	}
	a.kill9()
	b.kill9()
	if rep, res := fsck(t, a.store); rep.PendingUploads != 3 {
		t.Errorf("fsck of A's store: %d pending uploads: %s", rep.PendingUploads, res.stdout)
	}
	srv.Start()
	a = startRemoteNode(t, srv, dir, "a")
	b = startRemoteNode(t, srv, dir, "b")
	if f := a.uploaded(); f.Uploads != 3 {
		t.Errorf("uploads after the restart: %+v", f)
	}
	for _, key := range keys {
		if got, _ := remoteObject(t, srv, key); !bytes.Equal(got, objectBytes(key, 3*MiB)) {
			t.Errorf("%s: not in the bucket, or different, after the restart", key)
		}
		b.mustLoad(key, objectBytes(key, 3*MiB))
	}
	b.mustLoad("before", objectBytes("before", MiB))
	for _, n := range []*remoteNode{a, b} {
		st := assertQuietEqual(t, n.daemon)
		if left := n.writingEntries(); len(left) != 0 {
			t.Errorf("%s: writing/ holds %v", n.mp, left)
		}
		if ents, _ := os.ReadDir(filepath.Join(n.store, "remote")); len(ents) != 0 {
			t.Errorf("%s: %d journal entries left", n.mp, len(ents))
		}
		t.Logf("%s: %d objects, %d bytes", n.mp, st.Objects, st.UsedBytes)
	}
	b.stop()
	a.stop()
}

// TestRemoteKilledBeforeRelease: a store whose close returned, the
// daemon killed before the RELEASE that ends writing (and publishes,
// and queues the upload), is kept by the restart (see
// TestKilledBeforeRelease) on its node, and not uploaded: its close's
// record cannot rule out a writer that died with the daemon, and a
// prefix uploaded reached every node and kept the complete object's
// upload out (an outside tester). Another node misses it.
func TestRemoteKilledBeforeRelease(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	d := startRemoteNodeEnv(t, srv, dir, "a", []string{"KVFS_FAILPOINT=writer-release"})
	want := objectBytes("closed", MiB)
	if err := os.WriteFile(finalPath(d.mp, "closed"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	if !d.waitExited() {
		t.Fatal("the daemon did not die at the writer's release")
	}
	a := startRemoteNode(t, srv, dir, "a")
	a.mustLoad("closed", want)
	if f := a.uploaded(); f.Uploads != 0 {
		t.Errorf("uploads after the restart: %+v, want none", f)
	}
	if got, _ := remoteObject(t, srv, "closed"); got != nil {
		t.Fatalf("the store kept by its close's record is in the bucket (%d bytes)", len(got))
	}
	b := startRemoteNode(t, srv, dir, "b")
	if got, err := b.fs.load("closed"); err != nil || got != nil {
		t.Errorf("another node's load: %d bytes, %v; want a miss", len(got), err)
	}
	b.stop()
	a.stop()
}

// TestRemoteBadFlags: a bad --remote setting exits 2 with one line
// naming it, mounts nothing and creates no store.
func TestRemoteBadFlags(t *testing.T) {
	requireRoot(t)
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--remote", "http://bucket/p"}, []string{"bad --remote", "s3://BUCKET[/PREFIX]"}},
		{[]string{"--remote", "s3://B_ad/p"}, []string{"bad --remote", "bucket name"}},
		{[]string{"--remote", "s3://bucket/a/../b"}, []string{"bad --remote", "'..'"}},
		{[]string{"--remote", "s3://bucket/p", "--remote-endpoint", "ftp://host"}, []string{"bad remote endpoint", "ftp://host"}},
		// Were: exit 1 once the store was loaded, or a mount that never
		// reached its server (an outside tester).
		{[]string{"--remote", "s3://bucket/p", "--remote-endpoint", "http://:17391"}, []string{"bad remote endpoint", "no host name"}},
		{[]string{"--remote", "s3://bucket/p", "--remote-endpoint", "http://-bad-.host:80"}, []string{"bad remote endpoint", "no host name"}},
		{[]string{"--remote", "s3://bucket/p", "--remote-endpoint", "http://127.0.0.1:99999"}, []string{"bad remote endpoint", "port 99999"}},
		{[]string{"--remote", "s3://bucket/p", "--remote-queue", "-1"}, []string{"--remote-queue -1"}},
		{[]string{"--remote", "s3://bucket/p", "--remote-timeout", "-1s"}, []string{"--remote-timeout -1s", "negative"}},
		{[]string{"--remote", "s3://bucket/p", "--remote-exclude", "[x"}, []string{"--remote-exclude", "[x"}},
		{[]string{"--remote", "s3://bucket/p", "--remote-access-key", "AK"}, []string{"access key", "secret"}},
		{[]string{"--remote-timeout", "1s"}, []string{"--remote-timeout", "needs --remote"}},
	}
	dir := t.TempDir()
	mp := filepath.Join(dir, "mp")
	os.Mkdir(mp, 0o755)
	for i, c := range cases {
		t.Run(strings.Join(c.args, "="), func(t *testing.T) {
			store := filepath.Join(dir, fmt.Sprintf("store-%d", i))
			args := append(append([]string{"mount", "--store", store}, c.args...), mp)
			res := runKvfsTimeout(t, 10*time.Second, args...)
			if _, ok := mountAt(mp); ok {
				unix.Unmount(mp, unix.MNT_DETACH)
				t.Errorf("%v mounted", c.args)
			}
			requireUsageError(t, res, c.want...)
			if _, err := os.Lstat(store); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%v created the store", c.args)
			}
		})
	}
}

// TestRemoteWriterKilledMidWrite: a writer of an object's final name
// killed by a signal while it holds the object (here between two
// writes) leaves what it wrote on its node, as a file system does, but
// the object is not uploaded: what a killed writer left reads as
// complete, and uploaded it reached every node (an outside tester: 5 of
// 6 kills mid-write had the prefix on every node and in the bucket).
// A writer that ends of itself is uploaded as ever.
func TestRemoteWriterKilledMidWrite(t *testing.T) {
	srv := s3test.New(t)
	a := startRemoteNode(t, srv, t.TempDir(), "a")
	want := objectBytes("killed", 512<<10)
	p := finalPath(a.mp, "killed")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The shell writes, then execs a sleep that keeps the descriptor:
	// the kill ends the holder, whose exit closes it.
	cmd := exec.CommandContext(ctx, "sh", "-c", `exec 3>"$1"; cat >&3; echo written; exec sleep 60`, "sh", p)
	cmd.Stdin = bytes.NewReader(want)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "written\n" {
		t.Fatalf("the writer: %q, %v", line, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	a.put("control", objectBytes("control", 512<<10))
	a.uploaded()
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
		t.Errorf("the killed writer's object on its node: %d bytes, %v; want what it wrote", len(got), err)
	}
	if got, _ := remoteObject(t, srv, "killed"); got != nil {
		t.Errorf("the killed writer's object is in the bucket (%d bytes); want it kept off the shared tier", len(got))
	}
	if got, _ := remoteObject(t, srv, "control"); got == nil {
		t.Error("a store by a writer that ended of itself is not in the bucket")
	}
	a.stop()
}
