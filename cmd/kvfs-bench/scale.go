package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// The scale rows: what the object count costs. Over the restart store
// (--restart-objects, a million by default) and a store of scaleBase
// objects built the same way, each round mounts each store afresh (its
// metadata and the sampled objects' bytes in the page cache), waits for
// its start-up audit, and times, single-threaded, over as many names in
// each: lookups (the first stat of a name in the mount: a LOOKUP each),
// stats of those names again, loads (open, read, close) and fs_native
// stores of new objects (removed after, so the stores stay as built).
// The large store's rates are held to within 10% of the small one's.
// The same passes run first on each store's own directory (data/),
// before it is mounted, as rows without a bar: how much of a drop at
// the larger size the disk and the kernel's caches make without kvfs.
// Then every name of the large store is looked up (several threads, as
// `find` does) and the daemon's RSS divided by the objects: the memory a
// node pays per object once its clients have touched them all. Each
// mount serves while its index loads, the load held ($KVFS_LOAD_GATE)
// until the same loads have been timed through it: what a node serves
// in the minute after a restart at ten million objects.

// scaleBase is the object count the large store's rates are held to.
const scaleBase = 10_000

// scaleSample is how many names each timed pass touches.
const scaleSample = 5_000

// scaleRSSBar is the spec's bar on RSS per object after a full lookup,
// which it sets at scaleRSSAt objects: below that the runtime's fixed
// headroom (the collector's 64 MiB floor) weighs more per object, 67 B
// at a million, and the row is shown without the bar.
const (
	scaleRSSBar = 300
	scaleRSSAt  = 10_000_000
)

// scaleAuditWait bounds the wait for a start's audit.
const scaleAuditWait = 10 * time.Minute

// scaleSamples is one round over one store.
type scaleSamples struct {
	kvfs scaleRates
	// The same passes on the store's own directory (data/), before
	// mounting it: what the disk and the kernel's caches give at that
	// size without kvfs, the floor under kvfs's rows.
	plain scaleRates
	audit time.Duration
	// loading and storing are the loads' and the stores' rates while
	// the index loads (held).
	loading, storing float64
}

// scaleRates are one set of timed passes over a directory tree, in
// operations per second.
type scaleRates struct{ lookup, stat, load, store float64 }

// scaleRows adds the scale rows; big is the restart store, mp a free
// mount point.
func (b *bench) scaleRows(big *restartStore, mp string) error {
	small := newRestartStore(filepath.Join(b.cfg.restartParent, fmt.Sprintf("kvfs-bench-restart-%d", scaleBase)), scaleBase)
	if big.n <= scaleBase {
		b.skipRow("scale", fmt.Sprintf("the restart store has %d objects, not more than the %d the rates are held to", big.n, scaleBase))
		return nil
	}
	if _, err := small.ensure(b); err != nil {
		return fmt.Errorf("building the %d-object store: %w", scaleBase, err)
	}
	var rates [2][]scaleSamples // [0] small, [1] big
	var rss, audits []float64
	for r := 0; r < b.cfg.restartRounds; r++ {
		for i, s := range []*restartStore{small, big} {
			smp, perObject, err := b.scaleRound(s, mp, i == 1 && r == 0)
			if err != nil {
				return err
			}
			rates[i] = append(rates[i], smp)
			if perObject > 0 {
				rss = append(rss, perObject)
			}
			if i == 1 {
				audits = append(audits, smp.audit.Seconds())
			}
			b.progress("scale round %d/%d, %s objects: start-up audit %.1fs, then lookup %.0f/s, stat %.0f/s, load %.0f/s, store %.0f/s",
				r+1, b.cfg.restartRounds, count(s.n), smp.audit.Seconds(), smp.kvfs.lookup, smp.kvfs.stat, smp.kvfs.load, smp.kvfs.store)
		}
	}
	objs := count(big.n) + " objects"
	b.absRow("scale, "+objs+": start-up audit, mount to done (background)", "s", audits, 0, "")
	if big.n >= scaleRSSAt {
		b.absRow("scale, "+objs+": daemon RSS after every name was looked up, per object", "B/object", rss, scaleRSSBar, "")
	} else {
		b.absRow("scale, "+objs+": daemon RSS after every name was looked up, per object", "B/object", rss, 0,
			fmt.Sprintf("the bar, %d B an object, is at %s objects; below, the collector's fixed 64 MiB headroom weighs %.0f B an object here",
				scaleRSSBar, count(scaleRSSAt), float64(64<<20)/float64(big.n)))
	}
	for _, m := range []struct {
		name string
		get  func(scaleSamples) float64
	}{
		{"lookup (first stat of a name)", func(s scaleSamples) float64 { return s.kvfs.lookup }},
		{"stat of a looked-up name", func(s scaleSamples) float64 { return s.kvfs.stat }},
		{"load (open, read 64 B, close)", func(s scaleSamples) float64 { return s.kvfs.load }},
		{"fs_native store of 4 KiB", func(s scaleSamples) float64 { return s.kvfs.store }},
	} {
		var lo, hi []float64
		for i := range rates[1] {
			lo, hi = append(lo, m.get(rates[0][i])), append(hi, m.get(rates[1][i]))
		}
		b.scaleRow(fmt.Sprintf("scale, %s at %s vs %s objects", m.name, objs, count(scaleBase)), lo, hi)
	}
	for _, m := range []struct {
		what            string
		loaded, loading func(scaleSamples) float64
	}{
		{"load", func(s scaleSamples) float64 { return s.kvfs.load }, func(s scaleSamples) float64 { return s.loading }},
		{"fs_native store of 4 KiB", func(s scaleSamples) float64 { return s.kvfs.store }, func(s scaleSamples) float64 { return s.storing }},
	} {
		var loaded, loading []float64
		for _, s := range rates[1] {
			if m.loading(s) > 0 {
				loaded, loading = append(loaded, m.loaded(s)), append(loading, m.loading(s))
			}
		}
		name := fmt.Sprintf("scale, %s while the index loads vs once loaded, at %s", m.what, objs)
		if len(loading) == 0 {
			b.skipRow(name, "the store was loaded before it was served (no checkpoint or hint of its count yet)")
			continue
		}
		b.scaleRow(name, loaded, loading)
		r := b.rows[len(b.rows)-1]
		r.Bar, r.Result = "", "INFO"
		r.Note = "plain column: the same once loaded; kvfs column: the same mount before its index was built (held)"
	}
	for _, m := range []struct {
		name string
		get  func(scaleRates) float64
	}{
		{"stat", func(s scaleRates) float64 { return s.stat }},
		{"load (open, read 64 B, close)", func(s scaleRates) float64 { return s.load }},
		{"fs_native store of 4 KiB", func(s scaleRates) float64 { return s.store }},
	} {
		var lo, hi []float64
		for i := range rates[1] {
			lo, hi = append(lo, m.get(rates[0][i].plain)), append(hi, m.get(rates[1][i].plain))
		}
		b.scaleRow(fmt.Sprintf("  the store's own directory, no kvfs: %s at %s vs %s objects", m.name, objs, count(scaleBase)), lo, hi)
		r := b.rows[len(b.rows)-1]
		r.Bar, r.Result = "", "INFO"
		r.Note = "plain column: the " + count(scaleBase) + "-object store's data/, kvfs column: the large one's, each before it is mounted"
	}
	return nil
}

