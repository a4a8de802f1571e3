package tests

// SGLang HiCache's file storage backend (HiCacheFile, in
// sgl-project/sglang python/sglang/srt/mem_cache/hicache_storage.py at
// commit 001067fffe33427bee0ed2f007fb7551a1d76b44), syscall for syscall,
// with the metadata cache off (enable_metadata_cache unset): one
// <key><suffix>.bin file per KV page in one flat directory.
//   - set(): exists() (os.path.exists: a stat) and skip if present; else
//     numpy's ndarray.tofile(tmp) with tmp =
//     <final>.tmp.<pid>.<threading.get_ident()>.<uuid4().hex>, then
//     os.replace(tmp, final); on an error os.remove(tmp).
//   - tofile(path) (numpy/_core/src/multiarray/methods.c array_tofile
//     and npy_3kcompat.h npy_PyFile_Dup2 / npy_PyFile_DupClose2): Python
//     open(path, "wb") (O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666), then
//     os.dup of its descriptor, fdopen and fwrite of the whole array
//     through the duplicate, fclose of the duplicate FIRST, an lseek of
//     the original to where the duplicate ended, and only then the
//     close of the original: two close(2)s, so two FLUSHes, per page.
//   - batch_exists_v2 (_collect_existing_component_keys): with the
//     metadata cache off, os.scandir of the directory and is_file() of
//     the names asked for; the longest run of present pages from the
//     start is the hit.
//   - get(): open(path, "rb", buffering=0) (open O_RDONLY|O_CLOEXEC and
//     an fstat), one readinto of the page, close; FileNotFoundError is a
//     miss.
//   - clear(): listdir and remove every file; a restart with the
//     metadata cache on lists the directory for this rank's .bin names.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvfs/kvfs/internal/s3test"
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

// set stores one page unless it exists. It reports whether it wrote;
// tmp is the temp name it used.
func (h *hiCacheFile) set(key string, page []byte) (wrote bool, tmp string, err error) {
	if h.exists(key) {
		return false, "", nil
	}
	final := h.path(key)
	tmp = fmt.Sprintf("%s.tmp.%d.%d.%032x", final, os.Getpid(), 140000000000000+h.rank, h.seq.Add(1))
	if err := toFile(tmp, page); err != nil {
		unix.Unlink(tmp)
		return false, tmp, err
	}
	if err := unix.Rename(tmp, final); err != nil {
		unix.Unlink(tmp)
		return false, tmp, err
	}
	return true, tmp, nil
}

// toFile is numpy's ndarray.tofile(path): the bytes go through a
// duplicate of the descriptor Python opened, and the duplicate is closed
// before the original.
func toFile(path string, page []byte) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o666)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("dup: %w", err)
	}
	err = writeFull(dup, page)
	if cerr := unix.Close(dup); err == nil && cerr != nil {
		err = fmt.Errorf("fclose of the duplicate: %w", cerr)
	}
	if err == nil {
		_, err = unix.Seek(fd, int64(len(page)), io.SeekStart)
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	return err
}

