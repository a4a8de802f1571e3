package tests

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// kvKey is one cache key of the workload and the size of its object.
type kvKey struct {
	key  string
	size int
}

// workloadKeys makes n keys in LMCache's format, every fourth one too
// long for a file name, sized minSize..maxSize; three in four sizes are
// 4 KiB-aligned (O_DIRECT-able), the rest end mid-block.
func workloadKeys(n, minSize, maxSize int) []kvKey {
	r := rand.New(rand.NewPCG(7, 11))
	keys := make([]kvKey, n)
	for i := range keys {
		k := fmt.Sprintf("vllm@meta-llama--Llama-3.1-8B@1@0@%016x", r.Uint64())
		if i%4 == 3 {
			k = fmt.Sprintf("vllm@%s@1@0@%016x", strings.Repeat("very-long-model-name-", 14), r.Uint64())
		}
		size := minSize + r.IntN((maxSize-minSize)/4096+1)*4096
		if i%4 == 1 {
			size -= 1 + r.IntN(4095)
		}
		keys[i] = kvKey{k, size}
	}
	return keys
}

// counters is what the concurrent workload did.
type counters struct {
	storeTries                                    progress // readers, deleters and df act every so many
	stored, present, enospc, lostPublish          atomic.Int64
	lookups, hits, loads, loadMisses, bytesLoaded atomic.Int64
	deletes, deleteMisses, maxDf                  atomic.Int64
	// keys: each key's stores in flight and done, so a deleter can tell
	// a store that landed between its two unlinks.
	keys sync.Map // string -> *keyStores
}

type keyStores struct{ inFlight, published atomic.Int64 }

func (c *counters) key(k string) *keyStores {
	ks, _ := c.keys.LoadOrStore(k, &keyStores{})
	return ks.(*keyStores)
}

// TestLMCacheFSNative runs fs_native's I/O from several writers, readers
// and deleters at once over a capacity far below the data, then restarts.
// No store may fail: no ENOSPC (the cache can always free the room: four
// writers of at most 12 MiB hold 48 MiB of 64), and no publish lost (the
// grace is an hour, and ends at the link, so a slow link on a busy
// machine is still covered); deletes that removed an object are counted
// apart from those that met ENOENT.
func TestLMCacheFSNative(t *testing.T) {
	const (
		capacity        = 64 * MiB
		writers         = 4
		readers         = 4
		deleters        = 2
		storesPerWriter = 16
	)
	dir := t.TempDir()
	mp, store := filepath.Join(dir, "mnt"), filepath.Join(dir, "store")
	os.Mkdir(mp, 0o755)
	flags := []string{"--store", store, "--capacity", "64MiB", "--grace", "1h"}
	d := startDaemon(t, mp, flags...)
	keys := workloadKeys(28, 4*MiB, 12*MiB)
	var total int64
	for _, k := range keys {
		total += int64(k.size)
	}
	t.Logf("%d keys, %d MiB of distinct objects over a %d MiB capacity", len(keys), total/MiB, capacity/MiB)

	var c counters
	seq := &atomic.Int64{}
	start := time.Now()

	var others sync.WaitGroup
	others.Go(func() { c.storeTries.every(1, func() { sampleDf(t, mp, capacity, &c) }) })
	for r := range readers {
		others.Go(func() { fsNativeReader(t, &fsNative{base: mp, seq: seq}, keys, r, &c) })
	}
	for r := range deleters {
		others.Go(func() { fsNativeDeleter(t, &fsNative{base: mp, seq: seq}, keys, r, &c) })
	}
	var ws sync.WaitGroup
	for w := range writers {
		cl := &fsNative{base: mp, direct: w >= 2, whole: w%2 == 1, seq: seq}
		buf := alignedBuffer(t, 12*MiB)
		ws.Go(func() { fsNativeWriter(t, cl, keys, w, storesPerWriter, buf, &c) })
	}
	ws.Wait()
	c.storeTries.end()
	others.Wait()
	elapsed := time.Since(start)

	st := assertQuietEqual(t, d)
	t.Logf("in %v: %d store attempts, %d written, %d already present, %d ENOSPC, %d lost publishes; "+
		"%d lookups, %d hits, %d loads verified (%d MiB), %d load misses; %d deletes, %d of absent keys; max df used %d MiB",
		elapsed.Round(time.Millisecond), c.storeTries.Load(), c.stored.Load(), c.present.Load(), c.enospc.Load(),
		c.lostPublish.Load(), c.lookups.Load(), c.hits.Load(), c.loads.Load(), c.bytesLoaded.Load()/MiB,
		c.loadMisses.Load(), c.deletes.Load(), c.deleteMisses.Load(), c.maxDf.Load()/MiB)
	t.Logf("kvfs stats: %+v", st)
	if n := c.enospc.Load(); n != 0 {
		t.Errorf("%d of %d stores failed with ENOSPC", n, c.storeTries.Load())
	}
	if n := c.lostPublish.Load(); n != 0 {
		t.Errorf("%d of %d temp files were evicted before their link", n, c.storeTries.Load())
	}
	if c.stored.Load() == 0 || c.loads.Load() == 0 || st.Evictions == 0 || c.deletes.Load() == 0 {
		t.Errorf("workload did not exercise the cache: %d stored, %d loads, %d evictions, %d deletes",
			c.stored.Load(), c.loads.Load(), st.Evictions, c.deletes.Load())
	}
	if st.AdmissionFailures < c.enospc.Load() {
		t.Errorf("admission_failures %d, but clients saw %d ENOSPC", st.AdmissionFailures, c.enospc.Load())
	}

	before, tmps := scan(t, mp)
	if len(tmps) > 0 {
		t.Errorf("temp files left after every writer finished: %v", tmps)
	}
	if int64(len(before)) != st.Objects {
		t.Errorf("restart scan finds %d objects, kvfs stats says %d", len(before), st.Objects)
	}
	verifyScanned(t, mp, keys, before)

	d.stop()
	// Loads after the restart go through the daemon rather than FUSE
	// passthrough.
	d = startDaemon(t, mp, append(flags, "--no-passthrough")...)
	after, tmps := scan(t, mp)
	if len(tmps) > 0 {
		t.Errorf("temp files after restart: %v", tmps)
	}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("restart scan after remount differs:\nbefore %v\n after %v", before, after)
	}
	verifyScanned(t, mp, keys, after)
	if st2 := assertQuietEqual(t, d); st2.UsedBytes != st.UsedBytes || st2.Objects != st.Objects {
		t.Errorf("after remount used %d objects %d, before %d and %d", st2.UsedBytes, st2.Objects, st.UsedBytes, st.Objects)
	}
	d.stop()
}

