package blob

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// SnapshotName is the index a clean stop leaves in the store directory:
// every directory of data/ with its inode number and change time, and
// every object's names and size in least-recently-used order. The next
// start uses it instead of stat'ing every stored file, which over a
// million objects with cold caches is the kernel instantiating a million
// inodes (about 12 s of CPU on two cores), if and only if:
//
//   - writing/ is empty (no write was open when it was saved), and
//   - every directory it lists is still a directory with the same inode
//     number and change time. A directory's change time moves whenever
//     a name in it is added, removed or renamed, and cannot be set back
//     from user space, so no name can have changed since the save.
//
// What it cannot see is a stored file changed in place (truncated,
// rewritten) while kvfs was down. Start-up then says the index came from
// the snapshot, and the caller audits the store in the background at
// once, as it does periodically for changes made while running; every
// getattr also compares the stored size with the ledger.
//
// Start-up removes the snapshot before serving, so a crash afterwards
// leaves none and the start after it walks the store.
const SnapshotName = "kvfs.index"

const snapshotMagic = "kvfs index v1\n"

// SaveSnapshot writes the snapshot of a quiescent store (the file system
// stopped): each yields every object least recently used first, with its
// size. Objects with no name left are skipped.
func (s *Store) SaveSnapshot(each func(fn func(id ID, size int64))) error {
	tmp := filepath.Join(s.dir, SnapshotName+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // a no-op once renamed
	crc := crc32.NewIEEE()
	bw := bufio.NewWriterSize(f, 1<<20)
	w := &snapWriter{w: io.MultiWriter(bw, crc)}
	w.bytes([]byte(snapshotMagic))
	dirs := s.dirsParentsFirst()
	index := make(map[ID]uint32, len(dirs))
	w.u64(uint64(len(dirs)))
	for i, d := range dirs {
		index[d.id] = uint32(i)
		st, err := s.dirStat(d, true)
		if err != nil {
			f.Close()
			return fmt.Errorf("snapshot: %w", err)
		}
		parent := ^uint32(0)
		if d.parent != nil {
			parent = index[d.parent.id]
		}
		w.u32(parent)
		w.str(d.name)
		w.u64(st.Ino)
		w.u64(uint64(st.Ctim.Sec))
		w.u64(uint64(st.Ctim.Nsec))
	}
	var order []ID
	var sizes []int64
	each(func(id ID, size int64) {
		if f, ok := s.files[id]; ok && len(f.links) > 0 {
			order = append(order, id)
			sizes = append(sizes, size)
		}
	})
	w.u64(uint64(len(order)))
	for i, id := range order {
		links := s.files[id].links
		w.u64(uint64(sizes[i]))
		w.u32(uint32(len(links)))
		for _, n := range links {
			w.u32(index[n.Parent])
			w.str(n.Name)
		}
	}
	if w.err == nil {
		w.err = binary.Write(bw, binary.LittleEndian, crc.Sum32())
	}
	if w.err == nil {
		w.err = bw.Flush()
	}
	if w.err == nil {
		w.err = f.Sync()
	}
	if err := errors.Join(w.err, f.Close()); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, SnapshotName)); err != nil {
		return err
	}
	return s.syncStoreDir()
}

// dirsParentsFirst lists the index's directories, root first, each after
// its parent.
func (s *Store) dirsParentsFirst() []*dir {
	out := []*dir{s.dirs[RootID]}
	for i := 0; i < len(out); i++ {
		for _, id := range out[i].kids {
			if d, ok := s.dirs[id]; ok {
				out = append(out, d)
			}
		}
	}
	return out
}

// dirStat stats an indexed directory without following symlinks. With
// match it also checks that the directory holds exactly the names the
// index gives it, each of the right type: while kvfs ran, something may
// have been put in the store, or taken away, that no audit has seen
// since, and a snapshot of the index would then hide it from the next
// start. The change time is read first, so a change made after it is
// one the next start sees as a new change time.
func (s *Store) dirStat(d *dir, match bool) (unix.Stat_t, error) {
	var st unix.Stat_t
	f, err := s.openBeneath(s.dirPath(d), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return st, err
	}
	defer f.Close()
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || !match {
		return st, err
	}
	ents, err := f.ReadDir(-1)
	if err != nil {
		return st, err
	}
	if len(ents) != len(d.kids) {
		return st, fmt.Errorf("directory %q holds %d names, the index %d", s.dirPath(d), len(ents), len(d.kids))
	}
	for _, e := range ents {
		id, ok := d.kids[e.Name()]
		_, isDir := s.dirs[id]
		if !ok || e.IsDir() != isDir || (!isDir && !e.Type().IsRegular()) {
			return st, fmt.Errorf("directory %q: %q is not what the index says", s.dirPath(d), e.Name())
		}
	}
	return st, nil
}

func (s *Store) syncStoreDir() error { return syncDir(s.dir) }