// batchExists is batch_exists_v2 with the metadata cache off: a scan of
// the directory for the pages' names; the longest run of present pages
// from the start.
func (h *hiCacheFile) batchExists(keys []string) (int, error) {
	ents, err := os.ReadDir(h.dir)
	if err != nil {
		return 0, err
	}
	present := map[string]bool{}
	for _, e := range ents {
		if e.Type().IsRegular() {
			present[e.Name()] = true
		}
	}
	for i, k := range keys {
		if !present[filepath.Base(h.path(k))] {
			return i, nil
		}
	}
	return len(keys), nil
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
// miss what was evicted; the directory-scan lookup agrees with the
// loads; accounting is exact with no temp file left; after a restart
// each rank's scan finds exactly what was stored; clear empties the
// mount. Each page is written the numpy way (two closes, the duplicate
// first).
func TestHiCacheFileReplay(t *testing.T) {
	const pageSize, pages = 4 * MiB, 12
	// A grace period shorter than the default keeps the run short; it
	// still covers the close-to-rename step of set().
	d := mountCache(t, "--capacity", "32MiB", "--grace", "500ms")
	ranks, keys := hiCacheRanks(d.mp), pageKeys(pages, "hicache")
	wrote, skipped, _ := hiCacheStore(t, ranks, keys, pageSize)
	st := assertQuietEqual(t, d)
	if st.Evictions == 0 || wrote < 2*pages {
		t.Fatalf("wrote %d pages (%d skipped as present), %d evictions: the workload did not overflow the cache", wrote, skipped, st.Evictions)
	}
	before := hiCacheCheck(t, ranks, keys, pageSize)
	if int64(len(before)) != st.Objects {
		t.Errorf("%d pages found, kvfs holds %d objects", len(before), st.Objects)
	}
	t.Logf("%d pages written, %d skipped as present, %d evictions; %d pages held", wrote, skipped, st.Evictions, len(before))

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

// TestHiCacheFileReplayRemote: the same stores on a mount with a remote
// tier (--remote, default excludes): HiCache's temp names
// (<final>.tmp.<pid>.<tid>.<uuid>) are neither looked up nor uploaded,
// and every page uploaded under its final name loads byte for byte, from
// the mount or fetched back.
func TestHiCacheFileReplayRemote(t *testing.T) {
	const pageSize, pages = 4 * MiB, 12
	srv := s3test.New(t)
	n := startRemoteNode(t, srv, t.TempDir(), "mnt", "--capacity", "32MiB", "--grace", "500ms")
	ranks, keys := hiCacheRanks(n.mp), pageKeys(pages, "hicache")
	wrote, _, tmps := hiCacheStore(t, ranks, keys, pageSize)
	n.uploaded()
	if wrote < 2*pages || len(tmps) < 2*pages {
		t.Fatalf("wrote %d pages through %d temp files", wrote, len(tmps))
	}
	for _, tmp := range tmps {
		key := remotePrefix + "/" + filepath.Base(tmp)
		if heads, puts := srv.Requests("HEAD", key), srv.Requests("PUT", key); heads+puts != 0 {
			t.Errorf("temp file %s reached the remote tier: %d HEAD, %d PUT", filepath.Base(tmp), heads, puts)
		}
	}
	uploaded := 0
	for _, h := range ranks {
		for _, k := range keys {
			// A page evicted before its upload ran is gone (eviction is
			// local, and its upload is skipped); every other page loads.
			put := srv.Requests("PUT", remotePrefix+"/"+filepath.Base(h.path(k))) > 0
			data, err := h.get(k, pageSize)
			switch {
			case err != nil:
			case data == nil && put:
				err = errors.New("uploaded, but missed")
			case data != nil:
				err = checkObject(data, k+h.suffix, pageSize)
			}
			if err != nil {
				t.Errorf("rank %d page %s: %v", h.rank, k[:8], err)
			}
			if put {
				uploaded++
			}
		}
	}
	if f := n.remote(); uploaded == 0 || f.Hits == 0 {
		t.Errorf("%d pages uploaded, %+v: the remote tier was not exercised", uploaded, f)
	}
	assertQuietEqual(t, n.daemon)
	n.stop()
}

// hiCacheRanks are two TP ranks' HiCacheFile over dir.
func hiCacheRanks(dir string) []*hiCacheFile {
	seq := &atomic.Int64{}
	return []*hiCacheFile{
		newHiCacheFile(dir, "meta-llama/Llama-3.1-8B-Instruct", 0, 2, seq),
		newHiCacheFile(dir, "meta-llama/Llama-3.1-8B-Instruct", 1, 2, seq),
	}
}

// hiCacheStore has each rank set every page, then the first three again,
// at once; it returns how many were written and skipped, and the temp
// names used.
func hiCacheStore(t *testing.T, ranks []*hiCacheFile, keys []string, pageSize int) (wrote, skipped int, tmps []string) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, h := range ranks {
		wg.Go(func() {
			for i, k := range append(keys, keys[:3]...) {
				did, tmp, err := h.set(k, objectBytes(k+h.suffix, pageSize))
				if err != nil {
					t.Errorf("rank %d set page %d: %v", h.rank, i, err)
				}
				mu.Lock()
				if tmp != "" {
					tmps = append(tmps, tmp)
				}
				if did {
					wrote++
				} else {
					skipped++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return wrote, skipped, tmps
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
		run, err := h.batchExists(keys)
		if err != nil {
			t.Fatal(err)
		}
		if want := prefixRun(listed, keys); run != want {
			t.Errorf("rank %d: batch_exists finds a prefix of %d pages, the listing %d", h.rank, run, want)
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

// prefixRun is how many of keys, from the start, are listed.
func prefixRun(listed, keys []string) int {
	for i, k := range keys {
		if !contains(listed, k) {
			return i
		}
	}
	return len(keys)
}
