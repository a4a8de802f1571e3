package blob

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// Open opens the stored bytes of an existing file by its index path; the
// core opens by path itself, checking the inode (core.openPath).
func (s *Store) Open(id ID, flags int) (*os.File, error) {
	rel, ok := s.Path(id)
	if !ok {
		return nil, ErrNotFound
	}
	return s.OpenPath(rel, flags)
}

func TestOpenLayoutAndLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "store")
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	for _, name := range []string{DataName, WritingName} {
		if st, err := os.Lstat(filepath.Join(dir, name)); err != nil || !st.IsDir() {
			t.Fatalf("%s/: %v, %v", name, st, err)
		}
	}
	pid, err := os.ReadFile(filepath.Join(dir, LockName))
	if err != nil || strings.TrimSpace(string(pid)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("%s holds %q, %v; want our pid", LockName, pid, err)
	}
	if !filepath.IsAbs(s.Dir()) {
		t.Errorf("Dir() = %q, want absolute", s.Dir())
	}
	checkIndex(t, s)

	if s2, err := Open(dir); !errors.Is(err, ErrLocked) {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("second Open while the first is open: %v, want ErrLocked", err)
	}
	mustCreate(t, s, RootID, "kept", []byte("x"))
	s.Close()

	s, err = Open(dir)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	defer s.Close()
	if !exists(filepath.Join(dir, DataName, "kept")) {
		t.Fatal("reopening the store lost data/kept")
	}
}

func TestOpenRefusesSymlinkedLayout(t *testing.T) {
	dir := t.TempDir()
	elsewhere := t.TempDir()
	must(t, "symlink", os.Symlink(elsewhere, filepath.Join(dir, DataName)))
	if s, err := Open(dir); err == nil {
		s.Close()
		t.Fatal("Open followed a data/ that is a symlink")
	}
	// The failed Open let go of the lock.
	must(t, "remove", os.Remove(filepath.Join(dir, DataName)))
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open after a failed Open: %v", err)
	}
	s.Close()
}

func TestCreate(t *testing.T) {
	s := newStore(t)
	data := filepath.Join(s.Dir(), DataName)

	id, f, err := create(s, RootID, "a", 0o640, nobody)
	must(t, "Create", err)
	defer f.Close()
	if id <= RootID {
		t.Fatalf("Create gave id %d", id)
	}
	// Born under writing/, linked to its name: one inode, two links.
	st, m := lstat(t, filepath.Join(data, "a")), lstat(t, markerFile(s, id))
	if st.Ino != m.Ino || st.Nlink != 2 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Fatalf("data/a ino %d nlink %d mode %o; marker ino %d", st.Ino, st.Nlink, st.Mode, m.Ino)
	}
	checkIndex(t, s)
	if e, err := s.Lookup(RootID, "a"); err != nil || e != (Entry{ID: id}) {
		t.Fatalf("Lookup = %+v, %v", e, err)
	}
	if p, ok := s.Path(id); !ok || p != "a" {
		t.Fatalf("Path = %q, %v", p, ok)
	}
	if _, err := f.WriteString("hello"); err != nil {
		t.Fatal(err)
	}

	// Exclusive: a taken name changes nothing, on disk or in the index.
	dirID := mustMkdir(t, s, RootID, "d")
	before := treeSnapshot(t, s.Dir())
	_, _, err = create(s, RootID, "a", 0o644, nobody)
	wantErr(t, "Create on a taken name", err, unix.EEXIST)
	_, _, err = create(s, RootID, "d", 0o644, nobody)
	wantErr(t, "Create on a directory's name", err, unix.EEXIST)
	if after := treeSnapshot(t, s.Dir()); !slices.Equal(before, after) {
		t.Fatalf("failed Create changed the store:\n%v\n%v", before, after)
	}
	_, _, err = create(s, 9999, "x", 0o644, nobody)
	wantErr(t, "Create in an unknown directory", err, ErrNotFound)
	checkIndex(t, s)

	// Finished writing: the marker goes, and clearing twice is harmless.
	must(t, "ClearWriting", s.ClearWriting(id))
	if exists(markerFile(s, id)) || lstat(t, filepath.Join(data, "a")).Nlink != 1 {
		t.Fatal("ClearWriting left the marker")
	}
	must(t, "second ClearWriting", s.ClearWriting(id))
	checkIndex(t, s)

	// Reopened for writing: the marker is back; marking twice is harmless.
	w, err := s.Open(id, os.O_RDWR)
	must(t, "Open", err)
	defer w.Close()
	must(t, "MarkWriting", s.MarkWriting(w, id))
	must(t, "second MarkWriting", s.MarkWriting(w, id))
	if st := lstat(t, filepath.Join(data, "a")); st.Nlink != 2 || lstat(t, markerFile(s, id)).Ino != st.Ino {
		t.Fatalf("MarkWriting: nlink %d", st.Nlink)
	}
	checkIndex(t, s)
	must(t, "ClearWriting", s.ClearWriting(id))

	if got := readAll(t, s, id); string(got) != "hello" {
		t.Fatalf("read back %q", got)
	}
	if st, err := s.Stat(id); err != nil || st.Size != 5 || st.Mode&0o777 != 0o640&^umask() {
		t.Fatalf("Stat = size %d mode %o, %v", st.Size, st.Mode, err)
	}

	// In a subdirectory.
	sub := mustCreate(t, s, dirID, "b", []byte("bb"))
	if p, _ := s.Path(sub); p != "d/b" {
		t.Fatalf("Path = %q, want d/b", p)
	}
	if !exists(filepath.Join(data, "d", "b")) {
		t.Fatal("data/d/b missing")
	}
	checkIndex(t, s)
}

