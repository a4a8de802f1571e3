package blob

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cpLoad is one start from a checkpoint (see CheckpointName): the index
// is built from the checkpoint while the directories are checked against
// the store, then each directory that changed is reconciled with its
// listing.
type cpLoad struct {
	s     *Store
	l     *loader // what is stat'ed: changed entries, new subtrees
	marks *marks
	when  int64       // unix nanoseconds the checkpoint was taken
	dirs  []cpLoadDir // parents first; dirs[0] is data/
	objs  []cpObj     // least recently used first
	// unsure: objects whose size the checkpoint left to this start.
	unsure map[ID]bool
	// taken: names two holders claimed, by directory position. The
	// capture copies in steps and a name may pass from one holder to
	// another in between; that moved the directory's change time, so
	// the directory is listed.
	taken map[int][]string
	// reclaimed: how many objects of the checkpoint were dropped as
	// half-written (dropIncomplete), not gone (LoadReport.Gone).
	reclaimed int64
	// fresh: directories that are new since the checkpoint, walked.
	fresh []walkRoot
}

// cpLoadDir is one directory the checkpoint lists.
type cpLoadDir struct {
	d       *dir
	path    string
	ino     uint64
	ctime   int64
	names   int // entries it held
	trusted bool
	check   dirCheck
}

// dirCheck is what the store holds for a directory of the checkpoint:
// nothing (gone), the same directory unchanged (same), or a listing.
type dirCheck struct {
	gone, same bool
	names      string // the listed names, one after another
	ents       []dent
	err        error
	// held is the listed directory, if the listing can vouch for it as
	// a checkpoint's does (see dirHolds): every entry a directory or a
	// regular file, and no change within the racy window before it.
	held *heldDir
}

// dent is one listed entry; its name is names[off:off+n].
type dent struct {
	ino    uint64
	off, n uint32
	typ    uint8
}

func (c *dirCheck) name(e dent) string { return c.names[e.off : e.off+e.n] }

// cpObj is one object of the checkpoint.
type cpObj struct {
	id   ID
	ino  uint64
	size int64
}

// loadCheckpoint builds the index from the checkpoint and the store's
// directories. On an error the index is left half-built, for the caller
// to reset; ("none": there is no checkpoint).
func (s *Store) loadCheckpoint(m *marks, rep *LoadReport) (objects []Object, err error) {
	data, unmap, err := mapCheckpoint(filepath.Join(s.dir, CheckpointName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errors.New("none")
	}
	if err != nil {
		return nil, err
	}
	defer unmap()
	err = readMapped(func() error {
		objects, err = s.parseCheckpoint(data, m, rep)
		return err
	})
	return objects, err
}

// readMapped runs read, which reads a mapped file: one cut short under
// the mapping (kvfs only ever renames a new checkpoint into place)
// faults, and that is an error, not a crash.
func readMapped(read func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if _, fault := p.(interface{ Addr() uintptr }); !fault {
				panic(p)
			}
			err = fmt.Errorf("checkpoint changed while read: %v", p)
		}
	}()
	return read()
}

// parseCheckpoint is loadCheckpoint of the checkpoint's bytes.
func (s *Store) parseCheckpoint(data []byte, m *marks, rep *LoadReport) ([]Object, error) {
	r, when, err := s.readHeader(data)
	if err != nil {
		return nil, err
	}
	rep.SnapshotClean = r.clean
	c := &cpLoad{s: s, l: s.newLoader(m, rep, 0), marks: m, when: when, unsure: map[ID]bool{}, taken: map[int][]string{}}
	c.l.since = when
	rep.SnapshotTaken = c.when
	if err := c.parseDirs(r); err != nil {
		return nil, err
	}
	checked := c.checkDirs()
	defer checked.Wait() // when a fault cuts the parse short too
	err = c.parseObjects(r)
	checked.Wait()
	if err != nil {
		return nil, err
	}
	c.untangle()
	return c.reconcile()
}

// mapCheckpoint maps the checkpoint at path read-only. Reading it into
// the heap instead would cost a fresh page of memory for each of its
// pages (at ten million objects 450 MB: 1.7 s on a VM whose host backs
// each page on its first touch, against 0.1 s for the mapping, CRC
// included). Nothing parsed from it may keep a pointer into it: names
// are copied (cpReader.str). unmap ends the mapping.
func mapCheckpoint(path string) (data []byte, unmap func(), err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if st.Size() == 0 {
		return nil, func() {}, nil // not a checkpoint: checkpointBody says so
	}
	if int64(int(st.Size())) != st.Size() {
		return nil, nil, fmt.Errorf("checkpoint of %d bytes", st.Size())
	}
	data, err = unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mapping the checkpoint: %w", err)
	}
	unix.Madvise(data, unix.MADV_SEQUENTIAL) // read once, front to back
	unix.Madvise(data, unix.MADV_WILLNEED)
	return data, func() { unix.Munmap(data) }, nil
}

