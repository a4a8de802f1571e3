package blob

import (
	"os"
	"path"

	"github.com/kvfs/kvfs/ledger"
	"golang.org/x/sys/unix"
)

// Object is one stored inode found at start-up.
type Object struct {
	ID    ledger.ID
	Size  int64
	Atime int64 // unix nanoseconds: the later of atime and mtime
	Links int   // names in data/
}

// LoadReport says what start-up found and reclaimed.
type LoadReport struct {
	Objects        int64 `json:"objects"`
	Bytes          int64 `json:"bytes"`
	Dirs           int64 `json:"dirs"`
	Incomplete     int64 `json:"incomplete"`
	IncompleteByte int64 `json:"incomplete_bytes"`
	Foreign        int64 `json:"foreign"`
}

// Load rebuilds the index from data/ after a clean stop or a crash. Files
// that still had a write handle open (a link under writing/) are deleted,
// as is anything that is neither a directory nor a regular file. It
// returns every remaining inode once, however many names it has.
func (s *Store) Load() ([]Object, LoadReport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetIndex()
	var rep LoadReport
	incomplete, err := s.takeWriting()
	if err != nil {
		return nil, rep, err
	}
	l := loader{s: s, incomplete: incomplete, seen: map[uint64]ledger.ID{}, rep: &rep}
	if err := l.walk(s.dirs[RootID], "."); err != nil {
		return nil, rep, err
	}
	for i := range l.objects {
		l.objects[i].Links = len(s.files[l.objects[i].ID].links)
	}
	return l.objects, rep, nil
}

// takeWriting empties writing/ and returns the inode numbers it marked.
func (s *Store) takeWriting() (map[uint64]bool, error) {
	f, err := s.openWriting()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	marked := make(map[uint64]bool, len(names))
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(int(f.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			marked[st.Ino] = true
		}
		unix.Unlinkat(int(f.Fd()), name, 0)
	}
	return marked, nil
}

func (s *Store) openWriting() (*os.File, error) {
	return os.OpenFile(s.writing.Name(), os.O_RDONLY|unix.O_DIRECTORY, 0)
}

type loader struct {
	s          *Store
	incomplete map[uint64]bool      // inodes marked in writing/; false once counted
	seen       map[uint64]ledger.ID // inodes with several names
	objects    []Object
	rep        *LoadReport
}

func (l *loader) walk(d *dir, rel string) error {
	f, err := l.s.openBeneath(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return err
	}
	fd := int(f.Fd())
	for _, e := range ents {
		name := e.Name()
		switch {
		case e.IsDir():
			if err := l.addDir(d, rel, name); err != nil {
				return err
			}
		case e.Type().IsRegular():
			l.addFile(fd, d, name)
		default:
			l.rep.Foreign++
			unix.Unlinkat(fd, name, 0)
		}
	}
	return nil
}

func (l *loader) addDir(parent *dir, rel, name string) error {
	id := l.s.NewID()
	d := &dir{id: id, parent: parent, name: name, kids: map[string]ledger.ID{}}
	parent.kids[name] = id
	l.s.dirs[id] = d
	l.rep.Dirs++
	return l.walk(d, path.Join(rel, name))
}

func (l *loader) addFile(dirfd int, d *dir, name string) {
	var st unix.Stat_t
	if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return
	}
	if uncounted, marked := l.incomplete[st.Ino]; marked {
		// Counted once per inode, however many names it had.
		if uncounted {
			l.incomplete[st.Ino] = false
			l.rep.Incomplete++
			l.rep.IncompleteByte += st.Size
		}
		unix.Unlinkat(dirfd, name, 0)
		return
	}
	if id, ok := l.seen[st.Ino]; ok {
		d.kids[name] = id
		l.s.files[id].links = append(l.s.files[id].links, Name{d.id, name})
		return
	}
	id := l.s.NewID()
	if st.Nlink > 1 {
		l.seen[st.Ino] = id
	}
	d.kids[name] = id
	l.s.files[id] = &file{links: []Name{{d.id, name}}}
	l.objects = append(l.objects, Object{ID: id, Size: st.Size, Atime: max(ts(st.Atim), ts(st.Mtim))})
	l.rep.Objects++
	l.rep.Bytes += ledger.Charge(st.Size)
}

func ts(t unix.Timespec) int64 { return t.Sec*1e9 + t.Nsec }
