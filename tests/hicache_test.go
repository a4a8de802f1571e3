package tests

// SGLang HiCache's file storage backend (HiCacheFile, in
// python/sglang/srt/mem_cache/hicache_storage.py), syscall for syscall:
// one <key><suffix>.bin file per KV page in one flat directory; set()
// checks exists(), writes the page to <final>.tmp.<pid>.<tid>.<uuid>
// with numpy's tofile (open "wb", one write of the page) and publishes
// it with os.replace; get() opens unbuffered and readinto()s the whole
// page; exists() is a stat; clear() lists and removes every file; a
// restart lists the directory for this rank's .bin names.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// hiCacheFile is one TP rank's HiCacheFile over dir.
type hiCacheFile struct {
	dir, suffix string
	rank        int
	seq         *atomic.Int64
}

func newHiCacheFile(dir, model string, rank, tpSize int, seq *atomic.Int64) *hiCacheFile {
	// config_suffix: _<model with / as ->, then _<tp_rank>_<tp_size>
	// for models that are not MLA.
	suffix := fmt.Sprintf("_%s_%d_%d", strings.ReplaceAll(model, "/", "-"), rank, tpSize)
	return &hiCacheFile{dir: dir, suffix: suffix, rank: rank, seq: seq}
}

func (h *hiCacheFile) path(key string) string { return filepath.Join(h.dir, key+h.suffix+".bin") }

// exists is os.path.exists: a stat.
func (h *hiCacheFile) exists(key string) bool {
	var st unix.Stat_t
	return unix.Stat(h.path(key), &st) == nil
}

// set stores one page unless it exists. It reports whether it wrote.
func (h *hiCacheFile) set(key string, page []byte) (bool, error) {
	if h.exists(key) {
		return false, nil
	}
	final := h.path(key)
	tmp := fmt.Sprintf("%s.tmp.%d.%d.%032x", final, os.Getpid(), h.rank, h.seq.Add(1))
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o666)
	if err != nil {
		return false, fmt.Errorf("open %s: %w", tmp, err)
	}
	err = writeFull(fd, page)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Rename(tmp, final)
	}
	if err != nil {
		unix.Unlink(tmp)
		return false, err
	}
	return true, nil
}

// get reads a page of want bytes: open, fstat (Python's open does), one
// readinto, close. A missing file is a miss (nil, nil).
func (h *hiCacheFile) get(key string, want int) ([]byte, error) {
	fd, err := unix.Open(h.path(key), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	buf := make([]byte, want)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return nil, err
	}
	if n != want {
		return nil, fmt.Errorf("short read of %s: %d of %d", key, n, want)
	}
	return buf, nil
}

// scan is the restart scan: this rank's .bin names.
func (h *hiCacheFile) scan() ([]string, error) {
	ents, err := os.ReadDir(h.dir)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, e := range ents {
		stem, ok := strings.CutSuffix(e.Name(), ".bin")
		if key, mine := strings.CutSuffix(stem, h.suffix); ok && mine {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// clear removes every file in the directory, as HiCacheFile.clear does.
func hiCacheClear(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// pageKeys are a prefix chain of page hashes, as get_hash_str chains
// sha256 over the previous hash and the page's token ids.
func pageKeys(n int, seed string) []string {
	keys := make([]string, n)
	prev := []byte(seed)
	for i := range keys {
		sum := sha256.Sum256(append(prev, fmt.Sprintf("tokens-%d", i)...))
		keys[i] = hex.EncodeToString(sum[:])
		prev = sum[:]
	}
	return keys
}

// TestHiCacheFileReplay: two TP ranks store 96 MiB of 4 MiB pages into a
// 32 MiB mount, re-store a prefix, load what is there byte for byte and
// miss what was evicted; accounting is exact with no temp file left;
// after a restart each rank's scan finds exactly what was stored; clear
// empties the mount.
func TestHiCacheFileReplay(t *testing.T) {
	const pageSize, pages = 4 * MiB, 12
	// A grace period shorter than the default keeps the run short; it
	// still covers the close-to-rename step of set().
	d := mountCache(t, "--capacity", "32MiB", "--grace", "500ms")
	seq := &atomic.Int64{}
	ranks := []*hiCacheFile{
		newHiCacheFile(d.mp, "meta-llama/Llama-3.1-8B-Instruct", 0, 2, seq),
		newHiCacheFile(d.mp, "meta-llama/Llama-3.1-8B-Instruct", 1, 2, seq),
	}
	keys := pageKeys(pages, "hicache")
	var wrote, skipped atomic.Int64
	var wg sync.WaitGroup
	for _, h := range ranks {
		wg.Go(func() {
			for i, k := range append(keys, keys[:3]...) {
				did, err := h.set(k, objectBytes(k+h.suffix, pageSize))
				if err != nil {
					t.Errorf("rank %d set page %d: %v", h.rank, i, err)
				}
				if did {
					wrote.Add(1)
				} else {
					skipped.Add(1)
				}
			}
		})
	}
	wg.Wait()
	st := assertQuietEqual(t, d)
	if st.Evictions == 0 || wrote.Load() < 2*pages {
		t.Fatalf("wrote %d pages (%d skipped as present), %d evictions: the workload did not overflow the cache", wrote.Load(), skipped.Load(), st.Evictions)
	}
	before := hiCacheCheck(t, ranks, keys, pageSize)
	if int64(len(before)) != st.Objects {
		t.Errorf("%d pages found, kvfs holds %d objects", len(before), st.Objects)
	}
	t.Logf("%d pages written, %d skipped as present, %d evictions; %d pages held", wrote.Load(), skipped.Load(), st.Evictions, len(before))

	d.stop()
	d = startDaemon(t, d.mp, "--store", d.store, "--capacity", "32MiB", "--grace", "500ms")
	after := hiCacheCheck(t, ranks, keys, pageSize)
	if strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("after a restart the scans found %v, before %v", after, before)
	}
	if err := hiCacheClear(d.mp); err != nil {
		t.Fatalf("clear: %v", err)
	}
	if st := assertQuietEqual(t, d); st.Objects != 0 || st.UsedBytes != 0 {
		t.Errorf("after clear: %+v", st)
	}
	d.stop()
}

// hiCacheCheck scans each rank, loads every page it lists byte for byte,
// and checks the pages it does not list miss; no temp file may be left.
// It returns the rank/key names found.
func hiCacheCheck(t *testing.T, ranks []*hiCacheFile, keys []string, pageSize int) []string {
	t.Helper()
	var found []string
	for _, h := range ranks {
		listed, err := h.scan()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			data, err := h.get(k, pageSize)
			has := contains(listed, k)
			switch {
			case err != nil:
				t.Errorf("rank %d get %s: %v", h.rank, k[:8], err)
			case has && data == nil:
				t.Errorf("rank %d: %s listed but missed", h.rank, k[:8])
			case !has && data != nil:
				t.Errorf("rank %d: %s loaded but not listed", h.rank, k[:8])
			case has:
				if err := checkObject(data, k+h.suffix, pageSize); err != nil {
					t.Errorf("rank %d: %v", h.rank, err)
				}
				found = append(found, fmt.Sprintf("%d/%s", h.rank, k))
			}
		}
	}
	ents, _ := os.ReadDir(ranks[0].dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp.") {
			t.Errorf("temp file left: %s", e.Name())
		}
	}
	sort.Strings(found)
	return found
}
