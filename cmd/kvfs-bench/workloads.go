package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// target is one place the workloads run in: the plain directory, or a
// kvfs mount (with or without passthrough).
type target struct {
	name string // "plain", "loopback", "kvfs", "kvfs-nopt", "kvfs-ram", "kvfs-strict"
	mode string // for kvfs: "passthrough", "no-passthrough", "ram" or "strict"
	root string
	d    *daemon
	// passthrough is the daemon's word on it once mounted (kvfs
	// targets): "true", "false" or "unknown".
	passthrough string
	// only, when set, names the workloads the target takes part in.
	only map[string]bool
	// pid is a loopback's process (kvfs targets: d's).
	pid int
}

// daemonPID is the process serving t; 0 for a plain directory.
func (t *target) daemonPID() int {
	if t.d != nil {
		return t.d.cmd.Process.Pid
	}
	return t.pid
}

func (t *target) runs(workload string) bool { return t.only == nil || t.only[workload] }

func (t *target) path(elem ...string) string {
	return filepath.Join(append([]string{t.root}, elem...)...)
}

func mbps(bytes int64, d time.Duration) float64 { return float64(bytes) / 1e6 / d.Seconds() }

func readPath(t *target, i int) string { return t.path("read", fmt.Sprintf("obj-%03d.data", i)) }

// prepareReads stores the objects the read workloads load, through the
// target itself (so on kvfs they are committed objects), and reads each
// back once, checking every byte.
func (b *bench) prepareReads(t *target) error {
	if err := os.MkdirAll(t.path("read"), 0o755); err != nil {
		return err
	}
	want := make([]byte, b.cfg.objSize)
	for i := 0; i < b.cfg.readObjects; i++ {
		pattern(want, uint64(i)+1)
		if err := storeNative(readPath(t, i), want); err != nil {
			return err
		}
		if err := verifyObject(readPath(t, i), want, b.buf); err != nil {
			return err
		}
	}
	return nil
}

// readAll loads every read object once; it returns the bytes read.
func (b *bench) readAll(t *target) (int64, error) {
	for i := 0; i < b.cfg.readObjects; i++ {
		if err := readWhole(readPath(t, i), b.buf); err != nil {
			return 0, err
		}
	}
	return int64(b.cfg.readObjects) * int64(b.cfg.objSize), nil
}

// warmRead: the objects were just read (untimed), so they are in the
// page cache; then enough passes to read warmBytes are timed.
func (b *bench) warmRead(t *target, _ int) ([]float64, error) {
	if _, err := b.readAll(t); err != nil {
		return nil, err
	}
	set := int64(b.cfg.readObjects) * int64(b.cfg.objSize)
	passes := max(1, int((b.cfg.warmBytes+set-1)/set))
	var total int64
	start := time.Now()
	for p := 0; p < passes; p++ {
		n, err := b.readAll(t)
		if err != nil {
			return nil, err
		}
		total += n
	}
	v := mbps(total, time.Since(start))
	open, err := b.openCloseOnly(t)
	if err != nil {
		return nil, err
	}
	kept, err := b.readKeptOpen(t, passes)
	if err != nil {
		return nil, err
	}
	return []float64{v, open, kept}, nil
}

// openCloseOnly is the per-load cost that is not data: µs per open and
// close of a read object, reading nothing.
func (b *bench) openCloseOnly(t *target) (float64, error) {
	opens := 50 * b.cfg.readObjects
	start := time.Now()
	for i := 0; i < opens; i++ {
		fd, err := unix.Open(readPath(t, i%b.cfg.readObjects), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, err
		}
		unix.Close(fd)
	}
	return time.Since(start).Seconds() * 1e6 / float64(opens), nil
}

// readKeptOpen is the data path alone: whole-object pread()s on
// descriptors opened beforehand, MB/s.
func (b *bench) readKeptOpen(t *target, passes int) (float64, error) {
	fds := make([]int, b.cfg.readObjects)
	for i := range fds {
		fd, err := unix.Open(readPath(t, i), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, err
		}
		defer unix.Close(fd)
		fds[i] = fd
	}
	var total int64
	start := time.Now()
	for p := 0; p < passes; p++ {
		for _, fd := range fds {
			n, err := unix.Pread(fd, b.buf, 0)
			if err != nil || n != len(b.buf) {
				return 0, fmt.Errorf("pread: %d bytes, %v", n, err)
			}
			total += int64(n)
		}
	}
	return mbps(total, time.Since(start)), nil
}