// sampleDf checks that df used is within the capacity, once per store
// tried while the workload runs.
func sampleDf(t *testing.T, mp string, capacity int64, c *counters) {
	if t.Failed() {
		return
	}
	used, err := dfUsed(mp)
	if err != nil {
		t.Errorf("statfs %s: %v", mp, err)
		return
	}
	if used > c.maxDf.Load() {
		c.maxDf.Store(used)
	}
	if used > capacity {
		t.Errorf("df used %d exceeds the capacity %d", used, capacity)
	}
}

func fsNativeWriter(t *testing.T, cl *fsNative, keys []kvKey, w, n int, buf []byte, c *counters) {
	r := rand.New(rand.NewPCG(uint64(w), 1))
	for range n {
		k := keys[r.IntN(len(keys))]
		data := buf[:k.size]
		fillObject(data, k.key)
		c.storeTries.Add(1)
		ks := c.key(k.key)
		ks.inFlight.Add(1)
		wrote, err := cl.store(k.key, data)
		if err == nil && wrote {
			ks.published.Add(1)
		}
		ks.inFlight.Add(-1)
		switch {
		case err == nil && wrote:
			c.stored.Add(1)
		case err == nil:
			c.present.Add(1)
		case errors.Is(err, unix.ENOSPC):
			c.enospc.Add(1)
		case errors.Is(err, errLostPublish):
			c.lostPublish.Add(1)
		default:
			t.Errorf("writer %d: store %s: %v", w, k.key, err)
			return
		}
	}
}

func fsNativeReader(t *testing.T, cl *fsNative, keys []kvKey, id int, c *counters) {
	r := rand.New(rand.NewPCG(uint64(id), 2))
	// Reuse is skewed, as prefixes are: a hot few keys are read all the
	// time and the rest rarely, so the cold end of the LRU is not kept
	// warm by reads (each close restarts an object's grace period).
	zipf := rand.NewZipf(r, 1.3, 1, uint64(len(keys)-1))
	c.storeTries.every(1, func() {
		if t.Failed() {
			return
		}
		batch := make([]kvKey, 4)
		names := make([]string, len(batch))
		for i := range batch {
			batch[i] = keys[zipf.Uint64()]
			names[i] = batch[i].key
		}
		sizes, err := cl.lookup(names)
		c.lookups.Add(int64(len(names)))
		if err != nil {
			t.Errorf("reader %d: lookup: %v", id, err)
			return
		}
		for i, k := range batch {
			if sizes[i] < 0 {
				continue
			}
			c.hits.Add(1)
			if sizes[i] != int64(k.size) {
				t.Errorf("reader %d: stat %s: size %d, want %d", id, k.key, sizes[i], k.size)
				return
			}
			got, err := cl.load(k.key)
			if err != nil {
				t.Errorf("reader %d: load: %v", id, err)
				return
			}
			if got == nil {
				c.loadMisses.Add(1)
				continue
			}
			if err := checkObject(got, k.key, k.size); err != nil {
				t.Errorf("reader %d: load returned wrong bytes: %v", id, err)
				return
			}
			c.loads.Add(1)
			c.bytesLoaded.Add(int64(len(got)))
		}
	})
}

