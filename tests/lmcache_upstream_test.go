package tests

// LMCache's upstream fs_native store, the C++ FSConnector
// (LMCache/LMCache csrc/storage_backends/fs/connector.cpp and
// connector.h at commit 121206a976f4cd07e88aebd079ab92107ce291ad),
// syscall for syscall. It differs from the fork's protocol that
// TestLMCacheFSNative replays (unique temp, O_EXCL, link):
//   - file name: key "<model>@<kv_rank hex>@<hash>" becomes
//     "<model, / as -SEP->@0x<kv_rank hex>@<hash>.data" under base_path.
//   - do_single_set: std::filesystem::exists(final) (a stat) and skip if
//     there; the temp is the final name with ".tmp" in place of ".data",
//     or <base_path>/<relative_tmp_dir>/<file name> when relative_tmp_dir
//     is set; open(tmp, O_CREAT|O_WRONLY|O_TRUNC [|O_DIRECT when the
//     buffer and length are aligned to statvfs's f_bsize], 0644): no
//     O_EXCL, so two writers of one key share the temp and truncate each
//     other; write_all (write(2) until done, EINTR retried); on a write
//     error close, remove(tmp) and fail; close (its result ignored);
//     rename(tmp, final); if that fails, remove(tmp) and fail.
//   - do_single_get: open(final, O_RDONLY[|O_DIRECT]), read_all of the
//     length, "incomplete read" unless every byte came, close.
//   - do_single_exists: exists(final); do_single_delete: remove(final),
//     false (no error) when absent.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// fsConnector is one upstream FSConnector.
type fsConnector struct {
	base, tmpDir string // tmpDir: base/relative_tmp_dir, or ""
	odirect      bool
}

// upstreamKey is an LMCache key as _object_key_to_string makes it.
func upstreamKey(i int) string {
	return fmt.Sprintf("meta-llama/Llama-3.1-8B@%08x@%016x", i%2, uint64(i)*0x9e3779b97f4a7c15)
}

// filename is key_to_filename.
func (c *fsConnector) filename(key string) string {
	f := strings.Split(key, "@")
	return strings.ReplaceAll(f[0], "/", "-SEP-") + "@0x" + f[1] + "@" + f[2] + ".data"
}

func (c *fsConnector) final(key string) string { return filepath.Join(c.base, c.filename(key)) }

func (c *fsConnector) tmp(key string) string {
	if c.tmpDir != "" {
		return filepath.Join(c.tmpDir, c.filename(key))
	}
	return strings.TrimSuffix(c.final(key), ".data") + ".tmp"
}

// errRenameGone is do_single_set's rename failure when another writer of
// the key renamed the shared temp first: the connector reports the store
// failed; the other writer's store holds the key.
var errRenameGone = errors.New("rename failed: temp renamed by another writer")

// set is do_single_set; it reports whether it wrote.
func (c *fsConnector) set(key string, buf []byte) (bool, error) {
	final := c.final(key)
	if unix.Stat(final, new(unix.Stat_t)) == nil {
		return false, nil
	}
	tmp := c.tmp(key)
	flags := unix.O_CREAT | unix.O_WRONLY | unix.O_TRUNC
	if c.odirect && len(buf)%4096 == 0 {
		flags |= unix.O_DIRECT // alignedBuffer: the address is aligned too
	}
	fd, err := unix.Open(tmp, flags, 0o644)
	if err != nil {
		return false, fmt.Errorf("open for write failed: %s: %w", tmp, err)
	}
	if err := writeFull(fd, buf); err != nil {
		unix.Close(fd)
		unix.Unlink(tmp)
		return false, err
	}
	unix.Close(fd)
	if err := unix.Rename(tmp, final); err != nil {
		unix.Unlink(tmp)
		if err == unix.ENOENT {
			return false, errRenameGone
		}
		return false, fmt.Errorf("rename failed: %s -> %s: %w", tmp, final, err)
	}
	return true, nil
}

// get is do_single_get; nil without error is a miss (the open's ENOENT,
// which the connector reports as a failed get).
func (c *fsConnector) get(key string, buf []byte) ([]byte, error) {
	flags := unix.O_RDONLY
	if c.odirect && len(buf)%4096 == 0 {
		flags |= unix.O_DIRECT
	}
	fd, err := unix.Open(c.final(key), flags, 0)
	if err == unix.ENOENT {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open for read failed: %w", err)
	}
	defer unix.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read failed: %w", err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	if n != len(buf) {
		return nil, fmt.Errorf("incomplete read for %s: expected %d, got %d", key, len(buf), n)
	}
	return buf, nil
}