// scaleRow adds a row of the large store's rate against the small
// one's: the ratio of the medians, at least 0.9 to pass.
func (b *bench) scaleRow(name string, small, big []float64) {
	r := &row{Workload: name, Unit: "ops/s", HigherIsBetter: true, Plain: small, Kvfs: big,
		PlainMedian: median(small), KvfsMedian: median(big), Bar: ">= 0.90 of the small store's"}
	r.Ratio = throughputRatio(r.KvfsMedian, r.PlainMedian, true)
	var paired []float64
	for i := range min(len(small), len(big)) {
		paired = append(paired, throughputRatio(big[i], small[i], true))
	}
	r.PairedRatio = median(paired)
	r.Spread = spread(paired, "%.2f")
	r.Note = "plain column: the " + count(scaleBase) + "-object store"
	r.Result = passFail(r.Ratio >= 0.9)
	b.rows = append(b.rows, r)
}

// scaleRound mounts store s, times its passes and, when full is set,
// looks every name up and returns the daemon's RSS per object.
func (b *bench) scaleRound(s *restartStore, mp string, full bool) (scaleSamples, float64, error) {
	var smp scaleSamples
	// The store's metadata and the sample's bytes cached first, in both
	// stores alike (the restarts before dropped the caches): the rows
	// compare kvfs at two sizes, not a cold disk with a warm one.
	if err := s.warm(b); err != nil {
		return smp, 0, err
	}
	buf := make([]byte, restartObjSize)
	for i := range scaleSample {
		if err := readWhole(filepath.Join(s.store, "data", s.sampled(i)), buf); err != nil {
			return smp, 0, err
		}
	}
	var err error
	if smp.plain, err = s.passes(filepath.Join(s.store, "data"), buf); err != nil {
		return smp, 0, fmt.Errorf("on the store's own directory: %w", err)
	}
	gate := filepath.Join(s.root, "load-gate")
	os.Remove(gate)
	if err := unix.Mkfifo(gate, 0o600); err != nil {
		return smp, 0, err
	}
	defer os.Remove(gate)
	capacity, err := loadingCapacity(s.store, max(b.cfg.capacity, int64(s.n)*2*4096))
	if err != nil {
		return smp, 0, err
	}
	d, err := startDaemonEnv([]string{"KVFS_LOAD_GATE=" + gate}, b.bin, s.store, mp, capacity, "--serve-while-loading", "1")
	if err != nil {
		return smp, 0, err
	}
	defer d.stop()
	opened, started := make(chan struct{}), false
	defer func() {
		select {
		case <-opened:
		default:
			// Without blocking: a load still held is let go (so the
			// daemon can stop), and the goroutine's open freed if the
			// daemon never came.
			flags := os.O_RDONLY
			if !started {
				flags = os.O_WRONLY
			}
			if g, err := os.OpenFile(gate, flags|unix.O_NONBLOCK, 0); err == nil {
				g.Close()
			}
		}
	}()
	if err := d.waitMounted(b.cfg.mountTimeout); err != nil {
		return smp, 0, err
	}
	if smp.loading, err = s.loads(mp, buf); err != nil {
		return smp, 0, fmt.Errorf("loads while the index loads: %w", err)
	}
	if smp.storing, err = s.stores(mp); err != nil {
		return smp, 0, fmt.Errorf("stores while the index loads: %w", err)
	}
	// Only now is the load let go: opening the FIFO's other end, which
	// the daemon opens once it serves (or never, if it loaded first or
	// exited).
	started = true
	go func() {
		defer close(opened)
		if g, err := os.OpenFile(gate, os.O_WRONLY, 0); err == nil {
			g.Close()
		}
	}()
	select {
	case <-opened:
	case <-d.ready:
		select {
		case <-opened:
		default:
			// A store that expects fewer objects than 1 (no checkpoint
			// or hint yet) loads before it serves: nothing was held.
			smp.loading, smp.storing = 0, 0
		}
	case <-d.exited:
		return smp, 0, fmt.Errorf("kvfs mount exited (%v):\n%s", d.waitErr, tail(d.Log(), 2000))
	}
	// A start from the checkpoint audits every stored file in the
	// background: the rates are a node's once that is done.
	start := time.Now()
	select {
	case <-d.audited:
		smp.audit = time.Since(start)
	case <-d.exited:
		return smp, 0, fmt.Errorf("kvfs mount exited (%v):\n%s", d.waitErr, tail(d.Log(), 2000))
	case <-time.After(scaleAuditWait):
		return smp, 0, fmt.Errorf("no start-up audit done %v after mounting %s", scaleAuditWait, s.store)
	}
	if smp.kvfs, err = s.passes(mp, buf); err != nil || !full {
		return smp, 0, err
	}
	if err := s.statEach(b, mp); err != nil {
		return smp, 0, err
	}
	return smp, float64(d.rssBytes()) / float64(s.n), nil
}

