package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// runAs runs a command with the environment given (added to a minimal
// one) and, when uid >= 0, as that user; it returns its exit code and
// output.
func runAs(t *testing.T, uid int, env []string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return r
}

// buildCUDAStubs compiles gpudirect's stand-ins for libcufile.so.0 and
// libcudart.so.12 (C, with NVIDIA's signatures; "device memory" is host
// memory) into dir, the ones named in which.
func buildCUDAStubs(t *testing.T, dir string, which ...string) {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("needs a C compiler (gcc) to build the cuFile and CUDA runtime stand-ins")
	}
	src, _ := filepath.Abs("../gpudirect/testdata/stubcuda.c")
	defs := map[string]string{"libcufile.so.0": "-DSTUB_CUFILE", "libcudart.so.12": "-DSTUB_CUDART"}
	for _, lib := range which {
		if b, err := exec.Command(cc, "-shared", "-fPIC", "-O1", defs[lib], "-o", filepath.Join(dir, lib), src).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", lib, err, b)
		}
	}
}

// `kvfs cat --direct --gpu 0` on a machine without cuFile (or without
// any CUDA) says so once, whatever the number of objects, reads through
// host memory, and verifies; with the libraries present (stand-ins here)
// cuFile carries the bytes; cuFile refusing a store (ramfs: no O_DIRECT)
// is said once and the host path serves.
func TestGPUDirectCuFileAbsentReported(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB")
	var paths []string
	for i, size := range []int{4097, 1 << 20, 5} {
		p := filepath.Join(d.mp, fmt.Sprintf("obj-%d.data", i))
		putFile(t, p, objectBytes(p, size))
		paths = append(paths, p)
	}
	none, rtOnly, both := t.TempDir(), t.TempDir(), t.TempDir()
	buildCUDAStubs(t, rtOnly, "libcudart.so.12")
	buildCUDAStubs(t, both, "libcudart.so.12", "libcufile.so.0")
	args := append([]string{"cat", "--direct", "--gpu", "0", "--verify"}, paths...)
	for _, c := range []struct {
		libs, notice, route string
	}{
		{none, "no CUDA runtime", "into host buffers (1MiB x 4)"},
		{rtOnly, "cuFile unavailable", "then cudaMemcpy to the GPU"},
		{both, "", "cuFile into the GPU"},
	} {
		res := runAs(t, -1, []string{"LD_LIBRARY_PATH=" + c.libs}, kvfsBin, args...)
		lines := strings.Count(res.stderr, "\n")
		if res.code != 0 || strings.Count(res.stdout, "matches a plain read") != len(paths) || strings.Count(res.stdout, c.route) != len(paths) {
			t.Fatalf("LD_LIBRARY_PATH=%s kvfs %v: exit %d, want every object via %q\nstdout:\n%s\nstderr:\n%s", c.libs, args, res.code, c.route, res.stdout, res.stderr)
		}
		if (c.notice == "" && lines != 0) || (c.notice != "" && (lines != 1 || !strings.Contains(res.stderr, c.notice))) {
			t.Fatalf("libraries in %s: stderr %q; want %q said once", c.libs, res.stderr, c.notice)
		}
	}
	store := filepath.Join(mountFS(t, "ramfs"), "store")
	mp := filepath.Join(t.TempDir(), "mnt")
	os.Mkdir(mp, 0o755)
	rd := startDaemon(t, mp, "--store", store, "--capacity", "16MiB")
	var onRamfs []string
	for i := 0; i < 2; i++ {
		p := filepath.Join(rd.mp, fmt.Sprintf("r-%d.data", i))
		putFile(t, p, objectBytes(p, 9000))
		onRamfs = append(onRamfs, p)
	}
	res := runAs(t, -1, []string{"LD_LIBRARY_PATH=" + both}, kvfsBin, append([]string{"cat", "--direct", "--gpu", "0", "--verify"}, onRamfs...)...)
	if res.code != 0 || strings.Count(res.stderr, "cuFile refuses the stored file") != 1 ||
		strings.Count(res.stdout, "then cudaMemcpy to the GPU") != 2 || strings.Count(res.stdout, "matches a plain read") != 2 {
		t.Fatalf("cuFile on a ramfs store: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
}

// nobody is the unprivileged user the permission tests run as.
const nobody = 65534

// nobodyMount serves a fresh store with --allow-other in a directory
// every user can traverse, beside a copy of kvfs that nobody can run
// (the binary under test may sit where nobody cannot reach it). It
// returns the daemon and the copy's path.
func nobodyMount(t *testing.T) (*daemon, string) {
	t.Helper()
	requireRoot(t)
	base := worldDir(t)
	bin := filepath.Join(base, "kvfs")
	if b, err := exec.Command("cp", kvfsBin, bin).CombinedOutput(); err != nil {
		t.Fatalf("copying kvfs: %v %s", err, b)
	}
	mp := filepath.Join(base, "mnt")
	os.Mkdir(mp, 0o755)
	return startDaemon(t, mp, "--store", filepath.Join(base, "store"), "--capacity", "64MiB", "--allow-other"), bin
}

// A user reaches over the direct path exactly what it can read through
// the mount: each object below is read by uid 65534 both ways, and the
// two must agree, with at least one of each answer so that the test
// cannot pass by refusing (or allowing) everything.
func TestGPUDirectPermissions(t *testing.T) {
	d, bin := nobodyMount(t)
	objects := []struct {
		name string
		mode os.FileMode
		uid  int
		can  bool
	}{
		{"public.data", 0o644, 0, true},
		{"secret.data", 0o600, 0, false},
		{"group-only.data", 0o640, 0, false},
		{"mine.data", 0o600, nobody, true},
		{"private/inner.data", 0o644, 0, false}, // in a 0700 directory
		{"open/inner.data", 0o644, 0, true},
	}
	os.Mkdir(filepath.Join(d.mp, "private"), 0o700)
	os.Mkdir(filepath.Join(d.mp, "open"), 0o755)
	for _, o := range objects {
		p := filepath.Join(d.mp, o.name)
		putFile(t, p, objectBytes(p, 10000))
		if err := os.Chmod(p, o.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, o.uid, o.uid); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range objects {
		p := filepath.Join(d.mp, o.name)
		plain := runAs(t, nobody, nil, "head", "-c", "1", p)
		direct := runAs(t, nobody, nil, bin, "cat", "--direct", "--verify", "--chunk", "64KiB", "--depth", "2", p)
		if (plain.code == 0) != o.can || (direct.code == 0) != o.can {
			t.Fatalf("%s (mode %v, uid %d) as uid %d: plain read exit %d (%s), direct exit %d (%s%s); want both to succeed: %v",
				o.name, o.mode, o.uid, nobody, plain.code, plain.stderr, direct.code, direct.stdout, direct.stderr, o.can)
		}
		// Exit 1, whether the stat or the open is refused: the path is
		// an object (exit 2 is for one that is not; an outside tester
		// found the two refusals answered differently).
		if !o.can && (direct.code != 1 || !strings.Contains(direct.stderr+direct.stdout, "permission denied")) {
			t.Fatalf("%s refused with exit %d: %s%s; want exit 1 saying permission denied", o.name, direct.code, direct.stdout, direct.stderr)
		}
		// The store behind the mount agrees: its files carry the same
		// owners and modes, so reading them directly is refused alike.
		rel := filepath.Join(d.store, "data", o.name)
		if st := runAs(t, nobody, nil, "head", "-c", "1", rel); (st.code == 0) != o.can {
			t.Fatalf("%s's stored file %s as uid %d: exit %d (%s); want success %v", o.name, rel, nobody, st.code, st.stderr, o.can)
		}
	}
	// A hard link in a public directory to an object first named in a
	// 0700 one: the direct path names the stored file by the link the
	// user may reach, never the other (an outside tester: the first name
	// was given, leaking a name from another user's private directory,
	// and the user's direct load failed).
	first, linked := filepath.Join(d.mp, "private", "first-secret-name.data"), filepath.Join(d.mp, "open", "linked.data")
	putFile(t, first, objectBytes(first, 10000))
	if err := os.Link(first, linked); err != nil {
		t.Fatal(err)
	}
	direct := runAs(t, nobody, nil, bin, "cat", "--direct", "--verify", linked)
	if direct.code != 0 {
		t.Fatalf("direct load of %s (linked from a 0700 directory) as uid %d: exit %d (%s%s); want it read", linked, nobody, direct.code, direct.stdout, direct.stderr)
	}
	backing, err := xattrAs(nobody, linked, "user.kvfs.backing")
	if want := filepath.Join(d.store, "data", "open", "linked.data"); err != nil || backing != want {
		t.Fatalf("user.kvfs.backing of %s as uid %d: %q, %v; want %q", linked, nobody, backing, err, want)
	}
}

// xattrAs reads extended attribute name of path as user uid: with its
// file system IDs, on a thread of its own (setfsuid is a thread's), which
// FUSE names as the caller.
func xattrAs(uid int, path, name string) (string, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unix.Setfsgid(uid)
	unix.Setfsuid(uid)
	defer unix.Setfsgid(0)
	defer unix.Setfsuid(0)
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(path, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