func umask() uint32 {
	m := unix.Umask(0)
	unix.Umask(m)
	return uint32(m)
}

func TestCreateOverForeignFileCleansUp(t *testing.T) {
	s := newStore(t)
	ghost := filepath.Join(s.Dir(), DataName, "ghost")
	must(t, "plant", os.WriteFile(ghost, []byte("not ours"), 0o644))
	_, _, err := create(s, RootID, "ghost", 0o644, nobody)
	wantErr(t, "Create over a name the index lacks", err, unix.EEXIST)
	if ents, _ := ReadMarkers(filepath.Join(s.Dir(), WritingName)); len(ents) != 0 {
		t.Fatalf("failed Create left %d markers", len(ents))
	}
	if _, err := s.Lookup(RootID, "ghost"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("failed Create left a name in the index: %v", err)
	}
	if b, _ := os.ReadFile(ghost); string(b) != "not ours" {
		t.Fatalf("failed Create changed the planted file: %q", b)
	}
	must(t, "remove", os.Remove(ghost))
	checkIndex(t, s)
}

func TestMarkWritingUnlinkedFile(t *testing.T) {
	s := newStore(t)
	id := mustCreate(t, s, RootID, "a", []byte("x"))
	f, err := s.Open(id, os.O_RDWR)
	must(t, "Open", err)
	defer f.Close()
	_, err = s.Unlink(RootID, "a")
	must(t, "Unlink", err)
	must(t, "MarkWriting a file with no name", s.MarkWriting(f, id))
	if exists(markerFile(s, id)) {
		t.Fatal("MarkWriting gave an unlinked file a name under writing/")
	}
	checkIndex(t, s)
}

