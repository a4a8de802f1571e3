package tests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/fusefs"
	"github.com/kvfs/kvfs/gpudirect"
	"golang.org/x/sys/unix"
)

// TestGPUDirectXattrName: the gpudirect client's protocol is kvfs's: the
// attributes it asks for are the ones the daemon answers, asked of a real
// mount: an object opened through it names its stored file under the
// attribute gpudirect reads, a directory says how writers' bytes reach
// the store under gpudirect's name and values, and gpudirect.Open finds
// the stored file that way and reads the object's bytes from it.
func TestGPUDirectXattrName(t *testing.T) {
	if gpudirect.BackingXattr != fusefs.BackingXattr {
		t.Fatalf("gpudirect asks for %q, kvfs answers %q", gpudirect.BackingXattr, fusefs.BackingXattr)
	}
	if gpudirect.WritesXattr != fusefs.WritesXattr || gpudirect.WritesDaemon != fusefs.WritesDaemon ||
		gpudirect.WritesPassthrough != fusefs.WritesPassthrough {
		t.Fatalf("gpudirect asks for %q (%q, %q), kvfs answers %q (%q, %q)", gpudirect.WritesXattr, gpudirect.WritesDaemon,
			gpudirect.WritesPassthrough, fusefs.WritesXattr, fusefs.WritesDaemon, fusefs.WritesPassthrough)
	}
	for _, c := range []struct {
		flags  []string
		writes string
	}{{nil, gpudirect.WritesPassthrough}, {[]string{"--strict-capacity"}, gpudirect.WritesDaemon}} {
		d := mountCache(t, append([]string{"--capacity", "64MiB"}, c.flags...)...)
		p := filepath.Join(d.mp, "obj.data")
		want := objectBytes(p, 3*4096+5)
		putFile(t, p, want)
		// A strict mount names no stored file while a writer is open,
		// which lasts until its RELEASE, a moment after close(2).
		waitReleased(t, d.mp)
		buf := make([]byte, 4096)
		n, err := unix.Getxattr(d.mp, gpudirect.WritesXattr, buf)
		if err != nil || string(buf[:n]) != c.writes {
			t.Fatalf("%v: %s of the mount's root = %q, %v; want %q", c.flags, gpudirect.WritesXattr, buf[:max(n, 0)], err, c.writes)
		}
		pin, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		n, err = unix.Fgetxattr(int(pin.Fd()), gpudirect.BackingXattr, buf)
		pin.Close()
		if stored := filepath.Join(d.store, "data", "obj.data"); err != nil || string(buf[:n]) != stored {
			t.Fatalf("%v: %s of an open object = %q, %v; want %s", c.flags, gpudirect.BackingXattr, buf[:max(n, 0)], err, stored)
		}
		if got := directRead(t, newReader(t, gpudirect.Options{Chunk: 4096, Depth: 2}), p); !bytes.Equal(got, want) {
			t.Fatalf("%v: gpudirect read %d bytes, equal %v", c.flags, len(got), bytes.Equal(got, want))
		}
		d.stop()
	}
}

