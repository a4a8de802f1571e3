package tests

// Bad input: each case here is a row of docs/bad-input.md, which says
// what was tried and what kvfs answered.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBadInputNames: names of 255 bytes work and 256 get ENAMETOOLONG
// for every call that makes or resolves a name (bytes, not characters);
// "." and ".." get exactly what ext4 answers; names with spaces,
// newlines, a leading "-", invalid UTF-8, and the store's own names
// (kvfs.lock, data, writing) are plain objects: stored, listed, linked,
// renamed, restored after a restart and unlinked byte for byte. Symlinks,
// FIFOs, devices and sockets are EPERM.
func TestBadInputNames(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB")
	flags := []string{"--store", d.store, "--capacity", "64MiB"}
	p := func(name string) string { return d.mp + "/" + name } // not Join: it cleans "." and ".." away
	if err := os.Mkdir(p("dir"), 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("length", func(t *testing.T) {
		n255, n256 := strings.Repeat("n", 251)+".obj", strings.Repeat("n", 252)+".obj"
		euro255, euro258 := strings.Repeat("€", 85), strings.Repeat("€", 86) // 3 bytes each
		for _, name := range []string{n255, euro255, "dir/" + n255} {
			putFile(t, p(name), objectBytes(name, 5000))
			wantErrno(t, "rename to a 255-byte name", unix.Rename(p(name), p(name[:len(name)-1]+"x")), 0)
			wantErrno(t, "link to a 255-byte name", unix.Link(p(name[:len(name)-1]+"x"), p(name)), 0)
			if got, err := os.ReadFile(p(name)); err != nil || checkObject(got, name, 5000) != nil {
				t.Errorf("255-byte name %q reads back %v", name[:8], err)
			}
		}
		for _, name := range []string{n256, euro258, "dir/" + n256} {
			_, err := os.Create(p(name))
			wantErrno(t, "create with a 256-byte name", err, unix.ENAMETOOLONG)
			wantErrno(t, "mkdir with a 256-byte name", unix.Mkdir(p(name), 0o755), unix.ENAMETOOLONG)
			wantErrno(t, "stat of a 256-byte name", unix.Stat(p(name), new(unix.Stat_t)), unix.ENAMETOOLONG)
			wantErrno(t, "unlink of a 256-byte name", unix.Unlink(p(name)), unix.ENAMETOOLONG)
			wantErrno(t, "rename to a 256-byte name", unix.Rename(p(n255), p(name)), unix.ENAMETOOLONG)
			wantErrno(t, "link to a 256-byte name", unix.Link(p(n255), p(name)), unix.ENAMETOOLONG)
		}
	})

	t.Run("dot_and_dotdot", func(t *testing.T) {
		putFile(t, p("file"), []byte("x"))
		os.MkdirAll(p("full/x"), 0o755)
		os.Mkdir(p("empty"), 0o755)
		creat := func(name string, flags int) error {
			fd, err := unix.Open(p(name), flags|unix.O_CREAT|unix.O_WRONLY, 0o644)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}
		cases := []struct {
			what string
			err  error
			want unix.Errno
		}{
			{"mkdir .", unix.Mkdir(p("."), 0o755), unix.EEXIST},
			{"mkdir ..", unix.Mkdir(p("dir/.."), 0o755), unix.EEXIST},
			{"open(., O_CREAT)", creat(".", 0), unix.EISDIR},
			{"open(., O_CREAT|O_EXCL)", creat(".", unix.O_EXCL), unix.EEXIST},
			{"open(dir/.., O_CREAT|O_EXCL)", creat("dir/..", unix.O_EXCL), unix.EEXIST},
			{"unlink .", unix.Unlink(p("dir/.")), unix.EISDIR},
			{"unlink ..", unix.Unlink(p("dir/..")), unix.EISDIR},
			{"rmdir dir/.", unix.Rmdir(p("dir/.")), unix.EINVAL},
			{"rmdir dir/..", unix.Rmdir(p("dir/..")), unix.ENOTEMPTY},
			{"rename dir/. x", unix.Rename(p("dir/."), p("x")), unix.EBUSY},
			{"rename file dir/..", unix.Rename(p("file"), p("dir/..")), unix.EBUSY},
			{"rename file .", unix.Rename(p("file"), p(".")), unix.EBUSY},
			{"link file .", unix.Link(p("file"), p(".")), unix.EEXIST},
			{"link dir/. x", unix.Link(p("dir/."), p("x")), unix.EPERM},
			{"rmdir of the mount point", unix.Rmdir(d.mp), unix.EBUSY},
		}
		for _, c := range cases {
			wantErrno(t, c.what, c.err, c.want)
		}
	})

	t.Run("special_files", func(t *testing.T) {
		wantErrno(t, "symlink", unix.Symlink("/etc/passwd", p("sl")), unix.EPERM)
		wantErrno(t, "mkfifo", unix.Mkfifo(p("fifo"), 0o644), unix.EPERM)
		wantErrno(t, "mknod of a character device", unix.Mknod(p("dev"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))), unix.EPERM)
		wantErrno(t, "mknod of a socket", unix.Mknod(p("sock"), unix.S_IFSOCK|0o600, 0), unix.EPERM)
		wantErrno(t, "mknod of a regular file", unix.Mknod(p("plain"), unix.S_IFREG|0o644, 0), 0)
		// A whiteout leaves a character device in the name's place:
		// refused as mknod of one is, and the file stays where it was
		// (was: EINVAL, an outside tester).
		wantErrno(t, "RENAME_WHITEOUT", unix.Renameat2(unix.AT_FDCWD, p("plain"), unix.AT_FDCWD, p("moved"), unix.RENAME_WHITEOUT), unix.EPERM)
		if _, err := os.Stat(p("plain")); err != nil {
			t.Errorf("the file a refused RENAME_WHITEOUT named: %v", err)
		}
		os.Remove(p("plain"))
	})

	odd := []string{"with space", " leading and trailing ", "new\nline", "tab\there", "-rf", "--help", "\xff\xfe\xfd invalid utf-8",
		"back\\slash", "*?[glob]", "...", ".hidden", "kvfs.lock", "data", "writing", "émoji-🙂"}
	t.Run("odd_names", func(t *testing.T) {
		for _, name := range odd {
			putFile(t, p(name), objectBytes(name, 3000))
			if err := unix.Link(p(name), p("dir/"+name)); err != nil {
				t.Errorf("link %q: %v", name, err)
			}
			if err := unix.Rename(p("dir/"+name), p("dir/"+name+".renamed")); err != nil {
				t.Errorf("rename %q: %v", name, err)
			}
		}
		// The store's own names inside the mount are objects under
		// data/, never the store's lock or markers.
		if lock, err := os.ReadFile(filepath.Join(d.store, "kvfs.lock")); err != nil || bytes.Contains(lock, []byte("kvfs-test")) {
			t.Errorf("the store's kvfs.lock was touched through the mount: %q, %v", lock, err)
		}
		if _, err := os.Stat(filepath.Join(d.store, "data", "kvfs.lock")); err != nil {
			t.Errorf("kvfs.lock made through the mount is not under data/: %v", err)
		}
		checkOddNames(t, d.mp, odd)
		assertQuietEqual(t, d)
	})

	st := assertQuietEqual(t, d)
	d.stop()
	requireCleanFsck(t, d.store, st)
	d = startDaemon(t, d.mp, flags...)
	t.Run("odd_names_after_restart", func(t *testing.T) {
		checkOddNames(t, d.mp, odd)
		for _, name := range odd {
			for _, n := range []string{name, "dir/" + name + ".renamed"} {
				if err := os.Remove(p(n)); err != nil {
					t.Errorf("unlink %q: %v", n, err)
				}
			}
		}
	})
	assertQuietEqual(t, d)
	d.stop()
}

