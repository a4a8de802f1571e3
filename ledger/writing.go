package ledger

// writing is what an entry holds only while writers have it open. It is
// kept in a table of its own so that the millions of closed entries do
// not carry it: an entry names its record by slot (entry.w, 0: none).
// INVARIANT: a record exists exactly while its entry has writers > 0.
type writing struct {
	// res is the reservation admitted to the writers: the charge stays at
	// least this until the last writer's release settles (SettleLast).
	res int64
	// budget is the most the writers were ever reserved: what their
	// growth may evict for is twice that (pastBudget). Kept apart from
	// res, which other writers may take back (reclaim) where
	// reservations are not firm.
	budget int64
	// over is the part of the charge not admitted against the capacity.
	over    int64
	writers int32
	// waiting: its writers waiting in an admission for room (Waiting).
	waiting int32
	// gaveWay: a writer of it was refused as the one that gives way
	// (GiveWay); until its writing ends, what it holds is coming free.
	gaveWay bool
	// group: the process that made it (Group; 0: not known), whose
	// other writers a refusal of it may free (see yields).
	group int32
	// settledPast: a settle (a FLUSH) admitted the object past twice its
	// budget; the next ones past it wait for the last release (settle).
	settledPast bool
	// loose: part of res is room to grow that a writer of an existing
	// object took from free space (ReserveFreeLeaving), or its writer
	// cannot write while another waits (Loosen), which reclaim takes
	// back even where reservations are firm.
	loose bool
	// kept: a close of its only writer's descriptor settled the object
	// (a FLUSH) and kept the reservation, which no figure shows from
	// then on: what a duplicate of the descriptor may still write has
	// the room, and stat, df and the stats say what the object holds
	// (see Ledger.kept).
	kept bool
	// priorClose is the entry's lastClose when its first writer opened, and
	// unchanged says its writers changed nothing (Unchanged): the last
	// writer's close then gives it back instead of starting a grace.
	priorClose int64
	unchanged  bool
	// e is the entry's slot in the slab.
	e uint32
	// links is the record's place in the open list (Ledger.open).
	links [2]uint32
}

// writingTable holds the records by slot; slot 0 is no record: the open
// list's end, and all zeros otherwise, so that an entry without a record
// reads no reservation, nothing unadmitted and no writers through it.
// Records move when the table grows: no *writing is kept across alloc.
type writingTable struct {
	recs  []writing
	freed []uint32
}

func (t *writingTable) init() { t.recs, t.freed = make([]writing, 1), nil }

// alloc returns a free slot holding a zero record of entry slot e.
func (t *writingTable) alloc(e uint32) uint32 {
	var i uint32
	if n := len(t.freed); n > 0 {
		i, t.freed = t.freed[n-1], t.freed[:n-1]
	} else {
		i = uint32(len(t.recs))
		t.recs = append(t.recs, writing{})
	}
	t.recs[i] = writing{e: e}
	return i
}

func (t *writingTable) free(i uint32) {
	t.recs[i] = writing{}
	t.freed = append(t.freed, i)
}

// inUse is how many records are handed out.
func (t *writingTable) inUse() int { return len(t.recs) - 1 - len(t.freed) }

// wr is e's writing record, the zero record of slot 0 if it has none
// (read it, never write it); mu held.
func (l *Ledger[K]) wr(e *entry[K]) *writing { return &l.writing.recs[e.w] }

// writers is how many writers have e open; mu held.
func (l *Ledger[K]) writers(e *entry[K]) int32 { return l.wr(e).writers }
