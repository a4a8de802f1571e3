package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/gpudirect"
	"golang.org/x/sys/unix"
)

func newWriter(t *testing.T, opt gpudirect.Options) *gpudirect.Writer {
	t.Helper()
	w, err := gpudirect.NewWriter(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// directWrite creates path over the direct path, writes data and closes
// it, returning the close's error (where kvfs admits or refuses it).
func directWrite(t *testing.T, w *gpudirect.Writer, path string, data []byte) error {
	t.Helper()
	f, err := gpudirect.Create(path)
	if err != nil {
		t.Fatalf("gpudirect.Create(%s): %v", path, err)
	}
	if ok, why := f.Direct(); !ok {
		f.Close()
		t.Fatalf("%s: the stored file was not opened with O_DIRECT: %s", path, why)
	}
	if n, err := w.Write(f, data); err != nil || n != int64(len(data)) {
		f.Close()
		t.Fatalf("writing %s: %d of %d bytes, %v", path, n, len(data), err)
	}
	return f.Close()
}

// readBackPlain requires path, read plainly through the mount and
// stat'ed there, to be exactly want.
func readBackPlain(t *testing.T, path string, want []byte) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil || st.Size != int64(len(want)) {
		t.Fatalf("stat %s through the mount: size %d, %v; want %d", path, st.Size, err, len(want))
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("reading %s back through the mount: %d bytes, equal %v, %v", path, len(got), bytes.Equal(got, want), err)
	}
}

// Objects of odd sizes written over the direct path read back byte for
// byte through the mount (and over the direct path), with the size the
// mount reports right; each is charged exactly its size rounded up to a
// block once closed, with nothing left reserved or pinned; and du == df
// == used_bytes == the store's bytes.
func TestGPUDirectWriteOddSizes(t *testing.T) {
	d := mountCache(t, "--capacity", "512MiB")
	w := newWriter(t, gpudirect.Options{Chunk: 64 << 10, Depth: 3})
	r := newReader(t, gpudirect.Options{Chunk: 64 << 10, Depth: 3})
	var charged int64
	for _, size := range directSizes {
		p := filepath.Join(d.mp, fmt.Sprintf("obj-%d.data", size))
		want := objectBytes(p, size)
		if err := directWrite(t, w, p, want); err != nil {
			t.Fatalf("closing %s (%d bytes): %v", p, size, err)
		}
		charged += ceil4096(int64(size))
		st := stats(t, d.mp)
		// The close (FLUSH) settles the charge before it returns; the
		// pin goes with RELEASE, after it (assertQuietEqual waits).
		if st.UsedBytes != charged || st.ReservedBytes != 0 || st.UnadmittedBytes != 0 {
			t.Fatalf("after closing %d bytes: used %d (want %d), reserved %d, unadmitted %d",
				size, st.UsedBytes, charged, st.ReservedBytes, st.UnadmittedBytes)
		}
		readBackPlain(t, p, want)
		if got := directRead(t, r, p); !bytes.Equal(got, want) {
			t.Fatalf("size %d: %d bytes back over the direct read path", size, len(got))
		}
	}
	if st := assertQuietEqual(t, d); st.Stores != int64(len(directSizes)) || st.Objects != int64(len(directSizes)) {
		t.Fatalf("%d stores, %d objects; want %d of each", st.Stores, st.Objects, len(directSizes))
	}
}

// `kvfs put --direct --verify` writes an object over the direct path and
// checks it read back through the mount; bad input is one line, exit 2.
func TestGPUDirectPutCommand(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB")
	src := filepath.Join(t.TempDir(), "src")
	for _, size := range []int{0, 4097, 5<<20 + 3} {
		want := objectBytes(src, size)
		if err := os.WriteFile(src, want, 0o644); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(d.mp, fmt.Sprintf("put-%d.data", size))
		res := runKvfs(t, "put", "--direct", "--verify", "--chunk", "256KiB", "--depth", "2", src, dst)
		if res.code != 0 || !strings.Contains(res.stdout, fmt.Sprintf("%s: %d bytes in", dst, size)) ||
			!strings.Contains(res.stdout, "matches a read back through the mount") || !strings.Contains(res.stdout, "O_DIRECT") {
			t.Fatalf("kvfs put --direct (%d bytes): exit %d\nstdout: %s\nstderr: %s", size, res.code, res.stdout, res.stderr)
		}
		readBackPlain(t, dst, want)
	}
	plain := filepath.Join(t.TempDir(), "plain")
	// Larger than the cache, sparse: refused before a byte is read (was:
	// read whole into memory; /dev/zero grew past 1.5 GB, never ending).
	huge := filepath.Join(t.TempDir(), "huge")
	if err := os.WriteFile(huge, nil, 0o644); err != nil || os.Truncate(huge, 100<<20) != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"put", src, filepath.Join(d.mp, "x")}, "--direct is required"},
		{[]string{"put", "--direct", src}, "want SRC and DST"},
		{[]string{"put", "--direct", filepath.Join(d.mp, "absent"), filepath.Join(d.mp, "x")}, "no such file"},
		{[]string{"put", "--direct", src, plain}, "not a file on a kvfs mount"},
		{[]string{"put", "--direct", src, filepath.Join(d.mp, "nodir", "x")}, "no such file"},
		{[]string{"put", "--direct", "--chunk", "5000", src, filepath.Join(d.mp, "x")}, "multiple of 4096"},
		{[]string{"put", "--direct", "--chunk", "0", src, filepath.Join(d.mp, "x")}, "a chunk from 4KiB to 1GiB"}, // was: the default
		{[]string{"put", "--direct", "--depth", "0", src, filepath.Join(d.mp, "x")}, "--depth 0: want a depth"},   // was: "--gpu -1 --chunk 4194304 --depth 0"
		{[]string{"put", "--direct", filepath.Join(d.mp, "put-4097.data"), filepath.Join(d.mp, "put-4097.data")}, "are the same file"},
		{[]string{"put", "--direct", "--bogus", src, filepath.Join(d.mp, "x")}, "bogus"},
		{[]string{"put", "--direct", "/dev/zero", filepath.Join(d.mp, "x")}, "is a device"},
		{[]string{"put", "--direct", huge, filepath.Join(d.mp, "x")}, "more than the cache's capacity"},
	} {
		res := runKvfs(t, c.args...)
		if res.code != 2 || strings.Count(res.stderr, "\n") != 1 || !strings.Contains(res.stderr, c.says) {
			t.Fatalf("kvfs %v: exit %d, stderr %q; want exit 2 and one line saying %q", c.args, res.code, res.stderr, c.says)
		}
	}
	if _, err := os.Stat(plain); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("kvfs put to a path outside kvfs created it: %v", err)
	}
	readBackPlain(t, filepath.Join(d.mp, "put-4097.data"), objectBytes(src, 4097))
	if res := runKvfs(t, "put", "--direct", src, plain); !strings.Contains(res.stderr, plain+": ") || strings.Contains(res.stderr, ".kvfs-put.") {
		t.Errorf("kvfs put to a path outside kvfs: %q; want it named as given, not by the temporary name", res.stderr)
	}
	// A relative DST outside kvfs names its directory as a place, not
	// as "." (an outside tester's m/../f).
	cwd, _ := os.Getwd()
	rel := "kvfs-put-relative-refused"
	if res := runKvfs(t, "put", "--direct", src, rel); res.code != 2 || !strings.Contains(res.stderr, rel+": "+cwd+": not a file on a kvfs mount") {
		t.Errorf("kvfs put to a relative path outside kvfs: exit %d, %q; want its directory named %s", res.code, res.stderr, cwd)
	}
	if _, err := os.Stat(rel); !errors.Is(err, os.ErrNotExist) {
		os.Remove(rel)
		t.Fatalf("kvfs put to a relative path outside kvfs created it: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d.mp, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused kvfs put left an object: %v", err)
	}
	assertQuietEqual(t, d)
}

