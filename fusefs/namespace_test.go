package fusefs_test

import (
	"bytes"
	"fmt"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/internal/usage"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// path joins names under the mount point.
func (k *kvfsMount) path(elem ...string) string {
	return filepath.Join(append([]string{k.Mnt}, elem...)...)
}

// storePath joins names under the store's data/.
func (k *kvfsMount) storePath(elem ...string) string {
	return filepath.Join(append([]string{k.Store, "data"}, elem...)...)
}

func lstat(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return st
}

// wantAbsent checks that p does not exist, on the mount or in a store.
// wantGone waits for p to be absent: kvfs tells the kernel to forget a
// name it dropped from a goroutine of its own, so the kernel's cache may
// still answer for it for a moment.
func wantGone(t *testing.T, p string) {
	t.Helper()
	var st unix.Stat_t
	var err error
	eventually(func() bool { err = unix.Lstat(p, &st); return err == unix.ENOENT })
	wantErrno(t, "lstat "+p, err, syscall.ENOENT)
}

func wantAbsent(t *testing.T, p string) {
	t.Helper()
	var st unix.Stat_t
	wantErrno(t, "lstat "+p, unix.Lstat(p, &st), syscall.ENOENT)
}

// TestLink: link(2) gives an object a second name of the same inode, and
// fails with EEXIST on a taken name, leaving that name's object alone:
// LMCache's publish step reads EEXIST as "another writer won".
func TestLink(t *testing.T) {
	k := mountKVFS(t)
	data, other := pattern(1, 100*kib+1), pattern(2, 3000)
	mustWrite(t, k.path("tmp"), data)
	mustWrite(t, k.path("taken"), other)
	if err := os.Mkdir(k.path("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(k.path("tmp"), k.path("final")); err != nil {
		t.Fatalf("link: %v", err)
	}
	if err := os.Link(k.path("tmp"), k.path("sub", "final")); err != nil {
		t.Fatalf("link into a subdirectory: %v", err)
	}
	a, b := lstat(t, k.path("tmp")), lstat(t, k.path("sub", "final"))
	if a.Ino != b.Ino || b.Nlink != 3 {
		t.Errorf("links: inodes %d and %d, nlink %d; want one inode with nlink 3", a.Ino, b.Ino, b.Nlink)
	}
	mustRead(t, k.path("final"), data)
	mustRead(t, k.path("sub", "final"), data)

	wantErrno(t, "link onto a name of the same inode", os.Link(k.path("tmp"), k.path("final")), syscall.EEXIST)
	wantErrno(t, "link onto another object's name", os.Link(k.path("tmp"), k.path("taken")), syscall.EEXIST)
	mustRead(t, k.path("taken"), other)
	if err := os.Mkdir(k.path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "link onto a directory's name", os.Link(k.path("tmp"), k.path("dir")), syscall.EEXIST)
	wantErrno(t, "link of a directory", os.Link(k.path("dir"), k.path("dir2")), syscall.EPERM)

	// The publish step finishes by removing the temporary name.
	if err := os.Remove(k.path("tmp")); err != nil {
		t.Fatal(err)
	}
	mustRead(t, k.path("final"), data)
	if st := lstat(t, k.path("final")); st.Nlink != 2 {
		t.Errorf("nlink after unlinking one of three names: %d, want 2", st.Nlink)
	}
	if got, want := k.M.Stats().UsedBytes, ceil4096(int64(len(data)))+ceil4096(int64(len(other))); got != want {
		t.Errorf("used %d, want %d (each inode once)", got, want)
	}
}

// TestRenameReplacesAtomically: rename(2) over an existing object swaps
// it in one step (readers see the old or the new object, never neither),
// RENAME_NOREPLACE refuses a taken name, RENAME_EXCHANGE swaps.
func TestRenameReplacesAtomically(t *testing.T) {
	for _, cache := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprintf("cache=%v", cache), func(t *testing.T) { testRenameReplaces(t, cache) })
	}
}

