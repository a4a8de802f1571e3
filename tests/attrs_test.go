package tests

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStBlocksAfterWriterClose: while a writer is open its object is
// charged at least its reservation, and st_blocks says so; once the
// writer closes, stat(2) and fstat(2) through a reader show the settled
// charge at once, not the kernel's cached figure from while it was open
// (found by TestModel: stat said 503808 bytes of blocks for a closed
// object of 100000 bytes until the attribute cache timed out, a minute).
func TestStBlocksAfterWriterClose(t *testing.T) {
	for _, mode := range []struct {
		name  string
		flags []string
	}{{"passthrough", nil}, {"strict", []string{"--strict-capacity"}}} {
		t.Run(mode.name, func(t *testing.T) {
			d := mountCache(t, append([]string{"--capacity", "8MiB", "--write-reserve", "64KiB"}, mode.flags...)...)
			// A stored object of 500000 bytes makes the next writer's
			// reservation that large.
			putFile(t, filepath.Join(d.mp, "big"), objectBytes("big", 500000))
			p := filepath.Join(d.mp, "obj")
			w, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(objectBytes("obj", 100000)); err != nil {
				t.Fatal(err)
			}
			r, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var st unix.Stat_t
			if err := unix.Fstat(int(w.Fd()), &st); err != nil || st.Blocks*512 < ceil4096(500000) {
				t.Errorf("fstat of the open writer: %d bytes of blocks (%v), want at least its reservation %d", st.Blocks*512, err, ceil4096(500000))
			}
			if err := unix.Stat(p, &st); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			want := ceil4096(100000)
			if err := unix.Stat(p, &st); err != nil || st.Blocks*512 != want {
				t.Errorf("stat after the writer's close: %d bytes of blocks (%v), want %d", st.Blocks*512, err, want)
			}
			if err := unix.Fstat(int(r.Fd()), &st); err != nil || st.Blocks*512 != want {
				t.Errorf("fstat of a reader after the writer's close: %d bytes of blocks (%v), want %d", st.Blocks*512, err, want)
			}
			r.Close()
			if got, err := duCommand(p); err != nil || got != want {
				t.Errorf("du of the closed object: %d (%v), want %d", got, err, want)
			}
			assertQuietEqual(t, d)
			d.stop()
		})
	}
}

