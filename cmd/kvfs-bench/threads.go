package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/kvfs/kvfs/internal/procstat"
	"golang.org/x/sys/unix"
)

// Threads (issue 17): connectors store and load from thread pools. From
// 1, 4 and 16 OS threads at once, each in its own directory, the
// fs_native store of 256 KiB and of 4 MiB objects, the load (stat, open,
// read, close) and a stat of a known object, on a plain directory, on
// go-fuse's loopback built with CAP_HANDLE_KILLPRIV_V2 (loopkp: FUSE's
// limit here) and on kvfs, interleaved round by round. The bar: from 4
// and 16 threads, kvfs at least 0.9 of that loopback on stores and
// loads; and its store rate grows from 1 to 4 threads at least as the
// loopback's does.
const (
	threadsSmall = 256 << 10
	threadsLarge = 4 << 20
	threadsBar   = 0.9
	loopKPPkg    = "github.com/kvfs/kvfs/cmd/kvfs-bench/loopkp"
)

var threadCounts = []int{1, 4, 16}

// mountLoopKP mounts loopkp for the thread rows.
func (b *bench) mountLoopKP(cl *cleanups) (*target, error) {
	return b.mountLoop(cl, loopFS{name: "loopkp", pkg: loopKPPkg, fsType: "fuse.loopkp",
		args: func(mp, orig string) []string { return []string{mp, orig} }, only: map[string]bool{"threads": true}})
}

// threadMetrics are the rows of one thread count, in threadRound's order.
func threadMetrics(n int) []metric {
	return []metric{
		{name: fmt.Sprintf("threads %2d: fs_native store 256KiB", n), unit: "obj/s", higher: true},
		{name: fmt.Sprintf("threads %2d: fs_native store 4MiB", n), unit: "obj/s", higher: true},
		{name: fmt.Sprintf("threads %2d: load 256KiB (stat, open, read, close)", n), unit: "obj/s", higher: true},
		{name: fmt.Sprintf("threads %2d: stat of a known object", n), unit: "op/s", higher: true},
	}
}

func (b *bench) threadRows() error {
	targets := []*target{b.plain, b.loopKP}
	for _, k := range b.kvfs {
		if k.runs("threads") {
			targets = append(targets, k)
		}
	}
	stores := map[*target]map[int]float64{}
	for _, n := range threadCounts {
		samples := map[*target][][]float64{}
		for r := 0; r < b.cfg.rounds; r++ {
			for i := range targets {
				t := targets[(i+r)%len(targets)]
				if err := b.ctx.Err(); err != nil {
					return err
				}
				vs, err := b.threadRound(t, n)
				if err != nil {
					return fmt.Errorf("threads %d on %s, round %d: %w", n, t.name, r+1, err)
				}
				samples[t] = append(samples[t], vs)
				b.progress("threads %2d | round %d/%d %-9s store256 %.0f, store4M %.0f, load %.0f obj/s, stat %.0f op/s",
					n, r+1, b.cfg.rounds, t.name, vs[0], vs[1], vs[2], vs[3])
			}
		}
		for _, t := range targets {
			if stores[t] == nil {
				stores[t] = map[int]float64{}
			}
			stores[t][n] = median(column(samples[t], 0))
		}
		for j, m := range threadMetrics(n) {
			for _, k := range targets[2:] {
				b.threadRow(m, n, j, k.mode, column(samples[b.plain], j), column(samples[k], j), column(samples[b.loopKP], j))
			}
		}
		// Where a store's time goes: a daemon that spends more CPU on
		// each store than loopkp is bound by its own code; one that
		// spends as much and stores fewer waits (locks, the kernel).
		lp := median(column(samples[b.loopKP], threadsCPU))
		for _, k := range targets[2:] {
			kv := median(column(samples[k], threadsCPU))
			b.check("INFO threads %2d %s: daemon CPU per 256 KiB store %.0f us (loopkp %.0f us, %.2fx)", n, k.name, kv, lp, kv/max(lp, 1))
		}
	}
	for _, k := range targets[2:] {
		kv, lp := stores[k][4]/max(stores[k][1], 1), stores[b.loopKP][4]/max(stores[b.loopKP][1], 1)
		result := "INFO" // the bar is the default mode's
		if k.mode == "passthrough" {
			result = passFail(kv >= lp*loopTolerance)
		}
		b.check("%s threads %s: 256 KiB store rate from 1 to 4 threads grows %.2fx (loopkp %.2fx)", result, k.name, kv, lp)
	}
	return nil
}