func TestMkdirRmdir(t *testing.T) {
	s := newStore(t)
	data := filepath.Join(s.Dir(), DataName)
	d := mustMkdir(t, s, RootID, "d")
	if e, err := s.Lookup(RootID, "d"); err != nil || e != (Entry{ID: d, Dir: true}) {
		t.Fatalf("Lookup = %+v, %v", e, err)
	}
	if st, err := os.Lstat(filepath.Join(data, "d")); err != nil || !st.IsDir() {
		t.Fatalf("data/d: %v", err)
	}
	checkIndex(t, s)

	_, err := s.Mkdir(RootID, "d", 0o755, nobody)
	wantErr(t, "Mkdir on a taken name", err, unix.EEXIST)
	_, err = s.Mkdir(12345, "x", 0o755, nobody)
	wantErr(t, "Mkdir in an unknown directory", err, ErrNotFound)
	e := mustMkdir(t, s, d, "e")
	if p, _ := s.Path(e); p != "d/e" {
		t.Fatalf("Path = %q", p)
	}
	f := mustCreate(t, s, e, "f", nil)
	checkIndex(t, s)

	_, err = s.Rmdir(RootID, "d")
	wantErr(t, "Rmdir of a non-empty directory", err, unix.ENOTEMPTY)
	_, err = s.Rmdir(e, "f")
	wantErr(t, "Rmdir of a file", err, unix.ENOTDIR)
	_, err = s.Rmdir(RootID, "absent")
	wantErr(t, "Rmdir of an absent name", err, ErrNotFound)
	_, err = s.Rmdir(777, "d")
	wantErr(t, "Rmdir in an unknown directory", err, ErrNotFound)
	checkIndex(t, s)

	_, err = s.Unlink(e, "f")
	must(t, "Unlink", err)
	got, err := s.Rmdir(d, "e")
	if err != nil || got != e {
		t.Fatalf("Rmdir = %d, %v; want %d", got, err, e)
	}
	if exists(filepath.Join(data, "d", "e")) {
		t.Fatal("data/d/e still there")
	}
	if _, ok := s.Path(e); ok {
		t.Fatal("removed directory still has a path")
	}
	if _, ok := s.Path(f); ok {
		t.Fatal("unlinked file still has a path")
	}
	checkIndex(t, s)

	// A directory that vanished behind the store's back still goes.
	must(t, "remove", os.Remove(filepath.Join(data, "d")))
	_, err = s.Rmdir(RootID, "d")
	must(t, "Rmdir of a vanished directory", err)
	checkIndex(t, s)
}

func TestUnlink(t *testing.T) {
	s := newStore(t)
	data := filepath.Join(s.Dir(), DataName)
	d := mustMkdir(t, s, RootID, "d")
	a := mustCreate(t, s, RootID, "a", []byte("aaa"))

	_, err := s.Unlink(RootID, "d")
	wantErr(t, "Unlink of a directory", err, unix.EISDIR)
	_, err = s.Unlink(RootID, "absent")
	wantErr(t, "Unlink of an absent name", err, ErrNotFound)
	_, err = s.Unlink(4242, "a")
	wantErr(t, "Unlink in an unknown directory", err, ErrNotFound)
	checkIndex(t, s)

	// One of two names: the other keeps the file.
	must(t, "Link", s.Link(a, d, "a2"))
	got, err := s.Unlink(RootID, "a")
	if err != nil || got != a {
		t.Fatalf("Unlink = %d, %v; want %d", got, err, a)
	}
	if s.Links(a) != 1 {
		t.Fatalf("Links = %d, want 1", s.Links(a))
	}
	if p, _ := s.Path(a); p != "d/a2" {
		t.Fatalf("Path after unlinking the first name = %q", p)
	}
	if string(readAll(t, s, a)) != "aaa" {
		t.Fatal("the remaining name lost the bytes")
	}
	checkIndex(t, s)

	// The last name.
	if got, err := s.Unlink(d, "a2"); err != nil || got != a {
		t.Fatalf("Unlink = %d, %v", got, err)
	}
	if exists(filepath.Join(data, "d", "a2")) || s.Links(a) != 0 {
		t.Fatal("last name not removed")
	}
	if _, err := s.Open(a, os.O_RDONLY); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open of an unlinked file: %v", err)
	}
	if _, err := s.Stat(a); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Stat of an unlinked file: %v", err)
	}
	checkIndex(t, s)

	// The stored file vanished behind the store's back: the name still goes.
	b := mustCreate(t, s, d, "b", nil)
	must(t, "remove", os.Remove(filepath.Join(data, "d", "b")))
	if got, err := s.Unlink(d, "b"); err != nil || got != b {
		t.Fatalf("Unlink of a vanished file = %d, %v", got, err)
	}
	if _, err := s.Lookup(d, "b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup after Unlink: %v", err)
	}
	checkIndex(t, s)
}

