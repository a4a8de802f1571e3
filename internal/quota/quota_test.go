package quota

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/internal/loopfs"
	"golang.org/x/sys/unix"
)

// loopFS makes a file system of kind ("ext4" or "xfs") with project
// quotas enforced, on a loop device, mounted in a temporary directory;
// the test's cleanup unmounts it (which frees the loop device). It skips
// where that cannot be done, saying why.
func loopFS(t *testing.T, kind string) string {
	t.Helper()
	return loopfs.Mount(t, loopfs.ProjectQuotas[kind])
}

func TestUnsupportedChangesNothing(t *testing.T) {
	dir := t.TempDir()
	var sf unix.Statfs_t
	if err := unix.Statfs(dir, &sf); err != nil {
		t.Fatal(err)
	}
	if Enforced(dir) == nil {
		t.Skipf("%s enforces project quotas; this test wants a file system that does not", dir)
	}
	if err := os.WriteFile(filepath.Join(dir, "obj"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Apply(dir, 1<<20)
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Apply on a file system without enforced project quotas: %v, want ErrUnsupported", err)
	}
	if _, err := unix.Getxattr(dir, RecordXattr, make([]byte, 64)); err == nil {
		t.Errorf("Apply recorded a project although it capped nothing")
	}
}

func TestApply(t *testing.T) {
	for _, kind := range []string{"ext4", "xfs"} {
		t.Run(kind, func(t *testing.T) { testApply(t, kind) })
	}
}

func testApply(t *testing.T, kind string) {
	fs := loopFS(t, kind)
	if err := Enforced(fs); err != nil {
		t.Fatalf("a %s mounted with project quotas: %v", kind, err)
	}
	store := filepath.Join(fs, "store")
	other := filepath.Join(fs, "other")
	for _, d := range []string{filepath.Join(store, "data", "a"), other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := filepath.Join(store, "data", "a", "old")
	if err := os.WriteFile(old, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := Apply(store, 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	if st.Project == 0 || st.LimitBytes != 32<<20 || st.Tagged != 4 {
		t.Fatalf("Apply: %+v, want a project, a 32 MiB limit and 4 inodes tagged (store, data, a, old)", st)
	}
	if st.UsedBytes < 1<<20 {
		t.Errorf("the project holds %d bytes, want the existing 1 MiB object counted", st.UsedBytes)
	}
	got, err := Read(store)
	if err != nil || got.Project != st.Project || got.LimitBytes != 32<<20 {
		t.Fatalf("Read: %+v, %v; want project %d limited to 32 MiB", got, err, st.Project)
	}
	// Created later: inherited.
	fresh := filepath.Join(store, "data", "a", "new")
	if err := os.WriteFile(fresh, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{old, fresh, filepath.Join(store, "data")} {
		if r, err := Read(filepath.Dir(p)); err != nil || r.Project != st.Project {
			t.Errorf("%s: project %d, %v; want %d", filepath.Dir(p), r.Project, err, st.Project)
		}
		if id := projectOf(t, p); id != st.Project {
			t.Errorf("%s: project %d, want %d", p, id, st.Project)
		}
	}
	// Another capacity: the same project, nothing to tag, the new limit.
	again, err := Apply(store, 48<<20)
	if err != nil || again.Project != st.Project || again.Tagged != 0 || again.LimitBytes != 48<<20 {
		t.Fatalf("second Apply: %+v, %v; want project %d, nothing tagged, a 48 MiB limit", again, err, st.Project)
	}
	// Another directory on the same file system: another project.
	o, err := Apply(other, 16<<20)
	if err != nil || o.Project == st.Project || o.Project == 0 {
		t.Fatalf("Apply on a second directory: %+v, %v; want a project other than %d", o, err, st.Project)
	}
	if r, _ := Read(store); r.LimitBytes != 48<<20 {
		t.Errorf("capping another directory changed the store's limit to %d", r.LimitBytes)
	}
}

func projectOf(t *testing.T, p string) uint32 {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	x, err := getFsx(fd)
	if err != nil {
		t.Fatal(err)
	}
	return x.Projid
}

// TestReexecWithoutResourceCap runs this test binary again as a child
// that re-executes itself without a capability and reports. It sheds
// CAP_LEASE, harmless to lose, since CAP_SYS_RESOURCE is missing in
// some sandboxes; the mechanism is the same.
func TestReexecWithoutResourceCap(t *testing.T) {
	if os.Getenv("KVFS_QUOTA_TEST_CHILD") != "" {
		reexecChild(t)
		return
	}
	if !canShed(unix.CAP_LEASE) {
		t.Skip("needs root holding CAP_LEASE, without SECBIT_NOROOT")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReexecWithoutResourceCap$", "-test.v")
	cmd.Env = append(os.Environ(), "KVFS_QUOTA_TEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "re-executed: CAP_LEASE held=false, in bounding set=false") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func reexecChild(t *testing.T) {
	if os.Getenv(ReexecMarker) == "" {
		err := reexecWithout(unix.CAP_LEASE)
		t.Fatalf("reexecWithout returned: %v", err)
	}
	if canShed(unix.CAP_LEASE) {
		t.Errorf("canShed after the re-exec")
	}
	inBounding, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, unix.CAP_LEASE, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("re-executed: CAP_LEASE held=%v, in bounding set=%v", holds(unix.CAP_LEASE), inBounding == 1)
}

// TestRecord: the record names a project only for the directory it was
// written on.
func TestRecord(t *testing.T) {
	dir := t.TempDir()
	f, err := openFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	if _, ok := record(f.fd, f.ino); ok {
		t.Fatalf("a fresh directory has a record")
	}
	for _, c := range []struct {
		val  string
		want uint32
	}{
		{fmt.Sprintf("%d %d", 1<<30+7, f.ino), 1<<30 + 7},
		{fmt.Sprintf("%d %d", 1<<30+7, f.ino+1), 0}, // copied from another directory
		{fmt.Sprintf("0 %d", f.ino), 0},
		{"junk", 0},
	} {
		if err := unix.Fsetxattr(f.fd, RecordXattr, []byte(c.val), 0); err != nil {
			t.Skipf("no user extended attributes here: %v", err)
		}
		if got, _ := record(f.fd, f.ino); got != c.want {
			t.Errorf("record %q: project %d, want %d", c.val, got, c.want)
		}
	}
}

// TestTagEncoding: FS_IOC_FSGETXATTR and FS_IOC_FSSETXATTR as encoded
// here work on the file system under the test's temporary directory:
// project 0 with PROJINHERIT on a directory is accepted everywhere that
// has the ioctls, and read back.
func TestTagEncoding(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	x, err := getFsx(fd)
	if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("no FS_IOC_FSGETXATTR here: %v", err)
	}
	if err != nil || x.Projid != 0 {
		t.Fatalf("FS_IOC_FSGETXATTR: %+v, %v; want project 0", x, err)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for the rest")
	}
	if _, err := tag(fd, 0, true); err != nil {
		t.Fatalf("setting PROJINHERIT: %v", err)
	}
	if ok, err := tagged(fd, 0, true); !ok || err != nil {
		t.Fatalf("PROJINHERIT not read back: %v", err)
	}
}
