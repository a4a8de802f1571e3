package tests

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/loopfs"
	"golang.org/x/sys/unix"
)

// listing describes every entry under dir, dir itself included (its
// mtime moves if anything was created and deleted in it): type, mode,
// size, mtime, and a regular file's SHA-256 or a symlink's target, so a
// test can see that a command changed nothing in it. It never opens a
// fifo or follows a link; "absent" if dir does not exist.
func listing(t *testing.T, dir string) string {
	t.Helper()
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return "absent"
	}
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		line := rel + " " + info.Mode().String() + " " + strconv.FormatInt(info.Size(), 10) + " " + info.ModTime().Format(time.RFC3339Nano)
		switch {
		case info.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			line += " sha256:" + hex.EncodeToString(sum[:])
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + target
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatalf("listing %s: %v", dir, err)
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// requireUsageError: exit status 2 and exactly one line on stderr that
// contains every one of want.
func requireUsageError(t *testing.T, res result, want ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(res.stderr, "\n"), "\n")
	if res.code != 2 || len(lines) != 1 || lines[0] == "" || !strings.HasSuffix(res.stderr, "\n") {
		t.Fatalf("exit %d, stderr %q: want exit 2 and one line", res.code, res.stderr)
	}
	t.Logf("stderr: %s", lines[0])
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Errorf("error %q does not mention %q", lines[0], w)
		}
	}
}

// makeStore leaves a real, unmounted store with one object at dir.
func makeStore(t *testing.T, store string) {
	t.Helper()
	mp := store + "-mnt"
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, mp, "--store", store, "--capacity", "16MiB")
	putFile(t, filepath.Join(mp, "obj"), objectBytes("obj", 10000))
	d.stop()
}

// TestMountBadArguments: each mistake exits 2 with one line naming it,
// mounts nothing and leaves the store (or its absence) as it was.
func TestMountBadArguments(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	makeStore(t, store)
	cases := []struct {
		name  string
		setup func(dir string) // makes what the case needs under its dir
		args  func(dir string) []string
		want  []string
	}{
		{"bad size suffix", nil, func(d string) []string { return []string{"--store", store, "--capacity", "12X", d + "/mp"} }, []string{"12X"}},
		{"negative size", nil, func(d string) []string { return []string{"--store", store, "--capacity", "-1", d + "/mp"} }, []string{"-1"}},
		{"size below a block", nil, func(d string) []string { return []string{"--store", store, "--capacity", "100", d + "/mp"} }, []string{"capacity"}},
		{"unknown flag", nil, func(d string) []string { return []string{"--store", store, "--bogus", d + "/mp"} }, []string{"bogus"}},
		{"no mount point", nil, func(d string) []string { return []string{"--store", store} }, []string{"MOUNTPOINT"}},
		{"two mount points", nil, func(d string) []string { return []string{"--store", store, d + "/mp", d + "/mp2"} }, []string{"2 arguments"}},
		{"missing mount point", nil, func(d string) []string { return []string{"--store", store, d + "/nope"} }, []string{"nope", "does not exist"}},
		{"missing mount point, default store", nil, func(d string) []string { return []string{d + "/nope"} }, []string{"nope", "does not exist"}},
		{"mount point is a file", func(d string) { os.WriteFile(d+"/file", []byte("x"), 0o644) },
			func(d string) []string { return []string{"--store", store, d + "/file"} }, []string{"file", "not a directory"}},
		{"mount point not empty", func(d string) { os.WriteFile(d+"/mp/x", []byte("x"), 0o644) },
			func(d string) []string { return []string{"--store", store, d + "/mp"} }, []string{"mp", "not empty"}},
		{"store inside mount point", nil, func(d string) []string { return []string{"--store", d + "/mp/store", d + "/mp"} }, []string{"must not contain"}},
		{"mount point inside store", func(d string) { os.MkdirAll(d+"/st/mp", 0o755) },
			func(d string) []string { return []string{"--store", d + "/st", d + "/st/mp"} }, []string{"must not contain"}},
		{"store is a file", func(d string) { os.WriteFile(d+"/storefile", []byte("x"), 0o644) },
			func(d string) []string { return []string{"--store", d + "/storefile", d + "/mp"} }, []string{"storefile", "not a directory"}},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			d := t.TempDir()
			if err := os.Mkdir(d+"/mp", 0o755); err != nil {
				t.Fatal(err)
			}
			if c.setup != nil {
				c.setup(d)
			}
			args := c.args(d)
			watched := []string{store, d}
			before := map[string]string{}
			for _, w := range watched {
				before[w] = listing(t, w)
			}
			res := runKvfsTimeout(t, 10*time.Second, append([]string{"mount"}, args...)...)
			for _, a := range args {
				if _, ok := mountAt(absPath(t, a)); ok && strings.HasPrefix(a, d) {
					unix.Unmount(a, unix.MNT_DETACH)
					t.Errorf("%s got mounted", a)
				}
			}
			requireUsageError(t, res, c.want...)
			for _, w := range watched {
				if after := listing(t, w); after != before[w] {
					t.Errorf("%s changed:\nbefore\n%s\nafter\n%s", w, before[w], after)
				}
			}
		})
	}
}

