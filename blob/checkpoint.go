package blob

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CheckpointName is the index kvfs keeps in the store directory, written
// while it runs (see package core) and at a clean stop: every directory
// of data/ with its inode number and change time, and every object's
// stored inode number, size and names, least recently used first. A
// start reads it instead of stat'ing every stored file, which over a
// million objects with cold caches is the kernel instantiating a million
// inodes (about 11 s here), and trusts it only as far as the store
// proves it still holds:
//
//   - A directory whose inode number and change time are what the
//     checkpoint recorded, and that the checkpoint vouched for, holds
//     exactly the names it lists: a name added, removed or renamed moves
//     its directory's change time, which user space cannot set back. Its
//     entries are taken as they are.
//   - Any other directory is listed (getdents: names and inode numbers,
//     no stat). An entry whose name and inode number the checkpoint has
//     is taken as it is; only new or changed entries are stat'ed, and
//     names that vanished are dropped.
//   - Objects marked in writing/ (a writer was open at the crash) are
//     deleted whatever the checkpoint says.
//
// What neither can see is a stored file changed in place (a write
// through kvfs after the checkpoint, or a truncate behind its back), so
// a start from a checkpoint audits the store in the background at once;
// every getattr also compares the stored size with the ledger.
//
// A checkpoint is never deleted: a stale one is safe by the rules above,
// only slower to use.
const CheckpointName = "kvfs.index"

// checkpointMagic: v4 ends with the object count and the checksum, so a
// running daemon writes its checkpoint as it copies it, in pieces, and
// never holds the whole of it (v3 had the count before the objects: 60 to
// 90 bytes an object held at once, 0.6 to 0.9 GB at ten million). Since
// v3 every directory's and object's ID (and the next ID to hand out) is
// recorded, so a start from it numbers the namespace as the daemon that
// wrote it did: a handover's successor answers the node IDs the kernel
// holds (see package mount). Older checkpoints are not read (a walk
// replaces them once).
const checkpointMagic = "kvfs index v4\n"

// racyWindow: a directory changed this recently when the checkpoint read
// its change time could change again within the same tick of the file
// system's clock (a jiffy on ext4, a second or two on others) and keep
// that change time; the checkpoint does not vouch for it.
const racyWindow = 2 * time.Second

// settled: a directory whose change time is ctime, read at t, is past
// the racy window and may be vouched for.
func (s *Store) settled(ctime int64, t time.Time) bool {
	return ctime < t.Add(-s.racy).UnixNano()
}

// plainEntry: a directory holding only directories and regular files
// (as getdents64 types them) may be vouched for; anything else is left
// for the next start to look at.
func plainEntry(typ uint8) bool {
	return typ == unix.DT_REG || typ == unix.DT_DIR
}

// Checkpoint is what one capture of the index took (WriteCheckpoint,
// HandoverCheckpoint).
type Checkpoint struct {
	dirs []cpDir
	// Objects it lists; Unsure of them had a writer open, so the next
	// start reads their sizes; Distrusted directories are listed at the
	// next start even if unchanged.
	Objects, Unsure, Distrusted int
	// Listed is how many directories it listed to vouch for them: none
	// that the last checkpoint or the start vouched for and that are
	// unchanged since.
	Listed int
	Clean  bool
	Taken  time.Time
	// Steps is how many times the capture took the owner's lock to copy
	// the index (not counting the verification's, one short hold for
	// each directory it lists).
	Steps int
	// LeftOut are the objects of the order the capture wrote without a
	// size (being written) or did not write (no name in a directory
	// it listed).
	LeftOut []ID
	// Size is the checkpoint's length in bytes.
	Size int64
}

// cpDir is a directory the capture vouched for.
type cpDir struct {
	path string
	dir  *dir
	heldDir
	flagAt int // offset of its trusted byte in the capture's first step
}

// heldDir is a directory's inode number and change time, and how many
// entries it held then.
type heldDir struct {
	ino   uint64
	ctime int64
	names int
}

// sized is one object of the LRU order.
type sized struct {
	id   ID
	size int64
}

// cpStep is how many objects one step of a capture copies: a few
// milliseconds under the owner's lock.
const cpStep = 1 << 15

