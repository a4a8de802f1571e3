package tests

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/kvfs/kvfs/internal/s3test"
	"github.com/minio/minio-go/v7"
)

// remotePrefix is the key prefix every node of a test shares.
const remotePrefix = "fleet"

// remoteNode is one kvfs daemon of a fleet sharing srv's bucket, with
// its own store, and LMCache's fs_native client on its mount.
type remoteNode struct {
	*daemon
	fs *fsNative
}

// startRemoteNode mounts dir/name with --remote on srv's bucket (64 MiB,
// no grace period), endpoint and credentials from the environment as a
// user would give them, plus flags.
func startRemoteNode(t *testing.T, srv *s3test.Server, dir, name string, flags ...string) *remoteNode {
	t.Helper()
	return startRemoteNodeEnv(t, srv, dir, name, nil, flags...)
}

// startRemoteNodeEnv is startRemoteNode with env added to the daemon's
// environment.
func startRemoteNodeEnv(t *testing.T, srv *s3test.Server, dir, name string, env []string, flags ...string) *remoteNode {
	t.Helper()
	mp := filepath.Join(dir, name)
	// A mount point a kill -9 left dead answers stat with ENOTCONN, and
	// MkdirAll with EEXIST: kvfs mount cleans it up.
	if err := os.Mkdir(mp, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	args := append([]string{"--remote", srv.URL(remotePrefix), "--capacity", "64MiB", "--grace", "0s"}, flags...)
	d := startDaemonEnv(t, kvfsBin, append(srv.Env(), env...), mp, args...)
	return &remoteNode{daemon: d, fs: &fsNative{base: d.mp, seq: new(atomic.Int64)}}
}

// remoteFigures are the remote tier's fields of `kvfs stats --json`.
type remoteFigures struct {
	Hits           int64  `json:"remote_hits"`
	Misses         int64  `json:"remote_misses"`
	Heads          int64  `json:"remote_heads"`
	Fetches        int64  `json:"remote_fetches"`
	FetchedBytes   int64  `json:"remote_fetched_bytes"`
	Corrupt        int64  `json:"remote_corrupt"`
	Uploads        int64  `json:"remote_uploads"`
	UploadedBytes  int64  `json:"remote_uploaded_bytes"`
	AlreadyPresent int64  `json:"remote_upload_already_present"`
	UploadFailures int64  `json:"remote_upload_failures"`
	UploadDropped  int64  `json:"remote_upload_dropped"`
	UploadSkipped  int64  `json:"remote_upload_skipped"`
	Rejected       int64  `json:"remote_rejected"`
	UploadReads    int64  `json:"remote_upload_reads"`
	UploadChanged  int64  `json:"remote_upload_changed"`
	Deletes        int64  `json:"remote_deletes"`
	QueueDepth     *int64 `json:"remote_queue_depth"`
	BreakerState   string `json:"remote_breaker_state"`
	// Pinned is the mount's objects with a handle open (not a remote
	// figure): a store's upload is queued at its last RELEASE.
	Pinned int64 `json:"pinned_objects"`
}

// remote reads the node's remote figures; they must be there.
func (n *remoteNode) remote() remoteFigures {
	n.t.Helper()
	var f remoteFigures
	if out := statsJSON(n.t, n.mp, &f); f.QueueDepth == nil {
		n.t.Fatalf("kvfs stats --json %s: no remote figures: %s", n.mp, out)
	}
	return f
}

// waitRemote polls the node's figures until cond holds (a minute at
// most: uploads retry with a backoff of their own).
func (n *remoteNode) waitRemote(what string, cond func(remoteFigures) bool) remoteFigures {
	n.t.Helper()
	var f remoteFigures
	if !waitFor(func() bool { f = n.remote(); return cond(f) }) {
		n.t.Fatalf("%s: still %+v (queue %d) after %v", what, f, *f.QueueDepth, hangGuard)
	}
	return f
}

// uploaded waits until nothing is pending upload. A store's upload is
// queued at its last RELEASE, which the kernel sends after close(2) has
// returned, so it waits for nothing held open as well; and as a RELEASE
// unpins a moment before it queues, for both in two readings in a row.
func (n *remoteNode) uploaded() remoteFigures {
	n.t.Helper()
	settled := func(f remoteFigures) bool { return *f.QueueDepth == 0 && f.Pinned == 0 }
	n.waitRemote("stores released, uploads pending", settled)
	return n.waitRemote("stores released, uploads pending", settled)
}

// put publishes key the fs_native way.
func (n *remoteNode) put(key string, data []byte) {
	n.t.Helper()
	if _, err := n.fs.store(key, data); err != nil {
		n.t.Fatalf("storing %s on %s: %v", key, n.mp, err)
	}
}

// mustLoad loads key through the node and checks its bytes.
func (n *remoteNode) mustLoad(key string, want []byte) {
	n.t.Helper()
	got, err := n.fs.load(key)
	switch {
	case err != nil:
		n.t.Fatalf("loading %s on %s: %v", key, n.mp, err)
	case got == nil:
		n.t.Fatalf("loading %s on %s: absent", key, n.mp)
	case !bytes.Equal(got, want):
		n.t.Fatalf("loading %s on %s: %d bytes differ from the %d stored (at %d)", key, n.mp, len(got), len(want), firstDiff(got, want))
	}
}

// writingEntries lists what the node's store holds under writing/: the
// crash markers and unfinished fetches.
func (n *remoteNode) writingEntries() []string {
	n.t.Helper()
	names, err := markerNames(filepath.Join(n.store, "writing"))
	if err != nil {
		n.t.Fatal(err)
	}
	return names
}

// remoteKey is key's object key in the bucket.
func remoteKey(key string) string { return remotePrefix + "/" + key + ".data" }

// remoteObject reads key's object with a plain client; nil if absent.
func remoteObject(t *testing.T, srv *s3test.Server, key string) ([]byte, minio.ObjectInfo) {
	t.Helper()
	o, err := srv.Client().GetObject(context.Background(), srv.Bucket, remoteKey(key), minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(o); err != nil {
		if minio.ToErrorResponse(err).StatusCode == 404 {
			return nil, minio.ObjectInfo{}
		}
		t.Fatalf("get %s: %v", remoteKey(key), err)
	}
	st, _ := o.Stat()
	return b.Bytes(), st
}

// putRemote puts data under key with a plain client and the given user
// metadata, behind every node's back.
func putRemote(t *testing.T, srv *s3test.Server, key string, data []byte, meta map[string]string) {
	t.Helper()
	_, err := srv.Client().PutObject(context.Background(), srv.Bucket, remoteKey(key), bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{UserMetadata: meta, DisableMultipart: true})
	if err != nil {
		t.Fatalf("put %s: %v", remoteKey(key), err)
	}
}