// TestMountPointIsAVolume: a mount point that is a mount itself (a
// container's volume is a bind mount) is refused with the way out:
// mount the parent as the volume (after a crash, a volume that is the
// mount point cannot reach the host; see contrib/kubernetes).
func TestMountPointIsAVolume(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	host, mp := filepath.Join(dir, "host"), filepath.Join(dir, "mp")
	for _, p := range []string{host, mp} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(host, mp, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { detachAll(mp) })
	res := runKvfsTimeout(t, 10*time.Second, "mount", "--store", filepath.Join(dir, "store"), "--capacity", "16MiB", mp)
	requireUsageError(t, res, "already a mount point", "a volume or bind mount?", "make its parent the volume")
	if n := len(mountsAt(mp)); n != 1 {
		t.Errorf("%d mounts at %s, want the bind mount alone", n, mp)
	}
}

// TestSecondDaemonRefused: a store has one owner; a second daemon on it,
// named as the first named it or through a bind mount, exits 2 at once
// saying so (and where it is served), and the first keeps serving.
func TestSecondDaemonRefused(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	putFile(t, filepath.Join(d.mp, "before"), objectBytes("before", 5000))
	waitReleased(t, d.mp) // its crash marker goes at its RELEASE, after close(2)
	mp2 := filepath.Join(filepath.Dir(d.mp), "mnt2")
	if err := os.Mkdir(mp2, 0o755); err != nil {
		t.Fatal(err)
	}
	before := listing(t, d.store)
	// The store by its name, and through a bind mount of it (which a
	// start took for a daemon starting or stopping, and refused only
	// after 30 s: an outside tester).
	stores := []string{d.store}
	if bind := filepath.Join(filepath.Dir(d.mp), "bind"); os.Geteuid() == 0 {
		if err := os.Mkdir(bind, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(d.store, bind, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind mount of the store: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(bind, unix.MNT_DETACH) })
		stores = append(stores, bind)
	} else {
		t.Log("not root: the store through a bind mount is not tried")
	}
	for _, store := range stores {
		res := runKvfsTimeout(t, 10*time.Second, "mount", "--store", store, "--capacity", "16MiB", mp2)
		if _, ok := mountAt(mp2); ok {
			unix.Unmount(mp2, unix.MNT_DETACH)
			t.Fatalf("a second daemon mounted the served store at %s, given as %s", mp2, store)
		}
		requireUsageError(t, res, "already served")
		if store == d.store && !strings.Contains(res.stderr, "at "+d.mp+": unmount it there first") {
			t.Errorf("the refusal does not say where the store is served (%s):\n%s", d.mp, res.stderr)
		}
	}
	if after := listing(t, d.store); after != before {
		t.Errorf("the refused daemon changed the store:\nbefore\n%s\nafter\n%s", before, after)
	}
	putFile(t, filepath.Join(d.mp, "after"), objectBytes("after", 7000))
	for _, k := range []string{"before", "after"} {
		data, err := os.ReadFile(filepath.Join(d.mp, k))
		if err == nil {
			err = checkObject(data, k, len(data))
		}
		if err != nil {
			t.Errorf("first daemon after the refusal: %v", err)
		}
	}
	if st := assertQuietEqual(t, d); st.Objects != 2 {
		t.Errorf("first daemon has %d objects, want 2", st.Objects)
	}
	d.stop()
}