// checkOddNames requires each name and its renamed link to be listed
// with exactly its bytes, one inode, and to read back exact.
func checkOddNames(t *testing.T, mp string, names []string) {
	t.Helper()
	listed := map[string]bool{}
	for _, dir := range []string{mp, filepath.Join(mp, "dir")} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			rel, _ := filepath.Rel(mp, filepath.Join(dir, e.Name()))
			listed[rel] = true
		}
	}
	for _, name := range names {
		var a, b unix.Stat_t
		for i, rel := range []string{name, "dir/" + name + ".renamed"} {
			if !listed[rel] {
				t.Errorf("%q is not listed", rel)
			}
			got, err := os.ReadFile(filepath.Join(mp, rel))
			if err == nil {
				err = checkObject(got, name, 3000)
			}
			if err != nil {
				t.Errorf("%q: %v", rel, err)
			}
			unix.Stat(filepath.Join(mp, rel), []*unix.Stat_t{&a, &b}[i])
		}
		if a.Ino != b.Ino || a.Nlink != 2 {
			t.Errorf("%q and its link: inodes %d and %d, nlink %d", name, a.Ino, b.Ino, a.Nlink)
		}
	}
}

// TestBadInputSizes: truncate, fallocate and writes that would take the
// object past the capacity fail with ENOSPC at once (the charge is the
// size, holes included, so a 1-byte write at 1 TiB costs 1 TiB), change
// nothing and lose nothing; sparse files within the capacity are charged
// their size; a size that fits only by evicting evicts.
func TestBadInputSizes(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(map[bool]string{false: "passthrough", true: "strict"}[strict], func(t *testing.T) { badInputSizes(t, strict) })
	}
}

