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
	res, over            int64
	budget               int64 // the most res was while writers held it
	settledPast          bool  // a settle admitted it past its limit
	kept                 bool  // its only writer's close kept res, unshown
	nlink, pins, writers int
	lastClose, lastUse   int64
	final                bool
	priorClose           int64 // lastClose when its first writer opened
	unchanged            bool  // Unchanged since the last writer opened
	loose                bool  // Loosen: reclaimed even where firm
}

// charge is what the object costs: its size, or its reservation while a
// writer holds one.
func (o *mObj) charge() int64   { return max(mCharge(o.size), o.res) }
func (o *mObj) admitted() int64 { return o.charge() - o.over }

// limit is what a writer's growth may evict for: twice its budget, at
// least a quarter of the capacity.
func (o *mObj) limit() int64 { return max(2*o.budget, fzCap/4) }

// keptPart is the part of the charge no figure shows: the reservation
// past its size that a close of its only writer kept.
func (o *mObj) keptPart() int64 {
	if !o.kept || o.writers == 0 {
		return 0
	}
	return o.charge() - mCharge(o.size)
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
	peak       peakWindow
	// writing lists the objects with writers, in the order the first
	// writer of each opened.
	writing []ID
	// freeOnly: the op runs as a ...Free method.
	freeOnly bool
	// evictAtMost: the op runs as ReserveEvictingAtMost's (0: no bound).
	evictAtMost int64
	// firm: Config.FirmReservations, no reservation is taken back.
	firm bool
}

// startWriter and endWriter keep m.writing as a writer count of o
// leaves or reaches zero.
func (m *model) startWriter(o *mObj) {
	if o.writers == 0 {
		m.writing = append(m.writing, o.id)
	}
}

func (m *model) endWriter(id ID) {
	for i, x := range m.writing {
		if x == id {
			m.writing = append(m.writing[:i:i], m.writing[i+1:]...)
			return
		}
	}
}

// reclaim predicts the reservations taken back for need bytes.
func (m *model) reclaim(need int64, self ID) int64 {
	var got int64
	for _, id := range m.writing {
		o := m.objs[id]
		if got >= need {
			break
		}
		if id == self || o.res <= mCharge(o.size) || m.firm && !o.loose {
			continue
		}
		take := min(o.res-mCharge(o.size), mCharge(need-got))
		o.res -= take
		got += take
	}
	return got
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
		used += o.charge()
	}
	return used
}

// shown is used less what closes kept unshown.
func (m *model) shown() (used int64) {
	for _, o := range m.objs {
		used += o.charge() - o.keptPart()
	}
	return used
}

func (m *model) admitted() (adm int64) {
	for _, o := range m.objs {
		adm += o.admitted()
	}
	return adm
}

func (m *model) touch(id ID) {
	for i, x := range m.order {
		if x == id {
			m.order = append(append(m.order[:i:i], m.order[i+1:]...), id)
			m.objs[id].lastUse = m.now
			return
		}
	}
	panic("touch of an object not in order")
}