// passes times, over the same count of names in each store spread over
// all of it, under root (a mount of the store, or its data/): a stat of
// each (the first: a lookup through a mount), a second stat, a load
// (open, read, close), and fs_native stores into as many directories in
// each store (the small store's count), removed after so the stores stay
// as built.
func (s *restartStore) passes(root string, buf []byte) (scaleRates, error) {
	var got scaleRates
	names := make([]string, scaleSample)
	for i := range names {
		names[i] = filepath.Join(root, s.sampled(i))
	}
	var st unix.Stat_t
	statAll := func() error {
		for _, p := range names {
			if err := unix.Stat(p, &st); err != nil {
				return fmt.Errorf("stat %s: %w", p, err)
			}
		}
		return nil
	}
	var err error
	if got.lookup, err = rate(len(names), statAll); err != nil {
		return got, err
	}
	if got.stat, err = rate(len(names), statAll); err != nil {
		return got, err
	}
	if got.load, err = s.loads(root, buf); err != nil {
		return got, err
	}
	got.store, err = s.stores(root)
	return got, err
}

// stores times fs_native stores of 4 KiB under root, into as many
// directories in each store (the small store's count), and removes them
// after, so the stores stay as built.
func (s *restartStore) stores(root string) (float64, error) {
	dirs := newRestartStore("", scaleBase).dirs
	stored := make([]string, scaleSample)
	for i := range stored {
		stored[i] = filepath.Join(root, fmt.Sprintf("d%03d", i%dirs), fmt.Sprintf("scale-%08d.data", i))
	}
	data := make([]byte, 4096)
	r, err := rate(len(stored), func() error {
		for _, p := range stored {
			if err := storeNative(p, data); err != nil {
				return err
			}
		}
		return nil
	})
	for _, p := range stored {
		if uerr := unlinkTolerant(p); uerr != nil && err == nil {
			err = uerr
		}
	}
	return r, err
}

// loads times a load (open, read, close) of each sampled name under root.
func (s *restartStore) loads(root string, buf []byte) (float64, error) {
	return rate(scaleSample, func() error {
		for i := range scaleSample {
			if err := readWhole(filepath.Join(root, s.sampled(i)), buf); err != nil {
				return err
			}
		}
		return nil
	})
}

// sampled is the i-th of the scaleSample names each pass touches,
// spread evenly over the whole store.
func (s *restartStore) sampled(i int) string { return s.name(i * (s.n / scaleSample)) }

// rate runs pass, which does n operations, and returns their rate.
func rate(n int, pass func() error) (float64, error) {
	start := time.Now()
	if err := pass(); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// loadingCapacity is at least capacity, and a GiB more than what the
// store's disk holds: stores while the index loads take at most the
// capacity less that (other files too: the bench shares its disk).
func loadingCapacity(store string, capacity int64) (int64, error) {
	var sf unix.Statfs_t
	if err := unix.Statfs(store, &sf); err != nil {
		return 0, err
	}
	return max(capacity, int64(sf.Blocks-sf.Bfree)*sf.Bsize+1<<30), nil
}