// TestStatsNotKvfs: kvfs stats of a directory that is not a kvfs mount
// is a usage error.
func TestStatsNotKvfs(t *testing.T) {
	dir := t.TempDir()
	requireUsageError(t, runKvfs(t, "stats", "--json", dir), dir, "not")
	requireUsageError(t, runKvfs(t, "stats", filepath.Join(dir, "nope")), "nope")
	requireUsageError(t, runKvfs(t, "stats"), "MOUNTPOINT")
	requireUsageError(t, runKvfs(t, "unmount", dir), dir, "not mounted")
	requireUsageError(t, runKvfs(t, "nosuchcmd", dir), "unknown command", "nosuchcmd", "kvfs -h")
	// Near the mount helper's form (was: "unknown command", an outside
	// tester).
	requireUsageError(t, runKvfs(t, dir, dir, "-o"), "the mount helper's form", "kvfs STORE MOUNTPOINT -o OPT")
	requireUsageError(t, runKvfs(t, dir, dir, "-o", "a", "-o", "b"), "the mount helper's form")
	// Were: "... is not mounted" for a path that does not exist, the
	// current directory for "", "stat : no such file", and no hint of
	// --store (an outside tester).
	requireUsageError(t, runKvfs(t, "unmount", filepath.Join(dir, "nope")), "nope", "does not exist")
	requireUsageError(t, runKvfs(t, "unmount", ""), "an empty argument")
	requireUsageError(t, runKvfs(t, "stats", ""), "an empty argument")
	requireUsageError(t, runKvfs(t, "fsck", dir), "--store STORE")
	requireUsageError(t, runKvfs(t, "stats", "--watch", "--count", "-1", dir), "--count -1")
	requireUsageError(t, runKvfs(t, "stats", "--watch", "--interval", "0s", dir), "--interval 0s")
	requireUsageError(t, runKvfs(t, "stats", "--watch", "--json", dir), "leave out --json")
	for _, v := range []string{"version", "--version"} {
		if res := runKvfs(t, v); res.code != 0 || !strings.HasPrefix(res.stdout, "kvfs ") || !strings.Contains(res.stdout, "go1.") {
			t.Errorf("kvfs %s: exit %d, %q; want the build and Go version", v, res.code, res.stdout)
		}
	}
}

