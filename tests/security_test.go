package tests

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kvfs/kvfs/internal/mountinfo"
)

// superOptions is the file system options mountinfo shows for mp (for
// FUSE: default_permissions, allow_other, user_id...).
func superOptions(t *testing.T, mp string) string {
	t.Helper()
	m, _ := mountinfo.At(mp)
	return m.SuperOptions
}

// permTree makes, as root, the files and directories the permission
// tests try as another user.
func permTree(t *testing.T, mp string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	put := func(name string, mode os.FileMode) {
		putFile(t, filepath.Join(mp, name), []byte("content of "+name+"\n"))
		must(os.Chmod(filepath.Join(mp, name), mode))
	}
	for name, mode := range map[string]os.FileMode{"rootdir": 0o755, "sticky": 0o777 | os.ModeSticky, "open": 0o777} {
		must(os.Mkdir(filepath.Join(mp, name), 0o755))
		must(os.Chmod(filepath.Join(mp, name), mode))
	}
	put("private", 0o600)
	put("public", 0o644)
	put("rootdir/file", 0o644)
	put("sticky/rootfile", 0o666)
}

// TestPermissionsAllowOther: with --allow-other the kernel checks
// permissions (default_permissions) for every user: nobody (uid 65534)
// reads a 0644 root file but not a 0600 one, cannot write, truncate,
// chmod or rename root's files, cannot create or delete in root's 0755
// directory nor delete root's file in a sticky directory, and what it
// creates in a 0777 directory is its own, in the mount and in the store.
func TestPermissionsAllowOther(t *testing.T) {
	requireRoot(t)
	dir := worldDir(t)
	mp := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, mp, "--store", filepath.Join(dir, "store"), "--capacity", "16MiB", "--allow-other")
	opts := superOptions(t, mp)
	if !strings.Contains(opts, "default_permissions") || !strings.Contains(opts, "allow_other") {
		t.Errorf("mount options %q: want default_permissions and allow_other", opts)
	}
	permTree(t, mp)
	p := func(name string) string { return filepath.Join(mp, name) }
	denied := []struct {
		what string
		argv []string
		want string
	}{
		{"read a 0600 root file", []string{"/bin/cat", p("private")}, "Permission denied"},
		{"write a 0644 root file", []string{"/bin/sh", "-c", "echo x >> '" + p("public") + "'"}, "Permission denied"},
		{"truncate a 0644 root file", []string{"/bin/sh", "-c", ": > '" + p("public") + "'"}, "Permission denied"},
		{"chmod a root file", []string{"/bin/chmod", "666", p("public")}, "Operation not permitted"},
		{"delete in a 0755 root directory", []string{"/bin/rm", "-f", p("rootdir/file")}, "Permission denied"},
		{"create in a 0755 root directory", []string{"/bin/sh", "-c", "echo x > '" + p("rootdir/new") + "'"}, "Permission denied"},
		{"rename in the 0755 mount root", []string{"/bin/mv", p("public"), p("public2")}, "Permission denied"},
		{"delete root's file in a sticky directory", []string{"/bin/rm", "-f", p("sticky/rootfile")}, "Operation not permitted"},
	}
	for _, c := range denied {
		code, out := asNobody(t, c.argv...)
		if code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("nobody: %s: exit %d, %q; want %q", c.what, code, out, c.want)
		}
	}
	for _, name := range []string{"public", "rootdir/file", "sticky/rootfile", "private"} {
		if got, err := os.ReadFile(p(name)); err != nil || string(got) != "content of "+name+"\n" {
			t.Errorf("%s after nobody's attempts: %q, %v", name, got, err)
		}
	}
	if _, err := os.Lstat(p("rootdir/new")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("nobody created rootdir/new: %v", err)
	}
	if code, out := asNobody(t, "/bin/cat", p("public")); code != 0 || out != "content of public\n" {
		t.Errorf("nobody reading a 0644 file: exit %d, %q", code, out)
	}
	if code, out := asNobody(t, "/bin/sh", "-c", "echo mine > '"+p("open/mine")+"' && cat '"+p("open/mine")+"'"); code != 0 || out != "mine\n" {
		t.Errorf("nobody creating in a 0777 directory: exit %d, %q", code, out)
	}
	for _, path := range []string{p("open/mine"), filepath.Join(d.store, "data", "open", "mine")} {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil || st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("%s: owner %d:%d (%v), want 65534:65534", path, st.Uid, st.Gid, err)
		}
	}
	if code, out := asNobody(t, "/bin/rm", p("open/mine")); code != 0 {
		t.Errorf("nobody deleting its own file: exit %d, %q", code, out)
	}
	assertQuietEqual(t, d)
	d.stop()
}

