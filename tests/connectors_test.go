package tests

// The cache connectors the tests drive, syscall for syscall: LMCache's
// fs_native L2 adapter and local_disk backend, and the objects they
// store, whose content is derived from their key.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	MiB = 1 << 20
	// sliceSize is fs_native's write slice.
	sliceSize = 1 * MiB
	// objectsDir holds fs_native's objects whose key is too long for a
	// file name.
	objectsDir = ".lmcache-objects-v1"
	tmpPrefix  = ".lmcache-write.tmp."
)

// fillObject writes key's content into buf: a header naming the key and
// the size, then a pseudo-random stream seeded by both, so any byte from
// another object, another size or another offset is caught.
func fillObject(buf []byte, key string) {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", key, len(buf))))
	r := rand.NewPCG(binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16]))
	i := 0
	for ; i+8 <= len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], r.Uint64())
	}
	var tail [8]byte
	binary.LittleEndian.PutUint64(tail[:], r.Uint64())
	copy(buf[i:], tail[:])
	copy(buf, fmt.Sprintf("kvfs-test object %q size %d\n", key, len(buf)))
}

// objectBytes is key's content at the given size.
func objectBytes(key string, size int) []byte {
	b := make([]byte, size)
	fillObject(b, key)
	return b
}

// checkObject says where got differs from key's content, if anywhere.
func checkObject(got []byte, key string, size int) error {
	if len(got) != size {
		return fmt.Errorf("%s: %d bytes, want %d", key, len(got), size)
	}
	want := objectBytes(key, size)
	if i := firstDiff(got, want); i >= 0 {
		return fmt.Errorf("%s: byte %d of %d differs (got %q...)", key, i, size, preview(got[i:]))
	}
	return nil
}

// objectKey reads the key back from an object's header (see fillObject).
func objectKey(data []byte) (string, int, bool) {
	var key string
	var size int
	line, _, _ := strings.Cut(string(data[:min(len(data), 4096)]), "\n")
	if _, err := fmt.Sscanf(line, "kvfs-test object %q size %d", &key, &size); err != nil {
		return "", 0, false
	}
	return key, size, true
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

func preview(b []byte) []byte {
	return b[:min(len(b), 40)]
}

// alignedBuffer is page-aligned memory for O_DIRECT, as LMCache gets
// from its pinned allocator.
func alignedBuffer(t testing.TB, size int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatalf("mmap %d bytes: %v", size, err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// fsNative is LMCache's fs_native L2 adapter, syscall for syscall.
type fsNative struct {
	base   string
	direct bool // O_DIRECT for 4 KiB-aligned objects
	whole  bool // one write of the whole object instead of 1 MiB slices
	seq    *atomic.Int64
}

// finalPath is where key's object lives: <key>.data under the base, or,
// when that name is too long, under .lmcache-objects-v1 by hash.
func finalPath(base, key string) string {
	name := key + ".data"
	if len(name) <= 255 {
		return filepath.Join(base, name)
	}
	sum := sha256.Sum256([]byte(key))
	h := hex.EncodeToString(sum[:])
	return filepath.Join(base, objectsDir, h[:2], h[2:4], h+".data")
}

// errLostPublish: the temp file was evicted between close and link,
// which the grace period only makes unlikely.
var errLostPublish = errors.New("temp file evicted before link")

// store publishes data as key unless it is already there. It reports
// whether this call wrote it.
func (c *fsNative) store(key string, data []byte) (bool, error) {
	final := finalPath(c.base, key)
	if err := unix.Stat(final, new(unix.Stat_t)); err == nil {
		return false, nil
	} else if err != unix.ENOENT {
		return false, fmt.Errorf("stat %s: %w", final, err)
	}
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	tmp := filepath.Join(dir, fmt.Sprintf("%s%d.%d", tmpPrefix, os.Getpid(), c.seq.Add(1)))
	if err := c.writeTmp(tmp, data); err != nil {
		unix.Unlink(tmp)
		return false, err
	}
	err := unix.Link(tmp, final)
	if err == unix.ENOENT {
		err = errLostPublish
	} else if err == unix.EEXIST {
		err = nil // another writer won
	}
	if uerr := unix.Unlink(tmp); uerr != nil && uerr != unix.ENOENT && err == nil {
		err = fmt.Errorf("unlink %s: %w", tmp, uerr)
	}
	return err == nil, err
}

func (c *fsNative) writeTmp(tmp string, data []byte) error {
	flags := unix.O_CREAT | unix.O_EXCL | unix.O_WRONLY | unix.O_CLOEXEC
	if c.direct && len(data)%4096 == 0 {
		flags |= unix.O_DIRECT
	}
	fd, err := unix.Open(tmp, flags, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", tmp, err)
	}
	step := sliceSize
	if c.whole {
		step = max(len(data), 1)
	}
	for off := 0; off < len(data) && err == nil; off += step {
		err = writeFull(fd, data[off:min(off+step, len(data))])
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", tmp, cerr)
	}
	return err
}

// writeFull is one write(2) call, repeated only for a short count.
func writeFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
		b = b[n:]
	}
	return nil
}

// lookup stats each key's final path from two goroutines, as fs_native's
// batched contains does. A negative size means absent.
func (c *fsNative) lookup(keys []string) ([]int64, error) {
	sizes := make([]int64, len(keys))
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := w; i < len(keys); i += 2 {
				var st unix.Stat_t
				switch err := unix.Stat(finalPath(c.base, keys[i]), &st); err {
				case nil:
					sizes[i] = st.Size
				case unix.ENOENT:
					sizes[i] = -1
				default:
					errs[w] = fmt.Errorf("stat %s: %w", keys[i], err)
				}
			}
		})
	}
	wg.Wait()
	return sizes, errors.Join(errs...)
}