// readHeader checks a checkpoint and reads its header: when it was
// taken, and the next ID, which the store hands out from (IDs are the
// checkpoint's; what a start finds new gets IDs past them). The reader
// is left at the directories, and holds the body without its trailer.
func (s *Store) readHeader(data []byte) (*cpReader, int64, error) {
	body, objects, err := checkpointBody(data)
	if err != nil {
		return nil, 0, err
	}
	s.checkpointSize.Store(int64(len(data)))
	r := &cpReader{b: body, objects: objects}
	r.clean = r.u8() == 1 // the same rules hold either way; said in the report
	when := int64(r.u64())
	if next := r.u64(); r.err == nil && next > s.nextID.Load() {
		s.nextID.Store(next)
	}
	return r, when, r.err
}

// checkpointBody checks the magic and the checksum, and splits off the
// trailer's object count.
func checkpointBody(data []byte) ([]byte, uint64, error) {
	if len(data) < len(checkpointMagic)+12 || string(data[:len(checkpointMagic)]) != checkpointMagic {
		return nil, 0, errors.New("not a kvfs checkpoint of this version")
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, 0, errors.New("checksum mismatch")
	}
	objects := binary.LittleEndian.Uint64(body[len(body)-8:])
	return body[len(checkpointMagic) : len(body)-8], objects, nil
}

// parseDirs indexes the checkpoint's directories.
func (c *cpLoad) parseDirs(r *cpReader) error {
	n := r.u64()
	if r.err != nil || n == 0 || n > uint64(len(r.b)) {
		return errors.New("bad directory count")
	}
	c.dirs = make([]cpLoadDir, n)
	for i := range c.dirs {
		id, parent, name, ino, ctime, names, trusted := ID(r.u64()), r.u32(), r.str(), r.u64(), int64(r.u64()), r.u32(), r.u8()
		if r.err != nil || names > uint32(len(r.b)) {
			return fmt.Errorf("bad directory %d", i)
		}
		cd := &c.dirs[i]
		cd.ino, cd.ctime, cd.names, cd.trusted = ino, ctime, int(names), trusted == 1
		if i == 0 {
			if id != RootID {
				return errors.New("bad root directory")
			}
			cd.d, cd.path = c.s.dirs[RootID], "."
			cd.d.kids = newKids(int(names))
			c.s.dirsChanged()
			continue
		}
		if uint64(parent) >= uint64(i) || !validName(name) {
			return fmt.Errorf("bad directory entry %d", i)
		}
		p := &c.dirs[parent]
		if _, taken := p.d.kids.lookup(name); taken {
			return fmt.Errorf("directory %q listed twice", name)
		}
		if !c.freeID(id) {
			return fmt.Errorf("directory %q has a bad or taken ID %d", name, id)
		}
		cd.d = &dir{id: id, parent: p.d, name: name, kids: newKids(int(names))}
		cd.path = path.Join(p.path, name)
		p.d.kids.set(name, cd.d.id)
		c.s.dirs[cd.d.id] = cd.d
	}
	return nil
}

// parseObjects indexes the checkpoint's objects, each under every name
// it had; reconcile then drops what the store no longer holds.
func (c *cpLoad) parseObjects(r *cpReader) error {
	n := r.objects
	if r.err != nil || n > uint64(len(r.b)) {
		return errors.New("bad object count")
	}
	c.objs = make([]cpObj, 0, n)
	files := make([]file, n) // one allocation, not a million
	var names []Name
	for i := range files {
		if i%(1<<16) == 0 && c.s.stopping() {
			return ErrStopped
		}
		id, ino, size, nlinks := ID(r.u64()), r.u64(), int64(r.u64()), r.u32()
		if r.err != nil || size < -1 || nlinks == 0 || uint64(nlinks) > uint64(len(r.b)) || !c.usableID(id) {
			return fmt.Errorf("bad object %d", i)
		}
		names = names[:0]
		for j := uint32(0); j < nlinks; j++ {
			di, name := r.u32(), r.str()
			if r.err != nil || uint64(di) >= uint64(len(c.dirs)) || !validName(name) {
				return fmt.Errorf("bad name of object %d", i)
			}
			d := c.dirs[di].d
			if !d.kids.set(name, id) {
				c.taken[int(di)] = append(c.taken[int(di)], name)
			}
			names = append(names, Name{d.id, name})
		}
		f := &files[i]
		f.ino = ino
		if len(names) > 1 {
			f.setLinks(slices.Clone(names)) // names is reused
		} else {
			f.setLinks(names) // copied into f
		}
		// One hash of the ID, not a lookup and then a store: an ID taken
		// by an earlier object fails the load, and the store is walked
		// from an empty index.
		had := len(c.s.files)
		if c.s.files[id] = f; len(c.s.files) == had {
			return fmt.Errorf("bad object %d: ID %d listed twice", i, id)
		}
		c.objs = append(c.objs, cpObj{id: id, ino: ino, size: size})
		if size < 0 {
			c.unsure[id] = true
		}
	}
	if len(r.b) != 0 {
		return errors.New("trailing bytes")
	}
	return nil
}