func TestLink(t *testing.T) {
	s := newStore(t)
	data := filepath.Join(s.Dir(), DataName)
	d := mustMkdir(t, s, RootID, "d")
	a := mustCreate(t, s, RootID, "a", []byte("abc"))
	mustCreate(t, s, RootID, "other", nil)

	must(t, "Link", s.Link(a, RootID, "b"))
	must(t, "Link into a subdirectory", s.Link(a, d, "c"))
	sa, sb, sc := lstat(t, filepath.Join(data, "a")), lstat(t, filepath.Join(data, "b")), lstat(t, filepath.Join(data, "d", "c"))
	if sa.Ino != sb.Ino || sa.Ino != sc.Ino || sa.Nlink != 3 {
		t.Fatalf("inodes %d %d %d, nlink %d", sa.Ino, sb.Ino, sc.Ino, sa.Nlink)
	}
	if s.Links(a) != 3 {
		t.Fatalf("Links = %d", s.Links(a))
	}
	for _, n := range []Name{{RootID, "b"}, {d, "c"}} {
		if e, err := s.Lookup(n.Parent, n.Name); err != nil || e.ID != a || e.Dir {
			t.Fatalf("Lookup(%v) = %+v, %v", n, e, err)
		}
	}
	checkIndex(t, s)

	before := treeSnapshot(t, s.Dir())
	wantErr(t, "Link onto a taken file name", s.Link(a, RootID, "other"), unix.EEXIST)
	wantErr(t, "Link onto a directory's name", s.Link(a, RootID, "d"), unix.EEXIST)
	wantErr(t, "Link of an unknown id", s.Link(31337, RootID, "x"), ErrNotFound)
	wantErr(t, "Link of a directory", s.Link(d, RootID, "x"), ErrNotFound)
	wantErr(t, "Link into an unknown directory", s.Link(a, 999, "x"), ErrNotFound)
	if after := treeSnapshot(t, s.Dir()); !slices.Equal(before, after) {
		t.Fatalf("failed Link changed the store")
	}
	checkIndex(t, s)

	// Linking works from any remaining name, not only the first.
	_, err := s.Unlink(RootID, "a")
	must(t, "Unlink", err)
	must(t, "Link after the first name went", s.Link(a, d, "again"))
	checkIndex(t, s)
}

func TestDrop(t *testing.T) {
	s := newStore(t)
	data := filepath.Join(s.Dir(), DataName)
	d := mustMkdir(t, s, RootID, "d")
	a := mustCreate(t, s, RootID, "a", []byte("bytes"))
	keep := mustCreate(t, s, d, "keep", nil)
	must(t, "Link", s.Link(a, d, "a2"))
	must(t, "Link", s.Link(a, d, "a3"))
	f, err := s.Open(a, os.O_RDONLY)
	must(t, "Open", err)
	defer f.Close()
	checkIndex(t, s)

	names := s.Drop(a)
	want := []Name{{RootID, "a"}, {d, "a2"}, {d, "a3"}}
	sort.Slice(names, func(i, j int) bool { return names[i].Name < names[j].Name })
	if !slices.Equal(names, want) {
		t.Fatalf("Drop = %v, want %v", names, want)
	}
	for _, p := range []string{"a", "d/a2", "d/a3"} {
		if exists(filepath.Join(data, p)) {
			t.Fatalf("data/%s survived Drop", p)
		}
	}
	if s.Links(a) != 0 {
		t.Fatal("Drop left names in the index")
	}
	if _, err := s.Lookup(d, "keep"); err != nil || s.Links(keep) != 1 {
		t.Fatal("Drop touched another file")
	}
	// An open handle still reads the bytes.
	if b, _ := io.ReadAll(f); !bytes.Equal(b, []byte("bytes")) {
		t.Fatalf("open handle read %q", b)
	}
	checkIndex(t, s)
	if again := s.Drop(a); again != nil {
		t.Fatalf("second Drop = %v", again)
	}
	if none := s.Drop(d); none != nil {
		t.Fatalf("Drop of a directory = %v", none)
	}
	checkIndex(t, s)
}

