package ramcache

import "sync"

// pageSize is the unit reads are tracked in: the kernel asks for an
// object's pages whole, in readahead batches, in any order.
const pageSize = 4096

// Fill assembles a copy of one object from the reads that already pass
// through the daemon, so filling costs one memory copy per byte and no
// extra I/O, and nothing for a reader that sends no read. It is put in
// the tier when every page has been read, unless Drop cancelled it
// meanwhile.
type Fill struct {
	c     *Cache
	id    uint64
	stamp Stamp

	mu sync.Mutex
	// GUARDED_BY(mu). data is the copy, made at the first read; have
	// marks the pages copied; left counts those still missing.
	data []byte
	have []uint64
	left int
	done bool
	// GUARDED_BY(c.mu).
	cancelled bool
}

// StartFill begins a copy of object id as st describes it, or returns
// nil when the object is empty, too large for the tier, or fills in
// flight already hold as much memory as the tier itself may.
func (c *Cache) StartFill(id uint64, st Stamp) *Fill {
	if c == nil || st.Size <= 0 || st.Size > c.maxObject {
		return nil
	}
	pages := int((st.Size + pageSize - 1) / pageSize)
	f := &Fill{c: c, id: id, stamp: st, have: make([]uint64, (pages+63)/64), left: pages}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fillBytes+st.Size > c.capacity {
		return nil
	}
	c.fillBytes += st.Size // its buffer comes with its first read (Add)
	c.filling[id] = append(c.filling[id], f)
	return f
}

// Add records bytes read from the object at off. Pages count as copied
// only when covered whole (or up to the end of the object).
func (f *Fill) Add(off int64, b []byte) {
	if f == nil || off < 0 || off >= f.stamp.Size || len(b) == 0 {
		return
	}
	end := min(off+int64(len(b)), f.stamp.Size)
	first := (off + pageSize - 1) / pageSize
	last := end / pageSize // exclusive, unless end is the object's end
	if end == f.stamp.Size {
		last = (end + pageSize - 1) / pageSize
	}
	if first >= last {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return
	}
	if f.data == nil {
		// Made here, not at the open: a reader whose pages the kernel
		// still caches (FOPEN_KEEP_CACHE) sends no read, and a buffer
		// of the object's size made and dropped at each such open cost
		// about 0.5 ms an open (an outside tester: warm reads of objects
		// up to 16 MiB at a third of the rate without the tier).
		f.data = make([]byte, f.stamp.Size)
	}
	copy(f.data[off:end], b[:end-off])
	for p := first; p < last; p++ {
		w, bit := p/64, uint64(1)<<(p%64)
		if f.have[w]&bit == 0 {
			f.have[w] |= bit
			f.left--
		}
	}
	if f.left == 0 {
		f.done = true
		f.c.finish(f, true)
	}
}

// Abandon ends a fill that will not complete (its handle closed first).
func (f *Fill) Abandon() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.done {
		f.done = true
		f.c.finish(f, false)
	}
}

// finish takes f out of the fills in flight and, when complete and not
// cancelled, offers its copy to the tier. Offering under c.mu orders it
// before any later Drop's delete.
func (c *Cache) finish(f *Fill, complete bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fillBytes -= f.stamp.Size
	fs := c.filling[f.id]
	for i, g := range fs {
		if g == f {
			fs = append(fs[:i:i], fs[i+1:]...)
			break
		}
	}
	if len(fs) == 0 {
		delete(c.filling, f.id)
	} else {
		c.filling[f.id] = fs
	}
	if !complete || f.cancelled {
		return
	}
	if c.offer(&copyOf{id: f.id, stamp: f.stamp, data: f.data}) {
		c.bytes.Add(int64(len(f.data)))
		c.fills.Add(1)
	}
}