// TestMountinfoType: the mount is type fuse.kvfs with the store as its
// source.
func TestMountinfoType(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	m, ok := mountAt(d.mp)
	if !ok || m.FSType != "fuse.kvfs" || m.Source != d.store {
		t.Errorf("mountinfo for %s: %+v, want fuse.kvfs from %s", d.mp, m, d.store)
	}
	var sf unix.Statfs_t
	if err := unix.Statfs(d.mp, &sf); err != nil {
		t.Fatal(err)
	}
	if sf.Bsize != 4096 || sf.Namelen != 255 || int64(sf.Blocks)*sf.Frsize != 16*MiB {
		t.Errorf("statfs: bsize %d namelen %d blocks %d", sf.Bsize, sf.Namelen, sf.Blocks)
	}
	// df -i: the inodes used are the objects and the directories (was:
	// the objects alone).
	if err := os.MkdirAll(filepath.Join(d.mp, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"x", "a/y", "a/b/z"} {
		putFile(t, filepath.Join(d.mp, p), []byte(p))
	}
	if err := unix.Statfs(d.mp, &sf); err != nil {
		t.Fatal(err)
	}
	if used := sf.Files - sf.Ffree; used != 5 {
		t.Errorf("df -i: %d inodes used, want 5 (3 objects, 2 directories)", used)
	}
	d.stop()
}

// TestMountDefaults: kvfs mount MOUNTPOINT alone works: the store goes
// beside the mount point and the capacity comes from free space.
func TestMountDefaults(t *testing.T) {
	parent := t.TempDir()
	mp := filepath.Join(parent, "cache")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, mp)
	store := filepath.Join(parent, "cache.kvfs-store")
	if d.store != store {
		t.Fatalf("helper thinks the store is %s", d.store)
	}
	putFile(t, filepath.Join(mp, "obj"), objectBytes("obj", 12345))
	if data, err := os.ReadFile(filepath.Join(store, "data", "obj")); err != nil || checkObject(data, "obj", 12345) != nil {
		t.Errorf("object not in the default store %s: %v", store, err)
	}
	st := assertQuietEqual(t, d)
	var sf unix.Statfs_t
	if err := unix.Statfs(parent, &sf); err != nil {
		t.Fatal(err)
	}
	if disk := int64(sf.Blocks) * sf.Bsize; st.CapacityBytes <= 0 || st.CapacityBytes%4096 != 0 || st.CapacityBytes > disk {
		t.Errorf("default capacity %d (disk %d)", st.CapacityBytes, disk)
	}
	d.stop()

	// Through a symlink to the mount point, with a trailing slash too,
	// the store is the same (an outside tester's came up empty, on a
	// new store named after the link).
	link := filepath.Join(parent, "link")
	if err := os.Symlink("cache", link); err != nil {
		t.Fatal(err)
	}
	for _, via := range []string{link, link + "/"} {
		d = startDaemon(t, via)
		if data, err := os.ReadFile(filepath.Join(mp, "obj")); err != nil || checkObject(data, "obj", 12345) != nil {
			t.Errorf("mounted through %s, the object is not there: %v", via, err)
		}
		d.stop()
		if _, err := os.Lstat(filepath.Join(parent, "link.kvfs-store")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("mounted through %s, a store was made after the link: %v", via, err)
		}
	}
}

// TestSignalsUnmount: SIGTERM, SIGINT and SIGHUP (a terminal that
// closed: an outside tester's daemon died of it and left a dead mount)
// unmount cleanly and exit 0.
func TestSignalsUnmount(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		d := mountCache(t, "--capacity", "16MiB")
		putFile(t, filepath.Join(d.mp, "obj"), objectBytes("obj", 100))
		if err := d.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		select {
		case <-d.exited:
		case <-time.After(15 * time.Second):
			t.Fatalf("%v: daemon still running after 15s", sig)
		}
		if d.waitErr != nil {
			t.Errorf("%v: daemon exited with %v", sig, d.waitErr)
		}
		if m, ok := mountAt(d.mp); ok && m.ID == d.mountID {
			t.Errorf("%v: %s still mounted", sig, d.mp)
		}
	}
}