func TestList(t *testing.T) {
	s := newStore(t)
	d := mustMkdir(t, s, RootID, "m")
	z := mustCreate(t, s, RootID, "z", nil)
	a := mustCreate(t, s, RootID, "a", nil)
	must(t, "Link", s.Link(a, RootID, "b"))
	got, err := listAll(s, RootID, 1)
	must(t, "ListPage", err)
	for i := range got {
		got[i].Cookie = 0
	}
	slices.SortFunc(got, func(a, b DirEntry) int { return strings.Compare(a.Name, b.Name) })
	want := []DirEntry{{"a", Entry{a, false}, 0}, {"b", Entry{a, false}, 0}, {"m", Entry{d, true}, 0}, {"z", Entry{z, false}, 0}}
	if !slices.Equal(got, want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	if got, err := listAll(s, d, 1); err != nil || len(got) != 0 {
		t.Fatalf("List of an empty directory = %v, %v", got, err)
	}
	if _, err := listAll(s, z, 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("List of a file: %v", err)
	}
	rel, _ := s.Path(d)
	must(t, "SyncPath", s.SyncPath(rel))
	checkIndex(t, s)
}

// A symlink planted in data/ behind the store's back must not lead Open
// out of data/, whether it replaces the file itself or a directory on its
// path.
func TestOpenDoesNotFollowPlantedSymlinks(t *testing.T) {
	s := newStore(t)
	data := filepath.Join(s.Dir(), DataName)
	outside := t.TempDir()
	secret := []byte("outside the store")
	must(t, "write", os.WriteFile(filepath.Join(outside, "hostname"), secret, 0o644))

	leaf := mustCreate(t, s, RootID, "leaf", []byte("ours"))
	d := mustMkdir(t, s, RootID, "evil")
	inDir := mustCreate(t, s, d, "hostname", []byte("ours"))
	etc := mustMkdir(t, s, RootID, "etc")
	passwd := mustCreate(t, s, etc, "passwd", []byte("ours"))
	checkIndex(t, s)

	must(t, "remove", os.Remove(filepath.Join(data, "leaf")))
	must(t, "symlink", os.Symlink(filepath.Join(outside, "hostname"), filepath.Join(data, "leaf")))
	must(t, "remove", os.RemoveAll(filepath.Join(data, "evil")))
	must(t, "symlink", os.Symlink(outside, filepath.Join(data, "evil")))
	must(t, "remove", os.RemoveAll(filepath.Join(data, "etc")))
	must(t, "symlink", os.Symlink("/etc", filepath.Join(data, "etc")))

	for _, id := range []ID{leaf, inDir, passwd} {
		p, _ := s.Path(id)
		for _, flags := range []int{os.O_RDONLY, os.O_RDWR} {
			f, err := s.Open(id, flags)
			if err == nil {
				b, _ := io.ReadAll(f)
				f.Close()
				t.Fatalf("Open(%s, %#x) followed a planted symlink and read %q", p, flags, b)
			}
			if !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.EXDEV) {
				t.Errorf("Open(%s): %v, want ELOOP or EXDEV", p, err)
			}
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "hostname")); !bytes.Equal(b, secret) {
		t.Fatalf("the file outside changed: %q", b)
	}
	// SyncPath of a directory that became a symlink fails too.
	if rel, _ := s.Path(d); s.SyncPath(rel) == nil {
		t.Fatal("SyncPath followed a planted symlink")
	}
}

// Every operation resolves the directory holding a name beneath data/
// without following symlinks, so one planted in place of a directory
// never leads a change outside the store. Outside is a temporary
// directory, so the test is harmless even if that breaks.
func TestMutatorsDoNotFollowPlantedSymlinks(t *testing.T) {
	s := newStore(t)
	data := filepath.Join(s.Dir(), DataName)
	outside := t.TempDir()
	must(t, "write", os.WriteFile(filepath.Join(outside, "victim"), []byte("precious"), 0o600))
	d := mustMkdir(t, s, RootID, "d")
	v := mustCreate(t, s, d, "victim", []byte("x"))
	must(t, "remove", os.RemoveAll(filepath.Join(data, "d")))
	must(t, "symlink", os.Symlink(outside, filepath.Join(data, "d")))

	if st, err := s.Stat(v); err == nil {
		t.Errorf("Stat followed the symlink: size %d", st.Size)
	}
	if _, _, err := create(s, d, "planted", 0o644, nobody); err == nil || exists(filepath.Join(outside, "planted")) {
		t.Errorf("Create followed the symlink: %v", err)
	}
	if _, err := s.Mkdir(d, "planted-dir", 0o755, nobody); err == nil || exists(filepath.Join(outside, "planted-dir")) {
		t.Errorf("Mkdir followed the symlink: %v", err)
	}
	s.Unlink(d, "victim")
	if !exists(filepath.Join(outside, "victim")) {
		t.Errorf("Unlink deleted a file outside the store")
	}
}