// A direct write into a full cache is admitted like any writer's: the
// coldest object is evicted to make room, and only it.
func TestGPUDirectWriteEvictsColdest(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB", "--grace", "0s")
	var old []string
	for i := 0; i < 3; i++ {
		p := filepath.Join(d.mp, fmt.Sprintf("old-%d.data", i))
		putFile(t, p, objectBytes(p, 16<<20))
		waitReleased(t, d.mp) // its place in the LRU order is taken at its RELEASE
		old = append(old, p)
	}
	p := filepath.Join(d.mp, "new.data")
	want := objectBytes(p, 24<<20+5)
	if err := directWrite(t, newWriter(t, gpudirect.Options{}), p, want); err != nil {
		t.Fatalf("a direct write that fits once the coldest is evicted: %v", err)
	}
	readBackPlain(t, p, want)
	if _, err := os.Stat(old[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the coldest object %s is still there (%v)", old[0], err)
	}
	if _, err := os.Stat(filepath.Join(d.store, "data", "old-0.data")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the coldest object's stored file is still there (%v)", err)
	}
	for _, q := range old[1:] {
		readBackPlain(t, q, objectBytes(q, 16<<20))
	}
	if st := assertQuietEqual(t, d); st.Evictions != 1 || st.UsedBytes != 2*(16<<20)+ceil4096(int64(len(want))) {
		t.Fatalf("%d evictions, %d bytes used; want 1 eviction and the two warmer objects plus the new one", st.Evictions, st.UsedBytes)
	}
}

// A direct write of an object larger than a writer's budget (a quarter
// of the capacity, twice its reservation) is admitted whole before its
// bytes land: its preallocation goes through the mount, and the cold
// object it needs the room of is evicted first. Allocated in the stored
// file behind the daemon, it was growth past the budget, admitted only
// at the close, the store over the capacity by up to the object
// meanwhile (an outside tester: 889 MB over with a 1 GiB put into 1200
// MiB).
func TestGPUDirectWriteAdmittedAhead(t *testing.T) {
	d := mountCache(t, "--capacity", "48MiB", "--grace", "0s")
	cold := filepath.Join(d.mp, "cold.data")
	putFile(t, cold, objectBytes(cold, 32<<20))
	waitReleased(t, d.mp)
	p := filepath.Join(d.mp, "new.data")
	want := objectBytes(p, 32<<20+5)
	if err := directWrite(t, newWriter(t, gpudirect.Options{}), p, want); err != nil {
		t.Fatalf("a direct write that fits once the cold object is evicted: %v", err)
	}
	readBackPlain(t, p, want)
	if _, err := os.Stat(cold); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the cold object is still there (%v)", err)
	}
	if st := assertQuietEqual(t, d); st.OvershootMaxBytes != 0 || st.Evictions != 1 {
		t.Fatalf("overshoot_max_bytes %d, %d evictions; want the cold object evicted before the new one's bytes, never over the capacity",
			st.OvershootMaxBytes, st.Evictions)
	}
}