// TestStopWithFilesOpen: a stop (SIGTERM) while a client holds a file
// detaches the mount and serves the held file on, and neither a new
// mount of the store nor a second signal waits for that file to close:
// the new mount asks the stopping daemon to let go, a second signal ends
// it, and the held file fails from then on (as after a crash) while the
// store and its objects are whole. Before, the daemon held the store
// until the last such file closed: a new `kvfs mount` waited 30 s and
// failed, the mount point stayed the plain directory (an outside
// tester's finding).
//
// A passthrough handle reads its stored file with no daemon, so only
// without passthrough does the held file fail.
func TestStopWithFilesOpen(t *testing.T) {
	waitsOnTimers(t)
	for _, how := range []string{"new mount", "second signal", "new mount after a handover"} {
		t.Run(how, func(t *testing.T) {
			flags := []string{"--capacity", "16MiB"}
			if how == "second signal" {
				flags = append(flags, "--no-passthrough")
			}
			d := mountCache(t, flags...)
			if how == "new mount after a handover" {
				// The daemon that stops took the mount, and the store's
				// lock, over from another (which took the lock first: an
				// outside tester's new mount then took the store for a
				// live one's, and was refused).
				old := d
				d = startDaemon(t, old.mp, append([]string{"--store", old.store}, flags...)...)
				if !old.waitExited() || old.waitErr != nil {
					t.Fatalf("the daemon handing over did not exit cleanly:\n%s", old.out)
				}
			}
			obj := filepath.Join(d.mp, "obj")
			want := objectBytes("obj", 100000)
			held := stopHolding(t, d, obj, want)
			if m, ok := mountAt(d.mp); ok && m.ID == d.mountID {
				t.Fatal("still mounted after the stop detached it")
			}
			got := make([]byte, len(want))
			if _, err := held.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the held file after the detach: %v", err)
			}
			var d2 *daemon
			if how != "second signal" {
				d2 = startDaemon(t, d.mp, append([]string{"--store", d.store}, flags...)...)
				if !strings.Contains(d2.out.String(), "it ends it now") {
					t.Errorf("the new mount did not ask the stopping daemon to let go:\n%s", d2.out)
				}
			} else if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if !d.waitExited() || d.waitErr != nil {
				t.Fatalf("the stopping daemon did not exit cleanly (%v):\n%s", d.waitErr, d.out)
			}
			// Past the pages the kernel keeps of the first read.
			unix.Fadvise(int(held.Fd()), 0, 0, unix.FADV_DONTNEED)
			if _, err := held.ReadAt(got, 0); err == nil && how == "second signal" {
				t.Error("the held file (no passthrough) still reads after its mount was ended")
			}
			held.Close()
			if d2 == nil {
				d2 = startDaemon(t, d.mp, append([]string{"--store", d.store}, flags...)...)
			}
			if data, err := os.ReadFile(obj); err != nil || !bytes.Equal(data, want) {
				t.Fatalf("the object through the next mount: %d bytes, %v", len(data), err)
			}
			d2.stop()
		})
	}
}

// TestCapacityPastTheDisk: a capacity larger than the store's file
// system is warned of at the mount, and df of the mount shows the room
// the disk has left, not the capacity's, with Used the ledger's. As the
// disk fills, kvfs lowers the capacity to what it holds (keeping a floor
// of it free), and stores past the disk go on, evicting the coldest
// objects; kvfs stats, df and du agree. Before, df showed 957 MB free on
// a full 128 MB disk (an outside tester's finding), and later the stores
// failed on the full disk with nothing evicted (another's).
func TestCapacityPastTheDisk(t *testing.T) {
	for _, passthrough := range []bool{true, false} {
		t.Run(fmt.Sprintf("passthrough %v", passthrough), func(t *testing.T) { capacityPastTheDisk(t, passthrough) })
	}
}

func capacityPastTheDisk(t *testing.T, passthrough bool) {
	requireRoot(t)
	root := loopfs.Mount(t, loopfs.Spec{Mkfs: []string{"mkfs.ext4", "-q", "-F"}, Size: 64 << 20,
		NoMkfs: "this mkfs.ext4 cannot make the file system"})
	mp := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--store", filepath.Join(root, "store"), "--capacity", "1GiB", "--grace", "0s"}
	if !passthrough {
		flags = append(flags, "--no-passthrough")
	}
	d := startDaemon(t, mp, flags...)
	if !d.printed("the capacity is more than the store's file system can hold") {
		t.Errorf("no warning of a capacity past the disk:\n%s", d.out)
	}
	// Said beside the serving line too, which a --background start
	// shows where the daemon's log is discarded (an outside tester).
	if !d.printed("kvfs: warning: the capacity is more than the store's file system can hold (") {
		t.Errorf("no warning of a capacity past the disk beside the serving line:\n%s", d.out)
	}
	// The serving line says the capacity in force, as stats and df do,
	// not the 1 GiB asked for (an outside tester).
	if m := regexp.MustCompile(`kvfs: serving .*, capacity (\d+) bytes`).FindStringSubmatch(d.outSoFar()); m == nil {
		t.Errorf("no serving line:\n%s", d.outSoFar())
	} else if c, _ := strconv.ParseInt(m[1], 10, 64); c >= 64*MiB {
		t.Errorf("the serving line says capacity %d on a 64 MiB disk; want the capacity in force", c)
	}
	var disk, sf unix.Statfs_t
	for i := range 100 { // past the disk
		if err := os.WriteFile(filepath.Join(mp, fmt.Sprintf("o%03d", i)), make([]byte, MiB), 0o644); err != nil {
			t.Fatalf("store %d of 1 MiB onto a 64 MiB disk: %v", i, err)
		}
	}
	// The mount first: an eviction in between only frees the disk.
	if err := unix.Statfs(mp, &sf); err != nil {
		t.Fatal(err)
	}
	if err := unix.Statfs(root, &disk); err != nil {
		t.Fatal(err)
	}
	if avail := int64(sf.Bavail) * sf.Frsize; avail > int64(disk.Bavail)*disk.Bsize+4096 {
		t.Errorf("df of the mount shows %d bytes available; the store's disk has %d", avail, int64(disk.Bavail)*disk.Bsize)
	}
	st := assertQuietEqual(t, d) // df used == du == kvfs stats == the store's bytes
	if st.CapacityBytes >= 64*MiB || st.Evictions == 0 {
		t.Errorf("100 stores of 1 MiB onto a 64 MiB disk: capacity %d, %d evictions; want it lowered below the disk, and evictions",
			st.CapacityBytes, st.Evictions)
	}
	d.stop()
}