// TestAttrsOfNamelessOpenFile: fchmod and futimens through a descriptor
// whose file has no name left (unlinked, or replaced by a rename) work,
// as on ext4, with and without passthrough. The kernel sends chmod and
// utimes without the handle, and kvfs reached the file by its name: an
// outside tester's differential run met ESTALE in 66 of 80 seeds.
func TestAttrsOfNamelessOpenFile(t *testing.T) {
	for _, mode := range [][]string{nil, {"--no-passthrough"}} {
		d := mountCache(t, mode...)
		for _, how := range []string{"unlinked", "replaced"} {
			p := filepath.Join(d.mp, how)
			fd, err := unix.Open(p, unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := unix.Write(fd, []byte("nameless")); err != nil {
				t.Fatal(err)
			}
			if how == "unlinked" {
				err = unix.Unlink(p)
			} else {
				putFile(t, p+".new", []byte("other"))
				err = unix.Rename(p+".new", p)
			}
			if err != nil {
				t.Fatal(err)
			}
			tv := []unix.Timeval{{Sec: 1}, {Sec: 1000}}
			if err := unix.Fchmod(fd, 0o600); err != nil {
				t.Errorf("%v %s: fchmod: %v", mode, how, err)
			}
			if err := unix.Futimes(fd, tv); err != nil {
				t.Errorf("%v %s: futimens: %v", mode, how, err)
			}
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode&0o777 != 0o600 || st.Mtim.Sec != 1000 || st.Size != 8 {
				t.Errorf("%v %s: fstat after fchmod and futimens: mode %o, mtime %d, size %d; want 600, 1000, 8", mode, how, st.Mode&0o777, st.Mtim.Sec, st.Size)
			}
			unix.Close(fd)
		}
		waitReleased(t, d.mp)
		ledgerExact(t, d)
		d.stop()
	}
}

// TestTimesAsExt4KeepsThem: times set through the mount (touch -d,
// utimensat, futimens on a file with no name left) read back as set,
// before a restart and after, from 1950 to 2446, the range ext4 keeps,
// for a file and a directory, after a clean stop and after a kill -9.
// Through int64 nanoseconds a time past 2262-04-11 came back as
// 1901-12-13 (an outside tester). The directory's atime is in the past:
// the start's own listing of the stored directory moved it, as any
// reading does on ext4 under relatime (outside testers: a directory's
// atime set with touch -a was gone at every start, and after a kvfs
// fsck).
func TestTimesAsExt4KeepsThem(t *testing.T) {
	d := mountCache(t, "--capacity", "8MiB")
	file, dir := filepath.Join(d.mp, "f"), filepath.Join(d.mp, "d")
	putFile(t, file, objectBytes("f", 1000))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	times := map[string]unix.Timespec{
		"1950": {Sec: -617_328_000, Nsec: 250_000_000},
		"2262": {Sec: 9_223_372_037, Nsec: 1}, // just past int64 nanoseconds
		"2446": {Sec: 15_000_000_000, Nsec: 999_999_999},
	}
	check := func(when string) {
		t.Helper()
		for p, tsName := range map[string][2]string{file: {"2262", "2446"}, dir: {"1950", "2446"}} {
			var st unix.Stat_t
			if err := unix.Stat(p, &st); err != nil {
				t.Fatal(err)
			}
			if st.Atim != times[tsName[0]] || st.Mtim != times[tsName[1]] {
				t.Errorf("%s %s: atime %v, mtime %v; want %v, %v", when, filepath.Base(p), st.Atim, st.Mtim, times[tsName[0]], times[tsName[1]])
			}
		}
	}
	for p, tsName := range map[string][2]string{file: {"2262", "2446"}, dir: {"1950", "2446"}} {
		if err := unix.UtimesNano(p, []unix.Timespec{times[tsName[0]], times[tsName[1]]}); err != nil {
			t.Fatal(err)
		}
	}
	check("set")
	nameless := filepath.Join(d.mp, "nameless")
	putFile(t, nameless, objectBytes("n", 1000))
	fd, err := unix.Open(nameless, unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := os.Remove(nameless); err != nil {
		t.Fatal(err)
	}
	if err := unix.UtimesNanoAt(fd, "", []unix.Timespec{times["2446"], times["2262"]}, unix.AT_EMPTY_PATH); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Atim != times["2446"] || st.Mtim != times["2262"] {
		t.Errorf("a file with no name left: atime %v, mtime %v (%v); want %v, %v", st.Atim, st.Mtim, err, times["2446"], times["2262"])
	}
	unix.Close(fd)
	d.stop()
	// fsck's walk of the stopped store, which only reads, moved them too.
	if r := runKvfs(t, "fsck", "--store", d.store); r.code != 0 {
		t.Fatalf("kvfs fsck: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	d = startDaemon(t, d.mp, "--store", d.store, "--capacity", "8MiB")
	check("after a restart")
	d.kill9()
	d = startDaemon(t, d.mp, "--store", d.store, "--capacity", "8MiB")
	check("after a kill -9")
	d.stop()
}

// TestDotDotInodeInListings: a listing's ".." entry carries the inode
// number of the directory above, as stat(2) of it says and as on ext4:
// the root's is its own, a moved directory's is its new parent's. It
// was 2^32-1 everywhere (an outside tester, with getdents64).
func TestDotDotInodeInListings(t *testing.T) {
	d := mountCache(t)
	for _, dir := range []string{"a", "a/b", "c"} {
		if err := os.Mkdir(filepath.Join(d.mp, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	check := func(dir, parent string) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(d.mp, parent), &st); err != nil {
			t.Fatal(err)
		}
		if got := dotDotIno(t, filepath.Join(d.mp, dir)); got != st.Ino {
			t.Errorf("%q's listing: .. has inode %d; %q's is %d", dir, got, parent, st.Ino)
		}
	}
	check(".", ".")
	check("a", ".")
	check("a/b", "a")
	if err := os.Rename(filepath.Join(d.mp, "a/b"), filepath.Join(d.mp, "c/b")); err != nil {
		t.Fatal(err)
	}
	check("c/b", "c")
}

// dotDotIno lists dir with getdents64 and returns its ".." entry's inode
// number.
func dotDotIno(t *testing.T, dir string) uint64 {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("%s: no .. entry", dir)
		}
		for b := buf[:n]; len(b) > 0; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			ino, reclen := binary.NativeEndian.Uint64(b), binary.NativeEndian.Uint16(b[16:])
			name, _, _ := bytes.Cut(b[19:reclen], []byte{0})
			if string(name) == ".." {
				return ino
			}
			b = b[reclen:]
		}
	}
}