// coldRead drops the page cache, then times one pass over the objects.
func (b *bench) coldRead(t *target, _ int) ([]float64, error) {
	if err := dropCaches(); err != nil {
		return nil, err
	}
	start := time.Now()
	n, err := b.readAll(t)
	if err != nil {
		return nil, err
	}
	return []float64{mbps(n, time.Since(start))}, nil
}

// storeRound times storeObjects fs_native stores into a directory of its
// own, checks the first object in round one, then deletes the objects
// (untimed) and flushes the disk, so capacity and write-back never
// carry over into the next measurement.
func (b *bench) storeRound(t *target, round int) ([]float64, error) {
	dir := t.path("store", fmt.Sprintf("r%d", round))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	finals := make([]string, b.cfg.storeObjects)
	for i := range finals {
		finals[i] = filepath.Join(dir, fmt.Sprintf("%016x%04d.data", round+1, i))
	}
	start := time.Now()
	if err := b.nativeWriteAll(finals); err != nil {
		return nil, err
	}
	v := mbps(int64(len(finals))*int64(len(b.data)), time.Since(start))
	if round == 0 {
		if err := verifyObject(finals[0], b.data, b.buf); err != nil {
			return nil, err
		}
	}
	if err := b.removeAll(dir, finals); err != nil {
		return nil, err
	}
	return []float64{v}, nil
}

// nativeWriteAll stores each object the fs_native way into its name.
func (b *bench) nativeWriteAll(names []string) error {
	for _, p := range names {
		if err := storeNative(p, b.data); err != nil {
			return err
		}
	}
	return nil
}

// removeAll unlinks the given names, checks nothing else was left in dir
// (a temp file, say), removes dir and flushes the disk.
func (b *bench) removeAll(dir string, names []string) error {
	for _, f := range names {
		if err := unlinkTolerant(f); err != nil {
			return err
		}
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("%s: %d entries left after deleting the objects, first %q", dir, len(left), left[0].Name())
	}
	if err := os.Remove(dir); err != nil {
		return err
	}
	syncFS(b.work)
	return nil
}

func statPath(t *target, i int) string { return t.path("stat", fmt.Sprintf("%08x.data", i)) }

func (b *bench) prepareStats(t *target) error {
	if err := os.MkdirAll(t.path("stat"), 0o755); err != nil {
		return err
	}
	small := make([]byte, 4096)
	for i := 0; i < b.cfg.statObjects; i++ {
		if err := storeSmall(statPath(t, i), small); err != nil {
			return err
		}
	}
	return nil
}

// statKnown times statOps stat calls over the stat objects, after one
// untimed stat of each (the connector's lookups hit known keys).
func (b *bench) statKnown(t *target, _ int) ([]float64, error) {
	paths := make([]string, b.cfg.statObjects)
	var st unix.Stat_t
	for i := range paths {
		paths[i] = statPath(t, i)
		if err := unix.Stat(paths[i], &st); err != nil {
			return nil, fmt.Errorf("stat %s: %w", paths[i], err)
		}
	}
	start := time.Now()
	for i := 0; i < b.cfg.statOps; i++ {
		if err := unix.Stat(paths[i%len(paths)], &st); err != nil {
			return nil, fmt.Errorf("stat %s: %w", paths[i%len(paths)], err)
		}
	}
	return []float64{float64(time.Since(start).Nanoseconds()) / float64(b.cfg.statOps)}, nil
}

// smallRound times smallObjects small stores (create, write, close) in a
// fresh directory, then the unlink of each; µs per operation.
func (b *bench) smallRound(t *target, round int) ([]float64, error) {
	dir := t.path("small", fmt.Sprintf("r%d", round))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	syncFS(b.work)
	names := make([]string, b.cfg.smallObjects)
	for i := range names {
		names[i] = filepath.Join(dir, fmt.Sprintf("%08x.pt", i))
	}
	data := b.data[:b.cfg.smallSize]
	start := time.Now()
	for _, p := range names {
		if err := storeSmall(p, data); err != nil {
			return nil, err
		}
	}
	store := time.Since(start)
	syncFS(b.work)
	start = time.Now()
	for _, p := range names {
		if err := unlinkTolerant(p); err != nil {
			return nil, err
		}
	}
	unlink := time.Since(start)
	if err := b.removeAll(dir, nil); err != nil {
		return nil, err
	}
	n := float64(len(names))
	return []float64{(store + unlink).Seconds() * 1e6 / n, store.Seconds() * 1e6 / n, unlink.Seconds() * 1e6 / n}, nil
}