func testRenameReplaces(t *testing.T, cache time.Duration) {
	k := mountKVFS(t, withCache(cache))
	old, nu := pattern(1, 64*kib), pattern(2, 96*kib+7)
	final := k.path("final")
	mustWrite(t, final, old)
	mustWrite(t, k.path("tmp"), nu)

	var stop atomic.Bool
	var reads, sawNew atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if _, err := os.Stat(final); err != nil {
					errs <- fmt.Errorf("stat during rename: %v", err)
					return
				}
				got, err := os.ReadFile(final)
				reads.Add(1)
				switch {
				case err != nil:
					errs <- fmt.Errorf("reading during rename: %v", err)
					return
				case bytes.Equal(got, nu):
					sawNew.Add(1)
				case !bytes.Equal(got, old):
					errs <- fmt.Errorf("read %d bytes that are neither object", len(got))
					return
				}
			}
		}()
	}
	eventually(func() bool { return reads.Load() >= 50 || len(errs) > 0 })
	if err := os.Rename(k.path("tmp"), final); err != nil {
		t.Fatalf("rename over an existing object: %v", err)
	}
	if !eventually(func() bool { return sawNew.Load() >= 50 || len(errs) > 0 }) {
		t.Errorf("readers never saw the new object")
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d reads during the rename", reads.Load())
	mustRead(t, final, nu)
	wantAbsent(t, k.path("tmp"))
	wantAbsent(t, k.storePath("tmp"))

	mustWrite(t, k.path("other"), old)
	err := unix.Renameat2(unix.AT_FDCWD, k.path("other"), unix.AT_FDCWD, final, unix.RENAME_NOREPLACE)
	wantErrno(t, "RENAME_NOREPLACE onto a taken name", err, syscall.EEXIST)
	mustRead(t, final, nu)
	mustRead(t, k.path("other"), old)
	if err := unix.Renameat2(unix.AT_FDCWD, k.path("other"), unix.AT_FDCWD, k.path("free"), unix.RENAME_NOREPLACE); err != nil {
		t.Fatalf("RENAME_NOREPLACE onto a free name: %v", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, k.path("free"), unix.AT_FDCWD, final, unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("RENAME_EXCHANGE: %v", err)
	}
	mustRead(t, final, old)
	mustRead(t, k.path("free"), nu)
	want := ceil4096(int64(len(old))) + ceil4096(int64(len(nu)))
	if got := k.settled(func(st core.Stats) bool { return st.UsedBytes == want }).UsedBytes; got != want {
		t.Errorf("used %d after renames, want %d: the replaced object must be released", got, want)
	}

	for _, d := range []string{"d1", "d2", "full"} {
		if err := os.Mkdir(k.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, k.path("full", "x"), []byte("x"))
	// unix.Rename, not os.Rename: Go refuses a directory target itself.
	if err := unix.Rename(k.path("d1"), k.path("d2")); err != nil {
		t.Errorf("rename a directory over an empty one: %v", err)
	}
	wantErrno(t, "rename a directory over a non-empty one", unix.Rename(k.path("d2"), k.path("full")), syscall.ENOTEMPTY)
	wantErrno(t, "rename a file over a directory", unix.Rename(final, k.path("d2")), syscall.EISDIR)
	wantErrno(t, "rename a directory over a file", unix.Rename(k.path("d2"), final), syscall.ENOTDIR)
	wantErrno(t, "rename a directory into itself", unix.Rename(k.path("full"), k.path("full", "sub")), syscall.EINVAL)
	wantAbsent(t, k.path("d1"))
	mustRead(t, k.path("full", "x"), []byte("x"))
}

// TestCreateExclusiveRace: of N concurrent O_CREAT|O_EXCL opens of one
// name exactly one succeeds and the rest get EEXIST.
func TestCreateExclusiveRace(t *testing.T) {
	k := mountKVFS(t)
	const rounds, racers = 20, 12
	for r := range rounds {
		name := k.path(fmt.Sprintf("key-%d", r))
		start := make(chan struct{})
		var wg sync.WaitGroup
		results := make([]error, racers)
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err == nil {
					_, err = f.Write([]byte(fmt.Sprintf("winner %d", i)))
					if cerr := f.Close(); err == nil {
						err = cerr
					}
				}
				results[i] = err
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range results {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: racers %d and %d both created %s", r, winner, i, name)
			case err == nil:
				winner = i
			case errnoOf(err) != syscall.EEXIST:
				t.Errorf("round %d racer %d: %v, want success or EEXIST", r, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody created %s", r, name)
		}
		mustRead(t, name, []byte(fmt.Sprintf("winner %d", winner)))
	}
	if st := k.M.Stats(); st.Objects != rounds {
		t.Errorf("%d objects in the ledger, want %d", st.Objects, rounds)
	}
}

// TestSpecialFilesRefused: symlinks, FIFOs, device nodes and sockets are
// refused with EPERM and leave nothing behind; mknod of a regular file
// makes an empty file, as POSIX allows.
func TestSpecialFilesRefused(t *testing.T) {
	k := mountKVFS(t)
	mustWrite(t, k.path("target"), []byte("t"))
	cases := []struct {
		name string
		make func(p string) error
	}{
		{"symlink", func(p string) error { return os.Symlink("target", p) }},
		{"fifo", func(p string) error { return unix.Mkfifo(p, 0o644) }},
		{"chardev", func(p string) error { return unix.Mknod(p, unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3))) }},
		{"blockdev", func(p string) error { return unix.Mknod(p, unix.S_IFBLK|0o644, int(unix.Mkdev(7, 0))) }},
		{"socket", func(p string) error {
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Bind(fd, &unix.SockaddrUnix{Name: p})
		}},
	}
	for _, c := range cases {
		p := k.path(c.name)
		wantErrno(t, c.name, c.make(p), syscall.EPERM)
		wantAbsent(t, p)
		wantAbsent(t, k.storePath(c.name))
	}
	if err := unix.Mknod(k.path("regular"), unix.S_IFREG|0o640, 0); err != nil {
		t.Fatalf("mknod S_IFREG: %v", err)
	}
	if st := lstat(t, k.path("regular")); st.Mode != unix.S_IFREG|0o640 || st.Size != 0 {
		t.Errorf("mknod S_IFREG made mode %o size %d, want %o size 0", st.Mode, st.Size, unix.S_IFREG|0o640)
	}
	ents, _ := os.ReadDir(k.Mnt)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "regular target" {
		t.Errorf("mount holds %v, want [regular target]", names)
	}
}

// TestNameLength: names of 255 bytes work everywhere a name is made;
// 256 bytes get ENAMETOOLONG.
func TestNameLength(t *testing.T) {
	k := mountKVFS(t)
	long := func(c byte) string { return strings.Repeat(string(c), 255) }
	tooLong := func(c byte) string { return strings.Repeat(string(c), 256) }
	for _, d := range []string{"d", "e"} {
		if err := os.Mkdir(k.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data := pattern(3, 5000)

	mustWrite(t, k.path(long('a')), data)
	mustRead(t, k.path(long('a')), data)
	if _, err := os.Stat(k.storePath(long('a'))); err != nil {
		t.Errorf("the store does not hold the 255-byte name: %v", err)
	}
	wantErrno(t, "create 256", writeObject(k.path(tooLong('a')), data), syscall.ENAMETOOLONG)
	wantErrno(t, "stat 256", func() error { _, err := os.Stat(k.path(tooLong('a'))); return err }(), syscall.ENAMETOOLONG)

	if err := os.Mkdir(k.path(long('b')), 0o755); err != nil {
		t.Errorf("mkdir 255: %v", err)
	}
	mustWrite(t, k.path(long('b'), long('c')), data)
	wantErrno(t, "mkdir 256", os.Mkdir(k.path(tooLong('b')), 0o755), syscall.ENAMETOOLONG)

	if err := os.Link(k.path(long('a')), k.path("d", long('l'))); err != nil {
		t.Errorf("link to 255: %v", err)
	}
	wantErrno(t, "link to 256", os.Link(k.path(long('a')), k.path("d", tooLong('l'))), syscall.ENAMETOOLONG)

	if err := os.Rename(k.path(long('a')), k.path("e", long('r'))); err != nil {
		t.Errorf("rename to 255: %v", err)
	}
	mustRead(t, k.path("e", long('r')), data)
	wantErrno(t, "rename to 256", os.Rename(k.path("e", long('r')), k.path("e", tooLong('r'))), syscall.ENAMETOOLONG)
	mustRead(t, k.path("e", long('r')), data)

	names, _ := os.ReadDir(k.path("d"))
	if len(names) != 1 || names[0].Name() != long('l') {
		t.Errorf("readdir of d: %v, want the one 255-byte name", names)
	}
}

// TestStatfs: f_namelen 255, f_bsize 4096, f_blocks is the capacity in
// blocks, and used blocks follow the charges.
func TestStatfs(t *testing.T) {
	const capacity = 8 * mib
	k := mountKVFS(t, withCapacity(capacity))
	var sf unix.Statfs_t
	if err := unix.Statfs(k.Mnt, &sf); err != nil {
		t.Fatal(err)
	}
	if sf.Namelen != 255 || sf.Bsize != 4096 || sf.Frsize != 4096 || sf.Blocks != capacity/4096 {
		t.Errorf("statfs: namelen %d bsize %d frsize %d blocks %d; want 255, 4096, 4096, %d", sf.Namelen, sf.Bsize, sf.Frsize, sf.Blocks, capacity/4096)
	}
	if sf.Bfree != sf.Blocks || sf.Bavail != sf.Bfree {
		t.Errorf("empty mount: bfree %d bavail %d of %d blocks", sf.Bfree, sf.Bavail, sf.Blocks)
	}
	if err := os.Mkdir(k.path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, k.path("dir", "obj"), pattern(1, 10000))
	if err := unix.Statfs(k.path("dir"), &sf); err != nil {
		t.Fatal(err)
	}
	if used := sf.Blocks - sf.Bfree; used != 3 {
		t.Errorf("after storing 10000 bytes statfs shows %d blocks used, want 3", used)
	}
}

// TestStBlocks: st_blocks is exactly the charge, ceil4096(size)/512, for
// files of every size and after truncates, and 0 for directories.
func TestStBlocks(t *testing.T) {
	k := mountKVFS(t)
	sizes := []int{0, 1, 511, 512, 4095, 4096, 4097, 64 * kib, mib + 1}
	for i, size := range sizes {
		p := k.path(fmt.Sprintf("f%d", i))
		mustWrite(t, p, pattern(i, size))
		if st := lstat(t, p); st.Size != int64(size) || st.Blocks != blocksFor(int64(size)) {
			t.Errorf("size %d: stat says size %d blocks %d, want blocks %d", size, st.Size, st.Blocks, blocksFor(int64(size)))
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Blocks != blocksFor(int64(size)) {
			t.Errorf("size %d: fstat blocks %d (%v), want %d", size, st.Blocks, err, blocksFor(int64(size)))
		}
		f.Close()
	}
	p := k.path("grown")
	mustWrite(t, p, pattern(9, 100))
	// The writer's release first: a settle at the release that read the
	// size before a truncate by path commits that older size after it
	// (a race the closing note of 2026-12-04 describes; not this test's
	// subject).
	k.released(0)
	for _, size := range []int64{3*mib + 5, 10, 0, 4097} {
		if err := os.Truncate(p, size); err != nil {
			t.Fatalf("truncate to %d: %v", size, err)
		}
		if st := lstat(t, p); st.Size != size || st.Blocks != blocksFor(size) {
			t.Errorf("after truncate to %d: size %d blocks %d, want blocks %d", size, st.Size, st.Blocks, blocksFor(size))
		}
	}
	if err := os.MkdirAll(k.path("a", "b", "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{k.Mnt, k.path("a"), k.path("a", "b", "c")} {
		if st := lstat(t, d); st.Blocks != 0 {
			t.Errorf("directory %s: st_blocks %d, want 0", d, st.Blocks)
		}
	}
}

// TestLinksChargedOnce: an inode costs its charge once however many
// names it has, and a re-store of the same key is not counted twice.
func TestLinksChargedOnce(t *testing.T) {
	k := mountKVFS(t)
	data := pattern(1, 100*kib+1)
	charge := ceil4096(int64(len(data)))
	mustWrite(t, k.path("a"), data)
	if err := os.Mkdir(k.path("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"b", "sub/c"} {
		if err := os.Link(k.path("a"), k.path(name)); err != nil {
			t.Fatal(err)
		}
	}
	wantUsed := func(what string, want int64) {
		t.Helper()
		if got := k.settled(func(st core.Stats) bool { return st.UsedBytes == want }).UsedBytes; got != want {
			t.Errorf("%s: used %d, want %d", what, got, want)
		}
		if du, err := usage.Du(k.Mnt); err != nil || du != want {
			t.Errorf("%s: du of the mount %d (%v), want %d", what, du, err, want)
		}
	}
	wantUsed("three names", charge)
	if st := k.M.Stats(); st.Objects != 1 {
		t.Errorf("%d objects for one inode", st.Objects)
	}

	// A re-store of the same key the way LMCache does it: the link
	// finds the key taken, and the temporary is removed.
	mustWrite(t, k.path("tmp"), data)
	wantErrno(t, "publish over the existing key", os.Link(k.path("tmp"), k.path("a")), syscall.EEXIST)
	if err := os.Remove(k.path("tmp")); err != nil {
		t.Fatal(err)
	}
	wantUsed("after a re-store lost the race", charge)

	// A re-store by rename replaces the old inode in every count.
	other := pattern(2, 200*kib)
	mustWrite(t, k.path("tmp"), other)
	if err := os.Rename(k.path("tmp"), k.path("b")); err != nil {
		t.Fatal(err)
	}
	wantUsed("after a rename replaced one name", charge+ceil4096(int64(len(other))))
	for _, name := range []string{"a", "sub/c"} {
		if err := os.Remove(k.path(name)); err != nil {
			t.Fatal(err)
		}
	}
	wantUsed("after the old inode's last name went", ceil4096(int64(len(other))))
}

// TestSync: fsync, fdatasync and fsync of directories succeed, and the
// stored file holds the bytes.
func TestSync(t *testing.T) {
	k := mountKVFS(t)
	if err := os.Mkdir(k.path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := pattern(1, 300*kib)
	f, err := os.OpenFile(k.path("dir", "obj"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Errorf("fsync: %v", err)
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Errorf("fdatasync: %v", err)
	}
	stored, err := os.ReadFile(k.storePath("dir", "obj"))
	if err != nil || !bytes.Equal(stored, data) {
		t.Errorf("after fsync the store holds %d bytes (%v), want the %d written", len(stored), err, len(data))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{k.Mnt, k.path("dir")} {
		df, err := os.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := df.Sync(); err != nil {
			t.Errorf("fsync of directory %s: %v", d, err)
		}
		if err := unix.Fdatasync(int(df.Fd())); err != nil {
			t.Errorf("fdatasync of directory %s: %v", d, err)
		}
		df.Close()
	}
	r, err := os.Open(k.path("dir", "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Sync(); err != nil {
		t.Errorf("fsync of a read-only handle: %v", err)
	}
}

// TestDeepDirectories: directories nest to any depth, the store mirrors
// them, and renaming a directory in the middle moves everything below.
func TestDeepDirectories(t *testing.T) {
	k := mountKVFS(t)
	const depth = 64
	parts := make([]string, depth)
	for i := range parts {
		parts[i] = fmt.Sprintf("d%02d", i)
	}
	deep := filepath.Join(parts...)
	if err := os.MkdirAll(k.path(deep), 0o755); err != nil {
		t.Fatalf("mkdir -p of %d levels: %v", depth, err)
	}
	data := pattern(1, 70*kib)
	mustWrite(t, k.path(deep, "obj"), data)
	mustRead(t, k.path(deep, "obj"), data)
	mustRead(t, k.storePath(deep, "obj"), data)
	for i := 1; i <= depth; i++ {
		ents, err := os.ReadDir(k.path(parts[:i]...))
		if err != nil || len(ents) != 1 {
			t.Fatalf("level %d: %d entries (%v), want 1", i, len(ents), err)
		}
	}

	moved := append(append(append([]string{}, parts[:10]...), "moved"), parts[11:]...)
	if err := os.Rename(k.path(parts[:11]...), k.path(moved[:11]...)); err != nil {
		t.Fatalf("rename a directory 11 levels down: %v", err)
	}
	mustRead(t, k.path(append(moved, "obj")...), data)
	mustRead(t, k.storePath(append(moved, "obj")...), data)
	wantAbsent(t, k.path(deep, "obj"))

	if err := os.RemoveAll(k.path(parts[0])); err != nil {
		t.Fatalf("rm -r: %v", err)
	}
	ents, _ := os.ReadDir(k.storePath())
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	sort.Strings(left)
	if len(left) != 0 {
		t.Errorf("store data/ still holds %v after rm -r", left)
	}
}