// The store's doc says a name can never lead out of data/: ".." is only
// ever a name when the index holds one, which it then must not follow.
func TestOpenBeneathRefusesEscapes(t *testing.T) {
	s := newStore(t)
	for _, rel := range []string{"..", "../" + LockName, "/etc/passwd", "x/../../" + LockName} {
		if f, err := s.openBeneath(rel, os.O_RDONLY, 0); err == nil {
			f.Close()
			t.Errorf("openBeneath(%q) left data/", rel)
		}
	}
}

// TestConcurrentOps runs goroutines that create, link, unlink, rename
// (with every flag), make and remove directories, and read, all in a few
// shared directories with few names so that they collide, serialised by
// one lock as the store's owner serialises them; the race detector
// watches, and afterwards the index must match the disk and a fresh
// start-up must load the same namespace.
func TestConcurrentOps(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	must(t, "Open", err)
	parents := []ID{RootID}
	for _, name := range []string{"d0", "d1", "d2"} {
		parents = append(parents, mustMkdir(t, s, RootID, name))
	}
	names := []string{"a", "b", "c", "d", "e", "s0", "s1"}

	const workers, ops = 8, 1000
	var succeeded [9]atomic.Int64
	var wg sync.WaitGroup
	var owner sync.Mutex
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 42))
			pick := func() (ID, string) {
				return parents[r.IntN(len(parents))], names[r.IntN(len(names))]
			}
			for range ops {
				owner.Lock()
				err := randomOp(s, r, pick, &succeeded)
				owner.Unlock()
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var counts []int64
	for op := range succeeded {
		if counts = append(counts, succeeded[op].Load()); counts[op] == 0 {
			t.Errorf("operation %d never succeeded: the test exercises nothing", op)
		}
	}
	t.Logf("successes by operation: %v", counts)
	checkIndex(t, s)
	want := namespace(s)
	s.Close()

	s, err = Open(dir)
	must(t, "reopen", err)
	defer s.Close()
	_, rep, err := s.Load()
	must(t, "Load", err)
	checkIndex(t, s)
	if got := namespace(s); !slices.Equal(got, want) {
		t.Fatalf("loaded namespace differs:\n%v\nwant\n%v", got, want)
	}
	if rep.Incomplete != 0 || rep.Foreign != 0 {
		t.Fatalf("clean stop left %+v", rep)
	}
}

// randomOp does one random operation and returns an error only if it
// failed in a way no interleaving explains.
func randomOp(s *Store, r *rand.Rand, pick func() (ID, string), succeeded *[9]atomic.Int64) error {
	p, name := pick()
	var err error
	op := r.IntN(9)
	switch op {
	case 0, 1:
		var id ID
		var f *os.File
		if id, f, err = create(s, p, name, 0o644, nobody); err == nil {
			f.Write([]byte(name))
			f.Close()
			err = s.ClearWriting(id)
		}
	case 2:
		var e Entry
		if e, err = s.Lookup(p, name); err == nil {
			q, n := pick()
			err = s.Link(e.ID, q, n)
		}
	case 3:
		_, err = s.Unlink(p, name)
	case 4, 5:
		q, n := pick()
		flags := []uint32{0, 0, unix.RENAME_NOREPLACE, unix.RENAME_EXCHANGE}[r.IntN(4)]
		_, err = s.Rename(p, name, q, n, flags)
	case 6:
		_, err = s.Mkdir(p, name, 0o755, nobody)
	case 7:
		_, err = s.Rmdir(p, name)
	case 8:
		var e Entry
		if e, err = s.Lookup(p, name); err == nil && !e.Dir {
			var f *os.File
			if f, err = s.Open(e.ID, os.O_RDONLY); err == nil {
				f.Close()
			}
			if err == nil {
				_, err = s.Stat(e.ID)
			}
		} else if err == nil {
			_, _, err = s.ListPage(e.ID, 0, 64)
		}
	}
	if err == nil {
		succeeded[op].Add(1)
		return nil
	}
	expected := []error{ErrNotFound, unix.EEXIST, unix.EISDIR, unix.ENOTDIR, unix.ENOTEMPTY, unix.EINVAL}
	if op == 8 {
		// Open and Stat resolve a path outside the lock, so a rename
		// in between may leave nothing, or a file, on it.
		expected = append(expected, unix.ENOENT)
	}
	for _, e := range expected {
		if errors.Is(err, e) {
			return nil
		}
	}
	return fmt.Errorf("op %d: %w", op, err)
}

