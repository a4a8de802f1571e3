package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"time"

	"github.com/kvfs/kvfs/gpudirect"
	"golang.org/x/sys/unix"
)

// The direct rows compare, on one kvfs mount and with caches dropped
// before each pass, three ways of loading the same committed objects:
// gpudirect (pin through the mount, user.kvfs.backing, O_DIRECT reads of
// the stored file), a raw O_DIRECT read of the stored files behind kvfs's
// back (the ceiling: no pin, no FUSE), and a plain read() through the
// mount. The plain column of these rows is the raw O_DIRECT read.
var (
	mDirect      = metric{name: "cold direct read 32MiB: gpudirect vs raw O_DIRECT of the stored file", unit: "MB/s", higher: true, bar: 0.9}
	mDirectMount = metric{name: "  plain read() through the mount vs raw O_DIRECT", unit: "MB/s", higher: true}
)

// directRows measures the direct path on the first passthrough mount.
func (b *bench) directRows() error {
	t := b.directTarget()
	if t == nil {
		b.skipRow(mDirect.name, "no kvfs mount")
		return nil
	}
	if ok, why := canDropCaches(); !ok {
		b.skipRow(mDirect.name, why)
		return nil
	}
	if !b.cfg.workloads["read"] && !b.cfg.workloads["cold"] && !b.cfg.workloads["mixed"] {
		if err := b.prepareReads(t); err != nil {
			return err
		}
	}
	r, err := gpudirect.NewReader(gpudirect.Options{})
	if err != nil {
		return err
	}
	defer r.Close()
	rawSize := (b.cfg.objSize+gpudirect.Align-1)&^(gpudirect.Align-1) + gpudirect.Align
	aligned, err := unix.Mmap(-1, 0, rawSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(aligned)
	if err := b.checkDirect(r, t); err != nil {
		return err
	}
	ways := []func() (int64, error){
		func() (int64, error) { return b.rawDirectAll(t, aligned) },
		func() (int64, error) { return b.gpudirectAll(r, t) },
		func() (int64, error) { return b.readAll(t) },
	}
	samples, err := b.rotate(mDirect.name, []string{"raw O_DIRECT", "gpudirect", "read() via mount"}, func(w, _ int) (float64, error) {
		if err := dropCaches(); err != nil {
			return 0, err
		}
		start := time.Now()
		n, err := ways[w]()
		return mbps(n, time.Since(start)), err
	})
	if err != nil {
		return err
	}
	b.pairRow(mDirect, t.mode, samples[0], samples[1], nil)
	b.pairRow(mDirectMount, t.mode, samples[0], samples[2], nil)
	o := r.Options()
	b.note("direct rows: the plain column is a raw O_DIRECT read of the same stored files (open, one pread of the whole object, close); gpudirect reads %dKiB x %d in flight, its time including the pin, the xattr and the identity check", o.Chunk>>10, o.Depth)
	return b.directWriteRows(t)
}

// rotate measures each of the named ways once a round with pass, the
// order rotated from round to round as compare rotates the targets, and
// returns each way's samples, in MB/s.
func (b *bench) rotate(row string, names []string, pass func(way, round int) (float64, error)) ([][]float64, error) {
	samples := make([][]float64, len(names))
	for round := 0; round < b.cfg.rounds; round++ {
		for i := range names {
			w := (i + round) % len(names)
			v, err := pass(w, round)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", names[w], round+1, err)
			}
			samples[w] = append(samples[w], v)
			b.progress("%s | round %d/%d %-20s %s MB/s", row, round+1, b.cfg.rounds, names[w], num(v, true))
		}
	}
	return samples, nil
}

// directTarget is the kvfs mount the direct rows use: passthrough if one.
func (b *bench) directTarget() *target {
	for _, t := range b.kvfs {
		if t.mode == "passthrough" {
			return t
		}
	}
	if len(b.kvfs) > 0 {
		return b.kvfs[0]
	}
	return nil
}

// checkDirect reads every object once over the direct path, untimed, and
// checks every byte.
func (b *bench) checkDirect(r *gpudirect.Reader, t *target) error {
	want := make([]byte, b.cfg.objSize)
	for i := 0; i < b.cfg.readObjects; i++ {
		pattern(want, uint64(i)+1)
		f, err := gpudirect.Open(readPath(t, i))
		if err != nil {
			return err
		}
		if ok, why := f.Direct(); !ok {
			b.note("direct rows: the store refuses O_DIRECT (%s)", why)
		}
		_, err = r.Stream(f, func(off int64, p []byte) error {
			if !bytes.Equal(p, want[off:off+int64(len(p))]) {
				return fmt.Errorf("%s: wrong bytes at %d over the direct path", readPath(t, i), off)
			}
			return nil
		})
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// gpudirectAll loads every read object over the direct path.
func (b *bench) gpudirectAll(r *gpudirect.Reader, t *target) (int64, error) {
	var total int64
	for i := 0; i < b.cfg.readObjects; i++ {
		f, err := gpudirect.Open(readPath(t, i))
		if err != nil {
			return total, err
		}
		n, err := r.Stream(f, func(int64, []byte) error { return nil })
		f.Close()
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// rawDirectAll reads every read object's stored file with O_DIRECT, one
// pread of the whole object each, behind kvfs's back, into aligned
// (page-aligned, a block longer than an object rounded up to a block).
func (b *bench) rawDirectAll(t *target, aligned []byte) (int64, error) {
	var total int64
	for i := 0; i < b.cfg.readObjects; i++ {
		rel, err := filepath.Rel(t.root, readPath(t, i))
		if err != nil {
			return total, err
		}
		n, err := rawDirectRead(filepath.Join(t.d.store, "data", rel), aligned)
		if err != nil {
			return total, err
		}
		if n != b.cfg.objSize {
			return total, fmt.Errorf("%s: %d bytes with O_DIRECT, want %d", rel, n, b.cfg.objSize)
		}
		total += int64(n)
	}
	return total, nil
}

// rawDirectRead is open(O_DIRECT), pread until the end, close; buf is
// page-aligned and a block longer than the file.
func rawDirectRead(path string, buf []byte) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	got := 0
	for {
		n, err := unix.Pread(fd, buf[got:], int64(got))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return got, fmt.Errorf("pread %s: %w", path, err)
		}
		got += n
		if n == 0 || got%gpudirect.Align != 0 || got == len(buf) {
			return got, nil
		}
	}
}
