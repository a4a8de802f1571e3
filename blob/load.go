package blob

import (
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/kvfs/kvfs/internal/fdwalk"
	"golang.org/x/sys/unix"
)

// Object is one stored inode found at start-up.
type Object struct {
	ID    ID
	Size  int64
	Atime int64 // unix nanoseconds: its last use, the later of atime, mtime and the journal's (UsesName)
	Links int   // names in data/
}

// LoadReport says what start-up found and reclaimed.
type LoadReport struct {
	Objects        int64 `json:"objects"`
	Dirs           int64 `json:"dirs"`
	Incomplete     int64 `json:"incomplete"`
	IncompleteByte int64 `json:"incomplete_bytes"`
	Foreign        int64 `json:"foreign"`
	// Nameless: files only a marker in writing/ named, gone with it: a
	// fetch from the remote tier, or an object unlinked while written,
	// cut by the stop; or a stale marker (fsck's word for all of them:
	// nothing tells them apart).
	Nameless     int64 `json:"nameless"`
	NamelessByte int64 `json:"nameless_bytes"`
	// TooDeep: entries whose paths under data/ passed MaxPath (made
	// behind kvfs's back, or by an older kvfs, which let a directory
	// rename carry them past it), removed with everything beneath them:
	// no name past PATH_MAX can be served.
	TooDeep int64 `json:"too_deep"`
	// Gone: objects the checkpoint listed that the store no longer
	// holds under any name it listed (not those reclaimed as
	// half-written): deleted, replaced or renamed since it was written
	// (a renamed one is indexed anew under its new name; an inode
	// number, reused, cannot tell it from a new file), through kvfs
	// before a crash, or behind kvfs's back (an outside tester deleted
	// objects, and all of data/, by hand, and the start said nothing of
	// them).
	Gone int64 `json:"gone"`
	// SnapshotClean: the checkpoint was written at a clean stop, so
	// whatever it lists that is Gone went behind kvfs's back.
	SnapshotClean bool `json:"snapshot_clean,omitempty"`
	// FromSnapshot: the index came from the checkpoint (see
	// CheckpointName), not from a walk; SnapshotUnused says why a walk
	// was needed ("none": there was no checkpoint).
	FromSnapshot   bool   `json:"from_snapshot"`
	SnapshotUnused string `json:"snapshot_unused,omitempty"`
	// DirsListed: directories changed since the checkpoint, listed to
	// see which of their entries changed; Stated: objects whose size
	// came from a stat, not from the checkpoint (all, after a walk).
	DirsListed int64 `json:"dirs_listed"`
	Stated     int64 `json:"stated"`
	// SnapshotTaken is when the checkpoint read was taken (unix
	// nanoseconds; 0: none).
	SnapshotTaken int64 `json:"snapshot_taken,omitempty"`
	// Mounted: stored directories another file system is mounted on
	// (a user's FUSE server, say), not walked: served empty, and
	// nothing is made in them; MountedOne names one of them.
	Mounted    int64  `json:"mounted,omitempty"`
	MountedOne string `json:"mounted_one,omitempty"`
}

// ErrStopped: StopLoad stopped the load. It left the store as a crash
// would have (markers, checkpoint and hint as they were), for the next
// start to load.
var ErrStopped = errors.New("the load was stopped")

// StopLoad has a Load under way, or the next, stop at its next step with
// ErrStopped: a mount that is gone needs no index, and a minute's load
// at ten million objects would hold the store from the next daemon.
func (s *Store) StopLoad() { s.stopped.Store(true) }

// stopping reports whether StopLoad was called.
func (s *Store) stopping() bool { return s.stopped.Load() }