// TestModeZeroAllowOther: modes are the store's, all of them. A file and
// a directory set to 000 read back as 000, in the mount and in the store
// (was: 0644 and 0755, go-fuse's stand-in for a mode with no permission
// bits), and with --allow-other the kernel enforces them: nobody cannot
// read the file, list the directory or reach into it. pjdfstest's
// open/26.t: a file nobody creates with open(O_CREAT|O_WRONLY, 0) takes
// the bytes written through that descriptor, lstats as "regular,0", and
// nobody's later opens for reading, writing or both fail with EACCES.
func TestModeZeroAllowOther(t *testing.T) {
	requireRoot(t)
	dir := worldDir(t)
	mp := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, mp, "--store", filepath.Join(dir, "store"), "--capacity", "16MiB", "--allow-other")
	p := func(name string) string { return filepath.Join(mp, name) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	putFile(t, p("secret"), []byte("secret\n"))
	must(os.Chmod(p("secret"), 0))
	must(os.Mkdir(p("closed"), 0o755))
	putFile(t, p("closed/inner"), []byte("inner\n"))
	must(os.Chmod(p("closed/inner"), 0o644))
	must(os.Chmod(p("closed"), 0))
	must(os.Mkdir(p("nobodys"), 0o755))
	must(os.Chown(p("nobodys"), 65534, 65534))

	const create = "import os, sys\nfd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0)\nos.write(fd, b'mine')\nos.close(fd)\n"
	if code, out := asNobody(t, "/usr/bin/python3", "-c", create, p("nobodys/m0")); code != 0 {
		t.Fatalf("nobody: open(O_CREAT|O_WRONLY, 0) and write: exit %d, %q", code, out)
	}
	for path, want := range map[string]uint32{
		p("secret"): unix.S_IFREG, p("closed"): unix.S_IFDIR, p("nobodys/m0"): unix.S_IFREG,
		filepath.Join(d.store, "data", "secret"): unix.S_IFREG, filepath.Join(d.store, "data", "closed"): unix.S_IFDIR,
		filepath.Join(d.store, "data", "nobodys", "m0"): unix.S_IFREG,
	} {
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil || st.Mode != want {
			t.Errorf("lstat %s: mode %#o (%v), want %#o (type, permissions 0)", path, st.Mode, err, want)
		}
	}
	const reopen = "import os, sys, errno\nfor fl in (os.O_RDONLY, os.O_WRONLY, os.O_RDWR):\n  try:\n    os.close(os.open(sys.argv[1], fl)); print('opened')\n  except OSError as e:\n    print(errno.errorcode[e.errno])\n"
	if code, out := asNobody(t, "/usr/bin/python3", "-c", reopen, p("nobodys/m0")); code != 0 || out != "EACCES\nEACCES\nEACCES\n" {
		t.Errorf("nobody reopening its mode 0 file O_RDONLY, O_WRONLY, O_RDWR: exit %d, %q; want EACCES thrice", code, out)
	}
	for _, argv := range [][]string{
		{"/bin/cat", p("secret")},
		{"/bin/ls", p("closed")},
		{"/bin/cat", p("closed/inner")},
	} {
		if code, out := asNobody(t, argv...); code == 0 || !strings.Contains(out, "Permission denied") {
			t.Errorf("nobody: %v: exit %d, %q; want Permission denied", argv, code, out)
		}
	}
	if got, err := os.ReadFile(p("nobodys/m0")); err != nil || string(got) != "mine" {
		t.Errorf("root reading nobody's mode 0 file: %q, %v", got, err)
	}
	assertQuietEqual(t, d)
	d.stop()
}

