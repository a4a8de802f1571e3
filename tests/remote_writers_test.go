package tests

// The shared tier with real writers, odd names, deletes, a name/directory
// collision and credentials in the endpoint (issue 16), end to end
// against versitygw.

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvfs/kvfs/internal/s3test"
)

// slowChild is a Python child that writes its file argument to stdout
// in 64 KiB chunks with small pauses: a writer that goes on after its
// parent closed its copy of the descriptor.
const slowChild = `import sys, time
d = open(sys.argv[1], 'rb').read()
for i in range(0, len(d), 65536):
    sys.stdout.buffer.write(d[i:i+65536])
    sys.stdout.flush()
    time.sleep(0.005)
`

// popenWriter is subprocess.Popen(["python3", "-c", slowChild, src],
// stdout=f), then f.close() in the parent while the child still writes.
const popenWriter = `import subprocess, sys
with open(sys.argv[2], 'wb') as f:
    p = subprocess.Popen([sys.executable, '-c', sys.argv[3], sys.argv[1]], stdout=f)
print('parent closed', flush=True)
sys.exit(p.wait())
`

// TestRemoteRealWriters: objects written on A by a shell redirect, by dd
// and by a subprocess whose parent closes its descriptor first reach the
// bucket, and B, byte-identical; each upload read its object once per
// attempt.
func TestRemoteRealWriters(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is needed for the subprocess writer")
	}
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a")
	b := startRemoteNode(t, srv, dir, "b")
	src := t.TempDir()
	writers := map[string][]string{
		"shell": {"sh", "-c", `cat "$1" > "$2"`, "sh"},
		"dd":    {"dd", "bs=256k", "status=none"},
		"popen": {"python3", "-c", popenWriter},
	}
	data := map[string][]byte{}
	for key, argv := range writers {
		data[key] = objectBytes(key, 4*MiB+4321)
		in := filepath.Join(src, key)
		if err := os.WriteFile(in, data[key], 0o644); err != nil {
			t.Fatal(err)
		}
		out := finalPath(a.mp, key)
		args := append(append([]string{}, argv[1:]...), in, out)
		switch key {
		case "dd":
			args = append(argv[1:len(argv):len(argv)], "if="+in, "of="+out)
		case "popen":
			args = append(args, slowChild)
		}
		if res, err := exec.Command(argv[0], args...).CombinedOutput(); err != nil {
			t.Fatalf("%s writer: %v: %s", key, err, res)
		}
	}
	f := a.uploaded()
	for key, want := range data {
		if got, _ := remoteObject(t, srv, key); !bytes.Equal(got, want) {
			t.Errorf("%s: the bucket holds %d bytes, want the %d written (first difference at %d)", key, len(got), len(want), firstDiff(got, want))
		}
		b.mustLoad(key, want)
	}
	if f.Uploads != 3 || f.UploadReads != f.Uploads+f.UploadChanged || f.Rejected != 0 {
		t.Errorf("A's figures %+v: want 3 uploads, one read per attempt", f)
	}
	b.stop()
	a.stop()
}

// TestRemoteBadNamesDoNotDelay: two names that are not UTF-8 (no S3 key
// can hold them) are refused at once, counted, and kept out of the
// journal; a good object stored after them is uploaded.
func TestRemoteBadNamesDoNotDelay(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a")
	for _, name := range []string{"bad-\xff\xfe.data", "bad-\xc3\x28.data"} {
		putFile(t, filepath.Join(a.mp, name), []byte("a local object with an odd name"))
	}
	good := objectBytes("after-bad", 2*MiB)
	a.put("after-bad", good)
	f := a.uploaded()
	if f.Uploads != 1 || f.Rejected != 2 || f.UploadFailures != 0 || f.BreakerState != "closed" {
		t.Errorf("A's figures %+v: want the good one uploaded, the two bad ones refused", f)
	}
	if got, _ := remoteObject(t, srv, "after-bad"); !bytes.Equal(got, good) {
		t.Errorf("the good object is not in the bucket")
	}
	if ents, _ := os.ReadDir(filepath.Join(a.store, "remote")); len(ents) != 0 {
		t.Errorf("the journal holds %d entries", len(ents))
	}
	a.stop()
}