// Load rebuilds the index after a clean stop or a crash, from the
// checkpoint where the store proves it still holds (see CheckpointName),
// else by walking data/ and stat'ing every file. Files that still had a
// write handle open (a link under writing/) are deleted, as is anything
// that is neither a directory nor a regular file. It returns every
// remaining inode once, however many names it has.
func (s *Store) Load() ([]Object, LoadReport, error) {
	hint := s.readHint()
	s.resetIndex(hint)
	var rep LoadReport
	m, err := s.startMarks, error(nil)
	if s.startMarks = nil; m == nil {
		m, err = s.readWriting()
	}
	if err != nil {
		return nil, rep, err
	}
	objects, err := s.loadCheckpoint(m, &rep)
	switch {
	case err == nil:
		rep.FromSnapshot = true
	case errors.Is(err, ErrStopped):
		return nil, rep, err
	default:
		rep = LoadReport{SnapshotUnused: err.Error(), Foreign: rep.Foreign,
			Incomplete: rep.Incomplete, IncompleteByte: rep.IncompleteByte}
		s.resetIndex(hint)
		if objects, err = s.walkAll(m, hint, &rep); err != nil {
			return nil, rep, err
		}
	}
	if s.stopping() {
		// Last, before the markers go and before the owner restores
		// the ledger from what was loaded.
		return nil, rep, ErrStopped
	}
	// A marked inode with no name goes with its marker: said too (an
	// outside tester read incomplete_reclaimed 0 after a kill during a
	// fetch, and no word of it).
	for ino := range m.inos {
		if !m.counted[ino] {
			rep.Nameless++
			rep.NamelessByte += m.sizes[ino]
		}
	}
	// Only now that data/ holds nothing half-written: a crash before
	// this leaves the markers for the next start.
	m.remove(s)
	s.writeHint(len(objects))
	s.removeOldUses()
	s.checkpointObjects.Store(int64(len(objects)))
	if s.checkpointSize.Load() == 0 {
		s.checkpointSize.Store(64 * int64(len(objects))) // a guess; names vary
	}
	return objects, rep, nil
}

// walkAll indexes data/ by a walk that stats every file.
func (s *Store) walkAll(m *marks, hint int, rep *LoadReport) ([]Object, error) {
	l := s.newLoader(m, rep, hint)
	s.progress.expect(hint)
	err := l.run(walkRoot{s.dirs[RootID], "."})
	s.progress.done()
	if err != nil {
		return nil, err
	}
	uses := s.readUses()
	for i := range l.objects {
		o := &l.objects[i]
		f := s.files[o.ID]
		o.Links = len(f.links())
		o.Atime = max(o.Atime, uses[f.ino]) // the reads journaled (UsesName)
	}
	return l.objects, nil
}

// marks is what writing/ held at the start: the inodes being written
// at the crash, with their sizes, and the markers' names.
type marks struct {
	inos  map[uint64]bool
	sizes map[uint64]int64
	names []string
	// counted: the marked inodes reclaimed under a name so far, counted
	// once however many names or tries (a checkpoint given up, then a
	// walk); guarded by the loader's mu.
	counted map[uint64]bool
}

