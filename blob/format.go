package blob

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvfs/kvfs/internal/usageerr"
	"golang.org/x/sys/unix"
)

// FormatName marks a directory as a kvfs store, and says which layout.
const FormatName = "kvfs.format"

// formatV1 is what FormatName holds for the layout this package writes.
const formatV1 = "kvfs store v1\n"

// ErrNotStore means a directory is not a kvfs store and kvfs will not make
// it one: adopting it would evict, and start-up would delete, a user's
// files. errors.Is(err, ErrNotStore); the message says why.
var ErrNotStore = errors.New("not a kvfs store")

// notStore is an ErrNotStore with its reason.
type notStore struct{ msg string }

func (e notStore) Error() string        { return e.msg }
func (e notStore) Is(target error) bool { return target == ErrNotStore }

func notStoref(format string, args ...any) error {
	return notStore{fmt.Sprintf(format, args...)}
}

// legacyNames are what a store of this layout made before it carried
// FormatName: such a store is recognised once and marked.
var legacyNames = map[string]bool{
	LockName: true, DataName: true, WritingName: true,
	HintName: true, CheckpointName: true, CheckpointName + ".tmp": true,
	RemoteName: true,
}

// CheckDir decides whether dir may be served as a store without changing
// anything: an absent or empty directory becomes one (mark), a directory
// with this layout's FormatName is one, and an unmarked store of this
// layout is recognised (mark). Anything else is refused with
// ErrNotStore, as is a directory inside another store.
func CheckDir(dir string) (mark bool, err error) {
	if outer, ok := StoreAbove(filepath.Dir(dir)); ok {
		return false, notStoref("%s is inside the kvfs store %s", dir, outer)
	}
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return true, nil
	case err != nil:
		return false, err
	case !st.IsDir():
		return false, notStoref("%s is not a directory", dir)
	}
	return checkContents(dir)
}

// formatHead is the start of a format file kvfs does not know, short
// enough to quote in a one-line error.
func formatHead(format []byte) string {
	const most = 40
	head := strings.TrimSpace(string(format[:min(len(format), 4*most)]))
	if len(head) > most {
		head = head[:most] + "..."
	}
	return head
}

// checkContents is CheckDir for a directory that exists.
func checkContents(dir string) (mark bool, err error) {
	format, err := os.ReadFile(filepath.Join(dir, FormatName))
	if err == nil {
		// Its line as an editor or `echo -n` left it: without its
		// newline, or with a CR or blanks after (was refused as "an
		// unknown format", quoting the known one).
		if strings.TrimRight(string(format), " \t\r\n") != strings.TrimSuffix(formatV1, "\n") {
			return false, notStoref("%s holds a kvfs store of an unknown format (%s begins %q)", dir, FormatName, formatHead(format))
		}
		return false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	names, err := readNames(dir)
	if err != nil {
		return false, err
	}
	if onlyOurs(names) || onlyLegacyNames(names) && hasLegacyLayout(dir) {
		return true, nil
	}
	return false, notStoref("%s is not empty and is not a kvfs store (it has %s and no %s); "+
		"kvfs makes a store only of an empty directory", dir, usageerr.Entries(len(names)), FormatName)
}

// onlyOurs: the directory is empty but for what Open itself writes before
// the mark (a start that stopped half-way).
func onlyOurs(names []string) bool {
	for _, n := range names {
		if n != LockName && n != FormatName+".tmp" {
			return false
		}
	}
	return true
}

// A store made before FormatName holds nothing but the layout's own
// names (onlyLegacyNames), with its lock file and both directories
// (hasLegacyLayout).
func onlyLegacyNames(names []string) bool {
	for _, n := range names {
		if !legacyNames[n] {
			return false
		}
	}
	return true
}

func hasLegacyLayout(dir string) bool {
	for _, want := range []struct {
		name string
		dir  bool
	}{{LockName, false}, {DataName, true}, {WritingName, true}} {
		st, err := os.Lstat(filepath.Join(dir, want.name))
		if err != nil || st.IsDir() != want.dir || (!want.dir && !st.Mode().IsRegular()) {
			return false
		}
	}
	return true
}

// IsStore says whether dir is a kvfs store, marked or of the old layout.
// StoreAbove asks it of every directory above a store or a mount point,
// so it lists only a directory that has the old layout's entries.
func IsStore(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, FormatName)); err == nil {
		return true
	}
	if !hasLegacyLayout(dir) {
		return false
	}
	names, err := readNames(dir)
	return err == nil && len(names) > 0 && onlyLegacyNames(names)
}