// TestLMCacheUpstreamSharedTemp: two writers of one key share its temp
// file, as the upstream connector's O_TRUNC without O_EXCL makes them:
// the second truncates what the first wrote, the first renames the
// shared inode while the second is still writing it, the second's
// rename fails. The key ends complete and exact, charged once, with no
// temp left; in the temp's own directory and in relative_tmp_dir.
func TestLMCacheUpstreamSharedTemp(t *testing.T) {
	for _, tmpDir := range []string{"", "tmp"} {
		t.Run("tmp_dir="+tmpDir, func(t *testing.T) {
			d := mountCache(t, "--capacity", "64MiB")
			c := &fsConnector{base: d.mp}
			if tmpDir != "" {
				c.tmpDir = filepath.Join(d.mp, tmpDir)
				if err := os.MkdirAll(c.tmpDir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			const size = 3 * MiB
			key := upstreamKey(1)
			data := objectBytes(key, size)
			open := func() int {
				fd, err := unix.Open(c.tmp(key), unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				return fd
			}
			a := open()
			if err := writeFull(a, data[:size/2]); err != nil {
				t.Fatal(err)
			}
			b := open() // truncates a's half
			if err := writeFull(b, data[:size/3]); err != nil {
				t.Fatal(err)
			}
			if err := writeFull(a, data[size/2:]); err != nil {
				t.Fatal(err)
			}
			unix.Close(a)
			if err := unix.Rename(c.tmp(key), c.final(key)); err != nil {
				t.Fatalf("first writer's rename: %v", err)
			}
			if err := writeFull(b, data[size/3:]); err != nil {
				t.Fatalf("second writer, writing on into the renamed inode: %v", err)
			}
			unix.Close(b)
			if err := unix.Rename(c.tmp(key), c.final(key)); err != unix.ENOENT {
				t.Fatalf("second writer's rename: %v, want ENOENT (the temp was renamed)", err)
			}
			unix.Unlink(c.tmp(key))
			got, err := c.get(key, make([]byte, size))
			if err == nil && got == nil {
				err = errors.New("missing")
			}
			if err == nil {
				err = checkObject(got, key, size)
			}
			if err != nil {
				t.Fatalf("the key after two writers shared its temp: %v", err)
			}
			if _, err := os.Stat(c.tmp(key)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("temp file left: %v", err)
			}
			if st := assertQuietEqual(t, d); st.Objects != 1 || st.UsedBytes != charge(size) {
				t.Errorf("after the shared temp: %+v; want one object of %d bytes", st, charge(size))
			}
			d.stop()
		})
	}
}

// TestLMCacheUpstreamConcurrent: four writers store the same keys in the
// same order at once (so they meet on shared temps) over a capacity
// below the data, buffered and O_DIRECT, with two readers loading; then
// every key present loads exact, no temp is left and the accounting is
// exact. A writer may fail only as the connector does when another
// renamed the shared temp first; a load is exact or a miss.
func TestLMCacheUpstreamConcurrent(t *testing.T) {
	for _, tmpDir := range []string{"", "tmp"} {
		t.Run("tmp_dir="+tmpDir, func(t *testing.T) { upstreamConcurrent(t, tmpDir) })
	}
}

func upstreamConcurrent(t *testing.T, tmpDir string) {
	const keys, writers, readers = 12, 4, 2
	d := mountCache(t, "--capacity", "24MiB", "--grace", "1h")
	sizes := make([]int, keys)
	r := rand.New(rand.NewPCG(5, 8))
	for i := range sizes {
		sizes[i] = (2*MiB + r.IntN(2*MiB/4096+1)*4096) - i%2*r.IntN(4095) // some unaligned
	}
	var wrote, gone, loads, misses atomic.Int64
	var done atomic.Bool
	var ws, rs sync.WaitGroup
	for w := range writers {
		c := &fsConnector{base: d.mp, odirect: w%2 == 1}
		if tmpDir != "" {
			c.tmpDir = filepath.Join(d.mp, tmpDir)
			os.MkdirAll(c.tmpDir, 0o755)
		}
		buf := alignedBuffer(t, 4*MiB)
		ws.Go(func() {
			for i := range keys {
				key := upstreamKey(i)
				fillObject(buf[:sizes[i]], key)
				did, err := c.set(key, buf[:sizes[i]])
				switch {
				case errors.Is(err, errRenameGone):
					gone.Add(1)
				case err != nil:
					t.Errorf("writer %d key %d: %v", w, i, err)
				case did:
					wrote.Add(1)
				}
			}
		})
	}
	for rd := range readers {
		c := &fsConnector{base: d.mp}
		rs.Go(func() {
			r := rand.New(rand.NewPCG(uint64(rd), 9))
			for !done.Load() {
				i := r.IntN(keys)
				got, err := c.get(upstreamKey(i), make([]byte, sizes[i]))
				switch {
				case err != nil:
					// The shared temp's flaw, not kvfs's: a writer that
					// truncated it may still be writing the renamed inode.
					if !strings.Contains(err.Error(), "incomplete read") {
						t.Errorf("reader %d key %d: %v", rd, i, err)
					}
				case got == nil:
					misses.Add(1)
				default:
					if err := checkObject(got, upstreamKey(i), sizes[i]); err != nil {
						t.Errorf("reader %d: %v", rd, err)
					}
					loads.Add(1)
				}
			}
		})
	}
	ws.Wait()
	done.Store(true)
	rs.Wait()
	st := assertQuietEqual(t, d)
	t.Logf("%d stores written, %d lost their shared temp to another writer; %d loads, %d misses; %+v",
		wrote.Load(), gone.Load(), loads.Load(), misses.Load(), st)
	if wrote.Load() < keys || st.Evictions == 0 {
		t.Errorf("%d stores written, %d evictions: the workload did not fill the cache", wrote.Load(), st.Evictions)
	}
	c := &fsConnector{base: d.mp}
	present := 0
	for i := range keys {
		got, err := c.get(upstreamKey(i), make([]byte, sizes[i]))
		if err == nil && got != nil {
			err = checkObject(got, upstreamKey(i), sizes[i])
			present++
		}
		if err != nil {
			t.Errorf("key %d at rest: %v", i, err)
		}
	}
	if int64(present) != st.Objects || present == 0 {
		t.Errorf("%d keys load, kvfs holds %d objects", present, st.Objects)
	}
	filepath.WalkDir(d.mp, func(p string, e os.DirEntry, err error) error {
		rel, _ := filepath.Rel(d.mp, p)
		if err == nil && !e.IsDir() && (strings.HasSuffix(rel, ".tmp") || strings.HasPrefix(rel, "tmp/")) {
			t.Errorf("temp file left: %s", rel)
		}
		return nil
	})
	d.stop()
}