// TestNoAllowOtherByDefault: without --allow-other (the default) no user
// but the mounter gets into the mount at all, whatever the modes say.
func TestNoAllowOtherByDefault(t *testing.T) {
	requireRoot(t)
	dir := worldDir(t)
	mp := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, mp, "--store", filepath.Join(dir, "store"), "--capacity", "16MiB")
	opts := superOptions(t, mp)
	// Only the mounter may enter: the kernel then needs no permission
	// checks of its own (no default_permissions, which would cost a
	// GETATTR of a directory after each change in it).
	if strings.Contains(opts, "default_permissions") || strings.Contains(opts, "allow_other") {
		t.Errorf("mount options %q: want neither default_permissions nor allow_other", opts)
	}
	putFile(t, filepath.Join(mp, "public"), []byte("public\n"))
	os.Chmod(filepath.Join(mp, "public"), 0o644)
	if code, out := asNobody(t, "/bin/ls", dir); code != 0 || !strings.Contains(out, "mnt") {
		t.Fatalf("nobody cannot even list %s (exit %d, %q): the test setup is wrong", dir, code, out)
	}
	for _, argv := range [][]string{
		{"/usr/bin/stat", mp},
		{"/bin/ls", mp},
		{"/bin/cat", filepath.Join(mp, "public")},
		{"/bin/sh", "-c", "echo x > '" + filepath.Join(mp, "new") + "'"},
	} {
		if code, out := asNobody(t, argv...); code == 0 || !strings.Contains(out, "Permission denied") {
			t.Errorf("nobody: %v: exit %d, %q; want Permission denied", argv, code, out)
		}
	}
	if got, err := os.ReadFile(filepath.Join(mp, "public")); err != nil || string(got) != "public\n" {
		t.Errorf("root reading its own mount: %q, %v", got, err)
	}
	// kvfs stats says why, exit 1: a user refused, not a bad argument
	// (was: exit 2, "permission denied" alone: an outside tester).
	bin := filepath.Join(dir, "kvfs")
	if b, err := os.ReadFile(kvfsBin); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("a copy of kvfs nobody may run: %v", err)
	}
	if code, out := asNobody(t, bin, "stats", mp); code != 1 || !strings.Contains(out, "permission denied") || !strings.Contains(out, "--allow-other") {
		t.Errorf("nobody: kvfs stats: exit %d, %q; want exit 1 naming --allow-other", code, out)
	}
	// Nor the store: its data/ carries the mount's modes, which only
	// the mount's refusal of every other user kept from them (an outside
	// tester read every object through it and wrote past the capacity).
	// A store an older kvfs left open to others is mended at the start.
	store := filepath.Join(dir, "store")
	noEntry := func(when string) {
		t.Helper()
		if fi, err := os.Stat(store); err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: the store's mode %v (%v); want none for group and others", when, fi.Mode(), err)
		}
		for _, argv := range [][]string{
			{"/bin/cat", filepath.Join(store, "data", "public")},
			{"/bin/ls", filepath.Join(store, "data")},
			{"/bin/sh", "-c", "echo x > '" + filepath.Join(store, "data", "planted") + "'"},
		} {
			if code, out := asNobody(t, argv...); code == 0 || !strings.Contains(out, "Permission denied") {
				t.Errorf("%s: nobody: %v: exit %d, %q; want Permission denied", when, argv, code, out)
			}
		}
	}
	noEntry("mounted")
	d.stop()
	if err := os.Chmod(store, 0o755); err != nil {
		t.Fatal(err)
	}
	d = startDaemon(t, mp, "--store", store, "--capacity", "16MiB")
	noEntry("a store left 0755, mounted again")
	d.stop()
}

