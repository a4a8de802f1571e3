package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Turnover (issue 22, item 6): one thread storing 1 MiB objects into a
// cache that is full of just-stored objects. If a grace period outlived
// the publish step, every store would wait for the oldest object's grace
// to run out, capping turnover at capacity / grace. Measured into a 24
// MiB cache and a 1 GiB one (default --grace), with LMCache fs_native's
// protocol (O_EXCL temp, link, unlink) and LMCache upstream's (<final>.tmp
// with O_TRUNC, rename onto final); the bar is the small cache at least
// half as fast as the large one.
const (
	turnoverObject = 1 << 20
	turnoverSmall  = 24 << 20
	turnoverLarge  = 1 << 30
	turnoverBar    = 0.5
)

func (b *bench) turnoverRows() error {
	var nodes []*target
	for _, c := range []struct {
		name     string
		capacity int64
	}{{"turnover-24m", turnoverSmall}, {"turnover-1g", turnoverLarge}} {
		t, err := b.startNode(c.name, "passthrough", c.name, c.capacity)
		if err != nil {
			return err
		}
		defer b.stopTarget(t)
		if err := t.d.waitMounted(b.cfg.mountTimeout); err != nil {
			return err
		}
		nodes = append(nodes, t)
	}
	data := make([]byte, turnoverObject)
	pattern(data, 0x7e57)
	for _, proto := range []string{"link", "rename"} {
		var rates [2]float64
		var fails [2]int64
		for i, t := range nodes {
			n, failed, err := b.turnover(t.root, proto, data)
			if err != nil {
				return fmt.Errorf("turnover %s on %s: %w", proto, t.name, err)
			}
			rates[i], fails[i] = float64(n)/b.cfg.turnoverDur.Seconds(), failed
			b.progress("turnover %s into %s: %d stores in %v, %d failed", proto, t.name, n, b.cfg.turnoverDur, failed)
		}
		label := map[string]string{"link": "fs_native (O_EXCL temp, link)", "rename": "upstream (<final>.tmp, rename)"}[proto]
		b.absRow(fmt.Sprintf("turnover 1MiB stores, %s: 24MiB cache", label), "obj/s", []float64{rates[0]}, 0,
			"ratio = stores/s into the 24 MiB cache / into the 1 GiB cache (one thread, default grace)")
		r := b.rows[len(b.rows)-1]
		if rates[1] > 0 {
			r.Ratio = rates[0] / rates[1]
		}
		r.Bar = fmt.Sprintf(">= %.2f (vs 1GiB cache)", turnoverBar)
		r.Result = passFail(r.Ratio >= turnoverBar)
		b.absRow("  same, 1GiB cache", "obj/s", []float64{rates[1]}, 0, "")
		b.check("%s turnover %s: 24 MiB cache %.0f stores/s (%d failed), 1 GiB cache %.0f stores/s (%d failed)",
			passFail(fails[0] == 0 && fails[1] == 0), proto, rates[0], fails[0], rates[1], fails[1])
	}
	for _, t := range nodes {
		b.accounting(t, false)
	}
	return nil
}

// turnover stores distinct 1 MiB objects into dir by proto for the
// configured time; it returns the stores that published and those that
// failed for space or lost their temp file before the publish step.
func (b *bench) turnover(dir, proto string, data []byte) (stores, failed int64, err error) {
	sub, err := os.MkdirTemp(dir, "turnover-"+proto+"-")
	if err != nil {
		return 0, 0, err
	}
	until := time.Now().Add(b.cfg.turnoverDur)
	for i := 0; time.Now().Before(until); i++ {
		if err := b.ctx.Err(); err != nil {
			return 0, 0, err
		}
		final := filepath.Join(sub, fmt.Sprintf("obj-%06d.data", i))
		if proto == "link" {
			err = publishNative(final, data)
		} else {
			err = publishRename(final, data)
		}
		switch {
		case err == nil:
			stores++
		case errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.ENOENT):
			failed++
		default:
			return 0, 0, err
		}
	}
	return stores, failed, nil
}

// publishRename is LMCache upstream's store: <final>.tmp opened with
// O_CREAT|O_WRONLY|O_TRUNC, written, closed, renamed onto final.
func publishRename(final string, data []byte) error {
	tmp := final + ".tmp"
	if err := writeTemp(tmp, unix.O_TRUNC, data); err != nil {
		return err
	}
	if err := unix.Rename(tmp, final); err != nil {
		unix.Unlink(tmp)
		return fmt.Errorf("rename %s: %w", final, err)
	}
	return nil
}
