package remote

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestSendReader: an upload body is the source read once, exactly its
// size, checksummed on the way; it fails instead of ending when the
// source turned out shorter, or changed.
func TestSendReader(t *testing.T) {
	data := bytes.Repeat([]byte("kvfs"), 100_000)
	_, sum, _ := checksumOf(bytes.NewReader(data))
	send := func(src Source) (*sendReader, error) {
		s := newSendReader(src, nil)
		_, err := io.Copy(io.Discard, s)
		return s, err
	}
	s, err := send(&fakeSource{r: bytes.NewReader(data), size: int64(len(data))})
	if err != nil || s.sum() != sum || s.n != int64(len(data)) {
		t.Fatalf("unchanged: %v, %d bytes, crc %08x want %08x", err, s.n, s.sum(), sum)
	}
	for what, src := range map[string]*fakeSource{
		"shorter": {r: bytes.NewReader(data[:len(data)-1]), size: int64(len(data))},
		"changed": {r: bytes.NewReader(data), size: int64(len(data)), changed: errors.New("mtime moved")},
	} {
		if _, err := send(src); !errors.Is(err, errSourceChanged) {
			t.Errorf("%s: %v, want errSourceChanged", what, err)
		}
	}
	// Longer: only size bytes are read, and Unchanged (which sees the
	// size move) decides.
	long := &fakeSource{r: bytes.NewReader(append(bytes.Clone(data), 'x')), size: int64(len(data))}
	if s, err := send(long); err != nil || s.n != int64(len(data)) {
		t.Errorf("longer, unchanged by its own account: %v after %d bytes", err, s.n)
	}
}

type fakeSource struct {
	r       io.Reader
	size    int64
	changed error
}

func (f *fakeSource) Read(p []byte) (int, error) { return f.r.Read(p) }
func (f *fakeSource) Size() int64                { return f.size }
func (f *fakeSource) Unchanged() error           { return f.changed }
func (f *fakeSource) Close() error               { return nil }

// BenchmarkChecksum is the cost of the checksum on a 32 MiB object
// (LMCache chunks are 10-100 MiB); xxhash for comparison.
func BenchmarkChecksum(b *testing.B) {
	data := make([]byte, 32<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	b.Run("crc32c", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			h := newCRC()
			h.Write(data)
			h.Sum32()
		}
	})
	b.Run("xxhash64", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			xxhash.Sum64(data)
		}
	})
}
