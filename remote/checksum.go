package remote

import (
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// Every object kvfs uploads carries its size and CRC32C in user metadata
// (x-amz-meta-kvfs-size, x-amz-meta-kvfs-crc32c). CRC32C because it is
// hardware-assisted on amd64 and arm64 (see BenchmarkChecksum: tens of
// GB/s, far above any S3 transfer) and is S3's own x-amz-checksum-crc32c,
// so a later move to server-side checksums keeps the same value. It
// guards against damage, not against an adversary with write access to
// the bucket.
const (
	metaCRC  = "kvfs-crc32c"
	metaSize = "kvfs-size"
	// checksumPrefix starts Info.Checksum.
	checksumPrefix = "crc32c:"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func newCRC() hash.Hash32 { return crc32.New(castagnoli) }

// Info is what the remote holds for a name.
type Info struct {
	// Size is the object's length in bytes.
	Size int64
	// Checksum is "crc32c:" and eight hex digits.
	Checksum string
	// ETag and ModTime are the server's.
	ETag    string
	ModTime time.Time
}

func formatCRC(sum uint32) string { return fmt.Sprintf("%08x", sum) }

func userMeta(size int64, sum uint32) map[string]string {
	return map[string]string{metaCRC: formatCRC(sum), metaSize: strconv.FormatInt(size, 10)}
}

// errNoChecksum marks an object without kvfs's metadata (put there by
// something else): it cannot be verified, so it is not served.
var errNoChecksum = errors.New("object has no kvfs checksum metadata")

// infoOf reads kvfs's metadata from an object's info. The size is the
// one recorded at upload, which a truncated object no longer has.
func infoOf(oi minio.ObjectInfo) (Info, uint32, error) {
	var crcHex, sizeStr string
	for k, v := range oi.UserMetadata {
		switch strings.TrimPrefix(strings.ToLower(k), "x-amz-meta-") {
		case metaCRC:
			crcHex = v
		case metaSize:
			sizeStr = v
		}
	}
	sum, err1 := strconv.ParseUint(crcHex, 16, 32)
	size, err2 := strconv.ParseInt(sizeStr, 10, 64)
	if crcHex == "" || sizeStr == "" || err1 != nil || err2 != nil || size < 0 {
		return Info{}, 0, errNoChecksum
	}
	info := Info{Size: size, Checksum: checksumPrefix + formatCRC(uint32(sum)),
		ETag: oi.ETag, ModTime: oi.LastModified}
	return info, uint32(sum), nil
}

// checksumOf reads r to its end and returns its length and CRC32C.
func checksumOf(r io.Reader) (int64, uint32, error) {
	h := newCRC()
	n, err := io.CopyBuffer(h, r, make([]byte, copyBuf))
	return n, h.Sum32(), err
}

// errSourceChanged is what an upload's body returns when the bytes read
// are not the ones checksummed a moment before (the local object was
// replaced meanwhile): the PUT fails instead of storing a mismatch.
var errSourceChanged = errors.New("local object changed while uploading")

var _ io.Reader = (*verifyReader)(nil)

// verifyReader passes size bytes through and fails the read that
// completes them if their CRC32C is not want.
type verifyReader struct {
	r    io.Reader
	h    hash.Hash32
	n    int64
	size int64
	want uint32
}

func newVerifyReader(r io.Reader, size int64, want uint32) *verifyReader {
	return &verifyReader{r: r, h: newCRC(), size: size, want: want}
}

func (v *verifyReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	switch {
	case v.n > v.size:
		return 0, errSourceChanged
	case v.n == v.size && v.h.Sum32() != v.want:
		return 0, errSourceChanged
	case err == io.EOF && v.n < v.size:
		return n, errSourceChanged
	}
	return n, err
}