func (m *model) drop(id ID) {
	m.endWriter(id)
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
	o.lastUse = m.now
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

// coldest picks victims oldest first until they free need bytes or none
// is left, as the ledger's coldest does, and says whether need was met:
// a trim's victims (the ledger's evictSome).
func (m *model) coldest(need int64, self ID) ([]Victim[ID], bool) {
	var out []Victim[ID]
	var freed int64
	for _, id := range m.order {
		if freed >= need {
			break
		}
		o := m.objs[id]
		recent := o.lastClose != 0 && m.now-o.lastClose < int64(fzGrace)
		if id == self || o.pins > 0 || recent || o.charge() == 0 {
			continue // (an empty object frees nothing)
		}
		out = append(out, Victim[ID]{ID: id, Charge: o.charge(), LastUse: o.lastUse})
		freed += o.charge()
	}
	return out, freed >= need
}

// evict predicts an admission's victims, or nil if need cannot be met.
func (m *model) evict(need int64, self ID) ([]Victim[ID], bool) {
	if v, ok := m.coldest(need, self); ok {
		return v, true
	}
	return nil, false
}

func (m *model) commit(v []Victim[ID]) {
	for _, x := range v {
		m.evictions++
		m.evicted += x.Charge
		m.drop(x.ID)
	}
}

// room predicts the ledger's room: victims, or the error, for need more
// admitted bytes of self, whose admitted charge is then total.
func (m *model) room(need, total int64, self ID, freeOnly bool) ([]Victim[ID], error) {
	if need <= 0 {
		return nil, nil
	}
	if total > fzCap {
		return nil, ErrTooLarge
	}
	free := fzCap - m.admitted()
	if free >= need {
		return nil, nil
	}
	if m.freeOnly {
		return nil, ErrBusy
	}
	if m.evictAtMost > 0 {
		v, _ := m.coldest(need-free, self)
		var freed int64
		for _, x := range v {
			freed += x.Charge
		}
		if freed > m.evictAtMost {
			return nil, ErrBusy
		}
	}
	if !freeOnly {
		if v, ok := m.evict(need-free, self); ok {
			return v, nil
		}
	}
	if free += m.reclaim(need-free, self); free >= need {
		return nil, nil
	}
	if freeOnly {
		return nil, ErrPastBudget
	}
	v, ok := m.evict(need-free, self)
	if !ok {
		return nil, ErrNoSpace
	}
	return v, nil
}

// couldMake predicts the ledger's couldMake: whether need more bytes
// could be made for self from free space, unused reservations and cold
// objects.
func (m *model) couldMake(need int64, self ID) bool {
	free := fzCap - m.admitted()
	for _, id := range m.writing {
		if o := m.objs[id]; (!m.firm || o.loose) && id != self && o.res > mCharge(o.size) {
			free += o.res - mCharge(o.size)
		}
	}
	if free >= need {
		return true
	}
	_, ok := m.coldest(need-free, self)
	return ok
}

// admitAll predicts admitting all of o's charge at charge.
func (m *model) admitAll(o *mObj, charge int64, freeOnly bool) ([]Victim[ID], error) {
	return m.room(charge-o.admitted(), charge, o.id, freeOnly)
}

type fuzzRun struct {
	t     *testing.T
	l     *Ledger[ID]
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
func (r *fuzzRun) victims(got, want []Victim[ID]) {
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
		case v.Charge != o.charge():
			r.failf("victim %d charge %d, model %d", v.ID, v.Charge, o.charge())
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

func (r *fuzzRun) check() {
	r.t.Helper()
	if err := r.l.CheckInvariants(); err != nil {
		r.failf("invariants: %v", err)
	}
	st := r.l.Stats()
	want := Stats{CapacityBytes: fzCap}
	for _, o := range r.m.objs {
		c := o.charge()
		shown := c - o.keptPart()
		want.UsedBytes += shown
		want.Objects++
		want.ReservedBytes += shown - mCharge(o.size)
		want.UnadmittedBytes += o.over
		want.KeptBytes += o.keptPart()
		if o.pins > 0 {
			want.PinnedObjects++
			want.PinnedBytes += shown
		}
		if o.nlink == 0 {
			want.ShadowBytes += shown
		}
		size, charge, ok := r.l.Size(o.id)
		if !ok || size != o.size || charge != c {
			r.failf("Size(%d) = %d/%d/%v, model %d/%d", o.id, size, charge, ok, o.size, c)
		}
		if _, charge, _, _ := r.l.Shown(o.id); charge != shown {
			r.failf("Shown(%d) charge %d, model %d", o.id, charge, shown)
		}
		if w := r.l.Writers(o.id); w != o.writers {
			r.failf("Writers(%d) = %d, model %d", o.id, w, o.writers)
		}
	}
	want.Evictions, want.EvictedBytes = r.m.evictions, r.m.evicted
	want.AdmissionFailures, want.Reconciliations = r.m.refusals, r.m.reconciled
	want.OvershootMaxBytes = r.m.peak.max(r.m.now, max(r.m.shown()-fzCap, 0))
	if st != want {
		r.failf("stats\n got %+v\nwant %+v", st, want)
	}
	// Admitted bytes stay within the capacity; only unadmitted bytes (a
	// passthrough writer that outgrew what could be admitted) and a store
	// changed behind kvfs's back may take used past it.
	if adm := st.UsedBytes - st.UnadmittedBytes; adm > fzCap && r.m.reconciled == 0 {
		r.failf("admitted %d > capacity %d", adm, int64(fzCap))
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

// writer predicts the ledger's check for an open writer.
func (r *fuzzRun) writer(o *mObj) error {
	switch {
	case o == nil:
		return ErrGone
	case o.writers == 0:
		return ErrNotWriter
	}
	return nil
}

func (r *fuzzRun) do(op, slot int, arg byte) {
	r.m.freeOnly, r.m.evictAtMost = false, 0
	id, o := r.m.cur(slot)
	write := arg&1 == 1
	switch op {
	case 0, 1: // Create (weighted: it feeds everything else)
		r.create(slot, id, o, write)
	case 2:
		r.open(id, o, write)
	case 3, 4:
		r.close(id, o, write)
	case 5:
		r.grow(id, o, fzSize(arg), budgeting((arg>>1&3)%3))
	case 6:
		r.setSize(id, o, fzSize(arg))
	case 7, 21:
		r.m.freeOnly = op == 21
		r.reserve(id, o, fzSize(arg))
	case 8, 22:
		r.m.freeOnly = op == 22
		r.observe(id, o, fzSize(arg))
	case 9, 23:
		r.m.freeOnly = op == 23
		r.settle(id, o, fzSize(arg), false)
	case 24, 25:
		r.m.freeOnly = op == 25
		r.settle(id, o, fzSize(arg), true)
	case 10:
		r.link(id, o)
	case 11:
		r.unlink(id, o)
	case 12: // clock
		d := time.Duration(arg) * fzGrace / 64
		r.desc = fmt.Sprintf("Advance(%v)", d)
		r.clock.Advance(d)
		r.m.now += int64(d)
	case 13:
		r.restore(slot, id, o, arg)
	case 14:
		r.reconcile(id, o, fzSize(arg))
	case 15:
		r.trim()
	case 16:
		r.forget(id, o)
	case 17:
		r.waitHint(fzSize(arg))
	case 18:
		r.desc = "Refused"
		r.l.Refused()
		r.m.refusals++
	case 19:
		r.endGrace(id, o)
	case 20:
		r.overloaded(id, fzSize(arg))
	case 26:
		r.budget(id, o, fzSize(arg))
	case 27:
		r.reserveShare(id, o, fzSize(arg), fzSize(arg>>1))
	case 28:
		r.m.evictAtMost = max(2*mCharge(fzSize(arg)), 1)
		r.reserve(id, o, fzSize(arg))
	case 29:
		r.desc = fmt.Sprintf("Unchanged(%d)", id)
		r.l.Unchanged(id)
		if o != nil && o.writers > 0 {
			o.unchanged = true
		}
	case 30:
		r.desc = fmt.Sprintf("Loosen(%d)", id)
		got, want := r.l.Loosen(id), int64(0)
		if o != nil && o.writers == 1 {
			o.loose = true
			want = max(o.res-mCharge(o.size), 0)
		}
		if got != want {
			r.failf("= %d, want %d", got, want)
		}
	}
}

const fzOps = 31

func (r *fuzzRun) budget(id ID, o *mObj, n int64) {
	r.desc = fmt.Sprintf("Budget(%d, %d)", id, n)
	r.l.Budget(id, n)
	if r.writer(o) == nil {
		o.budget = max(o.budget, mCharge(n))
	}
}

// reserveShare checks ReserveFreeShare: half the free space, up to n, in
// whole blocks, where that is at least least.
func (r *fuzzRun) reserveShare(id ID, o *mObj, n, least int64) {
	r.desc = fmt.Sprintf("ReserveFreeShare(%d, %d, %d)", id, n, least)
	err := r.l.ReserveFreeShare(id, n, least)
	if werr := r.writer(o); werr != nil {
		r.errIs(err, werr)
		return
	}
	share := min(mCharge(n), (fzCap-r.m.admitted())/2/BlockSize*BlockSize)
	if share <= 0 || share < mCharge(least) {
		r.errIs(err, ErrBusy)
		return
	}
	r.m.freeOnly = true
	r.admit(o, nil, err, o.size, max(o.res, share), false)
}

func (r *fuzzRun) endGrace(id ID, o *mObj) {
	r.desc = fmt.Sprintf("EndGrace(%d)", id)
	r.l.EndGrace(id)
	if o != nil {
		o.final, o.lastClose = true, 0
	}
}

func (r *fuzzRun) overloaded(id ID, n int64) {
	r.desc = fmt.Sprintf("Overloaded(%d, %d)", id, n)
	var written, own int64
	for oid, o := range r.m.objs {
		switch {
		case o.writers > 0 && oid == id:
			own = mCharge(o.size)
		case o.writers > 0:
			written += mCharge(o.size)
		}
	}
	if got, want := r.l.Overloaded(id, n), written+max(own, mCharge(n)) > fzCap; got != want {
		r.failf("Overloaded = %v, model %v (written %d)", got, want, written)
	}
}

func (r *fuzzRun) create(slot int, id ID, o *mObj, write bool) {
	if o != nil {
		r.desc = fmt.Sprintf("Create(%d) exists", id)
		r.errIs(r.l.Create(id, write), ErrExists)
		return
	}
	id = r.m.fresh(slot)
	r.desc = fmt.Sprintf("Create(%d, %v)", id, write)
	r.errIs(r.l.Create(id, write), nil)
	o = &mObj{id: id, nlink: 1, pins: 1}
	if write {
		r.m.startWriter(o)
		o.writers = 1
	}
	r.m.add(o)
}

func (r *fuzzRun) open(id ID, o *mObj, write bool) {
	r.desc = fmt.Sprintf("Open(%d, %v)", id, write)
	if o == nil {
		r.errIs(r.l.Open(id, write), ErrGone)
		return
	}
	r.errIs(r.l.Open(id, write), nil)
	o.pins++
	if write {
		r.m.startWriter(o)
		if o.writers == 0 {
			o.priorClose = o.lastClose
		}
		o.unchanged = false
		o.writers++
		o.kept = false // a writer that has not closed: shown again
	}
	r.m.touch(id)
}

// close closes a handle, in a mode the handles allow.
func (r *fuzzRun) close(id ID, o *mObj, write bool) {
	if o == nil || o.pins == 0 {
		r.desc = fmt.Sprintf("Close(%d) unpinned", id)
		got, v := r.l.Close(id, write)
		r.victims(v, nil)
		r.released(id, got, false)
		return
	}
	if write && o.writers == 0 {
		write = false
	} else if !write && o.pins == o.writers {
		write = true
	}
	r.desc = fmt.Sprintf("Close(%d, %v)", id, write)
	got, v := r.l.Close(id, write)
	var want []Victim[ID]
	if write && o.writers == 1 {
		want = r.m.endWriting(o)
	}
	r.victims(v, want)
	r.m.commit(want)
	o.pins--
	if write {
		o.writers--
		if o.writers == 0 {
			r.m.endWriter(id)
		}
		switch {
		case o.final:
		case o.writers == 0 && o.unchanged:
			o.lastClose = o.priorClose
		default:
			o.lastClose = r.m.now
		}
	}
	r.m.touch(id)
	r.released(id, got, o.pins == 0 && o.nlink == 0)
}

// endWriting predicts the last writer's close: the reservation goes, and
// what was not admitted is, evicting others if it must: a reconciliation
// when they cannot make the room for what o left unadmitted.
func (m *model) endWriting(o *mObj) []Victim[ID] {
	unadmitted := o.over > 0
	o.over, o.res, o.budget, o.settledPast, o.kept, o.loose = 0, 0, 0, false, false, false
	over := m.admitted() - fzCap
	if over <= 0 {
		return nil
	}
	v, ok := m.coldest(over, o.id)
	if !ok && unadmitted {
		m.reconciled++
	}
	return v
}

func (r *fuzzRun) grow(id ID, o *mObj, end int64, b budgeting) {
	r.desc = fmt.Sprintf("Grow(%d, %d, budgeting %d)", id, end, b)
	grow := map[budgeting]func(ID, int64) ([]Victim[ID], error){
		unbudgeted: r.l.Extend, pastBudgetOver: r.l.Grow, pastBudgetFree: r.l.GrowWithin}[b]
	v, err := grow(id, end)
	if o == nil || end <= o.size { // never shrinks
		r.errIs(err, map[bool]error{true: ErrGone, false: nil}[o == nil])
		r.victims(v, nil)
		return
	}
	charge := max(mCharge(end), o.res)
	past := b != unbudgeted && o.writers > 0 && o.budget > 0 && charge > o.limit()
	if past && b == pastBudgetOver {
		// As Observe, unless it can never fit.
		if mCharge(end) > int64(fzCap) {
			r.errIs(err, ErrTooLarge)
			r.victims(v, nil)
			return
		}
		r.observed(o, v, err, end)
		return
	}
	r.admit(o, v, err, end, o.res, past)
}

// admit checks an admission that leaves o at size and reservation res
// (victims v, error err) against the model's prediction, and applies it
// to the model when the model admits it.
func (r *fuzzRun) admit(o *mObj, v []Victim[ID], err error, size, res int64, freeOnly bool) {
	r.t.Helper()
	want, werr := r.m.admitAll(o, max(mCharge(size), res), freeOnly)
	r.errIs(err, werr)
	r.victims(v, want)
	if werr == nil {
		r.m.commit(want)
		o.size, o.res, o.over = size, res, 0
		if o.writers > 0 {
			o.budget = max(o.budget, res)
		}
	}
}

func (r *fuzzRun) setSize(id ID, o *mObj, size int64) {
	r.desc = fmt.Sprintf("SetSize(%d, %d)", id, size)
	v, err := r.l.SetSize(id, size)
	if o == nil {
		r.errIs(err, ErrGone)
		r.victims(v, nil)
		return
	}
	if o.writers > 0 && size < o.size && o.over > 0 {
		// A shrink of unadmitted bytes: never refused, what stays past
		// the admitted charge stays unadmitted.
		r.errIs(err, nil)
		r.victims(v, nil)
		admitted := o.admitted()
		o.size = size
		o.over = max(o.charge()-admitted, 0)
		return
	}
	r.admit(o, v, err, size, o.res, false)
}

func (r *fuzzRun) reserve(id ID, o *mObj, n int64) {
	r.desc = fmt.Sprintf("Reserve(%d, %d, free %v, evicting at most %d)", id, n, r.m.freeOnly, r.m.evictAtMost)
	var v []Victim[ID]
	var err error
	switch {
	case r.m.freeOnly:
		err = r.l.ReserveFree(id, n)
	case r.m.evictAtMost > 0:
		v, err = r.l.ReserveEvictingAtMost(id, n, r.m.evictAtMost)
	default:
		v, err = r.l.Reserve(id, n)
	}
	if werr := r.writer(o); werr != nil {
		r.errIs(err, werr)
		r.victims(v, nil)
		return
	}
	r.admit(o, v, err, o.size, max(o.res, mCharge(n)), false)
}

func (r *fuzzRun) observe(id ID, o *mObj, size int64) {
	r.desc = fmt.Sprintf("Observe(%d, %d, free %v)", id, size, r.m.freeOnly)
	var v []Victim[ID]
	var err error
	if r.m.freeOnly {
		err = r.l.ObserveFree(id, size)
	} else {
		v, err = r.l.Observe(id, size)
	}
	if werr := r.writer(o); werr != nil || size <= o.size {
		r.errIs(err, werr)
		r.victims(v, nil)
		return
	}
	r.observed(o, v, err, size)
}

// observed checks an observation of writer o's growth to size (victims
// v, error err), which takes free space, evicts within o's budget, or
// charges the rest unadmitted.
func (r *fuzzRun) observed(o *mObj, v []Victim[ID], err error, size int64) {
	r.t.Helper()
	charge := max(mCharge(size), o.res)
	if charge <= o.charge() {
		r.errIs(err, nil)
		r.victims(v, nil)
		o.size = size
		return
	}
	grow := charge - o.charge()
	pastBudget := o.budget > 0 && charge > o.limit()
	want, werr := r.m.room(grow, o.admitted()+grow, o.id, pastBudget)
	if errors.Is(werr, ErrBusy) {
		r.errIs(err, ErrBusy)
		return
	}
	r.errIs(err, nil)
	r.victims(v, want)
	r.m.commit(want)
	if werr != nil {
		o.over += grow
	}
	o.size = size
}

func (r *fuzzRun) settle(id ID, o *mObj, size int64, last bool) {
	r.desc = fmt.Sprintf("Settle(%d, %d, free %v, last %v)", id, size, r.m.freeOnly, last)
	var v []Victim[ID]
	var err error
	switch {
	case r.m.freeOnly && last:
		err = r.l.SettleLastFree(id, size)
	case r.m.freeOnly:
		err = r.l.SettleFree(id, size)
	case last:
		v, err = r.l.SettleLast(id, size)
	default:
		v, err = r.l.Settle(id, size)
	}
	if werr := r.writer(o); werr != nil {
		r.errIs(err, werr)
		r.victims(v, nil)
		return
	}
	res := o.res
	if last && o.writers == 1 {
		res = 0 // writing has ended: the reservation goes
	}
	// A close of its only writer's descriptor keeps the reservation,
	// unshown from then on.
	if err == nil && !last && o.writers == 1 {
		defer func() { o.kept = true }()
	}
	past := o.budget > 0 && max(mCharge(size), res) > o.limit()
	if past && o.settledPast && !last {
		r.settledPast(o, v, err, size, res)
		return
	}
	r.admit(o, v, err, size, res, false)
	if err == nil && past {
		o.settledPast = true
	}
}

// settledPast predicts a settle of a writer settled past its budget
// before: its growth observed, then admitted from free space, else left
// unadmitted while eviction could make the room, else ErrNoSpace.
func (r *fuzzRun) settledPast(o *mObj, v []Victim[ID], err error, size, res int64) {
	r.t.Helper()
	if mCharge(size) > int64(fzCap) {
		r.errIs(err, ErrTooLarge)
		r.victims(v, nil)
		return
	}
	var grown []Victim[ID]
	if charge := max(mCharge(size), o.res); size > o.size && charge > o.charge() {
		grow := charge - o.charge()
		w, werr := r.m.room(grow, o.admitted()+grow, o.id, o.budget > 0 && charge > 2*o.budget)
		if errors.Is(werr, ErrBusy) {
			r.errIs(err, ErrBusy)
			r.victims(v, nil)
			return
		}
		r.m.commit(w)
		grown = w
		if werr != nil {
			o.over += grow
		}
	}
	o.size = max(o.size, size)
	charge := max(mCharge(size), res)
	w, werr := r.m.admitAll(o, charge, true)
	switch {
	case errors.Is(werr, ErrPastBudget) && r.m.couldMake(charge-o.admitted(), o.id):
		r.errIs(err, nil)
		r.victims(v, grown)
	case errors.Is(werr, ErrPastBudget):
		r.errIs(err, ErrNoSpace)
		r.victims(v, grown)
	default:
		r.errIs(err, werr)
		r.victims(v, append(grown, w...))
		if werr == nil {
			r.m.commit(w)
			o.size, o.res, o.over = size, res, 0
			o.budget = max(o.budget, res)
		}
	}
}

func (r *fuzzRun) link(id ID, o *mObj) {
	r.desc = fmt.Sprintf("Link(%d)", id)
	if o == nil {
		r.errIs(r.l.Link(id), ErrGone)
		return
	}
	r.errIs(r.l.Link(id), nil)
	o.nlink++
}

func (r *fuzzRun) unlink(id ID, o *mObj) {
	r.desc = fmt.Sprintf("Unlink(%d)", id)
	got := r.l.Unlink(id)
	if o == nil || o.nlink == 0 {
		r.released(id, got, false)
		return
	}
	o.nlink--
	r.released(id, got, o.nlink == 0 && o.pins == 0)
}

// restore restores into an empty slot.
func (r *fuzzRun) restore(slot int, id ID, o *mObj, arg byte) {
	if o != nil {
		r.desc = fmt.Sprintf("Restore(%d) exists", id)
		_, err := r.l.Restore(id, 0, 1)
		r.errIs(err, ErrExists)
		return
	}
	id = r.m.fresh(slot)
	size, nlink := fzSize(arg), 1+int(arg%3)
	r.desc = fmt.Sprintf("Restore(%d, %d, %d)", id, size, nlink)
	v, err := r.l.Restore(id, size, nlink)
	if mCharge(size) > fzCap {
		r.errIs(err, nil)
		if len(v) != 1 || v[0] != (Victim[ID]{ID: id}) { // last use unknown: 0
			r.failf("too-large restore gave %v", v)
		}
		r.m.gone[id] = true
		return
	}
	want, werr := r.m.room(mCharge(size), mCharge(size), 0, false)
	r.errIs(err, werr)
	r.victims(v, want)
	if werr == nil {
		r.m.commit(want)
		r.m.add(&mObj{id: id, size: size, nlink: nlink})
		r.m.objs[id].lastUse = 0 // unknown until it is used
	}
}

func (r *fuzzRun) reconcile(id ID, o *mObj, size int64) {
	r.desc = fmt.Sprintf("Reconcile(%d, %d)", id, size)
	got := r.l.Reconcile(id, size)
	want := o != nil && o.size != size && o.writers == 0
	if got != want {
		r.failf("Reconcile = %v, model %v", got, want)
	}
	if want {
		o.size = size
		r.m.reconciled++
	}
}

func (r *fuzzRun) trim() {
	r.desc = "Trim"
	v := r.l.Trim()
	var want []Victim[ID]
	if over := r.m.admitted() - fzCap; over > 0 {
		want, _ = r.m.coldest(over, 0)
	}
	r.victims(v, want)
	r.m.commit(want)
}

func (r *fuzzRun) forget(id ID, o *mObj) {
	r.desc = fmt.Sprintf("Forget(%d)", id)
	got := r.l.Forget(id)
	if got != (o != nil) {
		r.failf("Forget = %v, model %v", got, o != nil)
	}
	if o != nil {
		r.m.drop(id)
		r.m.reconciled++
	}
}

func (r *fuzzRun) waitHint(n int64) {
	r.desc = fmt.Sprintf("WaitHint(%d)", n)
	var writeBytes int64
	for _, o := range r.m.objs {
		if o.writers > 0 {
			writeBytes += mCharge(o.size)
		}
	}
	got := r.l.WaitHint(n)
	if (got == 0) != (n > fzCap-writeBytes) {
		r.failf("WaitHint = %v with write bytes %d", got, writeBytes)
	}
}

func FuzzLedger(f *testing.F) {
	f.Add([]byte{})
	// Fill past capacity with closed objects, then advance and refill.
	f.Add([]byte{
		0, 0, 1, 5, 0, 200, 3, 0, 1,
		0, 1, 1, 5, 1, 200, 3, 1, 1,
		0, 2, 1, 5, 2, 250, 12, 0, 255,
		5, 2, 255, 3, 2, 1, 0, 3, 0, 5, 3, 90,
	})
	// Shadow: create, open, unlink, close twice; link revives; unlink of
	// a closed object releases it at once.
	f.Add([]byte{0, 4, 1, 5, 4, 33, 2, 4, 0, 11, 4, 0, 3, 4, 1, 3, 4, 0, 11, 4, 0,
		0, 5, 0, 2, 5, 1, 11, 5, 0, 10, 5, 0, 3, 5, 0, 3, 5, 1, 11, 5, 0,
		0, 6, 1, 5, 6, 40, 10, 6, 0, 3, 6, 1, 11, 6, 0, 11, 6, 0, 11, 6, 0})
	// Restore over capacity, reconcile up, trim, forget, wait hint.
	f.Add([]byte{13, 0, 100, 13, 1, 100, 13, 2, 101, 13, 3, 40, 14, 3, 255, 15, 0, 0,
		16, 1, 0, 17, 0, 20, 2, 2, 1, 17, 0, 20, 15, 0, 0})
	// Grace boundary: close, advance just under, grow, advance, grow.
	f.Add([]byte{0, 0, 1, 6, 0, 120, 3, 0, 1, 0, 1, 1, 12, 0, 63, 6, 1, 130,
		12, 0, 2, 6, 1, 130, 5, 1, 254})
	// A passthrough writer: reserve, observe past the budget and past
	// the capacity, settle (refused), shrink, settle, close.
	f.Add([]byte{13, 0, 40, 13, 1, 40, 0, 2, 1, 7, 2, 20, 8, 2, 30, 8, 2, 90,
		8, 2, 200, 9, 2, 200, 6, 2, 10, 9, 2, 10, 3, 2, 1, 18, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		clock := newClock()
		firm := len(data)%2 == 1 // half the inputs: a passthrough mount's ledger
		r := &fuzzRun{
			t:     t,
			l:     New[ID](Config{Capacity: fzCap, Grace: fzGrace, Now: clock.Now, FirmReservations: firm}),
			clock: clock,
			m: &model{
				now:  clock.ns.Load(),
				objs: make(map[ID]*mObj),
				gone: make(map[ID]bool),
				firm: firm,
			},
		}
		for i := 0; i+2 < len(data) && r.step < fzMaxOp; i += 3 {
			r.step++
			r.do(int(data[i])%fzOps, int(data[i+1])%fzSlots, data[i+2])
			r.check()
		}
		// Closing every handle releases all shadow bytes, once each.
		for _, o := range r.m.objs {
			for o.pins > 0 {
				r.close(o.id, o, o.writers > 0)
				r.desc = fmt.Sprintf("final Close(%d)", o.id)
			}
		}
		r.check()
		if st := r.l.Stats(); st.PinnedObjects != 0 || st.ShadowBytes != 0 || st.ReservedBytes != 0 || st.UnadmittedBytes != 0 {
			t.Fatalf("after closing everything: %+v", st)
		}
	})
}