// A direct write that can never fit fails at close with ENOSPC, and kvfs
// removes it: no name, no stored file, no charge.
func TestGPUDirectWriteNeverFits(t *testing.T) {
	d := mountCache(t, "--capacity", "32MiB", "--grace", "0s")
	p := filepath.Join(d.mp, "huge.data")
	err := directWrite(t, newWriter(t, gpudirect.Options{}), p, objectBytes(p, 40<<20))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("closing a 40 MiB direct write into a 32 MiB cache: %v; want ENOSPC", err)
	}
	// kvfs tells the kernel to forget the name from a goroutine of its
	// own: its cached entry may answer for a moment.
	waitFor(func() bool { _, err := os.Stat(p); return errors.Is(err, os.ErrNotExist) })
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused object is still served: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(d.store, "data")); len(ents) != 0 {
		t.Fatalf("the refused object left %d entries in the store, first %s", len(ents), ents[0].Name())
	}
	if st := assertQuietEqual(t, d); st.UsedBytes != 0 || st.AdmissionFailures != 1 || st.Objects != 0 {
		t.Fatalf("after the refusal: used %d, admission failures %d, objects %d", st.UsedBytes, st.AdmissionFailures, st.Objects)
	}
}

// A direct write cut short by kill -9 of the daemon is not served after a
// restart, and leaves nothing in the store; an object completed before
// the kill is served byte for byte.
func TestGPUDirectWriteKill9(t *testing.T) {
	_, mp, store := mountDirs(t)
	flags := []string{"--store", store, "--capacity", "128MiB"}
	d := startDaemon(t, mp, flags...)
	w := newWriter(t, gpudirect.Options{Chunk: 1 << 20, Depth: 2})
	done := filepath.Join(mp, "done.data")
	doneBytes := objectBytes(done, 8<<20+1)
	if err := directWrite(t, w, done, doneBytes); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(mp, "cut.data")
	f, err := gpudirect.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	want := objectBytes(p, 32<<20)
	killed := make(chan struct{})
	_, werr := w.Fill(f, int64(len(want)), func(off int64, b []byte) error {
		if off == 16<<20 { // half written, and written with O_DIRECT
			if info, err := os.Stat(f.Backing()); err != nil || info.Size() < 8<<20 {
				t.Errorf("before the kill the stored file holds %v bytes (%v); want the first chunks", info.Size(), err)
			}
			d.kill9()
			close(killed)
			return errors.New("the daemon is dead")
		}
		copy(b, want[off:])
		return nil
	})
	<-killed
	f.Close() // the mount is dead: its error says so
	if werr == nil {
		t.Fatal("the write went on after the kill")
	}
	d = startDaemon(t, mp, flags...)
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the object cut short by the kill is served after the restart: %v", err)
	}
	if _, err := os.Stat(filepath.Join(store, "data", "cut.data")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the object cut short by the kill is still in the store: %v", err)
	}
	readBackPlain(t, done, doneBytes)
	if st := assertQuietEqual(t, d); st.Objects != 1 || st.UsedBytes != ceil4096(int64(len(doneBytes))) {
		t.Fatalf("after the restart: %d objects, %d bytes used; want only the completed one", st.Objects, st.UsedBytes)
	}
}

