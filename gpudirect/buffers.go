package gpudirect

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Defaults of Options, chosen by measurement (docs/gpudirect.md has the
// table): cold 32 MiB objects read fastest with 1 MiB reads four at a
// time on the disk measured; larger chunks or more depth added nothing.
// The 4 MiB of buffers also fit the 8 MiB an unprivileged user may
// page-lock by default.
const (
	DefaultChunk = 1 << 20
	DefaultDepth = 4
	// MaxDepth bounds the reads in flight (and the goroutines that issue
	// them).
	MaxDepth = 64
)

// Options tune the data path; the zero value takes the defaults.
type Options struct {
	// Chunk is the bytes per read or write, a multiple of Align.
	Chunk int
	// Depth is how many reads or writes are in flight at once.
	Depth int
}

// withDefaults fills in the defaults and checks the values.
func (o Options) withDefaults() (Options, error) {
	if o.Chunk == 0 {
		o.Chunk = DefaultChunk
	}
	if o.Depth == 0 {
		o.Depth = DefaultDepth
	}
	if o.Chunk < 0 || o.Chunk%Align != 0 || o.Chunk > 1<<30 {
		return o, fmt.Errorf("chunk %d: want a positive multiple of %d, at most 1 GiB", o.Chunk, Align)
	}
	if o.Depth < 0 || o.Depth > MaxDepth {
		return o, fmt.Errorf("depth %d: want 1 to %d", o.Depth, MaxDepth)
	}
	return o, nil
}

// buffers are depth page-aligned host buffers of chunk bytes each, in
// one anonymous mapping, page-locked when the memlock limit allows.
type buffers struct {
	mem    []byte
	bufs   [][]byte
	locked bool
	why    string // why not locked, when not
}

func newBuffers(chunk, depth int) (*buffers, error) {
	mem, err := unix.Mmap(-1, 0, chunk*depth, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes of buffers: %w", chunk*depth, err)
	}
	b := &buffers{mem: mem}
	if err := unix.Mlock(mem); err != nil {
		b.why = fmt.Sprintf("cannot page-lock %d bytes of buffers (%v; see RLIMIT_MEMLOCK, ulimit -l); using them unlocked", len(mem), err)
	} else {
		b.locked = true
	}
	for i := 0; i < depth; i++ {
		b.bufs = append(b.bufs, mem[i*chunk:(i+1)*chunk:(i+1)*chunk])
	}
	return b, nil
}

// close unmaps the buffers, which also unlocks them.
func (b *buffers) close() error { return unix.Munmap(b.mem) }
