package main

import (
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/gpudirect"
	"github.com/kvfs/kvfs/internal/usageerr"
	"golang.org/x/sys/unix"
)

// putJob is one `kvfs put --direct` run.
type putJob struct {
	out    io.Writer
	w      *gpudirect.Writer
	gpu    *gpudirect.GPU // nil: from host memory
	verify bool
}

func cmdPut(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("put", flag.ContinueOnError)
	direct := fs.Bool("direct", false, "write through the direct path (open through the mount, O_DIRECT on the stored file); required")
	gpu := fs.Int("gpu", -1, "write from this GPU's memory (SRC is copied there first): cuFile where present, else a copy and host buffers")
	chunk := int64(gpudirect.DefaultChunk)
	fs.Var(sizeFlag{&chunk}, "chunk", "bytes per write, a multiple of 4096, like 4MiB")
	depth := fs.Int("depth", gpudirect.DefaultDepth, "writes in flight")
	verify := fs.Bool("verify", false, "read DST back plainly through the mount and compare CRC-32C checksums")
	args, err := parse(fs, args, 2, "SRC and DST")
	if err != nil {
		return err
	}
	if !*direct {
		return usageerr.Errorf("--direct is required (kvfs put writes only through the direct path; plain writes are cp(1))")
	}
	if err := checkDirectFlags(*gpu, chunk, *depth); err != nil {
		return err
	}
	if st, err := os.Stat(args[1]); err == nil && st.IsDir() || strings.HasSuffix(args[1], "/") {
		return usageerr.Errorf("DST %s is a directory: name the object to write", args[1])
	}
	// As cp(1) refuses it: the object would be written over with itself
	// (it was, exit 0: an outside tester).
	if src, err := os.Stat(args[0]); err == nil {
		if dst, err := os.Stat(args[1]); err == nil && os.SameFile(src, dst) {
			return usageerr.Errorf("SRC %s and DST %s are the same file", args[0], args[1])
		}
	}
	data, mode, err := readSource(args[0], capacityAt(filepath.Dir(args[1])))
	if err != nil {
		return err
	}
	w, err := gpudirect.NewWriter(gpudirect.Options{Chunk: int(chunk), Depth: *depth})
	if err != nil {
		return usageerr.Errorf("%v", err)
	}
	defer w.Close()
	job := &putJob{out: stdout, w: w, verify: *verify}
	notice := noticeFor("put")
	if locked, why := w.Locked(); !locked {
		notice(why)
	}
	if *gpu >= 0 {
		if job.gpu, err = openGPU(*gpu, notice, "writing from host memory"); err != nil {
			return err
		}
		if job.gpu != nil {
			defer job.gpu.Close()
		}
	}
	return job.run(data, mode, args[1])
}

// readSource reads SRC ("-": standard input) whole: the transfer timed
// is the write, not the read of its source. mode is what cp(1) gives a
// new copy of it: SRC's permission bits (0644 for standard input) less
// the umask. A source larger than limit (the cache's capacity; 0: none
// known) is refused before it is read, or once limit bytes of a pipe
// were: `kvfs put --direct /dev/zero` grew past 1.5 GB of memory and
// never ended (an outside tester). A device is refused outright.
func readSource(src string, limit int64) (data []byte, mode os.FileMode, err error) {
	umask := os.FileMode(unix.Umask(0))
	unix.Umask(int(umask))
	if src == "-" {
		data, err = readAtMost(os.Stdin, "standard input", limit, 0)
		return data, 0o644 &^ umask, err
	}
	f, err := os.Open(src)
	if err == nil {
		defer f.Close()
		var fi os.FileInfo
		if fi, err = f.Stat(); err == nil {
			mode = fi.Mode().Perm() &^ umask
			switch {
			case fi.Mode()&(os.ModeDevice|os.ModeSocket) != 0:
				return nil, 0, usageerr.Errorf("SRC %s is a device, not a file: put stores a file's bytes (or standard input's, -)", src)
			case fi.Mode().IsRegular() && limit > 0 && fi.Size() > limit:
				return nil, 0, usageerr.Errorf("SRC %s is %d bytes, more than the cache's capacity (%d): it can never be stored", src, fi.Size(), limit)
			}
			hint := int64(0)
			if fi.Mode().IsRegular() {
				hint = fi.Size()
			}
			data, err = readAtMost(f, src, limit, hint)
		}
	}
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.EISDIR) || errors.Is(err, os.ErrPermission) {
		return nil, 0, usageerr.Errorf("SRC %v", err)
	}
	return data, mode, err
}

