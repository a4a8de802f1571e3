package tests

// Bad input to the command line; rows of docs/bad-input.md.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestBadInputMountPaths: a mount point with a space and a newline in
// its path mounts, serves, unmounts and remounts; one reached through a
// symlink mounts on the symlink's target, and stats, unmount, a second
// mount (refused: already served by a kvfs daemon) and a restart after kill -9 all
// work through the symlink; a store reached through a symlink into the
// mount point is refused like one inside it.
func TestBadInputMountPaths(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	t.Run("odd_path", func(t *testing.T) {
		mp := filepath.Join(dir, "mount point\nwith\ttabs and\nnewlines")
		if err := os.Mkdir(mp, 0o755); err != nil {
			t.Fatal(err)
		}
		flags := []string{"--store", filepath.Join(dir, "odd store"), "--capacity", "16MiB"}
		d := startDaemon(t, mp, flags...)
		putFile(t, filepath.Join(mp, "obj"), objectBytes("obj", 5000))
		assertQuietEqual(t, d)
		d.kill9()
		d = startDaemon(t, mp, flags...)
		if got, err := os.ReadFile(filepath.Join(mp, "obj")); err != nil || checkObject(got, "obj", 5000) != nil {
			t.Errorf("after the restart: %v", err)
		}
		d.stop()
	})
	t.Run("symlink", func(t *testing.T) {
		real, link := filepath.Join(dir, "real"), filepath.Join(dir, "link")
		os.Mkdir(real, 0o755)
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		store := filepath.Join(dir, "link-store")
		wait := func(d *linkDaemon) {
			t.Helper()
			if !waitFor(func() bool {
				m, ok := mountAt(real)
				return ok && m.FSType == "fuse.kvfs" && unix.Statfs(real, new(unix.Statfs_t)) == nil
			}) {
				t.Fatalf("kvfs mount %s: not mounted at %s; output:\n%s", link, real, d.out)
			}
		}
		d := startLinkDaemon(t, "mount", "--store", store, "--capacity", "16MiB", link)
		wait(d)
		putFile(t, filepath.Join(link, "obj"), objectBytes("obj", 5000))
		// Stored at its RELEASE, after close(2) returns; the kill below
		// must not come before it.
		waitReleased(t, link)
		if res := runKvfs(t, "stats", "--json", link); res.code != 0 {
			t.Errorf("kvfs stats through the symlink: exit %d, %q", res.code, res.stderr)
		}
		res := runKvfsTimeout(t, 10*time.Second, "mount", "--store", filepath.Join(dir, "other-store"), "--capacity", "16MiB", link)
		requireUsageError(t, res, "already served by a kvfs daemon run by uid 0, of the store "+store)
		d.cmd.Process.Kill()
		d.wait(t)
		d = startLinkDaemon(t, "mount", "--store", store, "--capacity", "16MiB", link)
		wait(d)
		if n := len(mountsAt(real)); n != 1 {
			t.Errorf("%d mounts stacked at %s after a restart through the symlink", n, real)
		}
		if got, err := os.ReadFile(filepath.Join(link, "obj")); err != nil || checkObject(got, "obj", 5000) != nil {
			t.Errorf("after the restart through the symlink: %v", err)
		}
		if res := runKvfs(t, "unmount", link); res.code != 0 {
			t.Errorf("kvfs unmount through the symlink: exit %d, %q", res.code, res.stderr)
		}
		if err := d.wait(t); err != nil {
			t.Errorf("daemon after kvfs unmount: %v", err)
		}
		if _, ok := mountAt(real); ok {
			t.Errorf("%s still mounted", real)
		}
		// A store inside the mount point, reached through the symlink.
		before := listing(t, real)
		res = runKvfsTimeout(t, 10*time.Second, "mount", "--store", filepath.Join(link, "store"), "--capacity", "16MiB", real)
		if _, ok := mountAt(real); ok {
			unix.Unmount(real, unix.MNT_DETACH)
		}
		requireUsageError(t, res, "must not contain")
		if after := listing(t, real); after != before {
			t.Errorf("the refused mount changed %s:\n%s", real, after)
		}
	})
}

// linkDaemon is a kvfs mount the daemon helper cannot follow (its mount
// point is a symlink, so mountinfo names another path).
type linkDaemon struct {
	cmd     *exec.Cmd
	out     *lockedBuffer
	exited  chan struct{}
	waitErr error
}