// The direct path refuses any symlink on the way to a stored file (a
// user who owns a directory on the mount owns its stored directory and
// could swap it for a link out of the store between the pin and the
// open; gpudirect's TestOpenNoFollow), so the daemon names the stored
// file by the store's resolved path: a store given through a symlink
// (/data -> /mnt/nvme0) still serves it.
func TestGPUDirectSymlinkedStore(t *testing.T) {
	requireRoot(t)
	dir, mp, store := mountDirs(t)
	link := filepath.Join(dir, "store-link")
	if err := os.Mkdir(store, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(store, link); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, mp, "--store", link, "--capacity", "64MiB")
	if err := os.Mkdir(filepath.Join(mp, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(mp, "sub", "obj.data")
	want := objectBytes(p, 3*4096+5)
	putFile(t, p, want)
	waitReleased(t, d.mp)
	real, err := filepath.EvalSymlinks(store)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gpudirect.Open(p)
	if err != nil {
		t.Fatalf("gpudirect.Open through a store named by a symlink: %v", err)
	}
	if stored := filepath.Join(real, "data", "sub", "obj.data"); f.Backing() != stored {
		t.Errorf("stored file named %s, want %s", f.Backing(), stored)
	}
	got := make([]byte, len(want))
	if _, err := newReader(t, gpudirect.Options{Chunk: 4096, Depth: 2}).ReadAt(f, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("direct read: %v, equal %v", err, bytes.Equal(got, want))
	}
	f.Close()
}

// directRead opens path over the direct path and streams it whole.
func directRead(t *testing.T, r *gpudirect.Reader, path string) []byte {
	t.Helper()
	f, err := gpudirect.Open(path)
	if err != nil {
		t.Fatalf("gpudirect.Open(%s): %v", path, err)
	}
	defer f.Close()
	var got []byte
	if _, err := r.Stream(f, func(off int64, b []byte) error {
		got = append(got, b...)
		return nil
	}); err != nil {
		t.Fatalf("Stream %s: %v", path, err)
	}
	return got
}

func newReader(t *testing.T, opt gpudirect.Options) *gpudirect.Reader {
	t.Helper()
	r, err := gpudirect.NewReader(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

var directSizes = []int{0, 1, 4095, 4096, 4097, 12345, 3<<20 + 5, 100 << 20}

// Objects of odd sizes come back byte for byte over the direct path, in
// process and through `kvfs cat --direct --verify`; the stored file is
// read with O_DIRECT, and the object is pinned exactly while it is open.
func TestGPUDirectOddSizes(t *testing.T) {
	d := mountCache(t, "--capacity", "512MiB")
	r := newReader(t, gpudirect.Options{Chunk: 64 << 10, Depth: 3})
	var paths []string
	for _, size := range directSizes {
		p := filepath.Join(d.mp, fmt.Sprintf("obj-%d.data", size))
		want := objectBytes(p, size)
		putFile(t, p, want)
		if got := directRead(t, r, p); !bytes.Equal(got, want) {
			t.Fatalf("size %d: %d bytes back over the direct path, equal %v", size, len(got), bytes.Equal(got, want))
		}
		paths = append(paths, p)
	}
	f, err := gpudirect.Open(paths[2])
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := f.Direct(); !ok {
		t.Fatalf("the store (on %s) was not read with O_DIRECT: %s", d.store, why)
	}
	if !strings.HasPrefix(f.Backing(), filepath.Join(d.store, "data")+"/") {
		t.Fatalf("backing file %s is not in the store %s", f.Backing(), d.store)
	}
	// An object read just before may stay pinned a moment: its release
	// asks whether a file the kernel opened for it is still open (a
	// mapping's), and on a loaded machine the kernel closes its own late.
	if !waitFor(func() bool { return stats(t, d.mp).PinnedObjects == 1 }) {
		t.Fatalf("%d objects pinned while one is open over the direct path", stats(t, d.mp).PinnedObjects)
	}
	f.Close()
	res := runKvfsTimeout(t, 2*time.Minute, append([]string{"cat", "--direct", "--verify", "--chunk", "1MiB", "--depth", "3"}, paths...)...)
	if res.code != 0 || strings.Count(res.stdout, "matches a plain read") != len(paths) {
		t.Fatalf("kvfs cat --direct --verify: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	for i, size := range directSizes {
		if !strings.Contains(res.stdout, fmt.Sprintf("%s: %d bytes in", paths[i], size)) {
			t.Fatalf("kvfs cat did not report %d bytes for %s:\n%s", size, paths[i], res.stdout)
		}
	}
	assertQuietEqual(t, d)
}

// Unaligned reads, and reads running past the end, return exactly the
// object's bytes, short only at its end.
func TestGPUDirectUnalignedAndShortReads(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB")
	size := 3*65536 + 777
	p := filepath.Join(d.mp, "obj.data")
	want := objectBytes(p, size)
	putFile(t, p, want)
	f, err := gpudirect.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := newReader(t, gpudirect.Options{Chunk: 65536, Depth: 2})
	for _, c := range []struct{ off, n int }{{1, 1}, {4095, 4098}, {65535, 65538}, {size - 1, 1}, {size - 700, 5000}, {7, size}, {0, size + 1}} {
		buf := make([]byte, c.n)
		n, err := r.ReadAt(f, buf, int64(c.off))
		wantN := min(c.n, size-c.off)
		if n != wantN || !bytes.Equal(buf[:n], want[c.off:c.off+n]) || (n < c.n) != errors.Is(err, io.EOF) {
			t.Fatalf("ReadAt(%d at %d) = %d, %v; want %d bytes", c.n, c.off, n, err, wantN)
		}
	}
	if n, err := r.ReadAt(f, make([]byte, 8), int64(size)); n != 0 || err != io.EOF {
		t.Fatalf("ReadAt at the end: %d, %v", n, err)
	}
}

// A direct read held up between two chunks keeps its object pinned while
// a flood of stores evicts everything else, and returns it byte for byte.
// The object is the first one opened, so without the pin it would be the
// flood's first victim.
func TestGPUDirectPinnedDuringFlood(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB", "--grace", "0s")
	const objSize = 8 << 20
	target := filepath.Join(d.mp, "target.data")
	want := objectBytes(target, objSize)
	putFile(t, target, want)
	var others []string
	for i := 0; i < 4; i++ {
		p := filepath.Join(d.mp, fmt.Sprintf("old-%d.data", i))
		putFile(t, p, objectBytes(p, objSize))
		others = append(others, p)
	}
	r := newReader(t, gpudirect.Options{Chunk: 64 << 10, Depth: 2})
	f, err := gpudirect.Open(target)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var backingBefore unix.Stat_t
	if err := unix.Fstat(f.Fd(), &backingBefore); err != nil {
		t.Fatal(err)
	}
	paused, resume := make(chan struct{}), make(chan struct{})
	result := make(chan error, 1)
	var got []byte
	go func() {
		_, err := r.Stream(f, func(off int64, b []byte) error {
			got = append(got, b...)
			if off == 0 {
				close(paused)
				<-resume // the read stops here, between its first chunks and the rest
			}
			return nil
		})
		result <- err
	}()
	<-paused
	evicted0 := stats(t, d.mp).Evictions
	for i := 0; i < 20; i++ { // 160 MiB through a 64 MiB cache
		p := filepath.Join(d.mp, fmt.Sprintf("flood-%d.data", i))
		putFile(t, p, objectBytes(p, objSize))
	}
	// The flood's last objects may stay pinned a moment (see
	// TestGPUDirectOddSizes).
	var st kvfsStats
	waitFor(func() bool { st = stats(t, d.mp); return st.PinnedObjects == 1 })
	if st.Evictions-evicted0 < 12 || st.PinnedObjects != 1 {
		t.Fatalf("the flood evicted %d objects with %d pinned; want at least 12 evictions and our pin", st.Evictions-evicted0, st.PinnedObjects)
	}
	for _, p := range others {
		rel, _ := filepath.Rel(d.mp, p)
		if _, err := os.Stat(filepath.Join(d.store, "data", rel)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s survived the flood (%v): the flood did not evict everything else", p, err)
		}
	}
	var backingNow unix.Stat_t
	if err := unix.Stat(f.Backing(), &backingNow); err != nil || backingNow.Ino != backingBefore.Ino {
		t.Fatalf("the pinned object's stored file %s is gone or replaced mid-read: %v", f.Backing(), err)
	}
	close(resume)
	if err := <-result; err != nil || !bytes.Equal(got, want) {
		t.Fatalf("direct read across the flood: %d bytes, equal %v, err %v", len(got), bytes.Equal(got, want), err)
	}
	f.Close()
	assertQuietEqual(t, d)
}

// A missing path, a file on another file system and a directory each get
// a clear error, from the package and from the command (one line, exit 2).
func TestGPUDirectBadPaths(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	if _, err := gpudirect.Open(filepath.Join(d.mp, "absent.data")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open of a missing object: %v", err)
	}
	plain := filepath.Join(t.TempDir(), "plain.data")
	putFile(t, plain, []byte("not on kvfs"))
	if _, err := gpudirect.Open(plain); !errors.Is(err, gpudirect.ErrNotKVFS) || !strings.Contains(err.Error(), plain) {
		t.Fatalf("Open of a file outside kvfs: %v", err)
	}
	if _, err := gpudirect.Open(d.mp); !errors.Is(err, gpudirect.ErrNotKVFS) {
		t.Fatalf("Open of the mount's root directory: %v", err)
	}
	if _, err := gpudirect.OpenFile(filepath.Join(d.mp, "x"), os.O_RDWR|os.O_CREATE, 0o644); !errors.Is(err, gpudirect.ErrMode) {
		t.Fatalf("OpenFile for reading and writing: %v", err)
	}
	for _, c := range []struct{ path, says string }{
		{filepath.Join(d.mp, "absent.data"), "no such file"},
		{plain, "not a file on a kvfs mount"},
		{d.mp, "is a directory, not a regular file"},
	} {
		res := runKvfs(t, "cat", "--direct", c.path)
		if res.code != 2 || strings.Count(res.stderr, "\n") != 1 || !strings.Contains(res.stderr, c.says) {
			t.Fatalf("kvfs cat --direct %s: exit %d, stderr %q; want exit 2 and one line saying %q", c.path, res.code, res.stderr, c.says)
		}
	}
	for _, args := range [][]string{{"cat", filepath.Join(d.mp, "x")}, {"cat", "--direct"}, {"cat", "--direct", "--chunk", "5000", d.mp}, {"cat", "--direct", "--chunk", "0", d.mp},
		{"cat", "--direct", "--depth", "0", d.mp}, {"cat", "--direct", "--gpu", "-2", d.mp}, {"cat", "--direct", "--bogus", d.mp}} {
		if res := runKvfs(t, args...); res.code != 2 || strings.Count(res.stderr, "\n") != 1 {
			t.Fatalf("kvfs %v: exit %d, stderr %q; want exit 2 and one line", args, res.code, res.stderr)
		}
	}
}

// mountFS mounts a fresh file system of type fstype (tmpfs, ramfs) at a
// new directory, unmounted at cleanup.
func mountFS(t *testing.T, fstype string) string {
	t.Helper()
	requireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("none", dir, fstype, 0, ""); err != nil {
		t.Fatalf("mounting %s: %v", fstype, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// A store on tmpfs (O_DIRECT refused before Linux 6.6, taken since) and
// one on ramfs (O_DIRECT always refused) serve the direct path byte for
// byte; where O_DIRECT is refused the object is read through the store's
// page cache and the command says so.
func TestGPUDirectStoreRefusesODirect(t *testing.T) {
	for _, fstype := range []string{"tmpfs", "ramfs"} {
		t.Run(fstype, func(t *testing.T) {
			store := filepath.Join(mountFS(t, fstype), "store")
			mp := filepath.Join(t.TempDir(), "mnt")
			os.Mkdir(mp, 0o755)
			d := startDaemon(t, mp, "--store", store, "--capacity", "64MiB")
			r := newReader(t, gpudirect.Options{Chunk: 8192, Depth: 3})
			var paths []string
			for _, size := range []int{0, 1, 4097, 1<<20 + 3} {
				p := filepath.Join(d.mp, fmt.Sprintf("obj-%d.data", size))
				want := objectBytes(p, size)
				putFile(t, p, want)
				if got := directRead(t, r, p); !bytes.Equal(got, want) {
					t.Fatalf("size %d on a %s store: wrong bytes", size, fstype)
				}
				paths = append(paths, p)
			}
			f, err := gpudirect.Open(paths[2])
			if err != nil {
				t.Fatal(err)
			}
			direct, why := f.Direct()
			f.Close()
			if fstype == "ramfs" && (direct || !strings.Contains(why, "refuses O_DIRECT")) {
				t.Fatalf("ramfs store: direct %v, reason %q", direct, why)
			}
			t.Logf("%s store: O_DIRECT %v %s", fstype, direct, why)
			res := runKvfs(t, append([]string{"cat", "--direct", "--verify"}, paths...)...)
			if res.code != 0 || strings.Count(res.stdout, "matches a plain read") != len(paths) ||
				(!direct && !strings.Contains(res.stdout, "refuses O_DIRECT")) {
				t.Fatalf("kvfs cat on a %s store: exit %d\n%s%s", fstype, res.code, res.stdout, res.stderr)
			}
			assertQuietEqual(t, d)
		})
	}
}

// TestGPUDirectNameRemovedWhilePinned: an object whose last name goes
// (an rm, a rename over it) between the loader's pin and its open of the
// stored file is read whole through the pin: the stored file has no name
// left (kvfs names none, or the name it gave is gone). The loader got a
// miss or an error for an object it held (an outside tester: 13-65 of
// about 3,000 direct loads racing a connector's deletes). The pin is
// made here, deterministically, by opening a held descriptor's
// /proc/self/fd link after the unlink.
func TestGPUDirectNameRemovedWhilePinned(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB")
	r := newReader(t, gpudirect.Options{Chunk: 64 << 10, Depth: 3})
	for _, how := range []string{"rm", "rename-over"} {
		p := filepath.Join(d.mp, how+".data")
		want := objectBytes(p, 3*MiB+123)
		putFile(t, p, want)
		held, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if how == "rm" {
			err = os.Remove(p)
		} else {
			putFile(t, p+".new", objectBytes("new", MiB))
			err = os.Rename(p+".new", p)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := directRead(t, r, fmt.Sprintf("/proc/self/fd/%d", held.Fd())); !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes back of the pinned object's %d, equal %v", how, len(got), len(want), bytes.Equal(got, want))
		}
		held.Close()
	}
	waitReleased(t, d.mp)
	assertQuietEqual(t, d)
}
