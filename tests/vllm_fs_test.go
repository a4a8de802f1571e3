package tests

// vLLM's native KV offloading, its file system tier
// (vllm/v1/kv_offload/tiering/fs/: FileSystemTierManager in manager.py,
// store_block/load_block/probe_o_direct in io.py, FileMapper in
// file_mapper.py), syscall for syscall: a config.json under
// <root>/<model>_<12 hex>/, an O_DIRECT probe file there, then one file
// per chunk of KV blocks at <base>_r<rank>/<hhh>/<hh>_g<group>/<hash>.bin.
// Store: exists() -> skip; makedirs; open(<dest>_<random>.tmp,
// O_CREAT|O_EXCL|O_WRONLY|O_TRUNC|O_DIRECT, 0644); one write; close;
// os.replace. Lookup: faccessat (or os.path.exists) of the path. Load:
// open(O_RDONLY|O_DIRECT), one readv; a failed load removes the file.
// No deletes and no scan: after a restart lookups simply find the files.

import (
	"crypto/sha256"
	"encoding/hex"
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

// vllmFsTier is one worker's file system tier under root.
type vllmFsTier struct {
	base string // <root>/<model>_<digest>
	rank int
}

func newVLLMFsTier(t *testing.T, root string) *vllmFsTier {
	t.Helper()
	fields := `{"dtype":"bfloat16","hash_block_size":16,"model_name":"meta-llama/Llama-3.1-8B-Instruct","tp_size":1}`
	sum := sha256.Sum256([]byte(fields))
	v := &vllmFsTier{base: filepath.Join(root, "meta-llama_Llama-3.1-8B-Instruct_"+hex.EncodeToString(sum[:])[:12])}
	if err := os.MkdirAll(v.base, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(v.base, "config.json")
	if _, err := os.Stat(cfg); errors.Is(err, os.ErrNotExist) {
		putFile(t, cfg, []byte(fields+"\n"))
	}
	if !v.probeODirect(t) {
		t.Fatalf("O_DIRECT probe failed on kvfs: vLLM would fall back to buffered I/O")
	}
	return v
}

// probeODirect is probe_o_direct: create, write one aligned page with
// O_DIRECT, close, remove.
func (v *vllmFsTier) probeODirect(t *testing.T) bool {
	path := filepath.Join(v.base, fmt.Sprintf(".o_direct_probe_%d.tmp", rand.Int64()))
	page := alignedBuffer(t, 4096)
	defer os.Remove(path)
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC|unix.O_DIRECT, 0o644)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, page)
	return err == nil
}

func (v *vllmFsTier) path(hash string, group int) string {
	return fmt.Sprintf("%s_r%d/%s/%s_g%d/%s.bin", v.base, v.rank, hash[:3], hash[3:5], group, hash)
}

// lookup is faccessat(F_OK).
func (v *vllmFsTier) lookup(hash string) bool {
	return unix.Faccessat(unix.AT_FDCWD, v.path(hash, 0), unix.F_OK, 0) == nil
}

// store is store_block; tmpSuffix is the writing thread's own.
func (v *vllmFsTier) store(hash, tmpSuffix string, block []byte) (bool, error) {
	dest := v.path(hash, 0)
	if _, err := os.Stat(dest); err == nil {
		return false, nil
	}
	tmp := dest + tmpSuffix
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return false, err
	}
	fd, err := unix.Open(tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_TRUNC|unix.O_DIRECT, 0o644)
	if err != nil {
		return false, fmt.Errorf("open %s: %w", tmp, err)
	}
	n, err := unix.Write(fd, block)
	if err == nil && n < len(block) {
		err = fmt.Errorf("short write %d of %d", n, len(block))
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Rename(tmp, dest)
	}
	if err != nil {
		unix.Unlink(tmp)
		return false, err
	}
	return true, nil
}

