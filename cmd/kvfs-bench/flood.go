package main

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The flood: many fs_native writers storing past the capacity at once,
// with readers holding pins, on a mount of its own. It measures the worst
// excess over the capacity: as the ledger saw it (overshoot_max_bytes)
// and as the store's disk held it (sampled), in the default mode, where
// writers' bytes pass the daemon and only admission bounds them, and in
// strict mode, where the capacity may never be passed.
const (
	floodWriters   = 16
	floodReaders   = 4
	floodPerWriter = 6
	floodCapObjs   = 32 // capacity, in objects
)

// floodRows runs the flood in both modes.
func (b *bench) floodRows() error {
	for _, mode := range []string{"passthrough", "strict"} {
		if err := b.floodMode(mode); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) floodMode(mode string) error {
	name := "flood-" + shortMode(mode)
	capacity := int64(floodCapObjs * b.cfg.objSize)
	var extra []string
	if mode == "strict" {
		extra = []string{"--strict-capacity"}
	}
	t, err := b.startNode(name, mode, name, capacity, extra...)
	if err != nil {
		return err
	}
	d := t.d
	defer b.stopTarget(t)
	if err := d.waitMounted(b.cfg.mountTimeout); err != nil {
		return err
	}
	res, err := b.flood(t.root, d.store, capacity)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	st, err := d.stats()
	if err != nil {
		return err
	}
	mb := func(n int64) float64 { return float64(n) / (1 << 20) }
	objs := fmt.Sprintf("%d writers x %d objects of %d MiB, %d readers, capacity %d MiB", floodWriters, floodPerWriter,
		b.cfg.objSize>>20, floodReaders, capacity>>20)
	b.absRow(fmt.Sprintf("flood %dW+%dR past capacity: worst overshoot, ledger", floodWriters, floodReaders), "MiB",
		[]float64{mb(st.OvershootMaxBytes)}, 0, objs)
	b.rows[len(b.rows)-1].Mode = mode
	b.absRow("  same, stored bytes on disk (sampled)", "MiB", []float64{mb(res.diskOver)}, 0, "")
	b.rows[len(b.rows)-1].Mode = mode
	b.absRow("  stores completed per second", "obj/s", []float64{res.storesPerSec}, 0, "")
	b.rows[len(b.rows)-1].Mode = mode
	b.check("%s %s flood: %d stores, %d ENOSPC, %d temp files evicted before their link (the writer stalled past the grace period), %d evictions, %d loads verified; ledger overshoot max %d bytes, disk over capacity max %d bytes (%d samples)",
		passFail(mode != "strict" || st.OvershootMaxBytes == 0 && res.diskOver == 0), name, res.stores, res.enospc,
		res.lost, st.Evictions, res.loads, st.OvershootMaxBytes, res.diskOver, res.samples)
	b.accounting(t, false)
	return nil
}

type floodResult struct {
	stores, enospc, loads, samples int64
	lost                           int64 // temp files evicted before their link
	diskOver                       int64
	storesPerSec                   float64
}

// flood runs the writers and readers, sampling the store's bytes.
func (b *bench) flood(mp, store string, capacity int64) (floodResult, error) {
	var r floodResult
	var published []string
	var pubMu sync.Mutex
	var wg sync.WaitGroup
	var stores, enospc, loads, lost atomic.Int64
	errs := make(chan error, floodWriters+floodReaders)
	done := make(chan struct{})
	start := time.Now()
	for w := range floodWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range floodPerWriter {
				final := filepath.Join(mp, fmt.Sprintf("flood-%02d-%02d.data", w, i))
				err := storeNative(final, b.data)
				switch {
				case errors.Is(err, unix.ENOSPC):
					enospc.Add(1)
					continue
				case errors.Is(err, unix.ENOENT):
					// The temp file was evicted before its link: the
					// writer took longer than the grace period between
					// close and link (16 writers on this machine's CPUs),
					// and its store fails, as LMCache's does, with an
					// error, never silently.
					lost.Add(1)
					continue
				case err != nil:
					errs <- err
					return
				}
				stores.Add(1)
				pubMu.Lock()
				published = append(published, final)
				pubMu.Unlock()
			}
		}()
	}
	var readers sync.WaitGroup
	for range floodReaders {
		readers.Add(1)
		go func() {
			defer readers.Done()
			buf := make([]byte, len(b.data))
			for {
				select {
				case <-done:
					return
				default:
				}
				pubMu.Lock()
				var p string
				if len(published) > 0 {
					p = published[rand.IntN(len(published))]
				}
				pubMu.Unlock()
				if p == "" {
					time.Sleep(time.Millisecond)
					continue
				}
				// Evicted since it was published: a miss, as for a connector.
				if err := verifyObject(p, b.data, buf); err == nil {
					loads.Add(1)
				} else if !errors.Is(err, unix.ENOENT) && !errors.Is(err, os.ErrNotExist) {
					errs <- fmt.Errorf("load %s: %w", p, err)
					return
				}
			}
		}()
	}
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			r.samples++
			r.diskOver = max(r.diskOver, storeBytes(store)-capacity)
		}
	}()
	wg.Wait()
	elapsed := time.Since(start)
	close(done)
	readers.Wait()
	<-sampled
	close(errs)
	for err := range errs {
		return r, err
	}
	r.stores, r.enospc, r.loads, r.lost = stores.Load(), enospc.Load(), loads.Load(), lost.Load()
	r.storesPerSec = float64(r.stores) / elapsed.Seconds()
	return r, nil
}

// storeBytes is what the store's files hold on disk (st_blocks), data/
// and writing/ together, each inode once.
func storeBytes(store string) int64 {
	seen := map[uint64]bool{}
	var total int64
	for _, sub := range []string{"data", "writing"} {
		filepath.WalkDir(filepath.Join(store, sub), func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			var st unix.Stat_t
			if unix.Lstat(p, &st) == nil && !seen[st.Ino] {
				seen[st.Ino] = true
				total += st.Blocks * 512
			}
			return nil
		})
	}
	return total
}