// wait waits 15s at most for the daemon to exit, then kills it.
func (d *linkDaemon) wait(t *testing.T) error {
	select {
	case <-d.exited:
	case <-time.After(15 * time.Second):
		t.Errorf("daemon still running after 15s; killing it")
		d.cmd.Process.Kill()
		<-d.exited
	}
	return d.waitErr
}

func startLinkDaemon(t *testing.T, args ...string) *linkDaemon {
	t.Helper()
	d := &linkDaemon{cmd: exec.Command(kvfsBin, args...), out: &lockedBuffer{}, exited: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.exited)
	}()
	mp := args[len(args)-1]
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			runKvfs(nil, "unmount", mp)
			d.wait(t)
		}
		if real, err := filepath.EvalSymlinks(mp); err == nil {
			if _, ok := mountAt(real); ok {
				unix.Unmount(real, unix.MNT_DETACH)
			}
		} else {
			unix.Unmount(mp, unix.MNT_DETACH)
		}
	})
	return d
}

// TestBadInputFlags: more bad sizes and durations than
// TestMountBadArguments covers, including an explicit capacity of 0:
// each exits 2 with one line naming it, mounts nothing and creates no
// store. fsck of a directory that is not a store is a usage error too.
func TestBadInputFlags(t *testing.T) {
	requireRoot(t)
	cases := []struct {
		flag, value string
		want        []string
	}{
		{"--capacity", "", []string{"bad size", `""`}},
		{"--capacity", "0", []string{"capacity 0"}},
		{"--capacity", "1.5G", []string{"bad size", "1.5G"}},
		{"--capacity", "64MiBs", []string{"bad size", "64MiBs"}},
		{"--capacity", "8192iB", []string{"bad size", "8192iB"}}, // was: 8,192 bytes
		{"--capacity", "64KiBB", []string{"bad size", "64KiBB"}},
		{"--capacity", "MiB", []string{"bad size", "MiB"}},
		{"--capacity", "0x100000", []string{"bad size", "0x100000"}},
		{"--capacity", "1e9", []string{"bad size", "1e9"}},
		{"--capacity", "\u22128M", []string{"bad size", "\u22128M"}},                             // a Unicode minus
		{"--capacity", "99999999999999999999", []string{"is too large", "99999999999999999999"}}, // was: "bad size ... want bytes"
		{"--capacity", "16777216T", []string{"16777216T", "too large"}},
		{"--capacity", "8E", []string{"bad size", "8E"}},
		{"--grace", "abc", []string{"grace", "abc"}},
		{"--grace", "-1s", []string{"--grace -1s", "negative"}},
		{"--wait-limit", "5", []string{"wait-limit", `"5"`, "missing unit", "like 2s"}}, // was: "parse error" alone
		{"--grace", "2", []string{"grace", "missing unit", "like 2s"}},
		{"--cache-timeout", "-1m", []string{"--cache-timeout -1m0s", "negative"}},
		{"--audit-interval", "-1s", []string{"--audit-interval -1s", "negative"}},
		{"--stop-linger", "-1s", []string{"--stop-linger -1s", "negative"}},
		{"--log-level", "loud", []string{"log-level", "loud", "debug, info, warn or error"}},
		{"--log-level", "", []string{"--log-level is empty"}}, // was: info, unsaid
		// Was: the default store, MOUNTPOINT.kvfs-store (an outside tester).
		{"--store", "", []string{"--store is empty"}},
		{"--metrics-addr", "", []string{"--metrics-addr is empty"}}, // was: no endpoint, unsaid (an outside tester)
		// Were: their defaults, unsaid (an outside tester).
		{"--remote-uploaders", "0", []string{"--remote-uploaders 0", "at least 1"}},
		{"--remote-queue", "0", []string{"--remote-queue 0", "at least 1"}},
		{"--remote-breaker-failures", "0", []string{"--remote-breaker-failures 0", "at least 1"}},
		{"--remote-timeout", "0s", []string{"--remote-timeout 0s", "more than 0"}},
		{"--remote-breaker-cooldown", "0s", []string{"--remote-breaker-cooldown 0s", "more than 0"}}, // was: 10s, unsaid
		{"--ram-cache", "12X", []string{"bad size", "12X"}},
		{"--ram-cache", "100", []string{"--ram-cache 100", "below 1 MiB"}},
		// Was: gigabytes asked for its counters, then the OOM killer.
		{"--ram-cache", "1P", []string{"--ram-cache 1125899906842624", "more than this machine's memory"}},
		{"--serve-while-loading", "-2", []string{"--serve-while-loading -2", "-1 (never)"}},
		{"--serve-while-loading", "many", []string{`invalid value "many" for flag --serve-while-loading`, "not a whole number"}},
		{"--nosuchflag", "1", []string{"mount: --nosuchflag: no such flag", `run "kvfs mount -h"`}},
		// Were: "flag provided but not defined: --nosuchflag" and "--o",
		// not as typed, and no word of the helper's form (an outside
		// tester).
		{"-nosuchflag", "1", []string{"mount: -nosuchflag: no such flag"}},
		{"-o", "capacity=2T,grace=3s", []string{"mount: -o: kvfs mount takes flags", "kvfs STORE MOUNTPOINT -o capacity=2T,grace=3s`"}},
		{"-ocapacity=1G", "--grace=1s", []string{"mount: -ocapacity: kvfs mount takes flags", "kvfs STORE MOUNTPOINT -o capacity=1G`"}}, // mount(8)'s joined form
		// Was: exit 1 (an outside tester).
		{"--cpuprofile", "/nonexistent/p", []string{"--cpuprofile /nonexistent/p", "no such file"}},
		{"--mutexprofile", "/nonexistent/p", []string{"--mutexprofile /nonexistent/p", "no such file"}},
		// Were (an outside tester): a whole core used by an idle daemon;
		// taken with no --capacity, unsaid; a store named --background,
		// served in the foreground.
		{"--checkpoint-interval", "1ns", []string{"--checkpoint-interval 1ns", "at least 10ms"}},
		{"--write-reserve", "100T", []string{"--write-reserve 109951162777600", "a quarter of any capacity the store's disk allows"}},
		{"--remote-region", "--background", []string{`--remote-region took "--background", another flag, as its value`}},
		{"--log-level", "--store", []string{`--log-level took "--store", another flag`}},
	}
	dir := t.TempDir()
	mp := filepath.Join(dir, "mp")
	os.Mkdir(mp, 0o755)
	for _, c := range cases {
		t.Run(strings.TrimPrefix(c.flag, "--")+"="+c.value, func(t *testing.T) {
			store := filepath.Join(dir, "store")
			args := []string{"mount", "--store", store, c.flag, c.value, mp}
			if c.flag == "--store" {
				args = []string{"mount", c.flag, c.value, mp}
			}
			res := runKvfsTimeout(t, 10*time.Second, args...)
			if _, ok := mountAt(mp); ok {
				unix.Unmount(mp, unix.MNT_DETACH)
				t.Errorf("%s %q mounted", c.flag, c.value)
			}
			requireUsageError(t, res, c.want...)
			if _, err := os.Lstat(store); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s %q created the store", c.flag, c.value)
			}
		})
	}
	t.Run("background_store_is_a_file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		os.WriteFile(file, []byte("x"), 0o644)
		// One line, the daemon's, as without --background (was: that
		// line, then "the daemon refused its arguments (see its output)").
		requireUsageError(t, runKvfsTimeout(t, hangGuard, "mount", "--background", "--store", file, mp), "store "+file+" is not a directory")
	})
	// Was: mounted, each writer reserved a quarter of the capacity,
	// unsaid.
	t.Run("write_reserve_past_a_quarter", func(t *testing.T) {
		store := filepath.Join(t.TempDir(), "store")
		requireUsageError(t, runKvfsTimeout(t, hangGuard, "mount", "--store", store, "--capacity", "64MiB", "--write-reserve", "24MiB", mp), "--write-reserve 25165824", "a quarter of the capacity (16777216)")
		if _, err := os.Lstat(store); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a refused --write-reserve created the store")
		}
	})
	t.Run("store_is_a_dangling_symlink", func(t *testing.T) {
		dir := t.TempDir()
		link := filepath.Join(dir, "link")
		os.Symlink("nowhere", link)
		requireUsageError(t, runKvfsTimeout(t, hangGuard, "mount", "--store", link, mp), link, "symbolic link to nowhere", "does not exist")
		if _, err := os.Lstat(filepath.Join(dir, "nowhere")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the link's target was made: %v", err)
		}
	})
	// Was: the whole chain made, like mkdir -p, and a fresh empty cache
	// served from it (an outside tester's typo).
	t.Run("store_parent_missing", func(t *testing.T) {
		dir := t.TempDir()
		store := filepath.Join(dir, "nonexist", "deep", "store")
		res := runKvfsTimeout(t, hangGuard, "mount", "--store", store, mp)
		if _, ok := mountAt(mp); ok {
			detachAll(mp)
			t.Errorf("mounted a store whose parent did not exist")
		}
		requireUsageError(t, res, store, "parent directory "+filepath.Dir(store)+" does not exist")
		if _, err := os.Lstat(filepath.Join(dir, "nonexist")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a refused --store made its parents: %v", err)
		}
	})
	// Were exit 1, "opening store: ..." (an outside tester).
	t.Run("store_data_is_a_file", func(t *testing.T) {
		store := filepath.Join(t.TempDir(), "store")
		os.MkdirAll(filepath.Join(store, "writing"), 0o755)
		os.WriteFile(filepath.Join(store, "kvfs.format"), []byte("kvfs store v1\n"), 0o644)
		os.WriteFile(filepath.Join(store, "data"), []byte("x"), 0o644)
		requireUsageError(t, runKvfsTimeout(t, hangGuard, "mount", "--store", store, mp), "data: not a directory", "kvfs fsck --store "+store)
	})
	// Were: mounted, then a warning at every checkpoint for as long as
	// it ran (a directory), or a start that never served (a FIFO): an
	// outside tester.
	for _, kind := range []string{"directory", "FIFO"} {
		t.Run("store_checkpoint_is_a_"+kind, func(t *testing.T) {
			store := filepath.Join(t.TempDir(), "store")
			os.MkdirAll(filepath.Join(store, "data"), 0o755)
			os.WriteFile(filepath.Join(store, "kvfs.format"), []byte("kvfs store v1\n"), 0o644)
			index := filepath.Join(store, "kvfs.index")
			if kind == "FIFO" {
				unix.Mkfifo(index, 0o644)
			} else {
				os.MkdirAll(filepath.Join(index, "kept"), 0o755)
			}
			res := runKvfsTimeout(t, hangGuard, "mount", "--store", store, mp)
			if _, ok := mountAt(mp); ok {
				detachAll(mp)
				t.Errorf("mounted a store whose checkpoint is a %s", kind)
			}
			requireUsageError(t, res, index+" is a ", "not kvfs's file", "kvfs fsck --store "+store)
		})
	}
	t.Run("store_on_a_read_only_file_system", func(t *testing.T) {
		disk := mountTmpfs(t, t.TempDir(), "1m")
		os.Mkdir(filepath.Join(disk, "store"), 0o755)
		if err := unix.Mount("", disk, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			t.Fatal(err)
		}
		requireUsageError(t, runKvfsTimeout(t, hangGuard, "mount", "--store", filepath.Join(disk, "store"), mp), "is on a read-only file system")
	})
	t.Run("store_on_a_full_file_system", func(t *testing.T) {
		disk := mountTmpfs(t, t.TempDir(), "64k")
		os.WriteFile(filepath.Join(disk, "fill"), make([]byte, 256<<10), 0o644) // fails once full
		os.Mkdir(filepath.Join(disk, "store"), 0o755)
		requireUsageError(t, runKvfsTimeout(t, hangGuard, "mount", "--store", filepath.Join(disk, "store"), mp), "no room on its file system")
	})
	// Was: the second checked, unsaid (an outside tester).
	t.Run("fsck_store_given_twice", func(t *testing.T) {
		a, b := t.TempDir(), t.TempDir()
		requireUsageError(t, runKvfs(t, "fsck", "--store", a, "--store", b, "--repair"), "--store (--store "+a, "then --store "+b, "give it once")
		for _, d := range []string{a, b} {
			if ents, _ := os.ReadDir(d); len(ents) != 0 {
				t.Errorf("a refused fsck left %d entries in %s", len(ents), d)
			}
		}
	})
	t.Run("fsck_of_a_plain_directory", func(t *testing.T) {
		plain := t.TempDir()
		os.WriteFile(filepath.Join(plain, "f"), []byte("x"), 0o644)
		before := listing(t, plain)
		requireUsageError(t, runKvfs(t, "fsck", "--store", plain), plain, "not a kvfs store")
		requireUsageError(t, runKvfs(t, "fsck", "--store", plain, "--repair"), plain, "not a kvfs store")
		absent := filepath.Join(plain, "absent")
		requireUsageError(t, runKvfs(t, "fsck", "--store", absent), absent, "does not exist") // was: "is not a directory"
		if _, err := os.Lstat(absent); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("fsck of %s created it", absent)
		}
		if after := listing(t, plain); after != before {
			t.Errorf("fsck changed a directory that is not a store:\n%s", after)
		}
	})
}

