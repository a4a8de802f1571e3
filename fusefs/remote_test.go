package fusefs_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/s3test"
	"github.com/kvfs/kvfs/mount"
	"github.com/kvfs/kvfs/remote"
	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"
)

// manualClock is the remote tier's clock in these tests: it moves only
// when the test says so.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After never fires on its own: upload retries wait for the breaker to
// close instead (which wakes them), or for the test to end.
func (c *manualClock) After(time.Duration) <-chan time.Time { return make(chan time.Time) }

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// withRemote mounts with the remote tier on srv's bucket under prefix,
// on clock.
func withRemote(srv *s3test.Server, prefix string, clock remote.Clock) mountOpt {
	return func(o *mount.Options) {
		cfg := &remote.Config{URL: srv.URL(prefix), Endpoint: srv.Endpoint, AccessKey: s3test.AccessKey,
			SecretKey: s3test.SecretKey, Region: s3test.Region, NegativeTTL: time.Minute}
		if err := cfg.Finish(func(string) string { return "" }); err != nil {
			panic(err)
		}
		o.Remote, o.RemoteClock = cfg, clock
	}
}

// waitUploads waits until k's tier has uploaded what is pending: an
// object is queued at its writer's RELEASE, which reaches kvfs after
// close(2) returns, so it first waits for the RELEASEs.
func (k *kvfsMount) waitUploads() {
	k.t.Helper()
	k.released(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := k.M.Tier().WaitUploads(ctx); err != nil {
		k.t.Fatalf("uploads still pending: %+v", k.M.Tier().Stats())
	}
}

func (k *kvfsMount) remoteStats() remote.Stats { return k.M.Tier().Stats() }

// TestRemoteReadThrough: a name node B does not have is found in the
// bucket node A uploaded it to: a regular file of the remote size that
// holds no local bytes until it is opened; however many open it at
// once, one GET brings it in, admitted and charged like a store, and it
// is never uploaded again.
func TestRemoteReadThrough(t *testing.T) {
	srv := s3test.New(t)
	a := mountKVFS(t, withRemote(srv, "fleet", &manualClock{now: time.Now()}))
	b := mountKVFS(t, withRemote(srv, "fleet", &manualClock{now: time.Now()}))
	data := pattern(1, 3*mib+5)
	mustWrite(t, filepath.Join(a.Mnt, "k.data"), data)
	a.waitUploads()

	path := filepath.Join(b.Mnt, "k.data")
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat of a remote name on B: %v", err)
	}
	if st.Size != int64(len(data)) || st.Blocks != 0 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Errorf("remote name before open: size %d blocks %d mode %o", st.Size, st.Blocks, st.Mode)
	}
	if used := b.M.Stats().UsedBytes; used != 0 {
		t.Errorf("B charged %d bytes for a name it only looked up", used)
	}
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("read of the remote object: %d bytes, %v", len(got), err)
			}
		}()
	}
	wg.Wait()
	if n := srv.Requests("GET", "fleet/k.data"); n != 1 {
		t.Errorf("%d GETs for six concurrent opens, want 1", n)
	}
	rs := b.remoteStats()
	if rs.Fetches != 1 || rs.FetchedBytes != int64(len(data)) || rs.Uploads != 0 || rs.QueueDepth != 0 {
		t.Errorf("B's tier: %+v", rs)
	}
	if used := b.M.Stats().UsedBytes; used != ceil4096(int64(len(data))) {
		t.Errorf("B used %d after the fetch, want %d", used, ceil4096(int64(len(data))))
	}
	eventually(func() bool { return unix.Stat(path, &st) == nil && st.Blocks == blocksFor(int64(len(data))) })
	if st.Blocks != blocksFor(int64(len(data))) {
		t.Errorf("st_blocks %d after the fetch, want the charge %d", st.Blocks, blocksFor(int64(len(data))))
	}
	if n := srv.Requests("PUT", "fleet/k.data"); n != 1 {
		t.Errorf("%d PUTs of the object, want A's one", n)
	}
	ents, _ := os.ReadDir(b.Mnt)
	if len(ents) != 1 {
		t.Errorf("B lists %d names, want the fetched one", len(ents))
	}
}

// TestRemoteNegativeCache: lookups of an absent name that reach the
// daemon cost one HEAD while the tier remembers the name absent, and a
// publish on another node shows once that memory expires.
func TestRemoteNegativeCache(t *testing.T) {
	srv := s3test.New(t)
	clock := &manualClock{now: time.Now()}
	a := mountKVFS(t, withRemote(srv, "fleet", &manualClock{now: time.Now()}))
	b := mountKVFS(t, withRemote(srv, "fleet", clock))
	path := filepath.Join(b.Mnt, "late.data")
	misses := b.M.Stats().LookupMisses
	for range 20 {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stat of an absent name: %v", err)
		}
	}
	reached := b.M.Stats().LookupMisses - misses
	if heads := srv.Requests("HEAD", "fleet/late.data"); heads != 1 || reached < 2 {
		t.Fatalf("%d lookups reached B, which sent %d HEADs; want several lookups and 1 HEAD", reached, heads)
	}
	data := pattern(2, 100*kib)
	mustWrite(t, filepath.Join(a.Mnt, "late.data"), data)
	a.waitUploads()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("within the negative TTL: %v, want the remembered ENOENT", err)
	}
	clock.Advance(time.Minute + time.Second)
	mustRead(t, path, data)
}

