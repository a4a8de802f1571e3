package blob

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvfs/kvfs/internal/fdwalk"
	"golang.org/x/sys/unix"
)

// FsckReport is what an offline check of a store found.
type FsckReport struct {
	Objects  int64    `json:"objects"`
	Bytes    int64    `json:"bytes"` // charged: the sum of charge(size)
	Dirs     int64    `json:"dirs"`
	Problems []string `json:"problems"`
	Repaired bool     `json:"repaired"`
	// PendingUploads are names the remote tier's journal (RemoteName)
	// still has to upload: not a problem, the next mount uploads them.
	PendingUploads int `json:"pending_uploads,omitempty"`
	// Foreign are the entries of the store directory that are not
	// kvfs's (put there by hand or by another program): not a problem,
	// kvfs neither serves nor removes them, but they take room on the
	// store's disk that no capacity counts.
	Foreign []string `json:"foreign,omitempty"`
}

// HandoverName is the Unix socket in the store on which its daemon
// takes handover requests (mount.HandoverSocket).
const HandoverName = "kvfs.handover"

// ownNames are the store directory's entries kvfs makes (the layout's
// before FormatName, and those since), and the one its file system may.
var ownNames = func() map[string]bool {
	own := maps.Clone(legacyNames)
	for _, n := range []string{FormatName, FormatName + ".tmp", HintName + ".tmp", UsesName, oldUsesName, HandoverName,
		"lost+found"} { // a store at the root of its own ext4
		own[n] = true
	}
	return own
}()

// foreignNames lists dir's entries that kvfs did not make, sorted.
func foreignNames(dir string) ([]string, error) {
	names, err := readNames(dir)
	if err != nil {
		return nil, err
	}
	var foreign []string
	for _, n := range names {
		if !ownNames[n] {
			foreign = append(foreign, n)
		}
	}
	slices.Sort(foreign)
	return foreign, nil
}

// InsideStore refuses dir (ErrNotStore) when a store holds real, the
// absolute path dir names, below its own directory: a directory of the
// store's (its data, an object directory), which may even hold an
// object named as the mark; it names the store to check instead.
func InsideStore(dir, real string) error {
	if outer, ok := StoreAbove(filepath.Dir(real)); ok {
		return notStoref("%s is inside the kvfs store %s: check that (kvfs fsck --store %s)", dir, outer, outer)
	}
	return nil
}

// Fsck checks an unmounted store without changing it, or with repair
// reclaims what start-up would: files left half-written by a crash and
// anything that is neither a directory nor a regular file. charge is what
// an object of a size costs (the store does not know).
func Fsck(dir string, repair bool, charge func(size int64) int64) (FsckReport, error) {
	return FsckWith(dir, repair, charge, nil)
}