// threadRow is pairRow against loopkp, with the thread rows' bar: at 4
// and 16 threads, stores and loads (not stat) of the default mode at
// least threadsBar of the loopback.
func (b *bench) threadRow(m metric, n, j int, mode string, plain, kvfs, loop []float64) {
	b.pairRow(m, mode, plain, kvfs, loop)
	r := b.rows[len(b.rows)-1]
	r.Bar, r.Result = "", "INFO"
	if n >= 4 && j < 3 && mode == "passthrough" {
		r.Bar = fmt.Sprintf(">= %.2f of loopkp", threadsBar)
		r.Result = passFail(r.VsLoop >= threadsBar)
	}
	r.Note = "vs loopback = vs go-fuse loopback with CAP_HANDLE_KILLPRIV_V2 (loopkp)"
}

// threadsCPU is the column of threadRound's answer that holds the
// daemon's CPU time per 256 KiB store, in microseconds.
const threadsCPU = 4

// threadRound measures one target at n threads: stores of 256 KiB and
// of 4 MiB objects, loads and stats of the 256 KiB ones, each for the
// configured time, and the CPU time the daemon serving it spent on each
// 256 KiB store (threadsCPU); the objects are removed after. Each store phase
// stops early once it has stored its share of kvfs's capacity (a
// quarter for the small objects, which the loads read, half for the
// large ones, removed before the loads): on a machine fast enough to
// store the capacity within a measurement kvfs would evict, and the
// loads would find the small objects gone and the rows would compare a
// cache turning over with loopkp, which never evicts.
func (b *bench) threadRound(t *target, n int) ([]float64, error) {
	root := t.path(fmt.Sprintf("threads-%d", n))
	for i := range n {
		if err := os.MkdirAll(filepath.Join(root, fmt.Sprint(i)), 0o755); err != nil {
			return nil, err
		}
	}
	defer os.RemoveAll(root)
	small, large := make([]byte, threadsSmall), make([]byte, threadsLarge)
	pattern(small, 0x5a11)
	pattern(large, 0x1a29e)
	name := func(i, k int, size string) string {
		return filepath.Join(root, fmt.Sprint(i), fmt.Sprintf("%s-%06d.data", size, k))
	}
	made := make([]int, n)
	store := func(size string, data []byte, share int64) func(i, k int) error {
		most := max(share/int64(n)/int64(len(data)), 1) // objects per thread
		return func(i, k int) error {
			if int64(k) >= most {
				return errEnough
			}
			if size == "s" {
				made[i] = k + 1
			}
			return publishNative(name(i, k, size), data)
		}
	}
	var out []float64
	var cpu time.Duration
	for _, op := range []func(i, k int) error{
		store("s", small, b.cfg.capacity/4),
		store("l", large, b.cfg.capacity/2),
		func(i, k int) error {
			buf := make([]byte, threadsSmall)
			var st unix.Stat_t
			p := name(i, k%made[i], "s")
			if err := unix.Stat(p, &st); err != nil {
				return err
			}
			return readWhole(p, buf)
		},
		func(i, k int) error {
			var st unix.Stat_t
			return unix.Stat(name(i, k%made[i], "s"), &st)
		},
	} {
		before := processCPU(t.daemonPID())
		rate, err := b.parallel(n, op)
		if err != nil {
			return nil, err
		}
		if len(out) == 0 {
			cpu = processCPU(t.daemonPID()) - before
		}
		out = append(out, rate)
		if len(out) == 2 { // the large objects: gone before the loads
			for i := range n {
				for k := 0; ; k++ {
					if err := os.Remove(name(i, k, "l")); errors.Is(err, os.ErrNotExist) {
						break
					} else if err != nil {
						return nil, err
					}
				}
			}
		}
	}
	stored := 0
	for _, m := range made {
		stored += m
	}
	return append(out, float64(cpu.Microseconds())/float64(max(stored, 1))), nil
}

// processCPU is the CPU time process pid has spent, user and system, in
// the kernel's clock ticks (USER_HZ, 100 on Linux); 0 for pid 0 or one
// that cannot be read.
func processCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	line, err := procstat.Read(pid)
	if err != nil {
		return 0
	}
	cpu, _ := procstat.CPU(line)
	return cpu
}

// errEnough is an op's way of saying its thread has done its share.
var errEnough = errors.New("this thread's share is done")

// parallel runs op(i, k) for k = 0, 1, ... on n locked OS threads i at
// once for the configured time, a thread stopping early where op says
// errEnough, and returns the ops per second done.
func (b *bench) parallel(n int, op func(i, k int) error) (float64, error) {
	var wg sync.WaitGroup
	counts, errs := make([]int, n), make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			<-start
			until := time.Now().Add(b.cfg.threadsDur)
			for k := 0; time.Now().Before(until); k++ {
				if errs[i] = op(i, k); errs[i] == errEnough {
					errs[i] = nil
					return
				} else if errs[i] != nil {
					return
				}
				counts[i]++
			}
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	took := time.Since(began)
	total := 0
	for i := range n {
		if errs[i] != nil {
			return 0, errs[i]
		}
		total += counts[i]
	}
	return float64(total) / took.Seconds(), nil
}