// stopHolding stores data at obj, holds it open (closed at the test's
// end) and stops d with SIGTERM, which must detach the busy mount.
func stopHolding(t *testing.T, d *daemon, obj string, data []byte) *os.File {
	t.Helper()
	putFile(t, obj, data)
	held, err := os.Open(obj)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !d.printed("unmount busy: detached the mount") {
		t.Fatalf("the stop did not detach the busy mount:\n%s", d.out)
	}
	return held
}

// TestStopWithAWriterOpen: a writer open across a stop that detached the
// mount writes, closes last, and its object is kept: the close answered
// success. The kernel drops the RELEASEs it has not handed the daemon
// yet when the last file of a detached mount closes, so the daemon
// releases what is left once nothing of the mount is open (an outside
// tester: in 3 of 7 tries the object stayed marked as being written, and
// the next start reclaimed it; closed last, every time).
func TestStopWithAWriterOpen(t *testing.T) {
	waitsOnTimers(t)
	for _, flags := range [][]string{nil, {"--no-passthrough"}} {
		t.Run(fmt.Sprintf("flags=%v", flags), func(t *testing.T) {
			d := mountCache(t, append([]string{"--capacity", "16MiB"}, flags...)...)
			obj := filepath.Join(d.mp, "obj")
			w, err := os.Create(obj)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			held := stopHolding(t, d, filepath.Join(d.mp, "held"), objectBytes("held", 5000))
			want := objectBytes("obj", 5000)
			if _, err := w.Write(want); err != nil {
				t.Fatal(err)
			}
			held.Close()
			if err := w.Close(); err != nil {
				t.Fatalf("the writer's close on the detached mount: %v", err)
			}
			if !d.waitExited() || d.waitErr != nil {
				t.Fatalf("the stopping daemon did not exit cleanly (%v):\n%s", d.waitErr, d.out)
			}
			if res := runKvfs(t, "fsck", "--store", d.store); res.code != 0 {
				t.Errorf("fsck after the stop: exit %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			d2 := startDaemon(t, d.mp, append([]string{"--store", d.store, "--capacity", "16MiB"}, flags...)...)
			if got, err := os.ReadFile(obj); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the object closed on the detached mount, after a start: %d bytes, %v", len(got), err)
			}
			d2.stop()
		})
	}
}

// TestStopAfterSomeoneElsesDetach: a mount someone else detached (umount
// -l) with a file still open on it is stopped as one the daemon detached
// itself: the first signal says so, the second ends it. Before, each
// signal logged "unmount: invalid argument" and the daemon served on
// until the file closed (an outside tester's finding; the cleanup loops
// of scripts do exactly this).
func TestStopAfterSomeoneElsesDetach(t *testing.T) {
	waitsOnTimers(t)
	d := mountCache(t, "--capacity", "16MiB", "--no-passthrough")
	obj := filepath.Join(d.mp, "obj")
	want := objectBytes("obj", 5000)
	putFile(t, obj, want)
	held, err := os.Open(obj)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Unmount(d.mp, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !d.printed("the mount was detached already") {
		t.Fatalf("the first signal did not find the mount detached:\n%s", d.out)
	}
	got := make([]byte, len(want))
	if _, err := held.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the held file before the second signal: %v", err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !d.waitExited() || d.waitErr != nil {
		t.Fatalf("the second signal did not end the daemon (%v):\n%s", d.waitErr, d.out)
	}
	unix.Fadvise(int(held.Fd()), 0, 0, unix.FADV_DONTNEED)
	if _, err := held.ReadAt(got, 0); err == nil {
		t.Error("the held file still reads after its mount was ended")
	}
}

// TestStopLinger: with --stop-linger, a stop that detached a busy mount
// ends it by itself once the linger has passed, with the file still
// held: the daemon saves its checkpoint and exits 0 without a second
// signal (systemd sends one, then kills the whole service at its
// TimeoutStopSec, a crash).
func TestStopLinger(t *testing.T) {
	waitsOnTimers(t)
	d := mountCache(t, "--capacity", "16MiB", "--stop-linger", "1s")
	stopHolding(t, d, filepath.Join(d.mp, "obj"), objectBytes("obj", 5000))
	if !d.waitExited() || d.waitErr != nil {
		t.Fatalf("the detached daemon did not end by itself after its linger (%v):\n%s", d.waitErr, d.out)
	}
	if !strings.Contains(d.out.String(), "--stop-linger passed") {
		t.Errorf("the daemon did not say why it ended the detached mount:\n%s", d.out)
	}
}

// TestDaemonOutlivesClosedOutput: a daemon whose output is a pipe whose
// reader went (`kvfs mount ... 2>&1 | grep -m1 serving`) loses the lines
// it writes there, not its life: Go's runtime killed it with SIGPIPE at
// its next log line, after it had mounted, leaving a dead mount (an
// outside tester).
func TestDaemonOutlivesClosedOutput(t *testing.T) {
	requireRoot(t)
	_, mp, store := mountDirs(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kvfsBin, "mount", "--store", store, "--capacity", "16MiB", "--checkpoint-interval", "50ms", mp)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited, done := make(chan error, 1), make(chan struct{})
	go func() { exited <- cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			runKvfs(t, "unmount", mp)
		}
		select {
		case <-done:
		case <-time.After(hangGuard):
			cmd.Process.Kill()
		}
	})
	lines := bufio.NewScanner(r)
	for lines.Scan() && !strings.Contains(lines.Text(), "kvfs: serving") {
	}
	r.Close() // the reader goes: every later line meets a broken pipe
	index := filepath.Join(store, "kvfs.index")
	checkpointed := func(since time.Time) bool {
		st, err := os.Stat(index)
		return err == nil && st.ModTime().After(since)
	}
	// Two checkpoints, each logged: the second comes after the first's
	// line met the broken pipe.
	for i := range 2 {
		since := time.Now()
		putFile(t, filepath.Join(mp, fmt.Sprintf("o%d", i)), objectBytes("o", 4096))
		if !waitFor(func() bool {
			select {
			case err := <-exited:
				t.Fatalf("the daemon exited (%v) once the reader of its output went", err)
			default:
			}
			return checkpointed(since)
		}) {
			t.Fatalf("no checkpoint %d after a store", i+1)
		}
	}
	for i := range 2 {
		if got, err := os.ReadFile(filepath.Join(mp, fmt.Sprintf("o%d", i))); err != nil || checkObject(got, "o", 4096) != nil {
			t.Fatalf("o%d through the mount: %v", i, err)
		}
	}
	if res := runKvfs(t, "unmount", mp); res.code != 0 {
		t.Fatalf("kvfs unmount: exit %d, %q", res.code, res.stderr)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the daemon exited with %v, want 0", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("the daemon did not exit after the unmount")
	}
}