// TestNoEscapeThroughMount: ".." at the mount's root is the mount
// point's parent, never the store; names that are the store's own
// (kvfs.lock, data, writing) are plain objects that survive a kill -9;
// symlinks planted directly in the store, new or in place of an object
// or a directory, are never followed: nothing outside the store is read
// or written through the mount, the replaced object is gone from the
// mount and the ledger, and start-up removes the symlinks, leaving their
// targets alone.
func TestNoEscapeThroughMount(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB", "--audit-interval", "500ms")
	flags := []string{"--store", d.store, "--capacity", "16MiB", "--audit-interval", "500ms"}
	p := func(name string) string { return d.mp + "/" + name } // not Join: it cleans ".." away
	os.MkdirAll(p("sub"), 0o755)
	var parent, viaDots unix.Stat_t
	unix.Stat(filepath.Dir(d.mp), &parent)
	for _, dots := range []string{"..", "sub/../..", "sub/../../mnt/.."} {
		if err := unix.Stat(p(dots), &viaDots); err != nil || viaDots.Ino != parent.Ino || viaDots.Dev != parent.Dev {
			t.Errorf("%s from the mount is not the mount point's parent (%v)", dots, err)
		}
	}

	// The store's own names, inside the mount, across a crash.
	os.MkdirAll(p("writing"), 0o755)
	for _, name := range []string{"writing/1", "kvfs.lock", "data", "kvfs.format"} {
		putFile(t, p(name), objectBytes(name, 5000))
	}
	// A store is complete at its RELEASE, which reaches kvfs after
	// close(2) returns: a crash before it leaves the object incomplete.
	waitReleased(t, d.mp)
	d.kill9()
	d = startDaemon(t, d.mp, flags...)
	for _, name := range []string{"writing/1", "kvfs.lock", "data", "kvfs.format"} {
		if got, err := os.ReadFile(p(name)); err != nil || checkObject(got, name, 5000) != nil {
			t.Errorf("%s made through the mount, after a kill -9: %v", name, err)
		}
	}
	// An object named kvfs.format is not a store's mark: the mount is
	// handed over (was: refused, "mount point ... is inside the kvfs
	// store" naming the mount point twice).
	d = handOver(t, kvfsBin, d, flags...)

	outside := filepath.Join(filepath.Dir(d.store), "outside")
	os.Mkdir(outside, 0o755)
	secret := filepath.Join(outside, "x")
	if err := os.WriteFile(secret, []byte("SECRET outside the store"), 0o644); err != nil {
		t.Fatal(err)
	}
	putFile(t, p("obj"), objectBytes("obj", 5000))
	putFile(t, p("sub/x"), objectBytes("x", 5000))
	before := assertQuietEqual(t, d)
	data := filepath.Join(d.store, "data")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(secret, filepath.Join(data, "evil")))
	must(os.Remove(filepath.Join(data, "obj")))
	must(os.Symlink(secret, filepath.Join(data, "obj")))
	must(os.Rename(filepath.Join(data, "sub"), filepath.Join(data, "sub.moved")))
	must(os.Symlink(outside, filepath.Join(data, "sub")))
	outsideBefore := listing(t, outside)

	noSecret := func(when string) {
		t.Helper()
		for _, name := range []string{"evil", "obj", "sub/x"} {
			got, err := os.ReadFile(p(name))
			if strings.Contains(string(got), "SECRET") {
				t.Errorf("%s: %s serves the file outside the store", when, name)
			} else if err == nil {
				t.Errorf("%s: %s reads %d bytes, want an error", when, name, len(got))
			}
		}
		if err := os.WriteFile(p("sub/new"), []byte("x"), 0o644); err == nil {
			t.Errorf("%s: created sub/new through a symlinked directory", when)
		}
		if _, err := os.Lstat(p("evil")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: the planted symlink is visible: %v", when, err)
		}
		buf := make([]byte, 4096)
		if n, err := unix.Getxattr(p("sub.moved/x"), "user.kvfs.backing", buf); err == nil && !strings.HasPrefix(string(buf[:n]), data+"/") {
			t.Errorf("%s: backing path %q is outside the store", when, buf[:n])
		}
	}
	noSecret("right after planting")
	if !waitFor(func() bool { return stats(t, d.mp).Reconciliations > before.Reconciliations }) {
		t.Errorf("the audit did not reconcile the replaced object")
	}
	noSecret("after the audit")
	wantErrno(t, "stat of the object a symlink replaced, after the audit", unix.Stat(p("obj"), new(unix.Stat_t)), unix.ENOENT)
	st := assertQuietEqual(t, d)
	if st.UsedBytes != before.UsedBytes-ceil4096(5000) {
		t.Errorf("after the audit used %d, want %d (the replaced object uncharged)", st.UsedBytes, before.UsedBytes-ceil4096(5000))
	}
	if after := listing(t, outside); after != outsideBefore {
		t.Errorf("the directory outside the store changed:\n%s", after)
	}
	d.stop()

	d = startDaemon(t, d.mp, flags...)
	noSecret("after a restart")
	for _, name := range []string{"evil", "obj", "sub"} {
		if _, err := os.Lstat(filepath.Join(data, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("start-up left the planted symlink %s in the store: %v", name, err)
		}
	}
	if got, err := os.ReadFile(secret); err != nil || string(got) != "SECRET outside the store" {
		t.Errorf("the symlinks' target after start-up removed them: %q, %v", got, err)
	}
	if got, err := os.ReadFile(p("sub.moved/x")); err != nil || checkObject(got, "x", 5000) != nil {
		t.Errorf("the directory moved behind kvfs's back: %v", err)
	}
	st = assertQuietEqual(t, d)
	d.stop()
	requireCleanFsck(t, d.store, st)
}