// readWriting reads writing/.
func (s *Store) readWriting() (*marks, error) {
	f, err := s.openWriting()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := ReadMarkers(f.Name())
	if err != nil {
		return nil, err
	}
	names = slices.DeleteFunc(names, func(n string) bool {
		plain, _, _ := strings.Cut(n, intactSep)
		return s.kept[plain]
	})
	m := &marks{inos: make(map[uint64]bool, len(names)), sizes: map[uint64]int64{}, names: names, counted: map[uint64]bool{}}
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(int(f.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && reclaimed(name, &st, s.distrustIntact) {
			m.inos[st.Ino] = true
			m.sizes[st.Ino] = st.Size
		}
	}
	return m, nil
}

// changedSince says whether the file a marker named name marks may have
// been changed since it was marked: always, but for an intact marker
// whose file still has the mtime it recorded (see MarkIntact). A close's
// record (Remark) is trusted only once a dead daemon's guard has vetted
// it (VetClosed): unvetted, the guard did not run (killed too, a power
// loss), and whether a holder wrote on is not known.
func changedSince(name string, st *unix.Stat_t) bool { return reclaimed(name, st, false) }

// reclaimed says whether a start reclaims the file a marker named name
// marks: changed since it was marked (changedSince), or intact but
// distrusted (a process holds a file of the dead mount: see
// DistrustIntact), unless a dead daemon's guard vetted it (nothing held
// it as the daemon died, and nothing can open it since: an outside
// tester's readers holding other files at the start had such a store
// reclaimed).
func reclaimed(name string, st *unix.Stat_t, distrust bool) bool {
	m, intact := IntactMark(name)
	return !intact || m.Closed && !m.Vetted || !Unchanged(st, m.Mtime) || distrust && !m.Vetted
}

// remove deletes the markers.
func (m *marks) remove(s *Store) {
	f, err := s.openWriting()
	if err != nil {
		return
	}
	defer f.Close()
	for _, name := range m.names {
		unix.Unlinkat(int(f.Fd()), name, 0)
	}
}

func (s *Store) openWriting() (*os.File, error) {
	return os.OpenFile(s.writing.Name(), os.O_RDONLY|unix.O_DIRECTORY, 0)
}

// loaderWorkers bounds the directories read at once: enough to keep a
// cold disk's queue busy, few enough not to thrash a warm cache.
const loaderWorkers = 32

// loader walks data/ with one goroutine a directory, loaderWorkers at a
// time reading the disk, and builds the index under its own lock (the
// store's is held by Load throughout).
type loader struct {
	s          *Store
	incomplete map[uint64]bool // inodes marked in writing/; read-only during the walk
	sem        chan struct{}
	wg         sync.WaitGroup

	mu sync.Mutex
	// GUARDED_BY(mu), the fields below and the index.
	counted map[uint64]bool // incomplete inodes already counted
	seen    map[uint64]ID   // inodes with several names
	objects []Object
	rep     *LoadReport
	err     error
	// since: a start from a checkpoint taken then (unix ns; 0: a walk
	// of the whole store), which ranks what it stats made since no
	// older than the checkpoint's objects (madeSince).
	since int64
}

// newLoader is a loader that reclaims what m marked and reports to rep;
// hint sizes its list of objects.
func (s *Store) newLoader(m *marks, rep *LoadReport, hint int) *loader {
	return &loader{s: s, incomplete: m.inos, counted: m.counted, seen: map[uint64]ID{},
		objects: make([]Object, 0, hint), rep: rep}
}

// walkRoot is a directory to walk with stats.
type walkRoot struct {
	d   *dir
	rel string
}

// entry is one name read from a directory; st is set for regular files.
type entry struct {
	name string
	dir  bool
	st   unix.Stat_t
}

// run walks the trees under roots: data/ at a start without a
// checkpoint, the directories new since it at a start from one.
func (l *loader) run(roots ...walkRoot) error {
	l.sem = make(chan struct{}, loaderWorkers)
	for _, r := range roots {
		l.wg.Add(1)
		go l.walk(r.d, r.rel)
	}
	l.wg.Wait()
	return l.err
}

func (l *loader) walk(d *dir, rel string) {
	defer l.wg.Done()
	l.sem <- struct{}{}
	ents, err := l.read(rel)
	<-l.sem
	if errors.Is(err, unix.EXDEV) {
		// Another file system is mounted on it (openBeneath never
		// crosses into one): not the store's, and no reason to fail
		// the start (an outside tester: a user's FUSE mount on a
		// stored directory they owned kept the cache from starting).
		l.count(func(r *LoadReport) { r.Mounted, r.MountedOne = r.Mounted+1, rel })
		ents, err = nil, nil
	}
	if l.s.stopping() {
		ents, err = nil, ErrStopped
	}
	l.mu.Lock()
	if err != nil && l.err == nil {
		l.err = err
	}
	var subdirs []*dir
	for i := range ents {
		if ents[i].dir {
			subdirs = append(subdirs, l.addDir(d, ents[i].name))
		} else {
			l.addFile(d, &ents[i])
		}
	}
	l.mu.Unlock()
	for _, sub := range subdirs {
		l.wg.Add(1)
		go l.walk(sub, path.Join(rel, sub.name))
	}
}

// read lists a directory and stats its files, deleting on the way what
// is neither a directory nor a regular file, and what was being written
// at the crash; it touches no shared state but the report's counters.
func (l *loader) read(rel string) ([]entry, error) {
	f, err := l.s.openListing(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	des, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	fd := int(f.Fd())
	out := make([]entry, 0, len(des))
	files := tally{r: l.s.progress}
	for _, de := range des {
		e := entry{name: de.Name(), dir: de.IsDir()}
		switch {
		case l.tooDeep(fd, rel, e.name):
			continue
		case e.dir:
		case !de.Type().IsRegular():
			unix.Unlinkat(fd, e.name, 0)
			l.count(func(r *LoadReport) { r.Foreign++ })
			continue
		case statAt(fd, e.name, &e.st) != nil:
			continue
		case l.incomplete[e.st.Ino]:
			unix.Unlinkat(fd, e.name, 0)
			l.countIncomplete(e.st.Ino, e.st.Size)
			continue
		}
		out = append(out, e)
		if !e.dir {
			files.add()
		}
	}
	files.flush()
	return out, nil
}

// tooDeep removes name, in the directory open as dirfd at rel, with
// everything beneath it, when its path passes MaxPath; it touches no
// shared state but the report's counters.
func (l *loader) tooDeep(dirfd int, rel, name string) bool {
	if len(path.Join(rel, name)) <= MaxPath {
		return false
	}
	if err := fdwalk.RemoveAt(dirfd, name); err == nil {
		l.count(func(r *LoadReport) { r.TooDeep++ })
	}
	return true
}

func (l *loader) count(f func(*LoadReport)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l.rep)
}

// countIncomplete counts a reclaimed inode once, however many names it
// had.
func (l *loader) countIncomplete(ino uint64, size int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.counted[ino] {
		l.counted[ino] = true
		l.rep.Incomplete++
		l.rep.IncompleteByte += size
	}
}

// addDir indexes a directory.
func (l *loader) addDir(parent *dir, name string) *dir {
	id := l.s.NewID()
	d := &dir{id: id, parent: parent, name: name, kids: newKids(0)}
	parent.kids.set(name, id)
	l.s.dirs[id] = d
	l.rep.Dirs++
	return d
}

// addFile indexes a regular file, once per inode.
func (l *loader) addFile(d *dir, e *entry) {
	st := &e.st
	if id, ok := l.seen[st.Ino]; ok {
		d.kids.set(e.name, id)
		l.s.files[id].addLink(Name{d.id, e.name})
		return
	}
	id := l.s.NewID()
	if st.Nlink > 1 {
		l.seen[st.Ino] = id
	}
	d.kids.set(e.name, id)
	l.s.files[id] = newFile(st.Ino, Name{d.id, e.name})
	l.objects = append(l.objects, Object{ID: id, Size: st.Size, Atime: l.madeSince(st)})
	l.rep.Objects++
	l.rep.Stated++
}

func ts(t unix.Timespec) int64 { return t.Sec*1e9 + t.Nsec }

// HintName is a file in the store directory that remembers how many
// objects the last start-up found, so the next one sizes its tables once
// instead of growing them a million times. Only a hint: wrong or missing
// costs time, never correctness.
const HintName = "kvfs.hint"

func (s *Store) readHint() int {
	f, err := os.OpenFile(filepath.Join(s.dir, HintName), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 32))
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || n < 0 || n > 1<<30 {
		return 0
	}
	return n
}

// writeHint replaces the hint, never writing through a symlink planted
// in its place.
func (s *Store) writeHint(n int) {
	writeDurablyIn(s.root, HintName, 0o644, func(w io.Writer) error {
		_, err := io.WriteString(w, strconv.Itoa(n)+"\n")
		return err
	})
}
