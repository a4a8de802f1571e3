package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// worker is one thread of the mixed workload: its bytes done and the
// time of its last completed operation, from which its own rate comes.
type worker struct {
	bytes int64
	last  time.Duration
	ops   int
	err   error
}

func (w *worker) rate() float64 {
	if w.ops == 0 || w.last <= 0 {
		return 0
	}
	return mbps(w.bytes, w.last)
}

// mixed runs cfg.writers fs_native writers and cfg.readers whole-object
// readers at once, each on an OS thread of its own, for cfg.mixedDur.
// The aggregate of each kind is the sum of its threads' rates, each
// over the time to its own last completed operation, so an operation
// cut off by the deadline neither counts nor dilutes. A writer keeps
// only its last two objects, so capacity never comes into it.
func (b *bench) mixed(t *target, round int) ([]float64, error) {
	writers := make([]worker, b.cfg.writers)
	readers := make([]worker, b.cfg.readers)
	var wg sync.WaitGroup
	begin := make(chan struct{})
	var start time.Time
	dirs := make([]string, len(writers))
	for i := range writers {
		dirs[i] = t.path("mixed", fmt.Sprintf("r%d-w%d", round, i))
		if err := os.MkdirAll(dirs[i], 0o755); err != nil {
			return nil, err
		}
	}
	for i := range writers {
		wg.Add(1)
		go func(w *worker, dir string) {
			defer wg.Done()
			lockThread()
			defer runtime.UnlockOSThread()
			<-begin
			w.err = b.writeLoop(w, dir, start)
		}(&writers[i], dirs[i])
	}
	for i := range readers {
		wg.Add(1)
		go func(w *worker, k int) {
			defer wg.Done()
			lockThread()
			defer runtime.UnlockOSThread()
			buf := make([]byte, b.cfg.objSize)
			<-begin
			w.err = b.readLoop(w, t, k, buf, start)
		}(&readers[i], i)
	}
	time.Sleep(10 * time.Millisecond) // let every thread reach the gate
	start = time.Now()
	close(begin)
	wg.Wait()
	var wr, rd float64
	for _, w := range writers {
		if w.err != nil {
			return nil, fmt.Errorf("writer: %w", w.err)
		}
		wr += w.rate()
	}
	for _, r := range readers {
		if r.err != nil {
			return nil, fmt.Errorf("reader: %w", r.err)
		}
		rd += r.rate()
	}
	for _, dir := range dirs {
		if err := b.removeAll(dir, listNames(dir)); err != nil {
			return nil, err
		}
	}
	return []float64{wr, rd, wr + rd}, nil
}

func lockThread() { runtime.LockOSThread() }

func (b *bench) writeLoop(w *worker, dir string, start time.Time) error {
	deadline := start.Add(b.cfg.mixedDur)
	for i := 0; time.Now().Before(deadline) && b.ctx.Err() == nil; i++ {
		if err := storeNative(filepath.Join(dir, fmt.Sprintf("%08x.data", i)), b.data); err != nil {
			return err
		}
		w.bytes += int64(len(b.data))
		w.ops++
		w.last = time.Since(start)
		if i >= 2 {
			if err := unlinkTolerant(filepath.Join(dir, fmt.Sprintf("%08x.data", i-2))); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *bench) readLoop(w *worker, t *target, k int, buf []byte, start time.Time) error {
	deadline := start.Add(b.cfg.mixedDur)
	for i := k; time.Now().Before(deadline) && b.ctx.Err() == nil; i++ {
		if err := readWhole(readPath(t, i%b.cfg.readObjects), buf); err != nil {
			return err
		}
		w.bytes += int64(len(buf))
		w.ops++
		w.last = time.Since(start)
	}
	return nil
}

// listNames lists the objects in dir.
func listNames(dir string) []string {
	ents, _ := os.ReadDir(dir)
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		// Temp files are not an object's: removeAll reports them.
		if !strings.HasPrefix(e.Name(), ".") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}