// TestMountInsideKvfsMount: a mount point inside a live kvfs mount is
// refused, exit 2, creating nothing: its directory is an object
// directory of the outer cache, and the inner mount died with the outer
// daemon (an outside tester's ended at the outer's restart after a crash).
func TestMountInsideKvfsMount(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	inner := filepath.Join(d.mp, "sub")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(t.TempDir(), "inner-store")
	res := runKvfs(t, "mount", "--store", store, "--capacity", "16MiB", inner)
	if res.code != 2 || !strings.Contains(res.stderr, "inside the kvfs mount "+d.mp) {
		t.Errorf("kvfs mount inside a kvfs mount: exit %d, stderr %q; want 2 naming %s", res.code, res.stderr, d.mp)
	}
	if _, err := os.Stat(store); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused mount made its store: %v", err)
	}
	if err := os.Remove(inner); err != nil {
		t.Fatal(err)
	}
	d.stop()
}

// TestHelpOfACommandAndUnmountOfAStore: `kvfs help mount` prints mount's
// usage line and flags (it printed the general usage), and `kvfs unmount STORE` of a
// served store names its mount point (it said only "is not mounted"):
// an outside tester.
func TestHelpOfACommandAndUnmountOfAStore(t *testing.T) {
	res := runKvfs(t, "help", "mount")
	if res.code != 0 || !strings.HasPrefix(res.stdout, "usage: kvfs mount [--store DIR]") || !strings.Contains(res.stdout, "--wait-limit") {
		t.Errorf("kvfs help mount: exit %d, stdout %q; want mount's flags", res.code, res.stdout)
	}
	// Help of no command is a usage error (it printed the general usage,
	// exit 0: an outside tester).
	requireUsageError(t, runKvfs(t, "help", "bogus"), `no help for "bogus"`)
	d := mountCache(t, "--capacity", "16MiB")
	requireUsageError(t, runKvfs(t, "unmount", d.store), d.store, "is the store of the kvfs mount at "+d.mp)
	if _, ok := mountAt(d.mp); !ok {
		t.Fatal("kvfs unmount of the store unmounted the mount")
	}
	d.stop()
}

