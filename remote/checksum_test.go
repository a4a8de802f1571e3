package remote

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestVerifyReader: an upload body fails if the bytes are not the ones
// checksummed: changed, shorter or longer.
func TestVerifyReader(t *testing.T) {
	data := bytes.Repeat([]byte("kvfs"), 100_000)
	_, sum, _ := checksumOf(bytes.NewReader(data))
	read := func(b []byte, size int64) error {
		_, err := io.Copy(io.Discard, newVerifyReader(bytes.NewReader(b), size, sum))
		return err
	}
	if err := read(data, int64(len(data))); err != nil {
		t.Fatalf("unchanged: %v", err)
	}
	changed := bytes.Clone(data)
	changed[7] ^= 1
	for what, b := range map[string][]byte{"changed": changed, "shorter": data[:len(data)-1], "longer": append(bytes.Clone(data), 'x')} {
		if err := read(b, int64(len(data))); !errors.Is(err, errSourceChanged) {
			t.Errorf("%s: %v, want errSourceChanged", what, err)
		}
	}
}

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