// readAtMost reads r whole, refusing it once it holds more than limit
// bytes (0: no limit); hint is its size where known (a regular file).
func readAtMost(r io.Reader, name string, limit, hint int64) ([]byte, error) {
	if limit > 0 {
		r = io.LimitReader(r, limit+1)
	}
	data, err := readSized(r, hint)
	if err == nil && limit > 0 && int64(len(data)) > limit {
		return nil, usageerr.Errorf("SRC %s holds more than the cache's capacity (%d bytes): it can never be stored", name, limit)
	}
	return data, err
}

// readSized reads r whole into one buffer of hint bytes (and a little
// room to see its end), growing it only if r holds more: io.ReadAll
// grows by copying, and `kvfs put --direct` of a 2 GiB file peaked at
// 4.6 GB of memory, of 6 GiB at 14.6 GB (an outside tester).
func readSized(r io.Reader, hint int64) ([]byte, error) {
	if hint <= 0 {
		return io.ReadAll(r)
	}
	buf := make([]byte, 0, hint+4096)
	for {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return buf, err
		case len(buf) == cap(buf):
			buf = append(buf, 0)[:len(buf)] // grown since its stat
		}
	}
}

// capacityAt is the capacity of the file system holding dir (a kvfs
// mount reports its capacity as its size), 0 if it cannot be read.
func capacityAt(dir string) int64 {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return 0
	}
	return int64(st.Blocks) * int64(st.Bsize)
}

// run writes data to dst over the direct path; the time is from the open
// through the mount to the object's publish (its close, or the rename).
//
// A new object is written under a temporary name beside dst and renamed
// to dst once whole and admitted: the direct path preallocates the
// stored file at its full size, so a put killed midway would otherwise
// leave at dst an object of the right size with zeros where its blocks
// were still to come. A killed put leaves the temporary name instead,
// which kvfs evicts like any cold object. An object that exists is
// rewritten in place, as cp(1) does, keeping its inode, names, owner and
// mode and the caller's right to write it (a rename would replace all
// of them, and needs the directory's); killed midway it holds the new
// bytes written so far and zeros after, at the new size. A new name too
// long for the temporary name's additions is made and written in place,
// and removed if the put fails.
//
// The direct path reads the object's user.kvfs.backing, which the kernel
// lets only a user who may read the object do: an object the caller may
// write but not read is refused before it is opened (an outside tester:
// the open's O_TRUNC had emptied it, then the put failed). A new object
// is made readable by its owner (0600) until it is renamed to dst with
// mode, so a umask without the owner's read bit does not stop it.
func (j *putJob) run(data []byte, mode os.FileMode, dst string) error {
	var dev uintptr
	if j.gpu != nil {
		var err error
		if dev, err = j.toDevice(data); err != nil {
			return err
		}
		defer j.gpu.Free(dev)
	}
	start := time.Now()
	f, tmp, made, err := openDestination(dst)
	if errors.Is(err, gpudirect.ErrNotKVFS) || errors.Is(err, os.ErrNotExist) {
		return usageerr.Errorf("DST %v", err)
	}
	if err != nil {
		return err
	}
	n, how, err := j.write(f, data, dev)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && made && mode != 0o600 {
		err = os.Chmod(tmp, mode)
	}
	if err == nil && tmp != dst {
		err = os.Rename(tmp, dst)
	}
	if err != nil && made {
		os.Remove(tmp)
	}
	d := time.Since(start)
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%s: %w (kvfs could not admit %d bytes and removed the object)", dst, err, len(data))
	}
	if err != nil {
		return err
	}
	if n != int64(len(data)) {
		return fmt.Errorf("%s: wrote %d bytes of %d", dst, n, len(data))
	}
	line := fmt.Sprintf("%s: %d bytes in %v, %s, %s", dst, n, d.Round(time.Microsecond), rate(n, d), how)
	if j.verify {
		want := crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))
		got, err := plainSum(dst)
		if err != nil {
			return fmt.Errorf("%s: stored, %d bytes, but --verify could not read it back: %w", dst, n, err)
		}
		if got != want {
			return fmt.Errorf("%s: checksum %08x read back through the mount, %08x written", dst, got, want)
		}
		line += fmt.Sprintf("; crc32c %08x matches a read back through the mount", got)
	}
	fmt.Fprintln(j.out, line)
	return nil
}