// TestFlagGivenTwiceWarned: a mount flag given twice takes the last, as
// a wrapper's defaults rely on (the systemd unit's --stop-linger before
// the user's $KVFS_OPTS), and the daemon warns of it, naming both (it
// was taken unsaid: an outside tester's --store a --store b served b).
func TestFlagGivenTwiceWarned(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB", "--capacity=32MiB")
	if !d.printed("a flag given twice: the last is taken") || !strings.Contains(d.out.String(), "--capacity (--capacity 16MiB, then --capacity=32MiB)") {
		t.Errorf("no warning naming both --capacity flags:\n%s", d.out)
	}
	if st := stats(t, d.mp); st.CapacityBytes != 32*MiB {
		t.Errorf("capacity %d, want the last flag's 32 MiB", st.CapacityBytes)
	}
	d.stop()
}

// TestCapacityInWholeBlocks: objects are charged in 4 KiB blocks, so a
// capacity that is not a multiple of one is taken rounded down, and the
// serving line, kvfs stats and df all say the same capacity (df showed
// 8192 bytes where kvfs stats said the 10000 asked for).
func TestCapacityInWholeBlocks(t *testing.T) {
	mp := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, mp, "--capacity", "10000")
	if !d.printed("capacity 8192 bytes") {
		t.Errorf("the serving line does not say the capacity taken, 8192 bytes:\n%s", d.out)
	}
	var sf unix.Statfs_t
	if err := unix.Statfs(mp, &sf); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, mp); st.CapacityBytes != 8192 || int64(sf.Blocks)*sf.Frsize != 8192 {
		t.Errorf("kvfs stats says a capacity of %d bytes, df %d; want 8192 in both", st.CapacityBytes, int64(sf.Blocks)*sf.Frsize)
	}
}