func fsNativeDeleter(t *testing.T, cl *fsNative, keys []kvKey, id int, c *counters) {
	r := rand.New(rand.NewPCG(uint64(id), 3))
	c.storeTries.every(4, func() {
		if t.Failed() {
			return
		}
		// fs_native's delete is unlink, ENOENT being success; only an
		// unlink that removed the object counts as a delete. The key is
		// one a lookup found, as a cache deletes what it holds.
		key := keys[r.IntN(len(keys))].key
		for i := range keys {
			if k := keys[(r.IntN(len(keys))+i)%len(keys)].key; unix.Stat(finalPath(cl.base, k), new(unix.Stat_t)) == nil {
				key = k
				break
			}
		}
		ks := c.key(key)
		published := ks.published.Load()
		switch err := unix.Unlink(finalPath(cl.base, key)); err {
		case nil:
			c.deletes.Add(1)
			// Two clients deleting one key: the second meets ENOENT,
			// unless a writer stored the key again in between.
			err := unix.Unlink(finalPath(cl.base, key))
			if err == nil && (ks.inFlight.Load() > 0 || ks.published.Load() != published) {
				c.deletes.Add(1)
				return
			}
			if err != unix.ENOENT {
				t.Errorf("deleter %d: second unlink of %s: %v, want ENOENT (no store of it in between)", id, key, err)
				return
			}
			c.deleteMisses.Add(1)
		case unix.ENOENT:
			c.deleteMisses.Add(1)
		default:
			t.Errorf("deleter %d: %v", id, err)
			return
		}
	})
}

// verifyScanned loads every object a restart scan found and checks it is
// one of the keys, complete and exact.
func verifyScanned(t *testing.T, base string, keys []kvKey, objs []scanned) {
	t.Helper()
	byPath := map[string]kvKey{}
	for _, k := range keys {
		rel, _ := filepath.Rel(base, finalPath(base, k.key))
		byPath[rel] = k
	}
	cl := &fsNative{base: base}
	for _, o := range objs {
		k, ok := byPath[o.path]
		if !ok {
			t.Errorf("restart scan found %s, which no key maps to", o.path)
			continue
		}
		got, err := cl.load(k.key)
		if err == nil && got == nil {
			err = fmt.Errorf("%s vanished", o.path)
		}
		if err == nil {
			err = checkObject(got, k.key, k.size)
		}
		if err != nil {
			t.Errorf("object from the restart scan: %v", err)
		}
	}
}

// TestLMCacheLocalDisk drives local_disk's I/O: <key>.pt written straight
// (buffered, or one O_DIRECT write), read back with one read into a
// buffer, removed with ENOENT tolerated; more data than the capacity.
func TestLMCacheLocalDisk(t *testing.T) {
	t.Run("passthrough", func(t *testing.T) { testLocalDisk(t) })
	t.Run("no-passthrough", func(t *testing.T) { testLocalDisk(t, "--no-passthrough") })
}

func testLocalDisk(t *testing.T, flags ...string) {
	dir := t.TempDir()
	mp, store := filepath.Join(dir, "mnt"), filepath.Join(dir, "store")
	os.Mkdir(mp, 0o755)
	d := startDaemon(t, mp, append([]string{"--store", store, "--capacity", "24MiB", "--grace", "200ms"}, flags...)...)
	var keys []kvKey
	for _, k := range workloadKeys(16, 2*MiB, 6*MiB) {
		if len(k.key+".pt") <= 255 { // local_disk has no scheme for longer keys
			keys = append(keys, k)
		}
	}
	buf := alignedBuffer(t, 6*MiB)
	for i, k := range keys {
		data := buf[:k.size]
		fillObject(data, k.key)
		if err := localDiskWrite(filepath.Join(mp, k.key+".pt"), data, i%2 == 1); err != nil {
			t.Fatalf("local_disk write %d (%d bytes): %v", i, k.size, err)
		}
	}
	present := 0
	for i, k := range keys {
		got, err := localDiskRead(filepath.Join(mp, k.key+".pt"), buf)
		switch {
		case errors.Is(err, unix.ENOENT):
			if i == len(keys)-1 {
				t.Errorf("the most recently written object %d was evicted", i)
			}
		case err != nil:
			t.Errorf("local_disk read %d: %v", i, err)
		default:
			present++
			if err := checkObject(got, k.key, k.size); err != nil {
				t.Errorf("local_disk read %d: %v", i, err)
			}
		}
	}
	st := assertQuietEqual(t, d)
	t.Logf("%d of %d objects still present; %d evictions, %d bytes used", present, len(keys), st.Evictions, st.UsedBytes)
	if st.Evictions == 0 || present == 0 || int64(present) != st.Objects {
		t.Errorf("%d present, stats %+v", present, st)
	}
	for _, k := range keys {
		for range 2 { // the second remove meets ENOENT
			if err := os.Remove(filepath.Join(mp, k.key+".pt")); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("remove: %v", err)
			}
		}
	}
	if st := assertQuietEqual(t, d); st.UsedBytes != 0 || st.Objects != 0 {
		t.Errorf("after removing everything: %+v", st)
	}
	d.stop()
}