// TestRemoteRmBucketOnly: rm on B of names B knows only from the bucket:
// each is absent on B at once, O_CREAT|O_EXCL and link(tmp, name) then
// succeed and store B's new bytes; the one left removed is gone from the
// bucket, so a third node finds nothing.
func TestRemoteRmBucketOnly(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a")
	b := startRemoteNode(t, srv, dir, "b")
	keys := []string{"rm-gone", "rm-excl", "rm-link"}
	for _, key := range keys {
		a.put(key, objectBytes(key, MiB))
	}
	a.uploaded()
	for _, key := range keys {
		p := finalPath(b.mp, key)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s: B does not see the bucket's object: %v", key, err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatalf("rm %s on B: %v", key, err)
		}
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s after rm on B: %v, want ENOENT", key, err)
		}
	}
	fresh := objectBytes("b's own", MiB)
	f, err := os.OpenFile(finalPath(b.mp, "rm-excl"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("O_CREAT|O_EXCL after rm: %v", err)
	}
	f.Write(fresh)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(b.mp, ".lmcache-write.tmp.1.1")
	putFile(t, tmp, fresh)
	if err := os.Link(tmp, finalPath(b.mp, "rm-link")); err != nil {
		t.Fatalf("link(tmp, name) after rm: %v", err)
	}
	os.Remove(tmp)
	fb := b.uploaded()
	// A store that lands while its name's delete is in flight deletes
	// once more before it uploads (a key already absent counts): 3,
	// and one more for each of the two stores that raced its delete.
	if fb.Deletes < 3 || fb.Deletes > 3+2 || fb.Uploads != 2 {
		t.Errorf("B's figures %+v: want 3 deletes (one more for each store that raced its delete), then 2 uploads", fb)
	}
	if got, _ := remoteObject(t, srv, "rm-gone"); got != nil {
		t.Errorf("rm-gone is still in the bucket")
	}
	c := startRemoteNode(t, srv, dir, "c")
	if _, err := os.Stat(finalPath(c.mp, "rm-gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a third node finds rm-gone: %v", err)
	}
	c.mustLoad("rm-excl", fresh)
	c.mustLoad("rm-link", fresh)
	for _, n := range []*remoteNode{c, b, a} {
		n.stop()
	}
}

// TestRemoteRmWhileServerDown: an rm with the server down answers at
// once, the name stays absent on that node, also across a restart, and
// leaves the bucket when the server is back.
func TestRemoteRmWhileServerDown(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a")
	flags := []string{"--remote-breaker-cooldown", "1s", "--remote-timeout", "1s"}
	b := startRemoteNode(t, srv, dir, "b", flags...)
	a.put("down", objectBytes("down", MiB))
	a.uploaded()
	p := finalPath(b.mp, "down")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("B does not see the bucket's object: %v", err)
	}
	srv.Stop()
	if err := os.Remove(p); err != nil {
		t.Fatalf("rm with the server down: %v", err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after rm with the server down: %v, want ENOENT", err)
	}
	b.stop()
	b = startRemoteNode(t, srv, dir, "b", flags...)
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after a restart with the delete pending: %v, want ENOENT", err)
	}
	srv.Start()
	if f := b.uploaded(); f.Deletes != 1 {
		t.Errorf("B's figures %+v: want the delete done", f)
	}
	c := startRemoteNode(t, srv, dir, "c")
	if _, err := os.Stat(finalPath(c.mp, "down")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a third node finds the removed name: %v", err)
	}
	for _, n := range []*remoteNode{c, b, a} {
		n.stop()
	}
}

