package blob

// Progress hears how far a walk of a whole store has got: start-up's
// (Load, when it cannot use the snapshot) and fsck's. Found is called
// from several walkers at once, every 1024 objects or so: it must be
// quick and safe for concurrent use. The package draws nothing itself.
type Progress interface {
	// Expect is how many objects the walk expects, before it starts:
	// what the last start-up found (kvfs.hint), 0 if unknown.
	Expect(objects int64)
	// Found counts n more stored files found (one with several names
	// once per name).
	Found(n int64)
	// Done: the walk ended, whatever its outcome.
	Done()
}

// foundEvery is how many objects a walker finds before it reports them.
const foundEvery = 1024

// ReportTo has the next Load's walk report its progress to p (nil: to
// nobody).
func (s *Store) ReportTo(p Progress) { s.progress = reporter{p} }

// reporter hands reports to a Progress, if there is one.
type reporter struct{ p Progress }

func (r reporter) expect(n int) {
	if r.p != nil {
		r.p.Expect(int64(n))
	}
}

func (r reporter) found(n int) {
	if r.p != nil && n > 0 {
		r.p.Found(int64(n))
	}
}

func (r reporter) done() {
	if r.p != nil {
		r.p.Done()
	}
}

// tally counts the files one walker finds and reports them in batches
// of foundEvery; flush reports the rest when it stops.
type tally struct {
	r reporter
	n int
}

func (t *tally) add() {
	if t.n++; t.n%foundEvery == 0 {
		t.r.found(foundEvery)
	}
}

func (t *tally) flush() { t.r.found(t.n % foundEvery) }
