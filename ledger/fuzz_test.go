package ledger

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// The fuzz target drives a ledger and an independent reference model with
// the same operation sequence and compares them after every step. The model
// keeps plain per-object fields and an LRU slice, and predicts exactly which
// victims an admission evicts.

const (
	fzSlots = 16
	fzCap   = 16 * BlockSize
	fzGrace = 50 * time.Millisecond
	fzMaxOp = 2000
)

type mObj struct {
	id                   ID
	size                 int64
	nlink, pins, writers int
	lastClose            int64
}

type model struct {
	now        int64
	objs       map[ID]*mObj
	order      []ID // least recently used first
	slotID     [fzSlots]ID
	nextGen    ID
	gone       map[ID]bool // released, evicted or forgotten: never again
	evictions  int64
	evicted    int64
	refusals   int64
	reconciled int64
}

// mCharge rounds up with its own arithmetic, not the ledger's Charge.
func mCharge(n int64) int64 {
	if n <= 0 {
		return 0
	}
	b := n / 4096
	if n%4096 != 0 {
		b++
	}
	return b * 4096
}

func (m *model) used() (used int64) {
	for _, o := range m.objs {
		used += mCharge(o.size)
	}
	return used
}

func (m *model) touch(id ID) {
	for i, x := range m.order {
		if x == id {
			m.order = append(append(m.order[:i:i], m.order[i+1:]...), id)
			return
		}
	}
	panic("touch of an object not in order")
}

func (m *model) drop(id ID) {
	delete(m.objs, id)
	for i, x := range m.order {
		if x == id {
			m.order = append(m.order[:i:i], m.order[i+1:]...)
			break
		}
	}
	m.gone[id] = true
}

func (m *model) add(o *mObj) {
	m.objs[o.id] = o
	m.order = append(m.order, o.id)
}

// cur is the live object in a slot, or nil; id is what the op addresses.
func (m *model) cur(slot int) (ID, *mObj) {
	id := m.slotID[slot]
	return id, m.objs[id]
}

func (m *model) fresh(slot int) ID {
	m.nextGen++
	id := ID(slot) + fzSlots*m.nextGen
	m.slotID[slot] = id
	return id
}

// evict predicts the victims, oldest first, or nil if need cannot be met.
func (m *model) evict(need int64, self ID) ([]Victim, bool) {
	var out []Victim
	var freed int64
	for _, id := range m.order {
		if freed >= need {
			break
		}
		o := m.objs[id]
		recent := o.lastClose != 0 && m.now-o.lastClose < int64(fzGrace)
		if id == self || o.pins > 0 || recent {
			continue
		}
		out = append(out, Victim{ID: id, Charge: mCharge(o.size)})
		freed += mCharge(o.size)
	}
	if freed < need {
		return nil, false
	}
	return out, true
}

func (m *model) commit(v []Victim) {
	for _, x := range v {
		m.evictions++
		m.evicted += x.Charge
		m.drop(x.ID)
	}
}

// room predicts makeRoom: victims and whether n more bytes fit.
func (m *model) room(n int64, self ID) ([]Victim, bool) {
	free := fzCap - m.used()
	if free >= n {
		return nil, true
	}
	return m.evict(n-free, self)
}

type fuzzRun struct {
	t     *testing.T
	l     *Ledger
	m     *model
	clock *fakeClock
	step  int
	desc  string
}

func (r *fuzzRun) failf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("step %d (%s): %s", r.step, r.desc, fmt.Sprintf(format, args...))
}