// openDestination opens dst for a put over the direct path: an object
// that exists, in place (refused untouched where the caller may not read
// it); a new one (made: the put made it, so it goes if the put fails)
// under a temporary name beside it, returned as tmp, or, where the name
// is too long for the additions, as dst itself. A new file is made 0600
// whatever the umask, so its owner can read its user.kvfs.backing (the
// command's one thread makes files); run gives it its mode.
func openDestination(dst string) (f *gpudirect.File, tmp string, made bool, err error) {
	_, err = os.Lstat(dst)
	if err == nil {
		if _, err := unix.Getxattr(dst, gpudirect.BackingXattr, nil); errors.Is(err, unix.EACCES) {
			// cp(1) is the way round only for a user who may write it
			// (an outside tester: a 0600 object of another user).
			through := "cp(1) writes it through the mount"
			if unix.Access(dst, unix.W_OK) != nil {
				through = "nor may you write it through the mount"
			}
			return nil, dst, false, fmt.Errorf("%s: the direct path reads the object's %s, which needs permission to read it: "+
				"left as it was (%s)", dst, gpudirect.BackingXattr, through)
		}
	}
	if !errors.Is(err, os.ErrNotExist) {
		f, err = gpudirect.Create(dst)
		return f, dst, false, err
	}
	for try := 0; ; try++ {
		// A name no one can take ahead of this put: the directory may be
		// shared (a sticky /tmp-like one).
		tmp = fmt.Sprintf(".%s.kvfs-put.%d.%08x", filepath.Base(dst), os.Getpid(), rand.Uint32())
		inPlace := len(tmp) > unix.NAME_MAX
		if inPlace {
			tmp = dst
		} else {
			tmp = filepath.Join(filepath.Dir(dst), tmp)
		}
		umask := unix.Umask(0o077)
		f, err = gpudirect.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		unix.Umask(umask)
		if inPlace || !errors.Is(err, os.ErrExist) || try == 8 {
			break
		}
	}
	if err != nil && tmp != dst {
		// Named as the user named it (an outside tester read the
		// temporary name in "not a file on a kvfs mount").
		var pe *os.PathError
		if errors.As(err, &pe) && pe.Path == tmp {
			pe.Path = dst
		} else if inner := errors.Unwrap(err); inner != nil && strings.HasPrefix(err.Error(), tmp+": ") {
			err = fmt.Errorf("%s: %w", dst, inner)
		}
	}
	return f, tmp, err == nil, err
}

// write writes data (or its copy on the GPU, at dev) to f.
func (j *putJob) write(f *gpudirect.File, data []byte, dev uintptr) (int64, string, error) {
	if j.gpu == nil {
		o := j.w.Options()
		n, err := j.w.Write(f, data)
		return n, fmt.Sprintf("%s from host buffers (%s x %d)", how(f), sizeName(o.Chunk), o.Depth), err
	}
	before, _ := j.gpu.Moved()
	n, err := j.gpu.Write(j.w, f, dev, int64(len(data)))
	route := "cudaMemcpy from the GPU into host buffers, then " + how(f)
	if after, _ := j.gpu.Moved(); after > before {
		route = "cuFile from the GPU"
	}
	return n, route, err
}

// toDevice copies data into fresh device memory, untimed.
func (j *putJob) toDevice(data []byte) (uintptr, error) {
	dev, err := j.gpu.Alloc(len(data))
	if err != nil {
		return 0, err
	}
	if err := j.gpu.CopyToDevice(dev, data); err != nil {
		j.gpu.Free(dev)
		return 0, err
	}
	return dev, nil
}
