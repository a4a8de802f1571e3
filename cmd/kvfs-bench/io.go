package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The I/O below is what connectors do, in raw system calls so that the
// Go runtime adds nothing (os.File would try to register regular files
// with the poller) and plain and kvfs pay exactly the same.

const sliceSize = 1 << 20 // fs_native writes in 1 MiB slices

// pattern fills b with bytes unique to seed, so a read that returns
// another object's bytes, or zeros, is caught.
func pattern(b []byte, seed uint64) {
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := 0; i+8 <= len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		for j := 0; j < 8; j++ {
			b[i+j] = byte(x >> (8 * j))
		}
	}
}

// readWhole is an LMCache load: open, one read() of the whole object
// into a preallocated buffer, close. A short read is finished with more
// reads (counted in shortReads) rather than failing: correctness first,
// and the count shows up in the report.
func readWhole(path string, buf []byte) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	got := 0
	for got < len(buf) {
		n, err := unix.Read(fd, buf[got:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("read %s: %w", path, err)
		}
		if n == 0 {
			unix.Close(fd)
			return fmt.Errorf("read %s: %d bytes, want %d", path, got, len(buf))
		}
		if got += n; got < len(buf) {
			shortReads.Add(1)
		}
	}
	if err := unix.Close(fd); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

var (
	shortReads atomic.Int64
	tmpSeq     atomic.Int64
)

// storeNative is LMCache fs_native's store: stat(final) must be absent,
// a temp file beside it with O_CREAT|O_EXCL, 1 MiB slice writes, close,
// link(tmp, final) (EEXIST counts as success), unlink(tmp).
func storeNative(final string, data []byte) error {
	var st unix.Stat_t
	switch err := unix.Stat(final, &st); {
	case err == nil:
		return fmt.Errorf("stat %s: exists before the store", final)
	case err != unix.ENOENT:
		return fmt.Errorf("stat %s: %w", final, err)
	}
	return publishNative(final, data)
}

// publishNative is storeNative after its stat: the temp file, its
// writes and close, the link and the unlink.
func publishNative(final string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(final),
		fmt.Sprintf(".lmcache-write.tmp.%d.%d", os.Getpid(), tmpSeq.Add(1)))
	if err := writeTemp(tmp, unix.O_EXCL, data); err != nil {
		return err
	}
	if err := unix.Link(tmp, final); err != nil && err != unix.EEXIST {
		unix.Unlink(tmp)
		return fmt.Errorf("link %s: %w", final, err)
	}
	if err := unix.Unlink(tmp); err != nil {
		return fmt.Errorf("unlink %s: %w", tmp, err)
	}
	return nil
}

// writeTemp creates tmp (open flags beyond O_CREAT|O_WRONLY), writes
// data in 1 MiB slices and closes it; on failure tmp is removed.
func writeTemp(tmp string, flags int, data []byte) error {
	fd, err := unix.Open(tmp, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC|flags, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", tmp, err)
	}
	if err := writeAll(fd, data, sliceSize); err != nil {
		unix.Close(fd)
		unix.Unlink(tmp)
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := unix.Close(fd); err != nil {
		unix.Unlink(tmp)
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	return nil
}

// writeAll writes data in slices of at most slice bytes.
func writeAll(fd int, data []byte, slice int) error {
	for off := 0; off < len(data); {
		end := min(off+slice, len(data))
		n, err := unix.Write(fd, data[off:end])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("write returned 0")
		}
		off += n
	}
	return nil
}

// storeSmall is a small-object store: create, write, close.
func storeSmall(path string, data []byte) error {
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_TRUNC|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := writeAll(fd, data, len(data)); err != nil {
		unix.Close(fd)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := unix.Close(fd); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

// unlinkTolerant is a connector's delete: ENOENT is success.
func unlinkTolerant(path string) error {
	if err := unix.Unlink(path); err != nil && err != unix.ENOENT {
		return fmt.Errorf("unlink %s: %w", path, err)
	}
	return nil
}

// verifyObject reads path back and compares it with want, byte for byte.
func verifyObject(path string, want, buf []byte) error {
	if err := readWhole(path, buf[:len(want)]); err != nil {
		return err
	}
	if !bytes.Equal(buf[:len(want)], want) {
		i := 0
		for i < len(want) && buf[i] == want[i] {
			i++
		}
		return fmt.Errorf("%s: content differs from what was stored, first at byte %d", path, i)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Size != int64(len(want)) {
		return fmt.Errorf("%s: size %d, want %d", path, st.Size, len(want))
	}
	return nil
}