// FsckWith is Fsck reporting its walk's progress to p (nil: to nobody).
func FsckWith(dir string, repair bool, charge func(size int64) int64, p Progress) (FsckReport, error) {
	rep := FsckReport{Problems: []string{}} // [] in JSON when there are none
	abs, err := filepath.Abs(dir)
	if err != nil {
		return rep, err
	}
	if err := InsideStore(dir, abs); err != nil {
		return rep, err
	}
	if !IsStore(dir) {
		return rep, notStoref("%s is not a kvfs store (no %s)", dir, FormatName)
	}
	if _, err := checkContents(dir); err != nil {
		return rep, err // another format's: neither checked by these rules nor written to
	}
	lock, err := lockStore(dir)
	if errors.Is(err, unix.EROFS) && !repair {
		lock, err = lockToRead(dir)
	}
	if err != nil {
		if errors.Is(err, ErrLocked) {
			return rep, inUse{dir}
		}
		return rep, err
	}
	defer lock.Close()
	if err := checkStoreNames(dir, repair, &rep); err != nil {
		return rep, err
	}
	if rep.Foreign, err = foreignNames(dir); err != nil {
		return rep, err
	}
	if err := checkCheckpoint(dir, repair, &rep); err != nil {
		return rep, err
	}
	incomplete, err := scanWriting(filepath.Join(dir, WritingName), &rep)
	if err != nil {
		return rep, err
	}
	data := filepath.Join(dir, DataName)
	if _, err := os.Lstat(data); errors.Is(err, fs.ErrNotExist) {
		// Removed behind kvfs's back: a problem to report, not a failure
		// of the check (an outside tester got a bare "lstat …/data: no
		// such file or directory", exit 1, and no repair).
		rep.Problems = append(rep.Problems, DataName+"/ is missing: the store holds no objects; a start, or --repair, makes it again, empty")
	} else {
		walk := reporter{p}
		walk.expect((&Store{dir: dir}).readHint()) // it only reads dir/kvfs.hint
		err = scanData(data, incomplete, charge, walk, &rep)
		walk.done()
		if err != nil {
			return rep, err
		}
	}
	if ents, err := os.ReadDir(filepath.Join(dir, RemoteName)); err == nil {
		rep.PendingUploads = len(ents)
	}
	if repair && len(rep.Problems) > 0 {
		lock.Close()
		return rep, repairStore(dir, charge, &rep)
	}
	return rep, nil
}

// checkStoreNames checks the store's own names: data/ and writing/ must
// be directories of their own (a symlink is refused, never followed),
// and the checkpoint and the hint files, if there, regular files; a
// directory or a symlink in their place (which blocks every checkpoint)
// is a problem, and repair removes it if it is a symlink or empty.
func checkStoreNames(dir string, repair bool, rep *FsckReport) error {
	for _, n := range []string{DataName, WritingName} {
		st, err := os.Lstat(filepath.Join(dir, n))
		if err == nil && !st.IsDir() {
			return fmt.Errorf("%s is not a directory but a %s: kvfs neither follows nor replaces it; move it away by hand",
				filepath.Join(dir, n), kindOf(st.Mode()))
		}
	}
	for _, n := range ownFiles {
		p := filepath.Join(dir, n)
		st, err := os.Lstat(p)
		if err == nil && st.Mode().IsRegular() && strings.HasSuffix(n, ".tmp") {
			// A temporary of a checkpoint or hint a daemon was writing
			// when it stopped (fsck holds the lock: none is writing
			// now). A start removes it; fsck said nothing of it, and
			// --repair left it (an outside tester).
			if repair {
				if err := os.Remove(p); err != nil {
					return fmt.Errorf("removing %s: %w", p, err)
				}
			}
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s is left from a checkpoint cut short (a start, or --repair, removes it)", n))
			continue
		}
		if err != nil || st.Mode().IsRegular() {
			continue
		}
		if repair {
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("removing %s (a %s in place of kvfs's file): %w: move it away by hand", p, kindOf(st.Mode()), err)
			}
		}
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s is a %s, not kvfs's file: the running checkpoint cannot be written", n, kindOf(st.Mode())))
	}
	return nil
}

// checkCheckpoint reports a checkpoint no start can use (cut short,
// damaged, another version's): nothing is lost, the next start walks the
// store instead, but fsck called such a store clean (an outside tester,
// 5 of 5 damaged checkpoints). repair removes it.
func checkCheckpoint(dir string, repair bool, rep *FsckReport) error {
	p := filepath.Join(dir, CheckpointName)
	if st, err := os.Lstat(p); err != nil || !st.Mode().IsRegular() {
		return nil // none; or not a file, which checkStoreNames reports
	}
	data, unmap, err := mapCheckpoint(p)
	if err == nil {
		defer unmap()
		err = readMapped(func() error {
			_, _, err := checkpointBody(data)
			return err
		})
	}
	if err == nil {
		return nil
	}
	if repair {
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("removing the unusable %s: %w", p, err)
		}
		rep.Repaired = true
	}
	rep.Problems = append(rep.Problems, fmt.Sprintf("%s is unusable (%v): the next start walks the whole store instead; nothing is lost", CheckpointName, err))
	return nil
}

