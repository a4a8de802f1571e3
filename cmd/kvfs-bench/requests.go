package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// requestRows counts the FUSE requests one operation costs on the
// passthrough mount (the daemon counts them by type, fuse_requests in
// `kvfs stats`): an fs_native store of a large object, a small store,
// its unlink, a whole-object load. Synchronous requests are what a
// client waits for; RELEASE and FORGET are not waited for.
func (b *bench) requestRows() error {
	var t *target
	for _, k := range b.kvfs {
		if k.mode == "passthrough" && k.d != nil {
			t = k
		}
	}
	if t == nil {
		return nil
	}
	dir := t.path("requests")
	ops := []struct {
		name string
		fn   func(i int) error
	}{
		{"fs_native store", func(i int) error { return storeNative(fmt.Sprintf("%s/big-%d.data", dir, i), b.data) }},
		{"load (open, fstat, read, close)", func(i int) error {
			return readWhole(fmt.Sprintf("%s/big-%d.data", dir, i), b.buf)
		}},
		{"small store", func(i int) error {
			return storeSmall(fmt.Sprintf("%s/small-%d.pt", dir, i), b.data[:b.cfg.smallSize])
		}},
		{"unlink of a small object", func(i int) error { return unlinkTolerant(fmt.Sprintf("%s/small-%d.pt", dir, i)) }},
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	const n = 4
	// What reading the counts costs (kvfs stats: a getattr and a
	// getxattr of the root), to take out of each difference.
	r1, err := t.d.stats()
	if err != nil {
		return err
	}
	r2, err := t.d.stats()
	if err != nil {
		return err
	}
	reading := diff(r1.FuseRequests, r2.FuseRequests)
	for _, op := range ops {
		before, err := t.d.stats()
		if err != nil {
			return err
		}
		for i := range n {
			if err := op.fn(i); err != nil {
				return fmt.Errorf("%s: %w", op.name, err)
			}
		}
		after, err := t.d.stats()
		if err != nil {
			return err
		}
		d := diff(before.FuseRequests, after.FuseRequests)
		for k, v := range reading {
			d[k] -= v
		}
		b.note("FUSE requests per %s on kvfs (%s): %s", op.name, shortMode(t.mode), requestsPerOp(d, n))
	}
	return nil
}

func diff(before, after map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range after {
		d[k] = v - before[k]
	}
	return d
}

// requestsPerOp lists the requests of n operations, per operation.
func requestsPerOp(d map[string]int64, n int) string {
	var parts []string
	for op, v := range d {
		if v > 0 {
			parts = append(parts, fmt.Sprintf("%s %.3g", op, float64(v)/float64(n)))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
