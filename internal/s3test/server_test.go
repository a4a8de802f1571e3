package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// TestServer checks what the rest of kvfs relies on the server for:
// user metadata comes back on HEAD and GET, a put with If-None-Match: *
// of an existing key is refused with 412 and leaves the first object,
// and Stop/Start keep port and data.
func TestServer(t *testing.T) {
	s := New(t)
	c := s.Client()
	ctx := context.Background()
	put := func(body string) error {
		opts := minio.PutObjectOptions{UserMetadata: map[string]string{"kvfs-crc32c": "0badf00d"}, DisableMultipart: true}
		opts.SetMatchETagExcept("*")
		_, err := c.PutObject(ctx, s.Bucket, "p/a.data", bytes.NewReader([]byte(body)), int64(len(body)), opts)
		return err
	}
	if err := put("first"); err != nil {
		t.Fatalf("first put: %v", err)
	}
	err := put("second")
	if resp := minio.ToErrorResponse(err); resp.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("second put with If-None-Match: * = %v (status %d), want 412", err, resp.StatusCode)
	}
	st, err := c.StatObject(ctx, s.Bucket, "p/a.data", minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.UserMetadata["Kvfs-Crc32c"]; got != "0badf00d" {
		t.Fatalf("HEAD user metadata = %v, want Kvfs-Crc32c=0badf00d", st.UserMetadata)
	}
	if n := s.Requests("PUT", "p/a.data"); n != 2 {
		t.Fatalf("server logged %d PUTs of p/a.data, want 2", n)
	}
	if n := s.Requests("HEAD", ""); n != 1 {
		t.Fatalf("server logged %d HEADs, want 1", n)
	}
	s.Stop()
	if _, err := c.StatObject(ctx, s.Bucket, "p/a.data", minio.StatObjectOptions{}); err == nil {
		t.Fatal("HEAD answered with the server stopped")
	}
	s.Start()
	if got := get(t, c, s.Bucket, "p/a.data"); got != "first" {
		t.Fatalf("after restart the object holds %q, want the first writer's %q", got, "first")
	}
}

// TestPause checks that a paused server makes a request hang until its
// deadline, and answers again once resumed.
func TestPause(t *testing.T) {
	s := New(t)
	c := s.Client()
	s.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := c.StatObject(ctx, s.Bucket, "absent", minio.StatObjectOptions{})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("HEAD of a paused server = %v, want a deadline exceeded", err)
	}
	s.Resume()
	_, err = c.StatObject(context.Background(), s.Bucket, "absent", minio.StatObjectOptions{})
	if resp := minio.ToErrorResponse(err); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("HEAD of an absent key after resume = %v, want 404", err)
	}
}

func get(t *testing.T, c *minio.Client, bucket, key string) string {
	t.Helper()
	o, err := c.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeTB records a failure instead of ending the test, so a test can
// see s3test fail one.
type fakeTB struct {
	*testing.T
	failed string
}

func (f *fakeTB) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

// TestFailures: where s3local returns an error, s3test fails the test.
func TestFailures(t *testing.T) {
	f := &fakeTB{T: t}
	s := New(f)
	s.Stop()
	if f.failed != "" {
		t.Fatalf("first Stop failed the test: %s", f.failed)
	}
	s.Stop()
	if f.failed == "" {
		t.Fatal("a Stop of a stopped server did not fail the test")
	}
}