// kindOf names a file's type for a message.
func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	}
	return "special file"
}

func scanWriting(path string, rep *FsckReport) (map[uint64]bool, error) {
	names, err := ReadMarkers(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	marked := map[uint64]bool{}
	for _, name := range names {
		var st unix.Stat_t
		err := unix.Lstat(filepath.Join(path, name), &st)
		if err == nil && st.Nlink > 1 && changedSince(name, &st) {
			marked[st.Ino] = true
			continue
		}
		if err == nil && st.Nlink > 1 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("stale write marker %s/%s of an object opened for writing and not changed (kept)", WritingName, name))
			continue
		}
		rep.Problems = append(rep.Problems, fmt.Sprintf("stale write marker %s/%s", WritingName, name))
	}
	return marked, nil
}

func scanData(root string, incomplete map[uint64]bool, charge func(int64) int64, walk reporter, rep *FsckReport) error {
	seen := map[uint64]bool{}
	files := tally{r: walk}
	defer files.flush()
	// By directory descriptors (fdwalk), not paths: a store's paths may
	// reach MaxPath under data/, which with the store's own path passes
	// PATH_MAX.
	return fdwalk.Walk(root, func(rel string, typ fs.FileMode, st *unix.Stat_t) error {
		switch {
		case len(rel) > MaxPath:
			rep.Problems = append(rep.Problems, fmt.Sprintf("path of %d bytes %s...: past PATH_MAX, kvfs cannot serve it (a start removes it)", len(rel), rel[:64]))
			if typ.IsDir() {
				return fs.SkipDir
			}
		case typ.IsDir():
			if rel != "" {
				rep.Dirs++
			}
		case typ.IsRegular():
			files.add()
			if incomplete[st.Ino] {
				rep.Problems = append(rep.Problems, fmt.Sprintf("incomplete object %s (%d bytes, marked when its daemon last stopped: being written, or being evicted, at a crash or a stop that ended its writer)", rel, st.Size))
			} else if !seen[st.Ino] {
				seen[st.Ino] = true
				rep.Objects++
				rep.Bytes += charge(st.Size)
			}
		default:
			rep.Problems = append(rep.Problems, fmt.Sprintf("foreign entry %s (%s): kvfs stores only directories and regular files", rel, entryMode(typ, st)))
		}
		return nil
	})
}

// repairStore reclaims exactly what a mount's start-up reclaims, by
// running it, and reports the store as it is afterwards.
func repairStore(dir string, charge func(int64) int64, rep *FsckReport) error {
	s, err := Open(dir)
	if err != nil {
		return err
	}
	_, _, err = s.Load()
	s.Close()
	if err != nil {
		return err
	}
	// What the store holds now, read from it: the load takes sizes from
	// the checkpoint where it may (a file changed behind kvfs's back is
	// the mount's audit's to find), and fsck reports the store.
	after, err := FsckWith(dir, false, charge, nil)
	if err != nil {
		return err
	}
	rep.Objects, rep.Bytes, rep.Dirs, rep.Repaired = after.Objects, after.Bytes, after.Dirs, true
	return nil
}

// inUse is the ErrLocked of a store a live daemon holds.
type inUse struct{ dir string }

func (e inUse) Error() string {
	return e.dir + " is in use by a live kvfs daemon: unmount it first"
}
func (e inUse) Is(target error) bool { return target == ErrLocked }

// entryMode is an entry's type and permissions, as ls shows them
// (prw-r--r--), where its attributes were read; its type alone else.
func entryMode(typ fs.FileMode, st *unix.Stat_t) fs.FileMode {
	if st == nil {
		return typ
	}
	return typ.Type() | fs.FileMode(st.Mode&0o777)
}