// TestFsckOfALiveStore: fsck, and fsck --repair, of a store a daemon
// serves are refused as a bad path is (exit 2, one line; was exit 1, the
// status of a failure while doing the work), and the store serves on.
func TestFsckOfALiveStore(t *testing.T) {
	requireRoot(t)
	_, mp, store := mountDirs(t)
	d := startDaemon(t, mp, "--store", store, "--capacity", "16MiB")
	putFile(t, filepath.Join(mp, "kept"), []byte("kept\n"))
	for _, args := range [][]string{{"fsck", "--store", store}, {"fsck", "--store", store, "--repair"}} {
		requireUsageError(t, runKvfs(t, args...), store, "is in use by a live kvfs daemon: unmount it first")
	}
	if got, err := os.ReadFile(filepath.Join(mp, "kept")); err != nil || string(got) != "kept\n" {
		t.Fatalf("after the refused fsck: %q, %v", got, err)
	}
	d.stop()
}

// TestFsckOfAStoresDataByAnotherPath: fsck of a store's data directory,
// reached directly, through a symlink or through a bind mount, and with
// an object named kvfs.format at the cache's root (which made it look
// like a store), is refused naming the store, and writes nothing there
// (an outside tester's fsck through a symlink checked it as a store and
// made kvfs.lock in it, an object at the next start; --repair made data/
// and writing/ there).
func TestFsckOfAStoresDataByAnotherPath(t *testing.T) {
	requireRoot(t)
	_, mp, store := mountDirs(t)
	d := startDaemon(t, mp, "--store", store, "--capacity", "16MiB")
	putFile(t, filepath.Join(mp, "kvfs.format"), []byte("kvfs store v1\n"))
	if err := os.Mkdir(filepath.Join(mp, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(store, "data")
	dir := t.TempDir()
	link, bind := filepath.Join(dir, "link"), filepath.Join(dir, "bind")
	if err := os.Symlink(data, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(bind, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(data, bind, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(bind, unix.MNT_DETACH)
	before := listing(t, data)
	for _, p := range []string{data, link, filepath.Join(link, "sub"), bind, filepath.Join(bind, "sub")} {
		for _, repair := range []bool{false, true} {
			args := []string{"fsck", "--store", p}
			if repair {
				args = append(args, "--repair")
			}
			requireUsageError(t, runKvfs(t, args...), "is inside the kvfs store "+store)
		}
	}
	// Nor is it mounted as a store (an outside tester's mount through
	// the bind made data/, writing/ and kvfs.index there).
	mp2 := filepath.Join(dir, "mp2")
	if err := os.Mkdir(mp2, 0o755); err != nil {
		t.Fatal(err)
	}
	// Should kvfs mount after all, it serves until the timeout kills
	// it: its dead mount must not outlive the test.
	t.Cleanup(func() { detachAll(mp2) })
	for _, p := range []string{link, bind, filepath.Join(bind, "sub")} {
		res := runKvfsTimeout(t, hangGuard, "mount", "--store", p, "--capacity", "16MiB", mp2)
		if _, ok := mountAt(mp2); ok {
			detachAll(mp2)
			t.Fatalf("kvfs mount --store %s mounted", p)
		}
		requireUsageError(t, res, "is inside the kvfs store "+store)
	}
	if after := listing(t, data); after != before {
		t.Errorf("fsck or mount wrote into the store's data directory:\n%s\nwas:\n%s", after, before)
	}
	d.stop()
}

// TestStoreLockedByAnotherProgram: a store whose lock another program
// holds (here this test, as `flock STORE/kvfs.lock CMD` would) is
// refused at once, naming that program (was: a 30 s wait for a kvfs
// daemon to finish starting or stopping, then named as one: an outside
// tester); once it lets go, the store mounts with its object.
func TestStoreLockedByAnotherProgram(t *testing.T) {
	requireRoot(t)
	store := filepath.Join(t.TempDir(), "store")
	makeStore(t, store)
	lock, err := os.Open(filepath.Join(store, "kvfs.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(t.TempDir(), "mp")
	os.Mkdir(mp, 0o755)
	requireUsageError(t, runKvfsTimeout(t, hangGuard, "mount", "--store", store, mp), store, fmt.Sprintf("pid %d", os.Getpid()), "not a kvfs daemon")
	if _, ok := mountAt(mp); ok {
		t.Fatal("mounted a store another program holds")
	}
	lock.Close()
	d := startDaemon(t, mp, "--store", store, "--capacity", "16MiB")
	if got, err := os.ReadFile(filepath.Join(mp, "obj")); err != nil || !bytes.Equal(got, objectBytes("obj", 10000)) {
		t.Errorf("the object once the lock was let go: %v", err)
	}
	d.stop()
}