// badInputSizes: sizes no object can ever have evict nothing. A truncate
// or fallocate states its size and fails at once with EFBIG (the capacity
// is the largest file, like a file-size limit; ENOSPC would say "not
// now"), uncounted as an admission failure. A write past the daemon
// (passthrough) lands, but the close fails with ENOSPC and the object is
// removed: nothing over the capacity is ever published; a write through
// the daemon (strict capacity) fails at once with ENOSPC.
func badInputSizes(t *testing.T, strict bool) {
	const capacity = 16 * MiB
	flags := []string{"--capacity", "16MiB", "--grace", "0s"}
	if strict {
		flags = append(flags, "--strict-capacity")
	}
	d := mountCache(t, flags...)
	keep := []string{"a", "b"}
	for _, k := range keep {
		putFile(t, filepath.Join(d.mp, k), objectBytes(k, 4*MiB))
	}
	intact := func(when string) {
		t.Helper()
		for _, k := range keep {
			if got, err := os.ReadFile(filepath.Join(d.mp, k)); err != nil || checkObject(got, k, 4*MiB) != nil {
				t.Errorf("%s: %s lost or changed (%v)", when, k, err)
			}
		}
	}
	before := assertQuietEqual(t, d)
	f, err := os.OpenFile(filepath.Join(d.mp, "t"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fd := int(f.Fd())
	sizes := []struct {
		what string
		call func() error
	}{
		{"ftruncate to the capacity + 1", func() error { return unix.Ftruncate(fd, capacity+1) }},
		{"truncate(path) to 1 TiB", func() error { return unix.Truncate(f.Name(), 1<<40) }},
		{"truncate(path) to 999999999999999", func() error { return unix.Truncate(f.Name(), 999999999999999) }},
		{"ftruncate to 2^62", func() error { return unix.Ftruncate(fd, 1<<62) }},
		{"ftruncate to 2^63-1", func() error { return unix.Ftruncate(fd, 1<<63-1) }},
		{"fallocate the capacity + 4 KiB", func() error { return unix.Fallocate(fd, 0, 0, capacity+4096) }},
		{"fallocate 4 KiB at 1 TiB", func() error { return unix.Fallocate(fd, 0, 1<<40, 4096) }},
	}
	for _, c := range sizes {
		wantErrno(t, c.what, c.call(), unix.EFBIG)
		if st, _ := f.Stat(); st.Size() != 0 {
			t.Errorf("%s left the file at %d bytes", c.what, st.Size())
		}
	}
	writes := []struct {
		what string
		call func(fd int) error
	}{
		{"pwrite 1 byte at 1 TiB", func(fd int) error { _, err := unix.Pwrite(fd, []byte("x"), 1<<40); return err }},
		{"pwrite 1 byte at 2^63-2", func(fd int) error { _, err := unix.Pwrite(fd, []byte("x"), 1<<63-2); return err }},
		{"write 1 byte after lseek to 1 TiB", func(fd int) error {
			if _, err := unix.Seek(fd, 1<<40, 0); err != nil {
				return err
			}
			_, err := unix.Write(fd, []byte("x"))
			return err
		}},
	}
	refused := 0
	for i, c := range writes {
		p := filepath.Join(d.mp, fmt.Sprintf("w%d", i))
		w, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		werr := c.call(int(w.Fd()))
		cerr := w.Close()
		// Its reservation is kept until its RELEASE, which comes after
		// the close: the next create before it would evict for it (f
		// stays open).
		if !waitFor(func() bool { return stats(t, d.mp).PinnedObjects == 1 }) {
			t.Fatalf("%s: its writer never released %v", c.what, hangGuard)
		}
		switch {
		case strict:
			wantErrno(t, c.what, werr, unix.ENOSPC)
			refused++
		case errors.Is(werr, unix.EFBIG):
			// The store's file system refused it before kvfs could.
		default:
			wantErrno(t, c.what+": close", cerr, unix.ENOSPC)
			refused++
		}
		if strict || werr == nil {
			waitFor(func() bool { _, err := os.Lstat(p); return errors.Is(err, os.ErrNotExist) })
			if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: the object is still there (%v); a store refused for space must be removed", c.what, err)
			}
		}
	}
	wantErrno(t, "fallocate KEEP_SIZE past the charge", unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 0, MiB), unix.EOPNOTSUPP)
	intact("after the refused sizes")
	st := stats(t, d.mp)
	if st.Evictions != before.Evictions || st.AdmissionFailures < before.AdmissionFailures+int64(refused) {
		t.Errorf("after %d refused sizes: %+v (before %+v)", refused, st, before)
	}
	if !strict && st.OvershootMaxBytes == 0 {
		t.Errorf("a 1 TiB passthrough write left no overshoot on record: %+v", st)
	}

	// Sparse, within the capacity: charged the size, holes included.
	if _, err := unix.Pwrite(fd, []byte("x"), 4*MiB); err != nil {
		t.Fatalf("pwrite 1 byte at 4 MiB: %v", err)
	}
	var sb unix.Stat_t
	unix.Fstat(fd, &sb)
	if sb.Size != 4*MiB+1 || sb.Blocks*512 != 4*MiB+4096 {
		t.Errorf("sparse file: size %d, st_blocks*512 %d, want %d and %d", sb.Size, sb.Blocks*512, 4*MiB+1, 4*MiB+4096)
	}
	wantErrno(t, "punch a hole", unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, MiB), 0)
	var sp unix.Stat_t
	unix.Fstat(fd, &sp)
	if sp.Size != sb.Size || sp.Blocks != sb.Blocks {
		t.Errorf("after punching a hole: size %d, st_blocks %d; before %d, %d", sp.Size, sp.Blocks, sb.Size, sb.Blocks)
	}
	f.Close()
	intact("after the sparse write")
	assertQuietEqual(t, d)

	// Exactly the capacity: fits once everything else is evicted, but
	// for empty objects (a refused write's the store's file system
	// refused first), which free nothing.
	if err := unix.Truncate(filepath.Join(d.mp, "t"), capacity); err != nil {
		t.Errorf("truncate to exactly the capacity: %v", err)
	}
	st = assertQuietEqual(t, d)
	ents, _ := os.ReadDir(d.mp)
	for _, e := range ents {
		if fi, err := e.Info(); e.Name() != "t" && (err != nil || fi.Size() != 0) {
			t.Errorf("after truncating to the capacity, %s is left (%v, %v)", e.Name(), fi, err)
		}
	}
	if st.UsedBytes != capacity || st.Objects != int64(len(ents)) {
		t.Errorf("after truncating to the capacity: %+v, %d names", st, len(ents))
	}
	d.stop()
}