// A mount that passes every written byte through its daemon
// (--strict-capacity) refuses direct writes: gpudirect says so before
// creating anything, the daemon names no stored file to a writer (so a
// client in any language that follows the protocol is refused too), and
// `kvfs put --direct` fails with that message. Reads still work.
func TestGPUDirectWriteStrictRefuses(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB", "--strict-capacity")
	p := filepath.Join(d.mp, "obj.data")
	if _, err := gpudirect.Create(p); !errors.Is(err, gpudirect.ErrStrictCapacity) || !strings.Contains(err.Error(), p) {
		t.Fatalf("gpudirect.Create on a strict mount: %v; want ErrStrictCapacity naming the path", err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused Create left an object: %v", err)
	}
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := runKvfs(t, "put", "--direct", src, p)
	if res.code != 1 || strings.Count(res.stderr, "\n") != 1 || !strings.Contains(res.stderr, "--strict-capacity") {
		t.Fatalf("kvfs put --direct on a strict mount: exit %d, stderr %q", res.code, res.stderr)
	}
	wr, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	if _, err := unix.Fgetxattr(int(wr.Fd()), gpudirect.BackingXattr, buf); err != unix.EPERM {
		t.Fatalf("a writer's %s on a strict mount: %v; want EPERM", gpudirect.BackingXattr, err)
	}
	if _, err := gpudirect.Open(p); !errors.Is(err, gpudirect.ErrStrictCapacity) || !strings.Contains(err.Error(), "open for writing") {
		t.Fatalf("a direct read of an object being written on a strict mount: %v", err)
	}
	want := objectBytes(p, 70000)
	if _, err := wr.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := wr.Close(); err != nil {
		t.Fatal(err)
	}
	if got := directRead(t, newReader(t, gpudirect.Options{}), p); !bytes.Equal(got, want) {
		t.Fatalf("a direct read on a strict mount: %d bytes", len(got))
	}
	assertQuietEqual(t, d)
}

// A user writes over the direct path exactly what it can write through
// the mount: each target below is written by uid 65534 both plainly (cp)
// and with `kvfs put --direct`, and the two must agree, with at least
// one of each answer. An object it creates is its own, on the mount and
// in the store.
func TestGPUDirectWritePermissions(t *testing.T) {
	d, bin := nobodyMount(t)
	src := filepath.Join(filepath.Dir(bin), "src")
	want := objectBytes(src, 3*4096+11)
	if err := os.WriteFile(src, want, 0o644); err != nil {
		t.Fatal(err)
	}
	for dir, mode := range map[string]os.FileMode{"shared": 0o777, "private": 0o700, "closed": 0o755} {
		os.Mkdir(filepath.Join(d.mp, dir), 0)
		os.Chmod(filepath.Join(d.mp, dir), mode)
	}
	for name, o := range map[string]struct {
		mode os.FileMode
		uid  int
	}{"public.data": {0o644, 0}, "mine.data": {0o600, nobody}} {
		p := filepath.Join(d.mp, name)
		putFile(t, p, []byte("old"))
		os.Chmod(p, o.mode)
		os.Chown(p, o.uid, o.uid)
	}
	for _, c := range []struct {
		name string
		can  bool
	}{
		{"shared/new.data", true},       // a new object in a 0777 directory
		{"mine.data", true},             // its own 0600 object
		{"public.data", false},          // root's 0644 object
		{"private/new.data", false},     // in root's 0700 directory
		{"closed/new.data", false},      // in root's 0755 directory
		{"shared/../new.data", false},   // the root directory is root's 0755
		{"shared/other/new.data", true}, // made below, by the user
	} {
		p := filepath.Join(d.mp, c.name)
		if strings.HasPrefix(c.name, "shared/other/") {
			if r := runAs(t, nobody, nil, "mkdir", filepath.Dir(p)); r.code != 0 {
				t.Fatalf("mkdir as uid %d: %s", nobody, r.stderr)
			}
		}
		plain := runAs(t, nobody, nil, "cp", src, p)
		direct := runAs(t, nobody, nil, bin, "put", "--direct", "--verify", "--chunk", "8KiB", src, p)
		if (plain.code == 0) != c.can || (direct.code == 0) != c.can {
			t.Fatalf("%s as uid %d: cp exit %d (%s), kvfs put --direct exit %d (%s%s); want both to succeed: %v",
				c.name, nobody, plain.code, plain.stderr, direct.code, direct.stdout, direct.stderr, c.can)
		}
		if !c.can {
			if !strings.Contains(direct.stderr, "permission denied") {
				t.Fatalf("%s refused without saying why: %s", c.name, direct.stderr)
			}
			continue
		}
		readBackPlain(t, p, want)
		var st unix.Stat_t
		rel, _ := filepath.Rel(d.mp, p)
		if err := unix.Stat(filepath.Join(d.store, "data", rel), &st); err != nil || st.Uid != nobody {
			t.Fatalf("%s's stored file: uid %d, %v; want %d", c.name, st.Uid, err, nobody)
		}
	}
	putWithoutRead(t, d, bin, src, want)
	assertQuietEqual(t, d)
}

// putWithoutRead: the direct path reads an object's user.kvfs.backing,
// which the kernel allows only a user who may read the object. An object
// the user may write but not read is refused untouched (an outside
// tester: the open's O_TRUNC emptied it, then the put failed, 4 of 4),
// while a new object made under a umask that takes the owner's read bit
// is stored, with SRC's mode less the umask as cp gives it (the put
// failed and left its temporary file).
func putWithoutRead(t *testing.T, d *daemon, bin, src string, want []byte) {
	t.Helper()
	wo := filepath.Join(d.mp, "shared", "write-only.data")
	putFile(t, wo, []byte("old bytes"))
	os.Chmod(wo, 0o622)
	if r := runAs(t, nobody, nil, bin, "put", "--direct", src, wo); r.code != 1 || !strings.Contains(r.stderr, "needs permission to read it") {
		t.Fatalf("kvfs put --direct over an object uid %d may write but not read: exit %d, %q; want exit 1 saying so", nobody, r.code, r.stderr)
	}
	if got, err := os.ReadFile(wo); err != nil || string(got) != "old bytes" {
		t.Fatalf("the refused put left the object holding %q (%v); want it untouched", got, err)
	}
	// One they may not write either: cp(1) is no way round (an outside
	// tester: the message offered it for a 0600 object of another user).
	os.Chmod(wo, 0o600)
	if r := runAs(t, nobody, nil, bin, "put", "--direct", src, wo); r.code != 1 || !strings.Contains(r.stderr, "nor may you write it through the mount") {
		t.Fatalf("kvfs put --direct over an object uid %d may neither read nor write: exit %d, %q; want exit 1 saying cp cannot either", nobody, r.code, r.stderr)
	}
	exe := filepath.Join(filepath.Dir(src), "src-exe")
	if err := os.WriteFile(exe, want, 0o755); err != nil {
		t.Fatal(err)
	}
	// A name too long for the temporary name's additions is made in
	// place: the same modes (an outside tester: 0644 where cp gave 0755,
	// and under umask 0477 an empty object left, 9 of 9).
	long := strings.Repeat("l", 240)
	for _, c := range []struct {
		umask, src, name string
		mode             os.FileMode
	}{
		{"0477", src, "umask-0477", 0o200}, {"0022", src, "umask-0022", 0o644}, {"0000", src, "umask-0000", 0o644},
		{"0022", exe, "exe-0022", 0o755}, {"0022", exe, long + "-0022", 0o755}, {"0477", exe, long + "-0477", 0o300},
	} {
		dst := filepath.Join(d.mp, "shared", c.name)
		r := runAs(t, nobody, nil, "sh", "-c", "umask "+c.umask+" && exec \"$0\" put --direct \"$1\" \"$2\"", bin, c.src, dst)
		if r.code != 0 {
			t.Fatalf("kvfs put --direct of a new object %.20s... under umask %s: exit %d, %q", c.name, c.umask, r.code, r.stderr)
		}
		readBackPlain(t, dst, want)
		if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != c.mode {
			t.Fatalf("a new object %.20s... put under umask %s has mode %v (%v); want %v, cp's", c.name, c.umask, fi.Mode().Perm(), err, c.mode)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(d.mp, "shared"))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".kvfs-put.") {
			t.Fatalf("a put left its temporary file %s", e.Name())
		}
	}
}

