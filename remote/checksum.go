package remote

import (
	"encoding/base64"
	"encoding/binary"
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

// Every object kvfs uploads carries its size in user metadata
// (x-amz-meta-kvfs-size, declared before the body) and its CRC32C as
// S3's own x-amz-checksum-crc32c, computed while the body is sent and
// sent as the request's trailer; the server checks it and keeps it with
// the object. Objects from older versions (and empty ones) carry the
// CRC32C in user metadata instead (x-amz-meta-kvfs-crc32c), which wins
// when present. CRC32C because it is
// hardware-assisted on amd64 and arm64 (see BenchmarkChecksum: tens of
// GB/s, far above any S3 transfer) and S3 checks it itself. It
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

// infoOf reads kvfs's size and checksum from an object's info (asked
// for with checksum mode). The size is the
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
	size, err := strconv.ParseInt(sizeStr, 10, 64)
	if sizeStr == "" || err != nil || size < 0 {
		return Info{}, 0, errNoChecksum
	}
	sum, err := strconv.ParseUint(crcHex, 16, 32)
	if crcHex == "" {
		s, ok := serverCRC(oi)
		sum, err = uint64(s), nil
		if !ok {
			err = errNoChecksum
		}
	}
	if err != nil {
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

// serverCRC is the CRC32C the server stored with an object (the upload's
// trailer), asked for with checksum mode; ok is false without one.
func serverCRC(oi minio.ObjectInfo) (uint32, bool) {
	b, err := base64.StdEncoding.DecodeString(oi.ChecksumCRC32C)
	if err != nil || len(b) != 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(b), true
}
