package main

import (
	"fmt"
	"github.com/kvfs/kvfs/internal/usage"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

var (
	mWarm   = metric{name: "warm read 32MiB: open, 1 read(), close", unit: "MB/s", higher: true, bar: 0.95}
	mOpen   = metric{name: "  open+close of such an object, no read", unit: "us/op"}
	mKept   = metric{name: "  read() only, object kept open", unit: "MB/s", higher: true}
	mCold   = metric{name: "cold read 32MiB (caches dropped)", unit: "MB/s", higher: true, bar: 0.9}
	mStore  = metric{name: "fs_native store 32MiB, 1MiB writes", unit: "MB/s", higher: true, bar: 0.9}
	mMixW   = metric{name: "mixed: writers' aggregate", unit: "MB/s", higher: true, bar: 0.8, barTxt: " (store)", plainOnly: true}
	mMixR   = metric{name: "mixed: readers' aggregate", unit: "MB/s", higher: true, bar: 0.9, barTxt: " (read)", plainOnly: true}
	mMixT   = metric{name: "mixed: total", unit: "MB/s", higher: true}
	mStat   = metric{name: "stat of a known object", unit: "ns/op", bar: 1 / 1.5, barTxt: " (1.5x)"}
	mSmallU = metric{name: "small store (create, write 64KiB, close) + unlink", unit: "us/op", bar: 0.5, barTxt: " (2x*)"}
	mSmall  = metric{name: "  small store alone", unit: "us/op"}
	mUnlink = metric{name: "  unlink alone", unit: "us/op"}
)

// measure runs the selected workloads in order: the ones on mounts, the
// end-of-run accounting check, then (mounts stopped, so they do not
// compete for the CPUs) the in-process ledger and the restarts.
func (b *bench) measure() error {
	sizeName := fmt.Sprintf("%dMiB", b.cfg.objSize>>20)
	for _, m := range []*metric{&mWarm, &mCold, &mStore, &mDirect, &mDirectWrite, &mRemoteCold, &mRemotePub} {
		m.name = strings.Replace(m.name, "32MiB", sizeName, 1)
	}
	mMixW.name = fmt.Sprintf("mixed %dW+%dR: writers' aggregate", b.cfg.writers, b.cfg.readers)
	mMixR.name = fmt.Sprintf("mixed %dW+%dR: readers' aggregate", b.cfg.writers, b.cfg.readers)
	mMixT.name = fmt.Sprintf("mixed %dW+%dR: total (both share the CPUs)", b.cfg.writers, b.cfg.readers)
	mSmallU.name = fmt.Sprintf("small store (create, write %dKiB, close) + unlink", b.cfg.smallSize>>10)
	w := b.cfg.workloads
	if w["read"] || w["cold"] || w["mixed"] {
		if err := b.forEach("preparing read objects", b.prepareReads); err != nil {
			return err
		}
	}
	steps := []struct {
		key     string
		metrics []metric
		fn      func(*target, int) ([]float64, error)
	}{
		{"read", []metric{mWarm, mOpen, mKept}, b.warmRead},
		{"cold", []metric{mCold}, b.coldRead},
		{"store", []metric{mStore}, b.storeRound},
		{"mixed", []metric{mMixW, mMixR, mMixT}, b.mixed},
		{"stat", []metric{mStat}, b.statKnown},
		{"small", []metric{mSmallU, mSmall, mUnlink}, b.smallRound},
	}
	for _, s := range steps {
		if !w[s.key] {
			continue
		}
		if s.key == "cold" {
			if ok, why := canDropCaches(); !ok {
				b.skipRow(mCold.name, why)
				continue
			}
		}
		if s.key == "stat" {
			if err := b.forEach("preparing stat objects", b.prepareStats); err != nil {
				return err
			}
		}
		if err := b.compare(s.key, s.metrics, s.fn); err != nil {
			return err
		}
	}
	if w["direct"] {
		if err := b.directRows(); err != nil {
			return err
		}
	}
	if w["threads"] {
		if err := b.threadRows(); err != nil {
			return err
		}
	}
	b.ramCheck()
	if w["store"] || w["small"] {
		if err := b.requestRows(); err != nil {
			return err
		}
	}
	for _, t := range b.kvfs {
		b.accounting(t, true)
		b.stopTarget(t)
	}
	// Each group below starts with the disk quiet: what the ones before
	// wrote is on it, not still being written back.
	syncFS(b.work)
	if w["flood"] {
		if err := b.floodRows(); err != nil {
			return err
		}
	}
	for _, s := range []struct {
		key string
		fn  func() error
	}{{"overload", b.overloadRows}, {"turnover", b.turnoverRows}} {
		if w[s.key] {
			syncFS(b.work)
			if err := s.fn(); err != nil {
				return err
			}
		}
	}
	// The flood leaves the page cache full of its 3 GiB: the remote rows'
	// stores and the server's writes would then wait on reclaim. Start
	// them with memory free, as every group before them did (dropCaches
	// syncs every file system first, so the disk is quiet too).
	if w["remote"] {
		dropCaches()
		if err := b.remoteRows(); err != nil {
			return err
		}
	}
	if w["ledger"] {
		if err := b.ledgerRows(); err != nil {
			return err
		}
	}
	if w["handover"] {
		if err := b.handoverRows(); err != nil {
			return err
		}
	}
	if w["restart"] {
		return b.restartRows()
	}
	return nil
}

func (b *bench) forEach(what string, fn func(*target) error) error {
	b.progress("%s", what)
	for _, t := range b.all {
		if err := fn(t); err != nil {
			return fmt.Errorf("%s on %s: %w", what, t.name, err)
		}
	}
	return nil
}

// compare measures every target each round, the order rotated from
// round to round (plain, kvfs; kvfs, plain; ...) so that drift and
// order effects cancel, and adds a row per metric and kvfs target.
func (b *bench) compare(key string, ms []metric, fn func(*target, int) ([]float64, error)) error {
	samples := map[*target][][]float64{}
	for r := 0; r < b.cfg.rounds; r++ {
		for i := range b.all {
			t := b.all[(i+r)%len(b.all)]
			if !t.runs(key) {
				continue
			}
			if err := b.ctx.Err(); err != nil {
				return err
			}
			vs, err := fn(t, r)
			if err != nil {
				return fmt.Errorf("%s on %s, round %d: %w", ms[0].name, t.name, r+1, err)
			}
			samples[t] = append(samples[t], vs)
			var parts []string
			for j, m := range ms {
				parts = append(parts, fmt.Sprintf("%s %s", num(vs[j], true), m.unit))
			}
			b.progress("%s | round %d/%d %-9s %s", ms[0].name, r+1, b.cfg.rounds, t.name, strings.Join(parts, ", "))
		}
	}
	for j, m := range ms {
		for _, k := range b.kvfs {
			if !k.runs(key) {
				continue
			}
			b.pairRow(m, k.mode, column(samples[b.plain], j), column(samples[k], j), column(samples[b.loop], j))
		}
	}
	return nil
}

// ramCheck reports what the RAM tier of the kvfs-ram mount did.
func (b *bench) ramCheck() {
	for _, t := range b.kvfs {
		if t.mode != "ram" || t.d == nil {
			continue
		}
		st, err := t.d.stats()
		if err != nil || st.RAMCache == nil {
			b.check("FAIL %s: no RAM tier stats: %v", t.name, err)
			continue
		}
		r := st.RAMCache
		b.note("%s RAM tier: %d hits, %d misses, %d copies made, %d bytes held of %d", t.name,
			r.Hits, r.Misses, r.Fills, r.Bytes, r.CapacityBytes)
	}
}

func column(rows [][]float64, j int) []float64 {
	out := make([]float64, len(rows))
	for i, r := range rows {
		out[i] = r[j]
	}
	return out
}

// accounting checks the spec's drift equality on a mount with nothing
// open: used_bytes == df used == du of the mount == du of the store's
// data, and, for a quiet mount, that nothing was evicted or refused
// during the bench.
func (b *bench) accounting(t *target, quiet bool) {
	if t.d == nil {
		return
	}
	time.Sleep(200 * time.Millisecond) // FUSE release is asynchronous
	st, err := t.d.stats()
	if err != nil {
		b.check("FAIL %s: %v", t.name, err)
		return
	}
	duMount, err1 := usage.FileBlocks(t.root)
	duStore, err2 := usage.FileBlocks(filepath.Join(t.d.store, "data"))
	var sf unix.Statfs_t
	err3 := unix.Statfs(t.root, &sf)
	if err1 != nil || err2 != nil || err3 != nil {
		b.check("FAIL %s: du/df: %v %v %v", t.name, err1, err2, err3)
		return
	}
	df := int64(sf.Blocks-sf.Bfree) * sf.Frsize
	ok := st.UsedBytes == duMount && duMount == duStore && df == st.UsedBytes &&
		st.PinnedObjects == 0 && st.ShadowBytes == 0 && (!quiet || st.Evictions == 0 && st.AdmissionFailures == 0)
	b.check("%s %s: used_bytes %d, df used %d, du mount %d, du store %d; objects %d, evictions %d, admission_failures %d, pinned %d, shadow %d",
		passFail(ok), t.name, st.UsedBytes, df, duMount, duStore, st.Objects, st.Evictions,
		st.AdmissionFailures, st.PinnedObjects, st.ShadowBytes)
}