// victims compares actual victims with the model's prediction and checks
// the plain rules independently: never pinned, never released before.
func (r *fuzzRun) victims(got, want []Victim) {
	r.t.Helper()
	for _, v := range got {
		o := r.m.objs[v.ID]
		switch {
		case r.m.gone[v.ID]:
			r.failf("victim %d was already released", v.ID)
		case o == nil:
			r.failf("victim %d unknown to the model", v.ID)
		case o.pins > 0:
			r.failf("victim %d was pinned (%d pins)", v.ID, o.pins)
		case v.Charge != mCharge(o.size):
			r.failf("victim %d charge %d, model %d", v.ID, v.Charge, mCharge(o.size))
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		r.failf("victims %v, model predicts %v", got, want)
	}
}

func (r *fuzzRun) errIs(got, want error) {
	r.t.Helper()
	if !errors.Is(got, want) && !(got == nil && want == nil) {
		r.failf("error %v, model expects %v", got, want)
	}
}

func (r *fuzzRun) released(id ID, got, want bool) {
	r.t.Helper()
	if got != want {
		r.failf("released(%d) = %v, model expects %v", id, got, want)
	}
	if got {
		if r.m.gone[id] {
			r.failf("%d released twice", id)
		}
		r.m.drop(id)
	}
}

func (r *fuzzRun) check(prevUsed int64, reconciled bool) {
	r.t.Helper()
	if err := r.l.CheckInvariants(); err != nil {
		r.failf("invariants: %v", err)
	}
	st := r.l.Stats()
	var want Stats
	want.CapacityBytes = fzCap
	for _, o := range r.m.objs {
		c := mCharge(o.size)
		want.UsedBytes += c
		want.Objects++
		if o.pins > 0 {
			want.PinnedObjects++
			want.PinnedBytes += c
		}
		if o.nlink == 0 {
			want.ShadowBytes += c
		}
		size, charge, ok := r.l.Size(o.id)
		if !ok || size != o.size || charge != c {
			r.failf("Size(%d) = %d/%d/%v, model %d/%d", o.id, size, charge, ok, o.size, c)
		}
		if w := r.l.Writers(o.id); w != o.writers {
			r.failf("Writers(%d) = %d, model %d", o.id, w, o.writers)
		}
	}
	want.Evictions, want.EvictedBytes = r.m.evictions, r.m.evicted
	want.AdmissionFailures, want.Reconciliations = r.m.refusals, r.m.reconciled
	if st != want {
		r.failf("stats\n got %+v\nwant %+v", st, want)
	}
	// Only Reconcile may push used over capacity; nothing else may add
	// to an overshoot.
	if st.UsedBytes > fzCap && !reconciled && st.UsedBytes > prevUsed {
		r.failf("used %d > capacity %d (was %d)", st.UsedBytes, int64(fzCap), prevUsed)
	}
}

// size decodes a byte into sizes up to ~3x the capacity, with odd values
// off block boundaries.
func fzSize(b byte) int64 {
	s := int64(b>>1) * 3 * fzCap / 127
	if b&1 == 1 {
		s += int64(b) * 7 % BlockSize
	}
	return s
}

func (r *fuzzRun) do(op, slot int, arg byte) (reconciled bool) {
	l, m := r.l, r.m
	id, o := m.cur(slot)
	write := arg&1 == 1
	switch op {
	case 0, 1: // Create (weighted: it feeds everything else)
		if o != nil {
			r.desc = fmt.Sprintf("Create(%d) exists", id)
			r.errIs(l.Create(id, write), ErrExists)
			return
		}
		id = m.fresh(slot)
		r.desc = fmt.Sprintf("Create(%d, %v)", id, write)
		r.errIs(l.Create(id, write), nil)
		o = &mObj{id: id, nlink: 1, pins: 1}
		if write {
			o.writers = 1
		}
		m.add(o)
	case 2: // Open
		r.desc = fmt.Sprintf("Open(%d, %v)", id, write)
		if o == nil {
			r.errIs(l.Open(id, write), ErrGone)
			return
		}
		r.errIs(l.Open(id, write), nil)
		o.pins++
		if write {
			o.writers++
		}
		m.touch(id)
	case 3, 4: // Close, in a mode the handles allow
		if o == nil || o.pins == 0 {
			r.desc = fmt.Sprintf("Close(%d) unpinned", id)
			r.released(id, l.Close(id, write), false)
			return
		}
		if write && o.writers == 0 {
			write = false
		} else if !write && o.pins == o.writers {
			write = true
		}
		r.desc = fmt.Sprintf("Close(%d, %v)", id, write)
		got := l.Close(id, write)
		o.pins--
		if write {
			o.writers--
		}
		if write {
			o.lastClose = m.now
		}
		m.touch(id)
		r.released(id, got, o.pins == 0 && o.nlink == 0)
	case 5, 6: // Grow
		end := fzSize(arg)
		r.desc = fmt.Sprintf("Grow(%d, %d)", id, end)
		v, err := l.Grow(id, end)
		if o == nil {
			r.errIs(err, ErrGone)
			r.victims(v, nil)
			return
		}
		if end <= o.size { // never shrinks
			r.errIs(err, nil)
			r.victims(v, nil)
			return
		}
		want, werr := m.predictResize(o, end)
		r.errIs(err, werr)
		r.victims(v, want)
		m.commitResize(o, end, want, werr)
	case 7: // SetSize
		size := fzSize(arg)
		r.desc = fmt.Sprintf("SetSize(%d, %d)", id, size)
		v, err := l.SetSize(id, size)
		if o == nil {
			r.errIs(err, ErrGone)
			r.victims(v, nil)
			return
		}
		want, werr := m.predictResize(o, size)
		r.errIs(err, werr)
		r.victims(v, want)
		m.commitResize(o, size, want, werr)
	case 8: // Link
		r.desc = fmt.Sprintf("Link(%d)", id)
		if o == nil {
			r.errIs(l.Link(id), ErrGone)
			return
		}
		r.errIs(l.Link(id), nil)
		o.nlink++
	case 9: // Unlink
		r.desc = fmt.Sprintf("Unlink(%d)", id)
		got := l.Unlink(id)
		if o == nil || o.nlink == 0 {
			r.released(id, got, false)
			return
		}
		o.nlink--
		r.released(id, got, o.nlink == 0 && o.pins == 0)
	case 10: // clock
		d := time.Duration(arg) * fzGrace / 64
		r.desc = fmt.Sprintf("Advance(%v)", d)
		r.clock.Advance(d)
		m.now += int64(d)
	case 11: // Touch
		r.desc = fmt.Sprintf("Touch(%d)", id)
		l.Touch(id)
		if o != nil {
			m.touch(id)
		}
	case 12: // Restore into an empty slot
		if o != nil {
			r.desc = fmt.Sprintf("Restore(%d) exists", id)
			_, err := l.Restore(id, 0, 1)
			r.errIs(err, ErrExists)
			return
		}
		id = m.fresh(slot)
		size, nlink := fzSize(arg), 1+int(arg%3)
		r.desc = fmt.Sprintf("Restore(%d, %d, %d)", id, size, nlink)
		v, err := l.Restore(id, size, nlink)
		if mCharge(size) > fzCap {
			r.errIs(err, nil)
			if len(v) != 1 || v[0] != (Victim{ID: id}) {
				r.failf("too-large restore gave %v", v)
			}
			m.gone[id] = true
			return
		}
		want, ok := m.room(mCharge(size), 0)
		if !ok {
			r.errIs(err, ErrNoSpace)
			r.victims(v, nil)
			return
		}
		r.errIs(err, nil)
		r.victims(v, want)
		m.commit(want)
		m.add(&mObj{id: id, size: size, nlink: nlink})
	case 13: // Reconcile, then usually Trim
		size := fzSize(arg)
		r.desc = fmt.Sprintf("Reconcile(%d, %d)", id, size)
		got := l.Reconcile(id, size)
		want := o != nil && o.size != size
		if got != want {
			r.failf("Reconcile = %v, model %v", got, want)
		}
		if want {
			o.size = size
			m.reconciled++
		}
		return true
	case 14: // Trim
		r.desc = "Trim"
		v := l.Trim()
		var want []Victim
		if over := m.used() - fzCap; over > 0 {
			want, _ = m.evict(over, 0)
		}
		r.victims(v, want)
		m.commit(want)
	case 15: // Forget
		r.desc = fmt.Sprintf("Forget(%d)", id)
		got := l.Forget(id)
		if got != (o != nil) {
			r.failf("Forget = %v, model %v", got, o != nil)
		}
		if o != nil {
			m.drop(id)
			m.reconciled++
		}
	case 16: // WaitHint
		n := fzSize(arg)
		r.desc = fmt.Sprintf("WaitHint(%d)", n)
		var writeBytes int64
		for _, o := range m.objs {
			if o.writers > 0 {
				writeBytes += mCharge(o.size)
			}
		}
		got := l.WaitHint(n)
		if (got == 0) != (n > fzCap-writeBytes) {
			r.failf("WaitHint = %v with write bytes %d", got, writeBytes)
		}
	}
	return false
}

const fzOps = 17

func (m *model) predictResize(o *mObj, size int64) ([]Victim, error) {
	delta := mCharge(size) - mCharge(o.size)
	if delta <= 0 {
		return nil, nil
	}
	if mCharge(size) > fzCap {
		return nil, ErrTooLarge
	}
	v, ok := m.room(delta, o.id)
	if !ok {
		return nil, ErrNoSpace
	}
	return v, nil
}

func (m *model) commitResize(o *mObj, size int64, v []Victim, err error) {
	if err != nil {
		m.refusals++
		return
	}
	m.commit(v)
	o.size = size
}

func FuzzLedger(f *testing.F) {
	f.Add([]byte{})
	// Fill past capacity with closed objects, then advance and refill.
	f.Add([]byte{
		0, 0, 1, 5, 0, 200, 3, 0, 1,
		0, 1, 1, 5, 1, 200, 3, 1, 1,
		0, 2, 1, 5, 2, 250, 10, 0, 255,
		5, 2, 255, 3, 2, 1, 0, 3, 0, 5, 3, 90,
	})
	// Shadow: create, open, unlink, close twice; link revives; unlink of
	// a closed object releases it at once.
	f.Add([]byte{0, 4, 1, 5, 4, 33, 2, 4, 0, 9, 4, 0, 3, 4, 1, 3, 4, 0, 9, 4, 0,
		0, 5, 0, 2, 5, 1, 9, 5, 0, 8, 5, 0, 3, 5, 0, 3, 5, 1, 9, 5, 0,
		0, 6, 1, 5, 6, 40, 8, 6, 0, 3, 6, 1, 9, 6, 0, 9, 6, 0, 9, 6, 0})
	// Restore over capacity, reconcile up, trim, forget, wait hint.
	f.Add([]byte{12, 0, 100, 12, 1, 100, 12, 2, 101, 12, 3, 40, 13, 3, 255, 14, 0, 0,
		15, 1, 0, 16, 0, 20, 2, 2, 1, 16, 0, 20, 11, 0, 0, 14, 0, 0})
	// Grace boundary: close, advance just under, grow, advance, grow.
	f.Add([]byte{0, 0, 1, 7, 0, 120, 3, 0, 1, 0, 1, 1, 10, 0, 63, 7, 1, 130,
		10, 0, 2, 7, 1, 130, 6, 1, 254})
	f.Fuzz(func(t *testing.T, data []byte) {
		clock := newClock()
		r := &fuzzRun{
			t:     t,
			l:     New(Config{Capacity: fzCap, Grace: fzGrace, Now: clock.Now}),
			clock: clock,
			m: &model{
				now:  clock.ns.Load(),
				objs: make(map[ID]*mObj),
				gone: make(map[ID]bool),
			},
		}
		for i := 0; i+2 < len(data) && r.step < fzMaxOp; i += 3 {
			r.step++
			prev := r.l.Stats().UsedBytes
			reconciled := r.do(int(data[i])%fzOps, int(data[i+1])%fzSlots, data[i+2])
			r.check(prev, reconciled)
		}
		// Closing every handle releases all shadow bytes, once each.
		for _, o := range r.m.objs {
			for o.pins > 0 {
				w := o.writers > 0
				got := r.l.Close(o.id, w)
				o.pins--
				if w {
					o.writers--
				}
				r.desc = fmt.Sprintf("final Close(%d)", o.id)
				r.released(o.id, got, o.pins == 0 && o.nlink == 0)
			}
		}
		r.check(r.l.Stats().UsedBytes, false)
		if st := r.l.Stats(); st.PinnedObjects != 0 || st.ShadowBytes != 0 {
			t.Fatalf("after closing everything: %+v", st)
		}
	})
}
