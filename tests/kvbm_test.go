package tests

// NVIDIA Dynamo KVBM's disk tier (G3), DiskStorage::new and
// allocate_file in ai-dynamo/dynamo lib/llm/src/block_manager/storage/disk.rs
// at commit 1fe5a66103831e0892cee212d71a97aa95838cb3, syscall for
// syscall: one large pool file per worker, made with mkostemp
// ("dynamo-kvbm-disk-cache-XXXXXX" in $DYN_KVBM_DISK_CACHE_DIR: open
// O_RDWR|O_CREAT|O_EXCL|O_CLOEXEC, 0600), switched to O_DIRECT with
// fcntl(F_GETFL/F_SETFL) (a failure there closes and unlinks), sized with
// fallocate(fd, 0, 0, size) (EOPNOTSUPP falls back to ftruncate), then
// registered with NIXL and unlinked: the pool lives as an open, unlinked
// file until the process exits. When fallocate fails otherwise (ENOSPC),
// allocate_file's error is returned by `?` at once: the descriptor stays
// open and the mkostemp file stays linked, as they are. Blocks are
// page-aligned pwrite/pread at block offsets inside the pool (NIXL's
// POSIX backend). Nothing survives a restart.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// kvbmPool is one worker's G3 pool file.
type kvbmPool struct {
	fd   int
	path string
}

// openKVBMPool is DiskStorage::new(size) up to the unlink. When
// fallocate fails it returns the pool as KVBM leaves it (descriptor
// open, file linked) with the error.
func openKVBMPool(dir string, size int64) (*kvbmPool, error) {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	name := []byte("dynamo-kvbm-disk-cache-XXXXXX")
	for i := len(name) - 6; i < len(name); i++ {
		name[i] = letters[rand.IntN(len(letters))]
	}
	path := filepath.Join(dir, string(name))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("mkostemp: %w", err)
	}
	p := &kvbmPool{fd: fd, path: path}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags|unix.O_DIRECT)
	}
	if err != nil {
		p.drop()
		return nil, err
	}
	if err := unix.Fallocate(fd, 0, 0, size); err == unix.EOPNOTSUPP {
		if err := unix.Ftruncate(fd, size); err != nil {
			return p, err
		}
	} else if err != nil {
		return p, err // no close, no unlink: disk.rs returns early
	}
	return p, nil
}

// drop is what a failed fcntl and Drop do: close, unlink.
func (p *kvbmPool) drop() {
	unix.Close(p.fd)
	unix.Unlink(p.path)
}

// TestKVBMDiskTierReplay: a pool larger than the capacity fails with
// EFBIG evicting nothing, and what KVBM leaves behind (its descriptor
// open, an empty file linked) costs nothing and stays an empty object
// after the worker exits; a 32 MiB G3 pool on a 64 MiB mount holding
// 48 MiB of other objects: fallocate makes room by evicting the oldest
// (the pool is charged in full at once), the unlinked pool stays charged
// as shadow bytes while open, blocks written and read back with O_DIRECT
// at their offsets are exact, closing releases the charge once.
func TestKVBMDiskTierReplay(t *testing.T) {
	const poolSize, blockSize = 32 * MiB, 1 * MiB
	d := mountCache(t, "--capacity", "64MiB", "--grace", "0s")
	for i := range 12 {
		putFile(t, filepath.Join(d.mp, fmt.Sprint("other-", i)), objectBytes(fmt.Sprint("other-", i), 4*MiB))
	}
	before := assertQuietEqual(t, d)

	leaked, err := openKVBMPool(d.mp, 65*MiB)
	if err != unix.EFBIG || leaked == nil {
		t.Fatalf("a pool larger than the capacity: %v, want EFBIG (docs/bad-input.md)", err)
	}
	var lst unix.Stat_t
	if err := unix.Fstat(leaked.fd, &lst); err != nil || lst.Size != 0 || lst.Nlink != 1 {
		t.Fatalf("the refused pool's file: size %d, %d links, %v; want empty, still linked", lst.Size, lst.Nlink, err)
	}
	// Its descriptor is an open writer's: charged its reservation, shown
	// (the stats child's exec closes its copy, which hides nothing).
	if st := stats(t, d.mp); st.Evictions != before.Evictions || st.UsedBytes != before.UsedBytes+st.ReservedBytes || st.KeptBytes != 0 || st.Objects != before.Objects+1 {
		t.Fatalf("a refused pool: before %+v, after %+v; want nothing evicted, nothing charged but an open writer's reservation, its empty file an object", before, st)
	}
	unix.Close(leaked.fd) // the worker exits; nobody unlinks the file
	if st := assertQuietEqual(t, d); st.Evictions != before.Evictions || st.UsedBytes != before.UsedBytes || st.Objects != before.Objects+1 {
		t.Fatalf("after the refused worker exits: before %+v, after %+v", before, st)
	}

	p, err := openKVBMPool(d.mp, poolSize)
	if err != nil {
		t.Fatalf("allocating the G3 pool on kvfs: %v", err)
	}
	defer unix.Close(p.fd)
	st := stats(t, d.mp)
	if st.Evictions <= before.Evictions || st.UsedBytes > st.CapacityBytes || st.PinnedBytes < poolSize {
		t.Fatalf("after fallocate of the pool: %+v (before %+v); want evictions, the pool pinned, used within capacity", st, before)
	}
	if err := unix.Unlink(p.path); err != nil {
		t.Fatalf("unlinking the registered pool: %v", err)
	}
	kvbmBlocks(t, p.fd, poolSize/blockSize, blockSize)
	st = stats(t, d.mp)
	du, _ := duCommand(d.mp)
	if st.ShadowBytes != poolSize || st.UsedBytes != du+poolSize {
		t.Errorf("open unlinked pool: shadow %d (want %d), used %d, du %d", st.ShadowBytes, poolSize, st.UsedBytes, du)
	}

	unix.Close(p.fd)
	after := assertQuietEqual(t, d)
	if after.UsedBytes != du {
		t.Errorf("after the worker exits: used %d, want %d (the other objects)", after.UsedBytes, du)
	}
	d.stop()
	d = startDaemon(t, d.mp, "--store", d.store, "--capacity", "64MiB")
	if st := assertQuietEqual(t, d); st.Objects != after.Objects {
		t.Errorf("after a restart %d objects, before %d", st.Objects, after.Objects)
	}
	ents, _ := os.ReadDir(d.mp)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "dynamo-kvbm-disk-cache-") && e.Name() != filepath.Base(leaked.path) {
			t.Errorf("the pool came back after a restart: %s", e.Name())
		}
	}
	d.stop()
}

// kvbmBlocks writes every block of the pool at its offset in random
// order with O_DIRECT from an aligned buffer, then reads each back.
func kvbmBlocks(t *testing.T, fd, n, blockSize int) {
	t.Helper()
	buf := alignedBuffer(t, blockSize)
	order := rand.Perm(n)
	for _, b := range order {
		fillObject(buf, fmt.Sprint("block-", b))
		if w, err := unix.Pwrite(fd, buf, int64(b*blockSize)); err != nil || w != blockSize {
			t.Fatalf("pwrite block %d: %d, %v", b, w, err)
		}
	}
	for _, b := range order {
		if r, err := unix.Pread(fd, buf, int64(b*blockSize)); err != nil || r != blockSize {
			t.Fatalf("pread block %d: %d, %v", b, r, err)
		}
		if err := checkObject(buf, fmt.Sprint("block-", b), blockSize); err != nil {
			t.Fatalf("block %d: %v", b, err)
		}
	}
}