// `kvfs put --direct --gpu 0` writes from device memory: with cuFile
// (stand-ins here) by cuFileWrite, with only a CUDA runtime through host
// buffers, with neither from host memory, saying why once; each object
// verifies read back through the mount.
func TestGPUDirectPutFromGPU(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB")
	src := filepath.Join(t.TempDir(), "src")
	want := objectBytes(src, 3<<20+4095)
	if err := os.WriteFile(src, want, 0o644); err != nil {
		t.Fatal(err)
	}
	none, rtOnly, both := t.TempDir(), t.TempDir(), t.TempDir()
	buildCUDAStubs(t, rtOnly, "libcudart.so.12")
	buildCUDAStubs(t, both, "libcudart.so.12", "libcufile.so.0")
	for i, c := range []struct{ libs, notice, route string }{
		{none, "no CUDA runtime", "O_DIRECT from host buffers"},
		{rtOnly, "cuFile unavailable", "cudaMemcpy from the GPU into host buffers, then O_DIRECT"},
		{both, "", "cuFile from the GPU"},
	} {
		dst := filepath.Join(d.mp, fmt.Sprintf("gpu-%d.data", i))
		res := runAs(t, -1, []string{"LD_LIBRARY_PATH=" + c.libs}, kvfsBin, "put", "--direct", "--gpu", "0", "--verify", src, dst)
		lines := strings.Count(res.stderr, "\n")
		if res.code != 0 || !strings.Contains(res.stdout, c.route) || !strings.Contains(res.stdout, "matches a read back through the mount") {
			t.Fatalf("LD_LIBRARY_PATH=%s kvfs put --gpu 0: exit %d, want the route %q\nstdout: %s\nstderr: %s", c.libs, res.code, c.route, res.stdout, res.stderr)
		}
		if (c.notice == "" && lines != 0) || (c.notice != "" && (lines != 1 || !strings.Contains(res.stderr, c.notice))) {
			t.Fatalf("libraries in %s: stderr %q; want %q said once", c.libs, res.stderr, c.notice)
		}
		readBackPlain(t, dst, want)
	}
	assertQuietEqual(t, d)
}

