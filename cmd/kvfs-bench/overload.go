package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The overload of issue 22 (item 4): 16 fs_native writers of 16 MiB
// objects and 4 threads flooding 1 MiB objects into the same directory
// (LMCache puts every object in one) of a 128 MiB cache, default grace.
// A store whose close succeeded and whose link then fails ENOENT lost its
// temp file to eviction before its publish step; the close→link gap is
// how long that step waited (a CREATE that waits for space inside the
// kernel's directory lock holds every link in that directory).
const (
	overloadWriters  = 16
	overloadFlood    = 4
	overloadBig      = 16 << 20
	overloadSmall    = 1 << 20
	overloadCapacity = 128 << 20
	overloadLostBar  = 2.0 // percent of closed big stores
)

type overloadResult struct {
	closed, lost, published, refused int64 // big stores
	floodStores, floodLost           int64
	wrong, verified                  int64 // published names read back
	gaps                             []time.Duration
}

func (b *bench) overloadRows() error {
	t, err := b.startNode("overload", "passthrough", "overload", overloadCapacity)
	if err != nil {
		return err
	}
	defer b.stopTarget(t)
	if err := t.d.waitMounted(b.cfg.mountTimeout); err != nil {
		return err
	}
	b.progress("overload: %d writers of %d MiB + %d flood threads of %d MiB into %d MiB, %v of stores",
		overloadWriters, overloadBig>>20, overloadFlood, overloadSmall>>20, overloadCapacity>>20, b.cfg.overloadDur)
	r, err := runOverload(b.ctx, t.root, b.cfg.overloadDur)
	if err != nil {
		return fmt.Errorf("overload: %w", err)
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	what := fmt.Sprintf("%d writers x %d MiB + %d flood threads x %d MiB, one directory, capacity %d MiB, %v",
		overloadWriters, overloadBig>>20, overloadFlood, overloadSmall>>20, overloadCapacity>>20, b.cfg.overloadDur)
	b.absRow(fmt.Sprintf("overload %dW+%d flood: fs_native close→link gap p50", overloadWriters, overloadFlood), "ms",
		[]float64{ms(pct(r.gaps, 0.5))}, 0, what)
	b.absRow("  same, gap p99", "ms", []float64{ms(pct(r.gaps, 0.99))}, 0, "")
	lost := 0.0
	if r.closed > 0 {
		lost = 100 * float64(r.lost) / float64(r.closed)
	}
	b.absRow("  closed stores lost before their link", "%", []float64{lost}, 0, "")
	row := b.rows[len(b.rows)-1]
	row.Bar = fmt.Sprintf("<= %g %%", overloadLostBar)
	row.Result = passFail(r.closed > 0 && lost <= overloadLostBar)
	b.check("%s overload: big stores %d closed, %d published, %d lost before link, %d refused (ENOSPC); flood %d stores, %d lost; %d published names read back, %d wrong",
		passFail(r.wrong == 0 && r.closed > 0), r.closed, r.published, r.lost, r.refused, r.floodStores, r.floodLost, r.verified, r.wrong)
	b.accounting(t, false)
	return nil
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// keyedPattern fills buf with content derived from name, so any published
// name can be checked against what its writer stored.
func keyedPattern(buf []byte, name string) {
	h := fnv.New64a()
	h.Write([]byte(name))
	pattern(buf, h.Sum64()|1)
}

// overloadStore is one fs_native store with the outcome told apart.
type storeOutcome int

const (
	storePublished storeOutcome = iota
	storeRefused                // ENOSPC at create, write or close
	storeLost                   // closed, then link ENOENT
)

func overloadStore(final string, data []byte) (storeOutcome, time.Duration, error) {
	tmp := filepath.Join(filepath.Dir(final), fmt.Sprintf(".lmcache-write.tmp.%d.%d", os.Getpid(), tmpSeq.Add(1)))
	fd, err := unix.Open(tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err == unix.ENOSPC {
		return storeRefused, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("open %s: %w", tmp, err)
	}
	err = writeAll(fd, data, sliceSize)
	cerr := unix.Close(fd)
	closed := time.Now()
	if err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlink(tmp)
		if errors.Is(err, unix.ENOSPC) {
			return storeRefused, 0, nil
		}
		return 0, 0, fmt.Errorf("write/close %s: %w", tmp, err)
	}
	err = unix.Link(tmp, final)
	gap := time.Since(closed)
	switch err {
	case unix.ENOENT:
		return storeLost, gap, nil
	case nil, unix.EEXIST:
	default:
		return 0, gap, fmt.Errorf("link %s: %w", final, err)
	}
	if err := unix.Unlink(tmp); err != nil && err != unix.ENOENT {
		return 0, gap, fmt.Errorf("unlink %s: %w", tmp, err)
	}
	return storePublished, gap, nil
}

// runOverload runs the writers (each starts stores until dur has passed)
// and the flood (until the writers are done), then reads every published
// name back.
func runOverload(ctx context.Context, dir string, dur time.Duration) (*overloadResult, error) {
	r := &overloadResult{}
	var mu sync.Mutex
	var closed, lost, published, refused, floodStores, floodLost atomic.Int64
	errs := make(chan error, overloadWriters+overloadFlood)
	until := time.Now().Add(dur)
	stop := make(chan struct{})
	var writers, flood sync.WaitGroup
	for w := range overloadWriters {
		writers.Go(func() {
			buf := make([]byte, overloadBig)
			for i := 0; time.Now().Before(until) && ctx.Err() == nil; i++ {
				name := fmt.Sprintf("big-%02d-%04d.data", w, i)
				keyedPattern(buf, name)
				out, gap, err := overloadStore(filepath.Join(dir, name), buf)
				if err != nil {
					errs <- err
					return
				}
				if out != storeRefused {
					closed.Add(1)
					mu.Lock()
					r.gaps = append(r.gaps, gap)
					mu.Unlock()
				}
				switch out {
				case storePublished:
					published.Add(1)
				case storeLost:
					lost.Add(1)
				case storeRefused:
					refused.Add(1)
				}
			}
		})
	}
	for f := range overloadFlood {
		flood.Go(func() {
			buf := make([]byte, overloadSmall)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("flood-%d-%06d.data", f, i)
				keyedPattern(buf, name)
				out, _, err := overloadStore(filepath.Join(dir, name), buf)
				if err != nil {
					errs <- err
					return
				}
				switch out {
				case storePublished:
					floodStores.Add(1)
				case storeLost:
					floodLost.Add(1)
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	flood.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	r.closed, r.lost, r.published, r.refused = closed.Load(), lost.Load(), published.Load(), refused.Load()
	r.floodStores, r.floodLost = floodStores.Load(), floodLost.Load()
	return r, r.readBack(dir)
}

// readBack checks every published name against its key's content.
func (r *overloadResult) readBack(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".data") {
			continue
		}
		size := overloadSmall
		if strings.HasPrefix(e.Name(), "big-") {
			size = overloadBig
		}
		want, buf := make([]byte, size), make([]byte, size)
		keyedPattern(want, e.Name())
		err := verifyObject(filepath.Join(dir, e.Name()), want, buf)
		switch {
		case errors.Is(err, unix.ENOENT):
			continue // evicted since the listing
		case err != nil:
			r.wrong++
		}
		r.verified++
	}
	return nil
}
