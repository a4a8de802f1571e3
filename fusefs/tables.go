package fusefs

import (
	"sync"
	"sync/atomic"

	"github.com/kvfs/kvfs/core"
)

// handleTable numbers open handles for the kernel: a FUSE file handle is
// an index into slots, reused once released. A request holds its handle
// (get) until it returns (put), and take, at RELEASE, waits for those, so
// a handle's stored file is never closed under a request that uses it
// (its descriptor number could be reused meanwhile). The kernel sends a
// RELEASE only once no request of the file is in flight; this makes that
// a property of kvfs, not an assumption.
type handleTable[T any] struct {
	mu    sync.RWMutex
	slots []slot[T] // GUARDED_BY(mu); index 0 is never used
	free  []uint64  // GUARDED_BY(mu)
}

type slot[T any] struct {
	v    T
	used bool
	busy *sync.WaitGroup
}

// add gives v a handle number.
func (t *handleTable[T]) add(v T) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.slots) == 0 {
		t.slots = append(t.slots, slot[T]{})
	}
	s := slot[T]{v: v, used: true, busy: new(sync.WaitGroup)}
	if n := len(t.free); n > 0 {
		fh := t.free[n-1]
		t.free = t.free[:n-1]
		t.slots[fh] = s
		return fh
	}
	t.slots = append(t.slots, s)
	return uint64(len(t.slots) - 1)
}

// get is the handle numbered fh, held until put; ok is false for a
// number no open handle has.
func (t *handleTable[T]) get(fh uint64) (v T, put func(), ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if fh >= uint64(len(t.slots)) || !t.slots[fh].used {
		return v, nil, false
	}
	s := t.slots[fh]
	s.busy.Add(1)
	return s.v, s.busy.Done, true
}

// take removes the handle numbered fh, once no request holds it.
func (t *handleTable[T]) take(fh uint64) (v T, ok bool) {
	t.mu.Lock()
	if fh >= uint64(len(t.slots)) || !t.slots[fh].used {
		t.mu.Unlock()
		return v, false
	}
	s := t.slots[fh]
	t.slots[fh] = slot[T]{}
	t.free = append(t.free, fh)
	t.mu.Unlock()
	s.busy.Wait()
	return s.v, true
}

// objects are the objects with open handles, each with what its
// handles share. An object is here from its first handle's open to its
// last one's release; the kernel's names for it cost nothing.
type objects struct {
	mu sync.RWMutex
	m  map[core.ID]*object // GUARDED_BY(mu)
}

func (o *objects) init() { o.m = map[core.ID]*object{} }

// hold is id's record, made if needed, counted until drop.
func (o *objects) hold(f *FS, id core.ID) *object {
	o.mu.Lock()
	defer o.mu.Unlock()
	ob := o.m[id]
	if ob == nil {
		ob = &object{fs: f, id: id}
		o.m[id] = ob
	}
	ob.refs++
	return ob
}

// drop ends a hold.
func (o *objects) drop(ob *object) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ob.refs--; ob.refs == 0 {
		delete(o.m, ob.id)
	}
}

// get is id's record, if it has open handles; nil otherwise.
func (o *objects) get(id core.ID) *object {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.m[id]
}

// each calls fn on every open handle, under the table's lock: fn may
// not use the handle's file unless no request can release it (the file
// system is quiesced); get it for that.
func (t *handleTable[T]) each(fn func(fh uint64, v T)) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for fh, s := range t.slots {
		if s.used {
			fn(uint64(fh), s.v)
		}
	}
}

// putAt gives v the number fh, which a predecessor gave it (a
// handover); reindex after the last.
func (t *handleTable[T]) putAt(fh uint64, v T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for uint64(len(t.slots)) <= fh {
		t.slots = append(t.slots, slot[T]{})
	}
	t.slots[fh] = slot[T]{v: v, used: true, busy: new(sync.WaitGroup)}
}

// reindex lists the numbers putAt left free.
func (t *handleTable[T]) reindex() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.free = t.free[:0]
	for fh := len(t.slots) - 1; fh > 0; fh-- {
		if !t.slots[fh].used {
			t.free = append(t.free, uint64(fh))
		}
	}
}

// count is how many handles are open.
func (t *handleTable[T]) count() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := 0
	if len(t.slots) > 0 {
		n = len(t.slots) - 1 - len(t.free)
	}
	return n
}