// TestBadInputOpenFiles: O_APPEND appends, also with a concurrent
// appender and a positional writer; an unlinked open file can still be
// written and read; rename over an open file leaves the open handle its
// old bytes; directories holding open readers and writers can be renamed
// and the writers finish their objects under the new path (and a crash
// after such a rename still reclaims the unfinished one).
func TestBadInputOpenFiles(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB")
	flags := []string{"--store", d.store, "--capacity", "64MiB"}
	p := func(name string) string { return d.mp + "/" + name } // not Join: it cleans "." and ".." away

	t.Run("append", func(t *testing.T) {
		putFile(t, p("log"), []byte(strings.Repeat("h", 1000)))
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				f, err := os.OpenFile(p("log"), os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Error(err)
					return
				}
				defer f.Close()
				for i := range 200 {
					if _, err := fmt.Fprintf(f, "%d:%04d:%s\n", w, i, strings.Repeat("r", 40)); err != nil {
						t.Errorf("append: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		got, _ := os.ReadFile(p("log"))
		var want []string
		for w := range 2 {
			for i := range 200 {
				want = append(want, fmt.Sprintf("%d:%04d:%s", w, i, strings.Repeat("r", 40)))
			}
		}
		lines := strings.Split(strings.TrimSuffix(string(got[min(len(got), 1000):]), "\n"), "\n")
		sort.Strings(lines)
		if len(got) != 1000+400*48 || string(got[:1000]) != strings.Repeat("h", 1000) || strings.Join(lines, "\n") != strings.Join(want, "\n") {
			t.Errorf("after 2x200 concurrent appends of 48 bytes to 1000: %d bytes, %d records, not each exactly once", len(got), len(lines))
		}
		// An appender after a positional write past the end appends at
		// the new end.
		w, _ := os.OpenFile(p("log"), os.O_WRONLY, 0)
		a, _ := os.OpenFile(p("log"), os.O_WRONLY|os.O_APPEND, 0)
		size := int64(len(got))
		w.WriteAt([]byte("POS"), size+10)
		a.Write([]byte("APP"))
		w.Close()
		a.Close()
		got, _ = os.ReadFile(p("log"))
		if int64(len(got)) != size+16 || string(got[size+13:]) != "APP" || string(got[size+10:size+13]) != "POS" {
			t.Errorf("append after a write past the end: %d bytes, tail %q", len(got), got[size:])
		}
	})

	t.Run("unlinked_open_file", func(t *testing.T) {
		base := assertQuietEqual(t, d)
		f, err := os.OpenFile(p("doomed"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		data := objectBytes("doomed", 2*MiB)
		f.Write(data[:MiB])
		if err := os.Remove(p("doomed")); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data[MiB:]); err != nil {
			t.Errorf("write after unlink: %v", err)
		}
		if err := f.Sync(); err != nil {
			t.Errorf("fsync after unlink: %v", err)
		}
		got := make([]byte, 2*MiB+1)
		n, _ := f.ReadAt(got, 0)
		if err := checkObject(got[:n], "doomed", 2*MiB); err != nil {
			t.Errorf("reading the unlinked file back: %v", err)
		}
		if st := stats(t, d.mp); st.ShadowBytes != 2*MiB {
			t.Errorf("unlinked open file: shadow %d, want %d", st.ShadowBytes, 2*MiB)
		}
		f.Close()
		if st := assertQuietEqual(t, d); st.UsedBytes != base.UsedBytes || st.Objects != base.Objects {
			t.Errorf("after closing the unlinked file: %+v, before %+v", st, base)
		}
	})

	t.Run("rename_over_open_file", func(t *testing.T) {
		putFile(t, p("target"), objectBytes("old", 3*MiB))
		r, err := os.Open(p("target"))
		if err != nil {
			t.Fatal(err)
		}
		w, err := os.OpenFile(p("target2"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(objectBytes("w", 2*MiB)[:MiB])
		putFile(t, p("source"), objectBytes("new", 2*MiB))
		putFile(t, p("source2"), objectBytes("new2", MiB))
		wantErrno(t, "rename over a file open for reading", unix.Rename(p("source"), p("target")), 0)
		wantErrno(t, "rename over a file open for writing", unix.Rename(p("source2"), p("target2")), 0)
		got := make([]byte, 3*MiB+1)
		n, _ := r.ReadAt(got, 0)
		if err := checkObject(got[:n], "old", 3*MiB); err != nil {
			t.Errorf("the open handle after the rename over it: %v", err)
		}
		if _, err := w.Write(objectBytes("w", 2*MiB)[MiB:]); err != nil {
			t.Errorf("the open writer after the rename over it: %v", err)
		}
		for name, want := range map[string]string{"target": "new", "target2": "new2"} {
			got, err := os.ReadFile(p(name))
			size := map[string]int{"new": 2 * MiB, "new2": MiB}[want]
			if err == nil {
				err = checkObject(got, want, size)
			}
			if err != nil {
				t.Errorf("%s after the rename: %v", name, err)
			}
		}
		// The open writer is charged at least its reservation, and what it
		// wrote once kvfs has seen it (passthrough writes pass the daemon).
		var st kvfsStats
		if !waitFor(func() bool {
			st = stats(t, d.mp)
			return st.ShadowBytes == 5*MiB+st.ReservedBytes
		}) {
			t.Errorf("with the replaced files open: shadow %d, want %d and the writer's reservation %d", st.ShadowBytes, 5*MiB, st.ReservedBytes)
		}
		r.Close()
		w.Close()
		assertQuietEqual(t, d)
	})

	t.Run("rename_dir_with_open_files", func(t *testing.T) {
		if err := os.MkdirAll(p("d1/d2"), 0o755); err != nil {
			t.Fatal(err)
		}
		putFile(t, p("d1/r"), objectBytes("r", MiB))
		r, _ := os.Open(p("d1/r"))
		w, err := os.OpenFile(p("d1/d2/w"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		data := objectBytes("w", 2*MiB)
		w.Write(data[:MiB])
		wantErrno(t, "rename a directory holding open files", unix.Rename(p("d1"), p("e1")), 0)
		wantErrno(t, "rename a directory into itself", unix.Rename(p("e1"), p("e1/d2/x")), unix.EINVAL)
		if _, err := w.Write(data[MiB:]); err != nil {
			t.Errorf("write after the directory was renamed: %v", err)
		}
		if err := w.Close(); err != nil {
			t.Errorf("close after the directory was renamed: %v", err)
		}
		got := make([]byte, MiB+1)
		n, _ := r.ReadAt(got, 0)
		if err := checkObject(got[:n], "r", MiB); err != nil {
			t.Errorf("reader after the directory was renamed: %v", err)
		}
		r.Close()
		if got, err := os.ReadFile(p("e1/d2/w")); err != nil || checkObject(got, "w", 2*MiB) != nil {
			t.Errorf("object finished after its directory's rename: %v", err)
		}
		if _, err := os.Stat(filepath.Join(d.store, "data", "e1", "d2", "w")); err != nil {
			t.Errorf("the store does not hold the renamed path: %v", err)
		}
		buf := make([]byte, 4096)
		if n, err := unix.Getxattr(p("e1/r"), "user.kvfs.backing", buf); err != nil || string(buf[:n]) != filepath.Join(d.store, "data", "e1", "r") {
			t.Errorf("backing path after the rename: %q, %v", buf[:max(n, 0)], err)
		}
		assertQuietEqual(t, d)
	})

	// A crash after renaming the directory of an unfinished object.
	{
		os.MkdirAll(p("c1"), 0o755)
		w, err := os.OpenFile(p("c1/unfinished"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(objectBytes("u", MiB))
		wantErrno(t, "rename the writer's directory", unix.Rename(p("c1"), p("c2")), 0)
		d.kill9()
		w.Close()
		d = startDaemon(t, d.mp, flags...)
		wantErrno(t, "stat of the object being written at the crash", unix.Stat(p("c2/unfinished"), new(unix.Stat_t)), unix.ENOENT)
		if got, err := os.ReadFile(p("e1/d2/w")); err != nil || checkObject(got, "w", 2*MiB) != nil {
			t.Errorf("finished object after the crash: %v", err)
		}
		assertQuietEqual(t, d)
	}
	d.stop()
}

// TestBadInputDirs: mkdir of what exists, rmdir of a non-empty directory
// or a file, unlink of a directory, a directory under a file: the errnos
// POSIX gives; a directory whose only file is unlinked but still open
// can be removed while that file stays readable.
func TestBadInputDirs(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	p := func(name string) string { return d.mp + "/" + name } // not Join: it cleans "." and ".." away
	os.MkdirAll(p("full/sub"), 0o755)
	putFile(t, p("full/f"), []byte("x"))
	putFile(t, p("file"), []byte("x"))
	wantErrno(t, "mkdir of an existing directory", unix.Mkdir(p("full"), 0o755), unix.EEXIST)
	wantErrno(t, "mkdir over a file", unix.Mkdir(p("file"), 0o755), unix.EEXIST)
	wantErrno(t, "mkdir under a file", unix.Mkdir(p("file/sub"), 0o755), unix.ENOTDIR)
	wantErrno(t, "rmdir of a non-empty directory", unix.Rmdir(p("full")), unix.ENOTEMPTY)
	wantErrno(t, "rmdir of a directory holding only a directory", unix.Rmdir(p("full/sub/..")), unix.ENOTEMPTY)
	wantErrno(t, "rmdir of a file", unix.Rmdir(p("file")), unix.ENOTDIR)
	wantErrno(t, "unlink of a directory", unix.Unlink(p("full")), unix.EISDIR)
	os.MkdirAll(p("empty"), 0o755)
	wantErrno(t, "rename a directory over a non-empty one", unix.Rename(p("empty"), p("full")), unix.ENOTEMPTY)
	wantErrno(t, "rename a file over a directory", unix.Rename(p("file"), p("empty")), unix.EISDIR)
	wantErrno(t, "rename a directory over a file", unix.Rename(p("empty"), p("file")), unix.ENOTDIR)
	deep := d.mp
	for i := range 64 {
		deep = filepath.Join(deep, fmt.Sprintf("level%02d", i))
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Errorf("64 levels of directories: %v", err)
	}
	putFile(t, filepath.Join(deep, "obj"), objectBytes("deep", 5000))

	os.Mkdir(p("gone"), 0o755)
	putFile(t, p("gone/open"), objectBytes("open", 10000))
	f, err := os.Open(p("gone/open"))
	if err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "unlink an open file", unix.Unlink(p("gone/open")), 0)
	wantErrno(t, "rmdir of a directory whose only file is unlinked but open", unix.Rmdir(p("gone")), 0)
	got := make([]byte, 10001)
	n, _ := f.ReadAt(got, 0)
	if err := checkObject(got[:n], "open", 10000); err != nil {
		t.Errorf("reading the open file of a removed directory: %v", err)
	}
	f.Close()
	assertQuietEqual(t, d)
	d.stop()
}

// TestBadInputLinks: a hard link across directories is one inode
// charged once, survives the removal of the other name and a restart;
// link onto an existing name is EEXIST, of a directory EPERM, to
// another file system EXDEV, and of an unlinked open file (through
// /proc/self/fd) ENOENT.
func TestBadInputLinks(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	flags := []string{"--store", d.store, "--capacity", "16MiB"}
	p := func(name string) string { return d.mp + "/" + name } // not Join: it cleans "." and ".." away
	os.MkdirAll(p("a/deep"), 0o755)
	os.MkdirAll(p("b"), 0o755)
	putFile(t, p("a/deep/x"), objectBytes("x", 3*MiB))
	before := assertQuietEqual(t, d)
	wantErrno(t, "link across directories", unix.Link(p("a/deep/x"), p("b/y")), 0)
	var sa, sb unix.Stat_t
	unix.Stat(p("a/deep/x"), &sa)
	unix.Stat(p("b/y"), &sb)
	if sa.Ino != sb.Ino || sb.Nlink != 2 {
		t.Errorf("linked names: inodes %d and %d, nlink %d", sa.Ino, sb.Ino, sb.Nlink)
	}
	if st := assertQuietEqual(t, d); st.UsedBytes != before.UsedBytes || st.Objects != before.Objects {
		t.Errorf("a second name changed the charge: %+v, before %+v", st, before)
	}
	putFile(t, p("b/taken"), []byte("x"))
	wantErrno(t, "link onto an existing name", unix.Link(p("b/y"), p("b/taken")), unix.EEXIST)
	wantErrno(t, "link of a directory", unix.Link(p("a/deep"), p("b/dirlink")), unix.EPERM)
	wantErrno(t, "link to another file system", unix.Link(p("b/y"), filepath.Join(t.TempDir(), "y")), unix.EXDEV)
	f, _ := os.Open(p("b/taken"))
	os.Remove(p("b/taken"))
	err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.AT_FDCWD, p("b/relinked"), unix.AT_SYMLINK_FOLLOW)
	wantErrno(t, "link of an unlinked open file", err, unix.ENOENT)
	f.Close()
	wantErrno(t, "unlink of the first name", unix.Unlink(p("a/deep/x")), 0)
	d.stop()
	d = startDaemon(t, d.mp, flags...)
	if got, err := os.ReadFile(p("b/y")); err != nil || checkObject(got, "x", 3*MiB) != nil {
		t.Errorf("the second name after unlinking the first and a restart: %v", err)
	}
	if st := assertQuietEqual(t, d); st.UsedBytes != before.UsedBytes {
		t.Errorf("after the restart: %+v, want %d bytes", st, before.UsedBytes)
	}
	d.stop()
}

// TestBadInputDeepPaths: kvfs reaches a stored file by its path under
// data/ in one system call, so no stored path may pass PATH_MAX (4095
// bytes and the NUL). A create, mkdir, link or rename whose new path
// would, and the rename of a directory that would carry a path below it
// past it, are refused with ENAMETOOLONG, although each name is legal;
// a path of exactly 4095 bytes works, and survives a restart and fsck.
// (Before: the rename was taken, the files below it then answered
// ENAMETOOLONG to every open, an unlink of one dropped its charge and
// left its bytes in the store, and the store no longer mounted.)
func TestBadInputDeepPaths(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	flags := []string{"--store", d.store, "--capacity", "16MiB"}
	// 16 levels of 250-byte names under "a": 1 + 16*251 = 4017 bytes.
	dir, err := unix.Open(d.mp, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { unix.Close(dir) }()
	rel := ""
	down := func(name string) {
		t.Helper()
		if err := unix.Mkdirat(dir, name, 0o755); err != nil {
			t.Fatalf("mkdir at %d bytes: %v", len(rel)+len(name), err)
		}
		sub, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(dir)
		dir, rel = sub, path.Join(rel, name)
	}
	down("a")
	for i := range 16 {
		down(fmt.Sprintf("%0250d", i))
	}
	put := func(name, content string) error {
		fd, err := unix.Openat(dir, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		_, err = unix.Write(fd, []byte(content))
		return err
	}
	// The longest name that fits: rel + "/" + name = 4095 bytes.
	edge := strings.Repeat("e", unix.PathMax-1-len(rel)-1)
	if err := put(edge, "at the edge\n"); err != nil {
		t.Fatalf("a file whose path is 4095 bytes: %v", err)
	}
	if err := put("f", "payload\n"); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "create at 4096 bytes", put(edge+"x", "x"), unix.ENAMETOOLONG)
	wantErrno(t, "mkdir at 4096 bytes", unix.Mkdirat(dir, edge+"x", 0o755), unix.ENAMETOOLONG)
	wantErrno(t, "link to 4096 bytes", unix.Linkat(dir, "f", dir, edge+"x", 0), unix.ENAMETOOLONG)
	wantErrno(t, "rename to 4096 bytes", unix.Renameat(dir, "f", dir, edge+"x"), unix.ENAMETOOLONG)
	// "a" renamed to a longer name would carry edge to 4096 bytes.
	wantErrno(t, "rename of a directory carrying a path past 4095 bytes", unix.Rename(filepath.Join(d.mp, "a"), filepath.Join(d.mp, "ab")), unix.ENAMETOOLONG)
	os.Mkdir(filepath.Join(d.mp, "b"), 0o755)
	wantErrno(t, "exchange carrying a path past 4095 bytes", unix.Renameat2(unix.AT_FDCWD, filepath.Join(d.mp, "a"), unix.AT_FDCWD, filepath.Join(d.mp, "b"), unix.RENAME_EXCHANGE), 0)
	wantErrno(t, "the same exchange back", unix.Renameat2(unix.AT_FDCWD, filepath.Join(d.mp, "a"), unix.AT_FDCWD, filepath.Join(d.mp, "b"), unix.RENAME_EXCHANGE), 0)
	os.Mkdir(filepath.Join(d.mp, "bb"), 0o755)
	wantErrno(t, "exchange that would carry a path past 4095 bytes", unix.Renameat2(unix.AT_FDCWD, filepath.Join(d.mp, "a"), unix.AT_FDCWD, filepath.Join(d.mp, "bb"), unix.RENAME_EXCHANGE), unix.ENAMETOOLONG)
	wantErrno(t, "unlink of a file 4,000 bytes deep", unix.Unlinkat(dir, "f", 0), 0)
	unix.Close(dir)
	dir = -1
	st := assertQuietEqual(t, d)
	d.stop()
	requireCleanFsck(t, d.store, st)
	// A start from the checkpoint, then one that walks the store.
	for _, how := range []string{"a clean stop", "a crash, with no checkpoint"} {
		d = startDaemon(t, d.mp, flags...)
		// Read by descriptors: the mount point and rel pass PATH_MAX.
		at, err := unix.Open(d.mp, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		for _, name := range append(strings.Split(rel, "/"), edge) {
			if err != nil {
				break
			}
			var next int
			next, err = unix.Openat(at, name, unix.O_RDONLY, 0)
			unix.Close(at)
			at = next
		}
		got := make([]byte, 64)
		n := 0
		if err == nil {
			n, err = unix.Read(at, got)
			unix.Close(at)
		}
		if err != nil || string(got[:n]) != "at the edge\n" {
			t.Fatalf("the 4095-byte path after %s: %q, %v", how, got[:n], err)
		}
		assertQuietEqual(t, d)
		d.kill9()
		os.Remove(filepath.Join(d.store, "kvfs.index"))
	}
}
