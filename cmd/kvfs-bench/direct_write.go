package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kvfs/kvfs/gpudirect"
	"golang.org/x/sys/unix"
)

// The direct write rows compare three ways of storing the same objects,
// with caches dropped before each pass and the objects deleted (untimed)
// after it: gpudirect (open for writing through the mount, O_DIRECT
// writes of the stored file, the close admitting the object), a raw
// O_DIRECT write of plain files on the same disk (the ceiling: no mount,
// no accounting), and a plain write() through the mount the fs_native
// way (temp file, 1 MiB writes, close, link, unlink). The plain column
// of these rows is the raw O_DIRECT write.
var (
	// No bar: gpudirect pays about a millisecond per object in round
	// trips to the daemon (create with its reservation, two attributes,
	// two forced stats, the close's admission) that a raw write of a
	// plain file does not, 5-8% of a 32 MiB object on a disk writing
	// 1.7 GB/s, and two runs here measured 0.97 and 0.80 with the CPUs
	// contended: a bar at 0.9 would pass or fail with the noise.
	mDirectWrite        = metric{name: "direct write 32MiB: gpudirect vs raw O_DIRECT write of a plain file", unit: "MB/s", higher: true}
	mDirectWriteNative  = metric{name: "  plain write() through the mount (fs_native) vs raw O_DIRECT", unit: "MB/s", higher: true}
	directWriteWayNames = []string{"raw O_DIRECT", "gpudirect", "fs_native via mount"}
)

// directWriteRows measures direct writes on target t (a passthrough
// mount, where kvfs takes them).
func (b *bench) directWriteRows(t *target) error {
	if t.mode != "passthrough" {
		b.skipRow(mDirectWrite.name, "needs a passthrough mount (kvfs takes no direct writes without one)")
		return nil
	}
	w, err := gpudirect.NewWriter(gpudirect.Options{})
	if err != nil {
		return err
	}
	defer w.Close()
	aligned, err := unix.Mmap(-1, 0, (b.cfg.objSize+gpudirect.Align-1)&^(gpudirect.Align-1),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(aligned)
	copy(aligned, b.data)
	ways := []func(names []string) error{
		func(names []string) error { return rawDirectWriteAll(names, aligned[:len(b.data)]) },
		func(names []string) error { return b.gpudirectWriteAll(w, names) },
		b.nativeWriteAll,
	}
	roots := []string{b.plain.root, t.root, t.root}
	samples, err := b.rotate(mDirectWrite.name, directWriteWayNames, func(k, round int) (float64, error) {
		return b.directWritePass(ways[k], filepath.Join(roots[k], "direct-write"), round, k)
	})
	if err != nil {
		return err
	}
	b.pairRow(mDirectWrite, t.mode, samples[0], samples[1], nil)
	b.pairRow(mDirectWriteNative, t.mode, samples[0], samples[2], nil)
	o := w.Options()
	b.note("direct write rows: %d objects per pass, caches dropped before each and the objects deleted after it (untimed); the plain column is open(O_DIRECT), one pwrite of the whole object, close, on the plain directory; gpudirect writes %dKiB x %d in flight, its time including the open through the mount (the reservation), the xattr, the identity check and the close (the admission)",
		b.cfg.storeObjects, o.Chunk>>10, o.Depth)
	return nil
}

// directWritePass times one way of storing storeObjects objects in a
// fresh directory, checks the first (round one) and deletes them.
func (b *bench) directWritePass(way func([]string) error, dir string, round, k int) (float64, error) {
	dir = filepath.Join(dir, fmt.Sprintf("r%d-%d", round, k))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	names := make([]string, b.cfg.storeObjects)
	for i := range names {
		names[i] = filepath.Join(dir, fmt.Sprintf("%016x%04d.data", round+1, i))
	}
	if err := dropCaches(); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := way(names); err != nil {
		return 0, err
	}
	v := mbps(int64(len(names))*int64(len(b.data)), time.Since(start))
	if round == 0 {
		if err := verifyObject(names[0], b.data, b.buf); err != nil {
			return 0, err
		}
	}
	if err := b.removeAll(dir, names); err != nil {
		return 0, err
	}
	return v, os.Remove(filepath.Dir(dir))
}

// gpudirectWriteAll stores each object over the direct path.
func (b *bench) gpudirectWriteAll(w *gpudirect.Writer, names []string) error {
	for _, p := range names {
		f, err := gpudirect.Create(p)
		if err != nil {
			return err
		}
		if ok, why := f.Direct(); !ok {
			b.note("direct write rows: the store refuses O_DIRECT (%s)", why)
		}
		n, err := w.Write(f, b.data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if n != int64(len(b.data)) {
			return fmt.Errorf("%s: wrote %d of %d bytes", p, n, len(b.data))
		}
	}
	return nil
}

// rawDirectWriteAll writes each object as a plain file with O_DIRECT:
// open, one pwrite of data (page-aligned, a whole number of blocks
// unless the object size is not), close. An object size that is not a
// multiple of a block is written whole blocks first and the rest
// through a plain descriptor, as gpudirect does.
func rawDirectWriteAll(names []string, data []byte) error {
	for _, p := range names {
		if err := rawDirectWrite(p, data); err != nil {
			return err
		}
	}
	return nil
}

func rawDirectWrite(path string, data []byte) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_DIRECT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	body := len(data) &^ (gpudirect.Align - 1)
	if err := pwriteAll(fd, data[:body], 0); err != nil {
		return fmt.Errorf("pwrite %s: %w", path, err)
	}
	if body == len(data) {
		return nil
	}
	tail, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(tail)
	return pwriteAll(tail, data[body:], int64(body))
}

// pwriteAll writes all of b at off.
func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("pwrite wrote nothing")
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}