// TestRemoteWriteBehind: what a writer publishes is uploaded (its final
// name, not the temp one), and a link or rename to a final name too.
func TestRemoteWriteBehind(t *testing.T) {
	srv := s3test.New(t)
	a := mountKVFS(t, withRemote(srv, "p", &manualClock{now: time.Now()}))
	data := pattern(3, 200*kib)
	tmp := filepath.Join(a.Mnt, ".lmcache-write.tmp.1.1")
	mustWrite(t, tmp, data)
	if err := os.Link(tmp, filepath.Join(a.Mnt, "linked.data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(a.Mnt, "renamed.data")); err != nil {
		t.Fatal(err)
	}
	a.waitUploads()
	for _, key := range []string{"p/linked.data", "p/renamed.data"} {
		if n := srv.Requests("PUT", key); n != 1 {
			t.Errorf("%d PUTs of %s, want 1", n, key)
		}
	}
	if n := srv.Requests("PUT", "p/.lmcache-write.tmp.1.1"); n != 0 {
		t.Errorf("the temp name was uploaded %d times", n)
	}
	if rs := a.remoteStats(); rs.Uploads != 2 || rs.UploadedBytes != 2*int64(len(data)) {
		t.Errorf("A's tier: %+v", rs)
	}
}

// TestRemoteRenameAndRm: the old name of a rename, and an rm'd name,
// leave the bucket (no DELETE for a temp name); the new name is
// uploaded.
func TestRemoteRenameAndRm(t *testing.T) {
	srv := s3test.New(t)
	a := mountKVFS(t, withRemote(srv, "p", &manualClock{now: time.Now()}))
	mustWrite(t, filepath.Join(a.Mnt, "old.data"), pattern(7, 64*kib))
	mustWrite(t, filepath.Join(a.Mnt, "rm.data"), pattern(8, 64*kib))
	a.waitUploads()
	if err := os.Rename(filepath.Join(a.Mnt, "old.data"), filepath.Join(a.Mnt, "new.data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(a.Mnt, "rm.data")); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(a.Mnt, ".lmcache-write.tmp.1.1")
	mustWrite(t, tmp, pattern(9, 4*kib))
	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	a.waitUploads()
	for key, want := range map[string]bool{"p/old.data": false, "p/rm.data": false, "p/new.data": true} {
		if _, err := getObject(t, srv, key); (err == nil) != want {
			t.Errorf("%s in the bucket: %v, want present %v", key, err, want)
		}
	}
	if n := srv.Requests("DELETE", "p/.lmcache-write.tmp.1.1"); n != 0 {
		t.Errorf("%d DELETEs of a temp name", n)
	}
	if rs := a.remoteStats(); rs.Deletes != 2 || rs.Uploads != 3 {
		t.Errorf("A's tier: %+v; want 2 deletes, 3 uploads", rs)
	}
}

// TestRemoteMiss: an object gone from the bucket between lookup and
// open answers ENOENT, leaves nothing local, and its name goes from the
// kernel.
func TestRemoteMiss(t *testing.T) {
	srv := s3test.New(t)
	a := mountKVFS(t, withRemote(srv, "fleet", &manualClock{now: time.Now()}))
	b := mountKVFS(t, withRemote(srv, "fleet", &manualClock{now: time.Now()}))
	mustWrite(t, filepath.Join(a.Mnt, "gone.data"), pattern(4, 64*kib))
	a.waitUploads()
	path := filepath.Join(b.Mnt, "gone.data")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stat before the delete: %v", err)
	}
	if err := srv.Client().RemoveObject(context.Background(), srv.Bucket, "fleet/gone.data", minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := os.ReadFile(path)
	wantErrno(t, "open of an object deleted remotely", err, syscall.ENOENT)
	if !eventually(func() bool { _, err := os.Stat(path); return errors.Is(err, os.ErrNotExist) }) {
		t.Error("the name is still in the kernel after the miss")
	}
	if st := b.M.Stats(); st.Objects != 0 || st.UsedBytes != 0 {
		t.Errorf("B holds %d objects, %d bytes after a miss", st.Objects, st.UsedBytes)
	}
}

// TestRemoteLocalChanges: what needs a remote name local (a write, a
// truncate, a link from it) fetches it first; an object that cannot be
// admitted is refused (ENOSPC; a miss, ENOENT, to a reader) without
// leaving anything, and the name stays usable; a local rewrite of a name the bucket holds supersedes
// the bucket's copy, as an rm and a new store would.
func TestRemoteLocalChanges(t *testing.T) {
	srv := s3test.New(t)
	a := mountKVFS(t, withRemote(srv, "fleet", &manualClock{now: time.Now()}))
	b := mountKVFS(t, withCapacity(4*mib), withRemote(srv, "fleet", &manualClock{now: time.Now()}))
	big, orig := pattern(5, 5*mib), pattern(6, 300*kib)
	mustWrite(t, filepath.Join(a.Mnt, "big.data"), big)
	mustWrite(t, filepath.Join(a.Mnt, "t.data"), orig)
	mustWrite(t, filepath.Join(a.Mnt, "l.data"), orig)
	a.waitUploads()

	// A reader has a miss; a writer, ENOSPC.
	_, err := os.ReadFile(filepath.Join(b.Mnt, "big.data"))
	wantErrno(t, "open for reading of a remote object larger than the capacity", err, syscall.ENOENT)
	_, err = os.OpenFile(filepath.Join(b.Mnt, "big.data"), os.O_WRONLY, 0)
	wantErrno(t, "open for writing of a remote object larger than the capacity", err, syscall.ENOSPC)
	if st := b.M.Stats(); st.Objects != 0 || st.UsedBytes != 0 || st.AdmissionFailures == 0 {
		t.Errorf("B after the refused fetch: %+v", st.Stats.Stats)
	}

	f, err := os.OpenFile(filepath.Join(b.Mnt, "t.data"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatalf("open for writing of a remote name: %v", err)
	}
	f.Write([]byte("rewritten"))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	mustRead(t, filepath.Join(b.Mnt, "t.data"), []byte("rewritten"))

	if err := os.Link(filepath.Join(b.Mnt, "l.data"), filepath.Join(b.Mnt, "l2.data")); err != nil {
		t.Fatalf("link from a remote name: %v", err)
	}
	mustRead(t, filepath.Join(b.Mnt, "l2.data"), orig)
	b.waitUploads()
	if got, _ := getObject(t, srv, "fleet/t.data"); !bytes.Equal(got, []byte("rewritten")) {
		t.Errorf("the bucket's t.data holds %d bytes, not B's rewrite", len(got))
	}
	if rs := b.remoteStats(); rs.Uploads != 2 || rs.Deletes == 0 {
		t.Errorf("B uploaded %d objects, want the rewritten t.data (after its delete) and the new name l2.data: %+v", rs.Uploads, rs)
	}
}

// TestRemoteRenameRemoteOnly: mv of a name B knows only from the
// bucket fetches it first, then moves it (its old key deleted, the new
// one uploaded, as a rename of a local name does); a RENAME_EXCHANGE of
// a local name with such a name swaps the two objects, here and in the
// bucket.
func TestRemoteRenameRemoteOnly(t *testing.T) {
	srv := s3test.New(t)
	a := mountKVFS(t, withRemote(srv, "fleet", &manualClock{now: time.Now()}))
	b := mountKVFS(t, withRemote(srv, "fleet", &manualClock{now: time.Now()}))
	moved, swapped, local := pattern(11, 200*kib), pattern(12, 70*kib), pattern(13, 30*kib)
	mustWrite(t, filepath.Join(a.Mnt, "mv.data"), moved)
	mustWrite(t, filepath.Join(a.Mnt, "x.data"), swapped)
	a.waitUploads()
	mustWrite(t, filepath.Join(b.Mnt, "y.data"), local)
	b.waitUploads()

	from, to := filepath.Join(b.Mnt, "mv.data"), filepath.Join(b.Mnt, "mv2.data")
	if _, err := os.Stat(from); err != nil {
		t.Fatalf("B does not see the bucket's object: %v", err)
	}
	if err := os.Rename(from, to); err != nil {
		t.Fatalf("mv of a remote-only name: %v", err)
	}
	mustRead(t, to, moved)
	if _, err := os.Stat(from); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old name after the mv: %v, want ENOENT", err)
	}
	x, y := filepath.Join(b.Mnt, "x.data"), filepath.Join(b.Mnt, "y.data")
	if _, err := os.Stat(x); err != nil {
		t.Fatalf("B does not see the bucket's object: %v", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, y, unix.AT_FDCWD, x, unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("RENAME_EXCHANGE of a local name and a remote-only one: %v", err)
	}
	mustRead(t, x, local)
	mustRead(t, y, swapped)
	b.waitUploads()
	for key, want := range map[string][]byte{"fleet/mv.data": nil, "fleet/mv2.data": moved, "fleet/x.data": local, "fleet/y.data": swapped} {
		if got, _ := getObject(t, srv, key); !bytes.Equal(got, want) {
			t.Errorf("%s in the bucket: %d bytes, want %d", key, len(got), len(want))
		}
	}
}

// getObject reads a key with a plain client.
func getObject(t *testing.T, srv *s3test.Server, key string) ([]byte, error) {
	t.Helper()
	o, err := srv.Client().GetObject(context.Background(), srv.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer o.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(o)
	return b.Bytes(), err
}