// `kvfs put --direct` killed midway leaves no object at DST: the direct
// path preallocates the stored file at its full size, so a put that wrote
// DST itself left, killed, an object of the right size with zeros where
// its blocks were still to come (6 kills in 6). It writes a temporary
// name beside DST and renames it once whole.
func TestGPUDirectPutKilled(t *testing.T) {
	d := mountCache(t, "--capacity", "256MiB")
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, objectBytes(src, 64<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(d.mp, "killed.data")
	put := exec.Command(kvfsBin, "put", "--direct", "--chunk", "4KiB", "--depth", "1", src, dst)
	if err := put.Start(); err != nil {
		t.Fatal(err)
	}
	writing := func() bool { // an object being written on the mount, and more than its first block
		es, _ := os.ReadDir(d.mp)
		for _, e := range es {
			if info, err := e.Info(); err == nil && info.Size() > 0 {
				return true
			}
		}
		return false
	}
	if !waitFor(writing) {
		put.Process.Kill()
		put.Wait()
		t.Fatal("kvfs put wrote nothing visible")
	}
	put.Process.Kill()
	if err := put.Wait(); err == nil {
		t.Fatal("kvfs put finished before the kill: the test needs a slower write")
	}
	waitReleased(t, d.mp)
	if info, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after kvfs put was killed, DST is an object of %d bytes (%v); want none", info.Size(), err)
	}
	es, _ := os.ReadDir(d.mp)
	if len(es) != 1 || !strings.HasPrefix(es[0].Name(), ".killed.data.kvfs-put.") {
		t.Fatalf("the mount holds %v; want only the killed put's temporary name", es)
	}
	assertQuietEqual(t, d)
	// An object that exists is rewritten in place, as cp does: its inode,
	// its other names, its owner and its mode stay (a rename made it a
	// new 0644 object of root's, and left its hard link the old bytes).
	// So is a name the temporary name's additions would make too long.
	old := filepath.Join(d.mp, "old.data")
	putFile(t, old, []byte("old"))
	if err := os.Chmod(old, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(old, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(d.mp, "other-name.data")
	if err := os.Link(old, other); err != nil {
		t.Fatal(err)
	}
	long := filepath.Join(d.mp, strings.Repeat("n", 250))
	small := filepath.Join(t.TempDir(), "small")
	want := objectBytes(small, 3*4096+7)
	if err := os.WriteFile(small, want, 0o644); err != nil {
		t.Fatal(err)
	}
	var before unix.Stat_t
	unix.Stat(old, &before)
	for _, p := range []string{old, long} {
		if res := runKvfs(t, "put", "--direct", "--verify", small, p); res.code != 0 {
			t.Fatalf("kvfs put --direct over %s: exit %d, %s", filepath.Base(p)[:min(20, len(filepath.Base(p)))], res.code, res.stderr)
		}
		readBackPlain(t, p, want)
	}
	var after unix.Stat_t
	if err := unix.Stat(old, &after); err != nil || after.Ino != before.Ino || after.Mode&0o777 != 0o600 || after.Uid != 65534 || after.Nlink != 2 {
		t.Fatalf("the rewritten object: inode %d (was %d), mode %o, uid %d, %d links, %v; want them kept", after.Ino, before.Ino, after.Mode&0o777, after.Uid, after.Nlink, err)
	}
	readBackPlain(t, other, want)
	// A directory as DST is refused before anything is written.
	for _, bad := range []string{d.mp, d.mp + "/"} {
		if res := runKvfs(t, "put", "--direct", src, bad); res.code != 2 || !strings.Contains(res.stderr, "is a directory") {
			t.Fatalf("kvfs put --direct SRC %s: exit %d, stderr %q; want exit 2, a directory", bad, res.code, res.stderr)
		}
	}
}