// WriteCheckpoint copies the index in steps, each run by shared, which
// holds the owner's lock (shared at least) while it calls its argument:
// no name changes during a step, and writers get in between. order
// hands out the objects least recently used first with their sizes, a
// step's worth at a time (see Order); busy says
// whether an object may be being written (its size is then left to the
// next start to read). clean: the file system has stopped serving.
//
// The directories' change times are read in the first step: a name
// changed in a directory after it moves the directory's change time
// past the one recorded (see racyWindow), so the next start lists that
// directory whatever the later steps copied of it. Each later step
// takes the next objects of the order, and copies them with their names
// as they are then: an object made after the first step (its ID above
// the next ID the first step recorded) is left to the next start's
// listing; one removed before its step is not written.
//
// Between the steps, without the lock, the copy is written to a
// temporary file as it grows, so the daemon holds one step of it at a
// time; once complete it is synced and renamed into place. Before the
// directories are written, the checkpoint withdraws its word for each
// directory the capture trusted that does not hold as many entries as
// the index gave it, all directories and regular files: something put
// in the store or taken from it behind kvfs's back, not yet audited,
// that an unchanged directory would hide from the next start. (A
// directory changed since the capture is listed at the next start
// anyway, and one unchanged since the last checkpoint that found it
// holding what the index said still does.) Checkpoints are written one
// at a time.
func (s *Store) WriteCheckpoint(shared func(func()), order Order, busy func(ID) bool, clean bool) (*Checkpoint, error) {
	// One step's objects at the last checkpoint's bytes an object, and
	// room to spare: no step grows the buffer under the lock.
	perObject := int64(64)
	if n := s.checkpointObjects.Load(); n > 0 {
		perObject = max(perObject, s.checkpointSize.Load()/n)
	}
	var cp *Checkpoint
	// Only the daemon reads it: it names every object, those below
	// directories other users may not list too.
	err := writeDurablyIn(s.root, CheckpointName, 0o600, func(f io.Writer) error {
		w := &cpWriter{b: make([]byte, 0, int64(s.step)*perObject*5/4+64<<10), out: f}
		cp = s.capture(w, shared, order, busy, clean, s.verifyDirs)
		return w.err
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	s.checkpointSize.Store(cp.Size)
	s.checkpointObjects.Store(int64(cp.Objects))
	return cp, nil
}

// Order hands fn up to n more objects, least recently used first, with
// their sizes, and says whether there are more: a ledger's walk, taken
// a step at a time so that no step copies the whole order (16 B an
// object, and at ten million 1.6-4.8 s under the caller's lock and the
// ledger's, every store waiting). An error (the walk may have missed an
// object) stops the checkpoint.
type Order func(n int, fn func(id ID, size int64)) (more bool, err error)

// capture copies the index into w in steps (see WriteCheckpoint),
// checking the directories it trusts with verify, if any, before it
// writes them.
func (s *Store) capture(w *cpWriter, shared func(func()), order Order, busy func(ID) bool, clean bool, verify func(cp *Checkpoint, head []byte, shared func(func()))) *Checkpoint {
	cp := &Checkpoint{Clean: clean}
	var index map[ID]uint32
	var last ID // the last ID handed out when the first step ran
	step := func(f func()) { shared(f); cp.Steps++ }
	step(func() {
		cp.Taken = time.Now()
		w.b = append(w.b, checkpointMagic...)
		w.u8(clean)
		w.u64(uint64(cp.Taken.UnixNano()))
		nextAt := len(w.b)
		w.u64(0)
		index = s.captureDirs(w, cp)
		// Read last: an owner hands out IDs without its lock, and
		// every object written must be at or below it.
		last = ID(s.nextID.Load())
		binary.LittleEndian.PutUint64(w.b[nextAt:], uint64(last))
	})
	if verify != nil {
		verify(cp, w.b, shared)
	}
	w.flush()
	objs := make([]sized, 0, s.step)
	for more := true; more && w.err == nil; {
		step(func() {
			objs = objs[:0]
			var err error
			more, err = order(s.step, func(id ID, size int64) {
				if id <= last {
					objs = append(objs, sized{id, size})
				}
			})
			if err != nil {
				w.err = err
				return
			}
			s.captureObjects(w, cp, objs, index, busy)
		})
		w.flush()
	}
	w.end(cp.Objects)
	cp.Size = w.size
	return cp
}

// captureDirs writes the directories, each after its parent, and
// returns their positions.
func (s *Store) captureDirs(w *cpWriter, cp *Checkpoint) map[ID]uint32 {
	dirs := s.dirsParentsFirst()
	index := make(map[ID]uint32, len(dirs))
	w.u64(uint64(len(dirs)))
	for i, d := range dirs {
		index[d.id] = uint32(i)
		parent := ^uint32(0)
		if d.parent != nil {
			parent = index[d.parent.id]
		}
		path := s.dirPath(d)
		st, err := s.dirStat(path)
		ctime := st.Ctim.Nano()
		w.u64(uint64(d.id))
		w.u32(parent)
		w.str(d.name)
		w.u64(st.Ino)
		w.u64(uint64(ctime))
		w.u32(uint32(d.kids.len()))
		trusted := err == nil && s.settled(ctime, cp.Taken)
		if trusted {
			cp.dirs = append(cp.dirs, cpDir{path: path, dir: d, heldDir: heldDir{st.Ino, ctime, d.kids.len()}, flagAt: len(w.b)})
		}
		w.u8(trusted)
	}
	return index
}

// captureObjects writes objects with their names in the directories the
// first step listed (a directory made since is not vouched for, as its
// parent changed, and is walked at the next start).
func (s *Store) captureObjects(w *cpWriter, cp *Checkpoint, order []sized, index map[ID]uint32, busy func(ID) bool) {
	for _, o := range order {
		f, ok := s.files[o.id]
		if !ok || len(f.links()) == 0 {
			cp.LeftOut = append(cp.LeftOut, o.id)
			continue
		}
		start := len(w.b)
		if busy(o.id) {
			o.size = -1
			cp.LeftOut = append(cp.LeftOut, o.id)
		}
		w.u64(uint64(o.id))
		w.u64(f.ino)
		w.u64(uint64(o.size))
		w.u32(0)
		names := 0
		for _, n := range f.links() {
			if i, ok := index[n.Parent]; ok {
				w.u32(i)
				w.str(n.Name)
				names++
			}
		}
		if names == 0 {
			w.b = w.b[:start]
			if o.size >= 0 {
				cp.LeftOut = append(cp.LeftOut, o.id)
			}
			continue
		}
		binary.LittleEndian.PutUint32(w.b[start+24:], uint32(names))
		cp.Objects++
		if o.size < 0 {
			cp.Unsure++
		}
	}
}

// dirsParentsFirst lists the index's directories, root first, each after
// its parent. It visits the directories, never their names: one may hold
// a million.
func (s *Store) dirsParentsFirst() []*dir {
	kids := make(map[*dir][]*dir, len(s.dirs))
	for _, d := range s.dirs {
		if d.parent != nil {
			kids[d.parent] = append(kids[d.parent], d)
		}
	}
	out := []*dir{s.dirs[RootID]}
	for i := 0; i < len(out); i++ {
		out = append(out, kids[out[i]]...)
	}
	return out
}

// dirStat stats a directory of data/ without following symlinks.
func (s *Store) dirStat(rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	f, err := s.openBeneath(rel, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return st, err
	}
	defer f.Close()
	return st, unix.Fstat(int(f.Fd()), &st)
}

// verifyDirs withdraws cp's word for each directory it trusted that
// does not hold what the index gave it (see WriteCheckpoint).
// head is the capture so far, which holds the directories; shared runs
// a function under the owner's lock, shared.
func (s *Store) verifyDirs(cp *Checkpoint, head []byte, shared func(func())) {
	verified := make(map[string]heldDir, len(cp.dirs))
	for _, d := range cp.dirs {
		if !s.dirHolds(cp, d, verified, shared) {
			head[d.flagAt] = 0
			cp.Distrusted++
		}
	}
	s.verified = verified
}

// dirHolds says whether a directory is still the one captured and holds
// what the index gives it: d.names entries, the directories it has, and
// its regular files at their inode numbers (a file replaced behind
// kvfs's back under the same name keeps the count, not the number). It
// notes in verified those it listed or knew to. shared runs the
// comparison with the index under the owner's lock.
func (s *Store) dirHolds(cp *Checkpoint, d cpDir, verified map[string]heldDir, shared func(func())) bool {
	f, err := s.openListing(d.path)
	if err != nil {
		return false
	}
	defer f.Close()
	var st unix.Stat_t
	switch {
	case unix.Fstat(int(f.Fd()), &st) != nil || st.Ino != d.ino:
		return false
	case st.Ctim.Nano() != d.ctime:
		return true // changed since the capture
	case s.verified[d.path] == d.heldDir:
		verified[d.path] = d.heldDir
		return true
	}
	cp.Listed++
	// Compared a batch at a time: a flat directory of millions of names
	// is neither held in memory nor compared under one hold of the lock.
	// A change through kvfs between two batches changes the directory,
	// which the next start then lists anyway.
	var b heldBatch
	n, ok := 0, true
	compare := func() {
		if ok && len(b.ents) > 0 {
			shared(func() { ok = s.indexHolds(d.dir, &b) })
		}
		b.ents, b.names = b.ents[:0], b.names[:0]
	}
	err = readDirents(int(f.Fd()), func(name []byte, ino uint64, typ uint8) {
		n++
		if !plainEntry(typ) {
			ok = false
			return
		}
		if typ == unix.DT_DIR {
			ino = 0
		}
		b.ents = append(b.ents, heldEnt{off: len(b.names), n: len(name), ino: ino})
		b.names = append(b.names, name...)
		if len(b.ents) == heldBatchSize {
			compare()
		}
	})
	compare()
	if err != nil || !ok || n != d.names {
		return false
	}
	verified[d.path] = d.heldDir
	return true
}

// direntBufSize is getdents64's buffer: a few system calls for a
// directory of thousands of entries.
const direntBufSize = 256 << 10

// direntBufs keeps getdents64's buffers between calls: a checkpoint
// lists a thousand small directories, and zeroing a fresh buffer for
// each cost more than the listings (a third of a 100,000-object
// checkpoint's time).
var direntBufs = sync.Pool{New: func() any { return new([direntBufSize]byte) }}

// heldBatch is a batch of a listed directory's entries for indexHolds.
type heldBatch struct {
	names []byte
	ents  []heldEnt
}

// heldEnt is a listed entry: its name is names[off:off+n]; ino is 0 for
// a directory.
type heldEnt struct {
	off, n int
	ino    uint64
}

// heldBatchSize is how many entries indexHolds compares under one hold
// of the owner's lock.
const heldBatchSize = 4096

// indexHolds says whether the index gives directory d each entry of b:
// a directory for a directory, a regular file at its inode number.
// The owner's lock held, shared.
func (s *Store) indexHolds(d *dir, b *heldBatch) bool {
	if s.dirs[d.id] != d {
		return false
	}
	for _, e := range b.ents {
		id, found := d.kids.lookup(unsafe.String(&b.names[e.off], e.n))
		if !found {
			return false
		}
		if e.ino == 0 {
			if _, isDir := s.dirs[id]; !isDir {
				return false
			}
			continue
		}
		if f, isFile := s.files[id]; !isFile || f.ino != e.ino {
			return false
		}
	}
	return true
}

// readDirents lists a directory with getdents64, without a stat: each
// entry's name (valid only during the call), inode number and type (may
// be DT_UNKNOWN on file systems that do not record it). "." and ".."
// are left out.
func readDirents(fd int, fn func(name []byte, ino uint64, typ uint8)) error {
	b := direntBufs.Get().(*[direntBufSize]byte)
	defer direntBufs.Put(b)
	buf := b[:]
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.LittleEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return errors.New("getdents: bad record")
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if !isDots(name) {
				fn(name, binary.LittleEndian.Uint64(b[0:8]), b[18])
			}
			b = b[reclen:]
		}
	}
}

