package main

import (
	"errors"
	"flag"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"time"

	"github.com/kvfs/kvfs/gpudirect"
	"github.com/kvfs/kvfs/internal/usageerr"
)

// catJob is one `kvfs cat --direct` run.
type catJob struct {
	out    io.Writer
	r      *gpudirect.Reader
	gpu    *gpudirect.GPU // nil: host memory
	verify bool
	// unTimed is how long the last toDevice spent outside the transfer
	// (allocating, reading back for the checksum).
	unTimed time.Duration
}

// checkDirectFlags checks the direct path's flags of cat and put, each
// named alone: "--chunk 1048576 --depth 0" blamed a chunk no one gave
// (an outside tester).
func checkDirectFlags(gpu int, chunk int64, depth int) error {
	switch {
	case gpu < -1:
		return usageerr.Errorf("--gpu %d: want a device ordinal (0, 1, ...)", gpu)
	case chunk <= 0 || chunk > 1<<30 || chunk%gpudirect.Align != 0:
		return usageerr.Errorf("--chunk %d: want a chunk from 4KiB to 1GiB, a multiple of 4096", chunk)
	case depth <= 0 || depth > gpudirect.MaxDepth:
		return usageerr.Errorf("--depth %d: want a depth from 1 to %d", depth, gpudirect.MaxDepth)
	}
	return nil
}

func cmdCat(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("cat", flag.ContinueOnError)
	direct := fs.Bool("direct", false, "read through the direct path (pin through the mount, O_DIRECT on the stored file); required")
	gpu := fs.Int("gpu", -1, "read into this GPU's memory: cuFile where present, else host buffers and a copy")
	chunk := int64(gpudirect.DefaultChunk)
	fs.Var(sizeFlag{&chunk}, "chunk", "bytes per read, a multiple of 4096, like 4MiB")
	depth := fs.Int("depth", gpudirect.DefaultDepth, "reads in flight")
	verify := fs.Bool("verify", false, "also read each object plainly through the mount and compare CRC-32C checksums")
	paths, err := parse(fs, args, -1, "at least one PATH")
	if err != nil {
		return err
	}
	if !*direct {
		return usageerr.Errorf("--direct is required (kvfs cat reads only through the direct path; plain reads are cat(1))")
	}
	if err := checkDirectFlags(*gpu, chunk, *depth); err != nil {
		return err
	}
	r, err := gpudirect.NewReader(gpudirect.Options{Chunk: int(chunk), Depth: *depth})
	if err != nil {
		return usageerr.Errorf("%v", err)
	}
	defer r.Close()
	for _, p := range paths {
		if err := gpudirect.Check(p); errors.Is(err, os.ErrPermission) {
			// Refused as the open of a readable path is (exit 1), not
			// as a path that is no object on kvfs (an outside tester).
			return err
		} else if err != nil {
			return usageerr.Errorf("%v", err)
		}
	}
	job := &catJob{out: stdout, r: r, verify: *verify}
	notice := noticeFor("cat")
	if locked, why := r.Locked(); !locked {
		notice(why)
	}
	if *gpu >= 0 {
		if job.gpu, err = openGPU(*gpu, notice, "reading into host memory"); err != nil {
			return err
		}
		if job.gpu != nil {
			defer job.gpu.Close()
		}
	}
	return job.run(paths)
}

// noticeFor is how command cmd (cat, put) tells the user, on stderr,
// something they should know once.
func noticeFor(cmd string) func(string) {
	return func(msg string) { fmt.Fprintf(os.Stderr, "kvfs %s: %s\n", cmd, msg) }
}

// openGPU opens device n, its notices going to notice; without a CUDA
// runtime it says so and returns nil: host memory serves, doing what
// instead says.
func openGPU(n int, notice func(string), instead string) (*gpudirect.GPU, error) {
	g, err := gpudirect.OpenGPU(n, gpudirect.SystemLibraries, notice)
	if errors.Is(err, gpudirect.ErrNoRuntime) {
		notice(fmt.Sprintf("--gpu %d: %v; %s instead", n, err, instead))
		return nil, nil
	}
	return g, err
}