// kernelNodes are nodes of the adapter's own, not the core's (the remote
// tier's placeholders, the names a mount answers while it loads), which
// live as long as the kernel's lookups of them: by node ID, and by name,
// where a name's newest node is the one a lookup finds again.
type kernelNodes[N kernelNode] struct {
	n      atomic.Int64 // how many: none, and requests skip the lock
	mu     sync.Mutex
	byID   map[core.ID]N // GUARDED_BY(mu)
	byName map[nameKey]N // GUARDED_BY(mu)
}

// kernelNode is a node of a kernelNodes.
type kernelNode interface {
	comparable
	nodeID() core.ID
	key() nameKey
	// lookupCount counts the kernel's lookups not yet forgotten;
	// GUARDED_BY(its kernelNodes' mu).
	lookupCount() *uint64
}

type nameKey struct {
	parent core.ID
	name   string
}

func (p *kernelNodes[N]) init() {
	p.byID, p.byName = map[core.ID]N{}, map[nameKey]N{}
}

// some is up to n of the nodes, in no order, each with its lookups not
// yet forgotten.
func (p *kernelNodes[N]) some(n int) (nodes []N, lookups []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, x := range p.byID {
		if len(nodes) == n {
			break
		}
		nodes, lookups = append(nodes, x), append(lookups, *x.lookupCount())
	}
	return nodes, lookups
}

// get is node id, or the zero N.
func (p *kernelNodes[N]) get(id core.ID) N {
	if p.n.Load() == 0 {
		var none N
		return none
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byID[id]
}

// named is the node a lookup of k finds again, or the zero N.
func (p *kernelNodes[N]) named(k nameKey) N {
	if p.n.Load() == 0 {
		var none N
		return none
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byName[k]
}

// nameOf is the name node id stands for, if it still does.
func (p *kernelNodes[N]) nameOf(id core.ID) (nameKey, bool) {
	if p.n.Load() == 0 {
		return nameKey{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.byID[id]
	if !ok {
		return nameKey{}, false
	}
	k := n.key()
	return k, p.byName[k] == n
}

// lookedUp counts a lookup of name k: of its node when keep says it
// still stands for what the lookup found, else of a new one from make.
func (p *kernelNodes[N]) lookedUp(k nameKey, keep func(N) bool, make func() N) N {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.byName[k]
	if !ok || !keep(n) {
		n = make()
		p.byID[n.nodeID()], p.byName[k] = n, n
		p.n.Add(1)
	}
	*n.lookupCount()++
	return n
}

// moved has the node named k named nk from now on (a rename the
// adapter made); set records the new name in the node.
func (p *kernelNodes[N]) moved(k, nk nameKey, set func(N, nameKey)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.byName[k]
	if !ok {
		return
	}
	delete(p.byName, k)
	set(n, nk)
	p.byName[nk] = n
}

// removed has the node named k stand for no name from now on (an
// unlink the adapter made); set records that in the node. A lookup of k
// makes a new node.
func (p *kernelNodes[N]) removed(k nameKey, set func(N)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, ok := p.byName[k]; ok {
		delete(p.byName, k)
		set(n)
	}
}

// forget counts the kernel's forgetting of n lookups of node id; the
// node goes with the last.
func (p *kernelNodes[N]) forget(id core.ID, n uint64) {
	if p.n.Load() == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.byID[id]
	if !ok {
		return
	}
	if c := r.lookupCount(); *c > n {
		*c -= n
		return
	}
	delete(p.byID, id)
	if k := r.key(); p.byName[k] == r {
		delete(p.byName, k)
	}
	p.n.Add(-1)
}

// rewrites are the objects whose bytes were changed in place since the
// mount: opened by a writer once they existed, or truncated by name. A
// plain reader of one that the daemon serves reads with direct I/O (see
// object.adopt). Object IDs are never used again, so a mark outlives
// its object harmlessly; past rewritesMax marks the set starts again,
// and those objects' readers use the page cache as before.
type rewrites struct {
	mu sync.Mutex
	m  map[core.ID]struct{} // GUARDED_BY(mu)
}

const rewritesMax = 1 << 16

func (r *rewrites) mark(id core.ID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= rewritesMax {
		r.m = map[core.ID]struct{}{}
	}
	r.m[id] = struct{}{}
}

func (r *rewrites) has(id core.ID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.m[id]
	return ok
}

// all lists the marks, for a successor (a handover).
func (r *rewrites) all() []core.ID {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]core.ID, 0, len(r.m))
	for id := range r.m {
		ids = append(ids, id)
	}
	return ids
}