// The handover socket passes /dev/fuse and the store to whoever asks:
// only root and the daemon's own user may. uid 65534 runs `kvfs mount`
// of the served store at its mount point, as a successor would: with the
// socket's mode as kvfs made it (0600) it cannot connect; with the mode
// opened by hand it connects and the daemon refuses it by its
// credentials. Either way the daemon serves on and nobody's process
// exits with the refusal (it took the mount, and every client hung).
func TestHandoverRefusedToOtherUsers(t *testing.T) {
	d, bin := nobodyMount(t)
	putFile(t, filepath.Join(d.mp, "kept"), []byte("kept\n"))
	sock := filepath.Join(d.store, "kvfs.handover")
	var st unix.Stat_t
	if err := unix.Stat(sock, &st); err != nil || st.Mode&0o777 != 0o600 {
		t.Fatalf("handover socket: mode %o, %v; want 0600", st.Mode&0o777, err)
	}
	successor := func() result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		// As the daemon was mounted: a successor may not change that
		// (mount.keepsKernelOptions), and it is its user that is refused.
		cmd := exec.CommandContext(ctx, bin, "mount", "--store", d.store, "--allow-other", d.mp)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("nobody's kvfs mount still ran after %v: it serves the mount\n%s", hangGuard, out)
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("nobody's kvfs mount: %v, want an exit status other than 0\n%s", err, out)
		}
		return result{code: ee.ExitCode(), stderr: string(out)}
	}
	if r := successor(); !strings.Contains(r.stderr, "already served by a kvfs daemon run by uid 0") {
		t.Errorf("nobody's mount over the 0600 socket: exit %d, %q", r.code, r.stderr)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	r := successor()
	if !strings.Contains(r.stderr, "the old daemon keeps the mount: handover asked by uid 65534: operation not permitted") {
		t.Errorf("nobody's mount over a 0666 socket: exit %d, %q; want the daemon's refusal", r.code, r.stderr)
	}
	if !d.printed("handover refused: asked by another user") {
		t.Errorf("the daemon did not log the refusal:\n%s", d.outSoFar())
	}
	if !d.alive() {
		t.Fatal("the daemon exited: nobody took its mount")
	}
	// Nor may nobody unmount it; kvfs says why (before: fusermount3's
	// "entry for MP not found in /etc/mtab").
	cmd := exec.Command(bin, "unmount", d.mp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "was mounted by uid 0: only that user or root may unmount it") {
		t.Errorf("nobody's kvfs unmount: %v, %q", err, out)
	}
	if got, err := os.ReadFile(filepath.Join(d.mp, "kept")); err != nil || string(got) != "kept\n" {
		t.Fatalf("kept after nobody's attempts: %q, %v", got, err)
	}
	assertQuietEqual(t, d)
	d.stop()
}