// TestWritingIsPrivate: writing/, its shards and the lock are the
// daemon's alone (with the lock open to all, any user could flock it and
// keep the store from starting). A
// marker is a hard link to an object being written; with writing/ open
// to all (0755, as stores were made before), anyone could read an object
// through it, and write one whose mode let them, in a directory they may
// not search (an outside tester's finding: another user's object in a
// 0700 directory, read and appended to). A store made before is mended
// when it opens.
func TestWritingIsPrivate(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkPrivate := func(when string) {
		t.Helper()
		for _, d := range append([]string{WritingName, LockName}, shardPaths()...) {
			fi, err := os.Stat(filepath.Join(dir, d))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm()&0o077 != 0 {
				t.Fatalf("%s: %s is %v, open to others", when, d, fi.Mode().Perm())
			}
		}
	}
	checkPrivate("a new store")
	s.Close()
	for _, d := range append([]string{WritingName, LockName}, shardPaths()...) {
		if err := os.Chmod(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkPrivate("a store made 0755 before, opened again")
	if fi, err := os.Stat(filepath.Join(dir, DataName)); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("data/ is %v (%v); the mount's root keeps its own mode", fi.Mode().Perm(), err)
	}
}

func shardPaths() []string {
	var ps []string
	for i := range writingShards {
		ps = append(ps, filepath.Join(WritingName, shardName(ID(i))))
	}
	return ps
}

// A store directory anyone but its mounter or root may change is
// refused, before anything is written in it: its data/ could be swapped
// under the mount.
func TestOpenRefusesStoreOthersMayChange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the store must belong to another user")
	}
	for _, c := range []struct {
		name string
		mode os.FileMode
		uid  int
	}{
		{"another user's", 0o755, 65534},
		{"another user's, symlinked", 0o755, 65534},
		{"world-writable", 0o777, 0},
		{"group-writable", 0o775, 0},
		{"sticky world-writable", 0o1777, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			must(t, "mkdir", os.Mkdir(dir, 0o755))
			must(t, "chmod", os.Chmod(dir, c.mode))
			must(t, "chown", os.Chown(dir, c.uid, c.uid))
			path := dir
			if strings.Contains(c.name, "symlinked") {
				path = dir + ".link"
				must(t, "symlink", os.Symlink(dir, path))
			}
			s, err := Open(path)
			if err == nil {
				s.Close()
				t.Fatalf("Open took a store directory of uid %d, mode %v", c.uid, c.mode)
			}
			if !errors.Is(err, ErrNotStore) || !strings.Contains(err.Error(), dir) {
				t.Errorf("Open: %v; want ErrNotStore naming %s", err, dir)
			}
			if names, _ := os.ReadDir(dir); len(names) != 0 {
				t.Errorf("the refused store holds %d names, want none written", len(names))
			}
		})
	}
	// Root's own, and root's symlinked, are taken.
	dir := filepath.Join(t.TempDir(), "store")
	must(t, "mkdir", os.Mkdir(dir, 0o700))
	must(t, "symlink", os.Symlink(dir, dir+".link"))
	s, err := Open(dir + ".link")
	must(t, "Open of the mounter's store through a symlink", err)
	s.Close()
}