func (j *catJob) run(paths []string) error {
	var total int64
	var failed error
	start := time.Now()
	for _, p := range paths {
		n, err := j.one(p)
		total += n
		if err != nil {
			fmt.Fprintf(j.out, "%s: FAILED: %v\n", p, err)
			failed = errors.Join(failed, err)
		}
	}
	if len(paths) > 1 {
		d := time.Since(start)
		fmt.Fprintf(j.out, "total: %d bytes in %v, %s\n", total, d.Round(time.Microsecond), rate(total, d))
	}
	return failed
}

// one reads one object over the direct path, checks its byte count and,
// with --verify, its checksum against a plain read through the mount.
// The time is from Open to the last byte in place (host or device).
func (j *catJob) one(path string) (int64, error) {
	start := time.Now()
	f, err := gpudirect.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sum := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	var n int64
	var how string
	if j.gpu == nil {
		n, how, err = j.toHost(f, sum)
	} else {
		n, how, err = j.toDevice(f, sum)
		start = start.Add(j.unTimed)
	}
	d := time.Since(start)
	if err != nil {
		return n, err
	}
	if n != f.Size() {
		return n, fmt.Errorf("read %d bytes, the object has %d", n, f.Size())
	}
	line := fmt.Sprintf("%s: %d bytes in %v, %s, %s", path, n, d.Round(time.Microsecond), rate(n, d), how)
	if j.verify {
		plain, err := plainSum(path)
		if err != nil {
			return n, err
		}
		if plain != sum.Sum32() {
			return n, fmt.Errorf("checksum %08x over the direct path, %08x through the mount", sum.Sum32(), plain)
		}
		line += fmt.Sprintf("; crc32c %08x matches a plain read", plain)
	}
	fmt.Fprintln(j.out, line)
	return n, nil
}

// how names the route of a file's bytes.
func how(f *gpudirect.File) string {
	if direct, _ := f.Direct(); !direct {
		return "buffered (the store refuses O_DIRECT)"
	}
	return "O_DIRECT"
}

// toHost streams the object through the reader's buffers; sum sees the
// bytes when verifying.
func (j *catJob) toHost(f *gpudirect.File, sum hash.Hash32) (int64, string, error) {
	o := j.r.Options()
	n, err := j.r.Stream(f, func(_ int64, b []byte) error {
		if j.verify {
			sum.Write(b)
		}
		return nil
	})
	return n, fmt.Sprintf("%s into host buffers (%s x %d)", how(f), sizeName(o.Chunk), o.Depth), err
}

// toDevice reads the object into fresh device memory; with --verify it
// then copies it back through host memory into sum. The allocation and
// the read-back are not the transfer: j.unTimed says how long they took.
func (j *catJob) toDevice(f *gpudirect.File, sum hash.Hash32) (int64, string, error) {
	t0 := time.Now()
	dev, err := j.gpu.Alloc(int(f.Size()))
	if err != nil {
		return 0, "", err
	}
	defer j.gpu.Free(dev)
	j.unTimed = time.Since(t0)
	before, _ := j.gpu.Moved()
	n, err := j.gpu.Read(j.r, f, dev)
	route := how(f) + " into host buffers, then cudaMemcpy to the GPU"
	if after, _ := j.gpu.Moved(); after > before {
		route = "cuFile into the GPU"
	}
	if err != nil || !j.verify {
		return n, route, err
	}
	t1 := time.Now()
	buf := make([]byte, j.r.Options().Chunk)
	for off := int64(0); off < n; off += int64(len(buf)) {
		b := buf[:min(int64(len(buf)), n-off)]
		if err := j.gpu.CopyFromDevice(b, dev+uintptr(off)); err != nil {
			return n, route, err
		}
		sum.Write(b)
	}
	j.unTimed += time.Since(t1)
	return n, route, nil
}

// plainSum is the CRC-32C of a plain read of path through the mount.
func plainSum(path string) (uint32, error) {
	fl, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer fl.Close()
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	_, err = io.CopyBuffer(h, fl, make([]byte, 1<<20))
	return h.Sum32(), err
}

func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "- B/s"
	}
	return fmt.Sprintf("%.3g GB/s (%.0f bytes/s)", float64(n)/1e9/d.Seconds(), float64(n)/d.Seconds())
}

func sizeName(n int) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}