// load is load_block: a failed or short read removes the file. A file
// already gone (evicted after the lookup) is a miss.
func (v *vllmFsTier) load(hash string, buf []byte) (bool, error) {
	path := v.path(hash, 0)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err == nil {
		var n int
		n, err = unix.Readv(fd, [][]byte{buf})
		unix.Close(fd)
		if err == nil && n < len(buf) {
			err = fmt.Errorf("short read %d of %d", n, len(buf))
		}
	}
	if err != nil {
		os.Remove(path)
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// TestVLLMFsTierReplay: four writer threads store 80 MiB of 2 MiB
// O_DIRECT chunks into a 32 MiB mount while two loaders look up and load
// them; every load is whole and byte-exact or a miss, loads succeed while
// the writers run, and a lookup that found a chunk misses at its load
// only if an eviction took it between the two; accounting is exact with
// no temp file left; after a restart lookups find exactly the chunks
// kvfs kept, and they load byte for byte.
func TestVLLMFsTierReplay(t *testing.T) {
	const blockSize, blocks, writers, loaders = 2 * MiB, 40, 4, 2
	d := mountCache(t, "--capacity", "32MiB", "--grace", "500ms")
	v := newVLLMFsTier(t, d.mp)
	hashes := pageKeys(blocks, "vllm")
	var stored, loaded, misses atomic.Int64
	var done atomic.Bool
	var wg, lw sync.WaitGroup
	for w := range writers {
		buf := alignedBuffer(t, blockSize)
		suffix := fmt.Sprintf("_%d.tmp", rand.Int64())
		wg.Go(func() {
			for i := w; i < blocks; i += writers {
				fillObject(buf, hashes[i])
				did, err := v.store(hashes[i], suffix, buf)
				if err != nil {
					t.Errorf("store %d: %v", i, err)
				} else if did {
					stored.Add(1)
				}
			}
		})
	}
	for l := range loaders {
		buf := alignedBuffer(t, blockSize)
		r := rand.New(rand.NewPCG(uint64(l), 3))
		lw.Go(func() {
			for !done.Load() {
				h := hashes[r.IntN(blocks)]
				if !v.lookup(h) {
					continue
				}
				ok, err := v.load(h, buf)
				switch {
				case err != nil:
					t.Errorf("load %s: %v", h[:8], err)
				case !ok:
					misses.Add(1)
				default:
					loaded.Add(1)
					if err := checkObject(buf, h, blockSize); err != nil {
						t.Errorf("load: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	done.Store(true)
	lw.Wait()
	st := assertQuietEqual(t, d)
	t.Logf("%d chunks stored, %d loads verified, %d lookups that missed at load; kvfs: %d objects, %d evictions",
		stored.Load(), loaded.Load(), misses.Load(), st.Objects, st.Evictions)
	if loaded.Load() == 0 {
		t.Errorf("no load succeeded while the writers ran (%d misses)", misses.Load())
	}
	if misses.Load() > st.Evictions {
		t.Errorf("%d loads of chunks a lookup had just found missed, but kvfs evicted only %d", misses.Load(), st.Evictions)
	}
	if stored.Load() != blocks || st.Evictions == 0 {
		t.Fatalf("stored %d of %d chunks, %d evictions", stored.Load(), blocks, st.Evictions)
	}
	before := vllmCheck(t, v, hashes, blockSize)
	if before == 0 {
		t.Errorf("after the run lookups find no chunk of %d stored in a 32 MiB cache", blocks)
	}
	if want := st.Objects - vllmConfigHeld(v); int64(before) != want {
		t.Errorf("lookups find %d chunks, kvfs holds %d objects besides config.json", before, want)
	}
	d.stop()
	d = startDaemon(t, d.mp, "--store", d.store, "--capacity", "32MiB")
	if after := vllmCheck(t, v, hashes, blockSize); after != before {
		t.Errorf("after a restart lookups find %d chunks, before %d", after, before)
	}
	assertQuietEqual(t, d)
	d.stop()
}

// vllmCheck looks up every chunk, loads those found byte for byte, and
// requires no temp file anywhere; it returns how many were found.
func vllmCheck(t *testing.T, v *vllmFsTier, hashes []string, blockSize int) int {
	t.Helper()
	buf := alignedBuffer(t, blockSize)
	found := 0
	for _, h := range hashes {
		if !v.lookup(h) {
			continue
		}
		ok, err := v.load(h, buf)
		if err != nil || !ok {
			t.Errorf("chunk %s found by lookup but not loaded: %v", h[:8], err)
			continue
		}
		if err := checkObject(buf, h, blockSize); err != nil {
			t.Error(err)
		}
		found++
	}
	filepath.WalkDir(filepath.Dir(v.base), func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".tmp") {
			t.Errorf("temp file left: %s", p)
		}
		return nil
	})
	return found
}

// vllmConfigHeld is 1 if config.json is still there: it is an object
// like any other, and the oldest, so eviction takes it first; vLLM only
// writes it (when absent, at start-up) and never reads it back.
func vllmConfigHeld(v *vllmFsTier) int64 {
	if _, err := os.Stat(filepath.Join(v.base, "config.json")); err == nil {
		return 1
	}
	return 0
}
