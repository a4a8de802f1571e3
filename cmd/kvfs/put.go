package main

import (
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
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
	if *gpu < -1 || chunk <= 0 || chunk > 1<<30 || *depth <= 0 || *depth > gpudirect.MaxDepth {
		return usageerr.Errorf("--gpu %d --chunk %d --depth %d: want a device ordinal, a chunk from 4KiB to 1GiB and a depth from 1 to %d", *gpu, chunk, *depth, gpudirect.MaxDepth)
	}
	if st, err := os.Stat(args[1]); err == nil && st.IsDir() || strings.HasSuffix(args[1], "/") {
		return usageerr.Errorf("DST %s is a directory: name the object to write", args[1])
	}
	data, err := readSource(args[0])
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
	return job.run(data, args[1])
}

// readSource reads SRC ("-": standard input) whole: the transfer timed
// is the write, not the read of its source.
func readSource(src string) ([]byte, error) {
	if src == "-" {
		return io.ReadAll(os.Stdin)
	}
	data, err := os.ReadFile(src)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.EISDIR) || errors.Is(err, os.ErrPermission) {
		return nil, usageerr.Errorf("SRC %v", err)
	}
	return data, err
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
// bytes written so far and zeros after, at the new size. So is a name
// too long for the temporary name's additions.
func (j *putJob) run(data []byte, dst string) error {
	var dev uintptr
	if j.gpu != nil {
		var err error
		if dev, err = j.toDevice(data); err != nil {
			return err
		}
		defer j.gpu.Free(dev)
	}
	start := time.Now()
	tmp := dst
	if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
		if name := fmt.Sprintf(".%s.kvfs-put.%d", filepath.Base(dst), os.Getpid()); len(name) <= unix.NAME_MAX {
			tmp = filepath.Join(filepath.Dir(dst), name)
		}
	}
	var f *gpudirect.File
	var err error
	if tmp != dst {
		f, err = gpudirect.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	} else {
		f, err = gpudirect.Create(dst)
	}
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Path == tmp {
		pe.Path = dst
	}
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
	if err == nil && tmp != dst {
		err = os.Rename(tmp, dst)
	}
	if err != nil && tmp != dst {
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
			return err
		}
		if got != want {
			return fmt.Errorf("%s: checksum %08x read back through the mount, %08x written", dst, got, want)
		}
		line += fmt.Sprintf("; crc32c %08x matches a read back through the mount", got)
	}
	fmt.Fprintln(j.out, line)
	return nil
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