// StoreAbove finds the store that holds path: path itself or a
// directory above it, the outermost where several look like one. Stores
// do not nest (CheckDir), but a store's objects may carry its marks'
// names: an object named kvfs.format at a mount's root made the store's
// data directory look like the store (an outside tester's refusal named
// STORE/data).
func StoreAbove(path string) (string, bool) {
	found := ""
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		if IsStore(p) {
			found = p
		}
		if p == filepath.Dir(p) {
			return found, found != ""
		}
	}
}

func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// writeFormat marks dir as a store of this layout, durably.
func writeFormat(dir string) error {
	return writeDurably(dir, FormatName, 0o644, []byte(formatV1))
}

// writeDurably replaces dir/name with data atomically and durably: a
// temporary file written and synced, renamed over name, dir synced. A
// crash leaves the old file or the new one, never a part of either.
func writeDurably(dir, name string, mode os.FileMode, data []byte) error {
	return writeDurablyFrom(dir, name, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeDurablyFrom is writeDurably for a file that fill writes, in as
// many pieces as it likes; dir/name is left as it was if fill fails.
// The file gets mode, whatever an earlier one left behind had.
func writeDurablyFrom(dir, name string, mode os.FileMode, fill func(io.Writer) error) error {
	d, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	return writeDurablyIn(d, name, mode, fill)
}

// writeDurablyIn is writeDurablyFrom in the directory d holds open,
// wherever it is now: a store moved while it is mounted (an operator's
// mv) keeps its checkpoint, and the store since made at its old path is
// never written (an outside tester: the stop's checkpoint went there).
func writeDurablyIn(d *os.File, name string, mode os.FileMode, fill func(io.Writer) error) error {
	dfd, tmp := int(d.Fd()), name+".tmp"
	pathErr := func(op, n string, err error) error {
		return &os.PathError{Op: op, Path: filepath.Join(d.Name(), n), Err: err}
	}
	// Whatever a crash (or anyone) left at tmp goes first, so the file
	// is made afresh with mode, and never through a symlink planted
	// there, which would have kvfs write the store's names wherever it
	// points.
	if err := unix.Unlinkat(dfd, tmp, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return pathErr("unlink", tmp, err)
	}
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(mode.Perm()))
	if err != nil {
		return pathErr("open", tmp, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(d.Name(), tmp))
	renamed := false
	defer func() {
		if !renamed {
			unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	err = fill(f)
	if err == nil {
		err = f.Sync()
	}
	if err := errors.Join(err, f.Close()); err != nil {
		return err
	}
	if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
		return pathErr("rename", tmp, err)
	}
	renamed = true
	return d.Sync()
}

// checkOwner refuses a store directory that anyone but its mounter and
// root may change: whoever can rename its data/ can swap every object
// under the mount (an outside tester made the default store,
// MOUNTPOINT.kvfs-store, in a world-writable directory before root
// mounted, then served root's clients objects of their own).
func checkOwner(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	if me := uint32(os.Geteuid()); st.Uid != me && st.Uid != 0 {
		return notStoref("%s is owned by uid %d, not by the mounter (uid %d) or root: its owner could swap the objects under the mount; pick another --store, or chown %d %s", dir, st.Uid, me, me, dir)
	}
	if st.Mode&0o022 != 0 {
		return notStoref("%s may be written by group or others (mode %04o): they could swap the objects under the mount; chmod go-w %s", dir, st.Mode&0o7777, dir)
	}
	return nil
}
