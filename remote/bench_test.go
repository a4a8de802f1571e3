package remote

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"

	"github.com/kvfs/kvfs/internal/s3test"
	"github.com/minio/minio-go/v7"
)

// BenchmarkGet32MiB compares, against one server in one run, a raw GET
// of a 32 MiB object with a plain client (to io.Discard) and Fetch
// of it into a file with the checksum verified: the tier's own share of
// a cold remote hit.
func BenchmarkGet32MiB(b *testing.B) {
	srv := s3test.New(b)
	n := newBenchNode(b, srv)
	data := make([]byte, 32<<20)
	for i := range data {
		data[i] = byte(i * 31)
	}
	if err := n.Put(context.Background(), "big.data", bytes.NewReader(data)); err != nil {
		b.Fatal(err)
	}
	c := srv.Client()
	b.Run("raw", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			body, err := c.GetObject(context.Background(), srv.Bucket, "bench/big.data", minio.GetObjectOptions{})
			if err == nil {
				_, err = io.Copy(io.Discard, body)
				body.Close()
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	dir := b.TempDir()
	b.Run("fetch", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			f, err := n.Fetch(context.Background(), "big.data", func(Info) (*os.File, error) {
				return os.CreateTemp(dir, "f")
			})
			if err != nil {
				b.Fatal(err)
			}
			f.File.Close()
			os.Remove(f.File.Name())
		}
	})
}

func newBenchNode(b *testing.B, srv *s3test.Server) *Tier {
	cfg := Config{URL: srv.URL("bench"), Endpoint: srv.Endpoint, AccessKey: s3test.AccessKey,
		SecretKey: s3test.SecretKey, Region: s3test.Region}
	if err := cfg.Finish(func(string) string { return "" }); err != nil {
		b.Fatal(err)
	}
	t, err := New(cfg, Deps{JournalDir: b.TempDir(), Open: func(string) (Source, error) { return nil, ErrNotFound }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { t.Close() })
	return t
}
