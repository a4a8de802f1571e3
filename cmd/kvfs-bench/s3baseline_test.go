package main

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/kvfs/kvfs/internal/s3test"
	"github.com/kvfs/kvfs/remote"
)

func newBaseline(t *testing.T) *s3Baseline {
	srv := s3test.New(t)
	cfg := remote.Config{URL: srv.URL("bench"), Endpoint: srv.Endpoint, AccessKey: s3test.AccessKey,
		SecretKey: s3test.SecretKey, Region: s3test.Region}
	if err := cfg.Finish(func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	noUploads := func(string) (remote.Source, error) { return nil, remote.ErrNotFound }
	tier, err := remote.New(cfg, remote.Deps{JournalDir: t.TempDir(), Open: noUploads})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tier.Close() })
	return &s3Baseline{client: srv.Client(), bucket: srv.Bucket, prefix: "bench", tier: tier}
}

// TestAbsentLookup: one HEAD for the first lookup of an absent name and
// none for the cached ones, by the tier's count.
func TestAbsentLookup(t *testing.T) {
	s := newBaseline(t)
	c, err := s.absentLookup(context.Background(), "absent.data", 5)
	if err != nil {
		t.Fatal(err)
	}
	if c.headsFirst != 1 || c.headsCached != 0 || c.rawHead <= 0 || c.first <= 0 {
		t.Fatalf("cost %+v: want 1 HEAD first, none cached", c)
	}
}

// TestRawGet: the raw GET reads the object the tier put, under the
// same key.
func TestRawGet(t *testing.T) {
	s := newBaseline(t)
	data := bytes.Repeat([]byte("kvfs"), 300_000)
	if err := s.tier.Put(context.Background(), "d/x.data", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	n, err := s.rawGet(context.Background(), "d/x.data", &got)
	if err != nil || n != int64(len(data)) || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("rawGet: %d bytes, %v; equal %v", n, err, bytes.Equal(got.Bytes(), data))
	}
	if _, err := s.rawGet(context.Background(), "absent.data", io.Discard); err == nil {
		t.Fatal("rawGet of an absent key succeeded")
	}
}