// TestRemoteNameDirCollision: docs/remote.md, "Names and directories".
// A file of the bucket (published by A) does not block a local
// directory of that name: on B, which made the directory first, and on
// C, which saw the file first, mkdir x and mkdir -p x/sub work, and the
// local directory then hides the remote file (never looked up there); a
// node that makes no directory still loads the file.
func TestRemoteNameDirCollision(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a")
	b := startRemoteNode(t, srv, dir, "b")
	if err := os.Mkdir(filepath.Join(b.mp, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	file := objectBytes("x", MiB)
	putFile(t, filepath.Join(a.mp, "x"), file)
	a.uploaded()
	c := startRemoteNode(t, srv, dir, "c")
	if st, err := os.Stat(filepath.Join(c.mp, "x")); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("C does not see A's file x: %v", err)
	}
	heads := srv.Requests("HEAD", remotePrefix+"/x")
	for _, n := range []*remoteNode{b, c} {
		// mkdir(1), which tries mkdir(2) first (Go's MkdirAll stats x
		// first and stops at the file it finds).
		if out, err := exec.Command("mkdir", "-p", filepath.Join(n.mp, "x", "sub")).CombinedOutput(); err != nil {
			t.Fatalf("mkdir -p x/sub on %s: %v: %s", n.mp, err, out)
		}
		if st, err := os.Stat(filepath.Join(n.mp, "x")); err != nil || !st.IsDir() {
			t.Fatalf("%s/x after mkdir -p: %v; want the local directory", n.mp, err)
		}
		sub := filepath.Join(n.mp, "x", "sub", "k.data")
		mine := objectBytes(n.mp, MiB)
		putFile(t, sub, mine)
		if got, err := os.ReadFile(sub); err != nil || !bytes.Equal(got, mine) {
			t.Fatalf("%s: %v", sub, err)
		}
		// versitygw's posix store cannot hold x/sub/k.data beside x: the
		// upload is refused for good, and the queue drains.
		if f := n.uploaded(); f.Uploads+f.Rejected != 1 {
			t.Errorf("%s's figures %+v: want x/sub/k.data uploaded or refused once", n.mp, f)
		}
	}
	if got := srv.Requests("HEAD", remotePrefix+"/x"); got > heads+1 {
		t.Errorf("%d HEADs of x after the directories were made; the mkdir's own at most", got-heads)
	}
	d := startRemoteNode(t, srv, dir, "d")
	if got, err := os.ReadFile(filepath.Join(d.mp, "x")); err != nil || !bytes.Equal(got, file) {
		t.Errorf("D, without a directory x, does not load A's file x: %v", err)
	}
	for _, n := range []*remoteNode{d, c, b, a} {
		n.stop()
	}
}

// TestRemoteCredentialsRedacted: credentials given in --remote-endpoint
// work, and the secret appears nowhere: not in the daemon's log (at
// debug level), its errors, `kvfs stats` or /metrics.
func TestRemoteCredentialsRedacted(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	mp := filepath.Join(dir, "a")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	endpoint := strings.Replace(srv.Endpoint, "http://", "http://"+s3test.AccessKey+":"+s3test.SecretKey+"@", 1)
	d := startDaemonEnv(t, kvfsBin, []string{"AWS_REGION=" + s3test.Region}, mp, "--remote", srv.URL(remotePrefix),
		"--remote-endpoint", endpoint, "--capacity", "64MiB", "--grace", "0s", "--log-level", "debug", "--metrics-addr", "127.0.0.1:0")
	n := &remoteNode{daemon: d, fs: &fsNative{base: d.mp, seq: new(atomic.Int64)}}
	n.put("secretive", objectBytes("secretive", MiB))
	if f := n.uploaded(); f.Uploads != 1 {
		t.Fatalf("with the credentials in the endpoint: %+v", f)
	}
	leaks := map[string]string{}
	for _, args := range [][]string{{"stats", mp}, {"stats", "--json", mp}} {
		res := runKvfs(t, args...)
		leaks[strings.Join(args, " ")] = res.stdout + res.stderr
	}
	resp, err := http.Get(metricsURL(t, d))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	leaks["/metrics"] = string(body)
	for _, args := range [][]string{
		{"--remote", "s3://u:" + s3test.SecretKey + "@bucket/p"},
		{"--remote", srv.URL(remotePrefix), "--remote-endpoint", "ftp://u:" + s3test.SecretKey + "@host"},
	} {
		res := runKvfs(t, append(append([]string{"mount", "--store", filepath.Join(dir, "bad")}, args...), filepath.Join(dir, "bad-mp"))...)
		leaks["mount "+strings.Join(args, " ")] = res.stdout + res.stderr
	}
	n.stop()
	leaks["the daemon's log"] = d.out.String()
	for where, text := range leaks {
		if strings.Contains(text, s3test.SecretKey) {
			t.Errorf("the secret appears in %s:\n%s", where, text)
		}
	}
	if !strings.Contains(d.out.String(), srv.Endpoint) {
		t.Errorf("the log does not name the endpoint (redacted) at all:\n%s", d.out)
	}
}