// freeID says whether id may be given to an entry of the checkpoint:
// usable, and not given yet.
func (c *cpLoad) freeID(id ID) bool {
	_, file := c.s.files[id]
	return c.usableID(id) && !file
}

// usableID says whether id may be an object's or a directory's of the
// checkpoint: not the root's, below the next ID to hand out, and no
// directory's (there are few; parseObjects checks files itself).
func (c *cpLoad) usableID(id ID) bool {
	if id <= RootID || uint64(id) > c.s.nextID.Load() {
		return false
	}
	_, dir := c.s.dirs[id]
	return !dir
}

// untangle leaves each name claimed twice to its later holder, which
// took it last, and takes it from the earlier ones (a directory goes
// with everything under it); the listing of its directory, which
// changed, then checks the name against the store like any other.
func (c *cpLoad) untangle() {
	if len(c.taken) == 0 {
		return
	}
	claimed := map[Name]bool{}
	for di, names := range c.taken {
		d := c.dirs[di].d
		for _, name := range names {
			claimed[Name{d.id, name}] = true
		}
		for j := di + 1; j < len(c.dirs); j++ {
			if sub := c.dirs[j].d; sub.parent == d && claimed[Name{d.id, sub.name}] {
				c.s.dropDir(sub)
			}
		}
	}
	for _, o := range c.objs {
		f := c.s.files[o.id]
		if f == nil {
			continue // its names went with a directory
		}
		kept := f.links()[:0]
		for _, n := range f.links() {
			if !claimed[n] || c.s.dirs[n.Parent].kids.get(n.Name) == o.id {
				kept = append(kept, n)
			}
		}
		if f.setLinks(kept); len(kept) == 0 {
			delete(c.s.files, o.id)
		}
	}
}

// checkDirs compares each directory of the checkpoint with the store, in
// the background, loaderWorkers at a time.
func (c *cpLoad) checkDirs() *sync.WaitGroup {
	var wg sync.WaitGroup
	sem := make(chan struct{}, loaderWorkers)
	for i := range c.dirs {
		wg.Add(1)
		go func(cd *cpLoadDir) {
			defer wg.Done()
			sem <- struct{}{}
			cd.check = c.s.checkDir(cd)
			<-sem
		}(&c.dirs[i])
	}
	return &wg
}

// checkDir says whether a directory of the checkpoint is gone, the
// same as recorded (and vouched for), or else what it holds now.
func (s *Store) checkDir(cd *cpLoadDir) dirCheck {
	start := time.Now()
	f, err := s.openListing(cd.path)
	if err != nil {
		return dirCheck{gone: true}
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return dirCheck{err: err}
	}
	if cd.trusted && st.Ino == cd.ino && st.Ctim.Nano() == cd.ctime {
		return dirCheck{same: true}
	}
	ch := dirCheck{ents: make([]dent, 0, cd.names+cd.names/8)}
	var names strings.Builder // its String is the bytes, not a copy
	names.Grow(32 * cd.names)
	plain := true
	ch.err = readDirents(int(f.Fd()), func(name []byte, ino uint64, typ uint8) {
		ch.ents = append(ch.ents, dent{ino: ino, off: uint32(names.Len()), n: uint32(len(name)), typ: typ})
		names.Write(name)
		plain = plain && plainEntry(typ)
	})
	ch.names = names.String()
	if ctime := st.Ctim.Nano(); plain && ch.err == nil && s.settled(ctime, start) {
		ch.held = &heldDir{st.Ino, ctime, len(ch.ents)}
	}
	return ch
}

func validName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= 255 &&
		strings.IndexByte(name, '/') < 0 && strings.IndexByte(name, 0) < 0
}

// cpReader reads what cpWriter wrote, keeping the first error.
type cpReader struct {
	b       []byte
	objects uint64 // the trailer's count
	clean   bool   // written at a clean stop (the header's)
	err     error
	// names is the arena str copies names into: a chunk holds many, so
	// the millions of names a checkpoint gives cost their bytes, not a
	// heap object each rounded up to its size class (a 40-byte LMCache
	// key took 48), and the collector sees chunks, not names. A chunk
	// lives while any of its names does; it is only ever appended to.
	names []byte
}

// nameChunk is the arena's chunk size.
const nameChunk = 64 << 10

func (r *cpReader) take(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.err = io.ErrUnexpectedEOF
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *cpReader) u8() byte {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *cpReader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *cpReader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *cpReader) str() string {
	b := r.take(int(r.u32()))
	if len(b) == 0 {
		return ""
	}
	if len(b) > cap(r.names)-len(r.names) {
		r.names = make([]byte, 0, max(nameChunk, len(b)))
	}
	start := len(r.names)
	r.names = append(r.names, b...)
	return unsafe.String(&r.names[start], len(b))
}