// A directory with the set-group-ID bit gives what is made in it its
// group, and a new directory its bit too, whoever makes it (ext4 does;
// kvfs gave the maker's group). Checked in the mount and in the store.
func TestSetGIDDirectoryGivesItsGroup(t *testing.T) {
	d, _ := nobodyMount(t)
	const group = 1234
	sg := filepath.Join(d.mp, "sg")
	if err := os.Mkdir(sg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(sg, 0, group); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sg, 0o2777|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	putFile(t, filepath.Join(sg, "byroot"), []byte("root\n"))
	if err := os.Mkdir(filepath.Join(sg, "dirbyroot"), 0o755); err != nil {
		t.Fatal(err)
	}
	if r := runAs(t, nobody, nil, "/bin/sh", "-c", "echo nobody > '"+filepath.Join(sg, "bynobody")+"' && mkdir '"+filepath.Join(sg, "dirbynobody")+"'"); r.code != 0 {
		t.Fatalf("nobody making entries in a 2777 directory: exit %d, %s", r.code, r.stderr)
	}
	want := map[string]struct {
		uid uint32
		dir bool
	}{"byroot": {0, false}, "dirbyroot": {0, true}, "bynobody": {nobody, false}, "dirbynobody": {nobody, true}}
	for _, root := range []string{sg, filepath.Join(d.store, "data", "sg")} {
		for name, w := range want {
			var st unix.Stat_t
			p := filepath.Join(root, name)
			if err := unix.Stat(p, &st); err != nil {
				t.Fatal(err)
			}
			if st.Uid != w.uid || st.Gid != group || (st.Mode&unix.S_ISGID != 0) != w.dir {
				t.Errorf("%s: owner %d:%d, mode %o; want %d:%d, set-group-ID %v", p, st.Uid, st.Gid, st.Mode&0o7777, w.uid, group, w.dir)
			}
		}
	}
	assertQuietEqual(t, d)
	d.stop()
}

// TestUnprivilegedMountSaysWhy: a mount by a user other than root that
// fusermount3 would refuse says why on its last line, before it opens or
// makes the store (before: go-fuse's "fusermount exited with code 256",
// fusermount3's reason on a line above it). Which refusal depends on the
// machine: /dev/fuse closed to other users (0600 here), else
// --allow-other without user_allow_other in /etc/fuse.conf.
func TestUnprivilegedMountSaysWhy(t *testing.T) {
	requireRoot(t)
	base := worldDir(t)
	bin := filepath.Join(base, "kvfs")
	if b, err := exec.Command("cp", kvfsBin, bin).CombinedOutput(); err != nil {
		t.Fatalf("copying kvfs: %v %s", err, b)
	}
	// nobody's own directory, where a mount that went on would make its
	// store.
	own, mp := filepath.Join(base, "own"), filepath.Join(base, "mnt")
	store := filepath.Join(own, "store")
	for _, d := range []string{own, mp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	conf, _ := os.ReadFile("/etc/fuse.conf")
	var st unix.Stat_t
	if err := unix.Stat("/dev/fuse", &st); err != nil {
		t.Skipf("needs /dev/fuse: %v", err)
	}
	args := []string{"mount", "--store", store, "--capacity", "8MiB"}
	var want string
	switch {
	case st.Mode&0o006 != 0o006:
		want = "kvfs mount: /dev/fuse: permission denied: a mount by a user other than root needs to read and write it"
	case !strings.Contains("\n"+string(conf)+"\n", "\nuser_allow_other\n"):
		args = append(args, "--allow-other")
		want = "kvfs mount: --allow-other by a user other than root needs the line user_allow_other in /etc/fuse.conf"
	default:
		t.Skip("/dev/fuse is open to all and /etc/fuse.conf has user_allow_other: nothing here refuses an unprivileged mount")
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(args, mp)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		exec.Command("fusermount3", "-u", "-z", mp).Run()
		t.Fatalf("nobody's kvfs mount still ran after %v: it mounted\n%s", hangGuard, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err == nil || !strings.HasPrefix(lines[len(lines)-1], want) {
		t.Errorf("nobody's kvfs mount: %v; last line %q, want %q", err, lines[len(lines)-1], want)
	}
	if _, err := os.Stat(store); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused mount made or opened its store: %v", err)
	}
}

// TestStoreOfAnotherUser: a store this user may not enter (another
// user's, mode 0700, as a user's daemon makes it) is refused by mount
// and fsck naming its owner and mode; fsck said a live daemon "no
// longer holds its lock (was kvfs.lock removed?)" and mount "open
// .../kvfs.format: permission denied" (an outside tester). The store's
// daemon serves on.
func TestStoreOfAnotherUser(t *testing.T) {
	d, bin := nobodyMount(t)
	putFile(t, filepath.Join(d.mp, "kept"), []byte("kept\n"))
	if err := os.Chmod(d.store, 0o700); err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(filepath.Dir(d.mp), "mnt2")
	if err := os.Mkdir(mp, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{{bin, "fsck", "--store", d.store}, {bin, "mount", "--store", d.store, mp}} {
		code, out := asNobody(t, argv...)
		if code != 2 || !strings.Contains(out, "belongs to uid 0 (mode 0700)") || strings.Contains(out, "no longer holds its lock") {
			t.Errorf("nobody's %v: exit %d, %q; want exit 2 naming the store's owner and mode", argv[1:], code, out)
		}
	}
	// A directory inside it (was: "is not a directory").
	if code, out := asNobody(t, bin, "fsck", "--store", filepath.Join(d.store, "data")); code != 2 || !strings.Contains(out, "may not reach it") {
		t.Errorf("nobody's fsck of the store's data: exit %d, %q; want exit 2, may not reach it", code, out)
	}
	if got, err := os.ReadFile(filepath.Join(d.mp, "kept")); err != nil || string(got) != "kept\n" || !d.alive() {
		t.Fatalf("kept after nobody's attempts: %q, %v (daemon alive: %v)", got, err, d.alive())
	}
	d.stop()
}