func isDots(name []byte) bool {
	return len(name) == 1 && name[0] == '.' || len(name) == 2 && name[0] == '.' && name[1] == '.'
}

// cpWriter appends little-endian integers and length-prefixed strings
// to b, which flush writes out between the capture's steps (out nil: b
// keeps the whole checkpoint).
type cpWriter struct {
	b    []byte
	out  io.Writer
	crc  uint32 // of what was written out
	size int64  // bytes written out, or the whole when end has run
	err  error
}

// flush writes out what b holds.
func (w *cpWriter) flush() {
	if w.out == nil || w.err != nil {
		return
	}
	w.crc = crc32.Update(w.crc, crc32.IEEETable, w.b)
	w.write()
}

func (w *cpWriter) write() {
	_, w.err = w.out.Write(w.b)
	w.size += int64(len(w.b))
	w.b = w.b[:0]
}

// end appends the trailer: the object count, and the checksum of
// everything before it; then writes out the rest.
func (w *cpWriter) end(objects int) {
	w.u64(uint64(objects))
	w.crc = crc32.Update(w.crc, crc32.IEEETable, w.b)
	w.b = binary.LittleEndian.AppendUint32(w.b, w.crc)
	if w.out == nil {
		w.size = int64(len(w.b))
	} else if w.err == nil {
		w.write()
	}
}

func (w *cpWriter) u8(b bool) {
	if b {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}

func (w *cpWriter) u32(v uint32) { w.b = binary.LittleEndian.AppendUint32(w.b, v) }
func (w *cpWriter) u64(v uint64) { w.b = binary.LittleEndian.AppendUint64(w.b, v) }
func (w *cpWriter) str(s string) { w.u32(uint32(len(s))); w.b = append(w.b, s...) }