// takeSnapshot reads and removes the snapshot, and rebuilds the index
// from it if it still describes data/; index empty. On any
// doubt it leaves the index empty and returns why ("none": there is no
// snapshot).
func (s *Store) takeSnapshot() ([]Object, LoadReport, error) {
	data, err := os.ReadFile(filepath.Join(s.dir, SnapshotName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, LoadReport{}, errors.New("none")
	}
	// Whatever it holds, it describes the store only until this daemon
	// changes something: it must not outlive this start.
	if rmErr := s.dropSnapshot(); err == nil {
		err = rmErr
	}
	if err != nil {
		return nil, LoadReport{}, err
	}
	objects, rep, err := s.applySnapshot(data)
	if err != nil {
		s.resetIndex(0)
		return nil, LoadReport{}, err
	}
	rep.FromSnapshot = true
	return objects, rep, nil
}

// dropSnapshot removes the snapshot, durably.
func (s *Store) dropSnapshot() error {
	if err := os.Remove(filepath.Join(s.dir, SnapshotName)); err != nil {
		return err
	}
	return s.syncStoreDir()
}

// applySnapshot checks data against data/ and indexes it.
func (s *Store) applySnapshot(data []byte) ([]Object, LoadReport, error) {
	var rep LoadReport
	if len(data) < len(snapshotMagic)+4 || string(data[:len(snapshotMagic)]) != snapshotMagic {
		return nil, rep, errors.New("not a kvfs index")
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, rep, errors.New("checksum mismatch")
	}
	r := &snapReader{b: body[len(snapshotMagic):]}
	ndirs := r.u64()
	if r.err != nil || ndirs == 0 || ndirs > uint64(len(r.b)) {
		return nil, rep, errors.New("bad directory count")
	}
	dirs := make([]*dir, 0, ndirs)
	for i := uint64(0); i < ndirs; i++ {
		parent, name, ino, sec, nsec := r.u32(), r.str(), r.u64(), r.u64(), r.u64()
		if r.err != nil {
			return nil, rep, r.err
		}
		var d *dir
		if i == 0 {
			d = s.dirs[RootID]
		} else {
			if uint64(parent) >= i || !validName(name) {
				return nil, rep, fmt.Errorf("bad directory entry %d", i)
			}
			p := dirs[parent]
			if _, taken := p.kids[name]; taken {
				return nil, rep, fmt.Errorf("directory %q listed twice", name)
			}
			d = &dir{id: s.NewID(), parent: p, name: name, kids: map[string]ID{}}
			p.kids[name] = d.id
			s.dirs[d.id] = d
		}
		st, err := s.dirStat(d, false)
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Ino != ino ||
			uint64(st.Ctim.Sec) != sec || uint64(st.Ctim.Nsec) != nsec {
			return nil, rep, fmt.Errorf("directory %q changed since the snapshot", s.dirPath(d))
		}
		dirs = append(dirs, d)
	}
	rep.Dirs = int64(len(dirs) - 1)
	nobj := r.u64()
	if r.err != nil || nobj > uint64(len(r.b)) {
		return nil, rep, errors.New("bad object count")
	}
	objects := make([]Object, 0, nobj)
	for i := uint64(0); i < nobj; i++ {
		size, nlinks := int64(r.u64()), r.u32()
		if r.err != nil || size < 0 || nlinks == 0 || uint64(nlinks) > uint64(len(r.b)) {
			return nil, rep, fmt.Errorf("bad object %d", i)
		}
		id := s.NewID()
		f := &file{links: make([]Name, 0, nlinks)}
		for j := uint32(0); j < nlinks; j++ {
			di, name := r.u32(), r.str()
			if r.err != nil || uint64(di) >= ndirs || !validName(name) {
				return nil, rep, fmt.Errorf("bad name of object %d", i)
			}
			d := dirs[di]
			if _, taken := d.kids[name]; taken {
				return nil, rep, fmt.Errorf("name %q listed twice", name)
			}
			d.kids[name] = id
			f.links = append(f.links, Name{d.id, name})
		}
		s.files[id] = f
		// Atime only orders the objects: the snapshot lists them least
		// recently used first.
		objects = append(objects, Object{ID: id, Size: size, Atime: int64(i), Links: int(nlinks)})
		rep.Objects++
	}
	if len(r.b) != 0 {
		return nil, rep, errors.New("trailing bytes")
	}
	return objects, rep, nil
}

func validName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= 255 && !strings.ContainsAny(name, "/\x00")
}

// snapWriter writes little-endian integers and length-prefixed strings,
// keeping the first error.
type snapWriter struct {
	w   io.Writer
	buf [8]byte
	err error
}

func (w *snapWriter) bytes(b []byte) {
	if w.err == nil {
		_, w.err = w.w.Write(b)
	}
}

func (w *snapWriter) u32(v uint32) {
	binary.LittleEndian.PutUint32(w.buf[:4], v)
	w.bytes(w.buf[:4])
}

func (w *snapWriter) u64(v uint64) {
	binary.LittleEndian.PutUint64(w.buf[:8], v)
	w.bytes(w.buf[:8])
}

func (w *snapWriter) str(s string) {
	w.u32(uint32(len(s)))
	w.bytes([]byte(s))
}

// snapReader is snapWriter's reverse over a byte slice.
type snapReader struct {
	b   []byte
	err error
}

func (r *snapReader) take(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.err = io.ErrUnexpectedEOF
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *snapReader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *snapReader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *snapReader) str() string {
	n := r.u32()
	return string(r.take(int(n)))
}