// load opens, reads the whole object and closes; nil without error
// means absent.
func (c *fsNative) load(key string) ([]byte, error) {
	f, err := os.Open(finalPath(c.base, key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// Read to EOF, not just the stat size, so a longer file shows too.
	var b bytes.Buffer
	b.Grow(int(st.Size()) + 1)
	if _, err := b.ReadFrom(f); err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return b.Bytes(), nil
}

// remove is fs_native's delete: ENOENT is success.
func (c *fsNative) remove(key string) error {
	if err := unix.Unlink(finalPath(c.base, key)); err != nil && err != unix.ENOENT {
		return fmt.Errorf("unlink %s: %w", key, err)
	}
	return nil
}

// scanned is one object fs_native's restart scan found.
type scanned struct {
	path    string // relative to the base
	size    int64
	mtimeNs int64
}

// scan is fs_native's restart: scandir of the base and a walk of
// .lmcache-objects-v1, ordered by st_mtime_ns. Temp files are reported
// separately.
func scan(t testing.TB, base string) (objs []scanned, tmps []string) {
	t.Helper()
	add := func(p string) {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatalf("restart scan: stat %s: %v", p, err)
		}
		rel, _ := filepath.Rel(base, p)
		objs = append(objs, scanned{rel, st.Size, st.Mtim.Nano()})
	}
	ents, err := os.ReadDir(base)
	if err != nil {
		t.Fatalf("restart scan: %v", err)
	}
	for _, e := range ents {
		switch {
		case strings.HasPrefix(e.Name(), tmpPrefix):
			tmps = append(tmps, e.Name())
		case e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".data"):
			add(filepath.Join(base, e.Name()))
		}
	}
	err = filepath.WalkDir(filepath.Join(base, objectsDir), func(p string, d fs.DirEntry, err error) error {
		switch {
		case errors.Is(err, fs.ErrNotExist) && p == filepath.Join(base, objectsDir):
			return filepath.SkipDir
		case err != nil:
			return err
		case strings.HasPrefix(d.Name(), tmpPrefix):
			tmps = append(tmps, p)
		case d.Type().IsRegular() && strings.HasSuffix(d.Name(), ".data"):
			add(p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("restart scan: %v", err)
	}
	sort.SliceStable(objs, func(i, j int) bool {
		if objs[i].mtimeNs != objs[j].mtimeNs {
			return objs[i].mtimeNs < objs[j].mtimeNs
		}
		return objs[i].path < objs[j].path
	})
	return objs, tmps
}

// localDiskWrite is local_disk's store: straight to the final name, one
// write, O_DIRECT when asked and aligned.
func localDiskWrite(path string, data []byte, direct bool) error {
	flags := unix.O_CREAT | unix.O_WRONLY | unix.O_TRUNC | unix.O_CLOEXEC
	if direct && len(data)%4096 == 0 {
		flags |= unix.O_DIRECT
	}
	fd, err := unix.Open(path, flags, 0o644)
	if err != nil {
		return err
	}
	err = writeFull(fd, data)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// localDiskRead is one read(2) into buf, as readinto does.
func localDiskRead(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size > int64(len(buf)) {
		return nil, fmt.Errorf("%s: %d bytes, larger than any object stored", path, st.Size)
	}
	n, err := unix.Read(fd, buf[:st.Size])
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}
