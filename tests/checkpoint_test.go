package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// loadedReport is the daemon's "store loaded" log line.
type loadedReport struct {
	Objects      int64 `json:"objects"`
	Incomplete   int64 `json:"incomplete_reclaimed"`
	Foreign      int64 `json:"foreign_removed"`
	FromSnapshot bool  `json:"from_snapshot"`
	DirsListed   int64 `json:"dirs_listed"`
	Stated       int64 `json:"stated"`
}

func loaded(t *testing.T, d *daemon) loadedReport {
	t.Helper()
	// The line is the log's (stderr), which may come after "kvfs:
	// serving" (stdout) has been read.
	d.printed("store loaded")
	for _, line := range strings.Split(d.out.String(), "\n") {
		if !strings.Contains(line, "store loaded") {
			continue
		}
		var r loadedReport
		if i := strings.IndexByte(line, '{'); i < 0 || json.Unmarshal([]byte(line[i:]), &r) != nil {
			t.Fatalf("cannot read %q", line)
		}
		return r
	}
	t.Fatalf("no \"store loaded\" line:\n%s", d.out.String())
	return loadedReport{}
}

// waitAudited waits for the start-up audit, which reconciles what the
// checkpoint cannot see (objects rewritten in place since).
func waitAudited(t *testing.T, d *daemon) {
	t.Helper()
	if !d.printed("start-up audit done") {
		t.Fatalf("no start-up audit:\n%s", d.out.String())
	}
}

// changeAfterCheckpoint changes the cache through the mount in every
// way a checkpoint must be corrected for, and updates want.
func changeAfterCheckpoint(t *testing.T, mp string, want map[string]object) {
	t.Helper()
	p := func(rel string) string { return filepath.Join(mp, rel) }
	put := func(rel, key string, size int) {
		putFile(t, p(rel), objectBytes(key, size))
		want[rel] = object{key, size}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	put("top/added", "top/added", 2*MiB+5)
	must(os.MkdirAll(p("new/dir"), 0o755))
	put("new/dir/deep", "new/dir/deep", MiB)
	must(os.Remove(p("top/obja")))
	delete(want, "top/obja")
	must(os.Rename(p("top/objb"), p("a/renamed")))
	want["a/renamed"] = want["top/objb"]
	delete(want, "top/objb")
	put("replacement", "replacement", 3000)
	must(os.Rename(p("replacement"), p("top/objc")))
	want["top/objc"] = want["replacement"]
	delete(want, "replacement")
	put("top/objf", "top/objf rewritten", 3*MiB+77) // in place: same inode, new size
	must(os.Link(p("a/b/c/deep"), p("top/deep-link")))
	want["top/deep-link"] = want["a/b/c/deep"]
}

// TestCrashAfterCheckpoint: kill -9 after a checkpoint (a clean stop's)
// and after more changes (stores, a delete, a rename, a replacement, an
// object rewritten in place, a hard link, a new directory, two writes
// left open). The restart starts from the checkpoint, stat'ing only
// what changed; it serves every completed object byte for byte and
// nothing half-written, and once its start-up audit has run, df, du,
// used_bytes and the store agree; fsck finds the store clean.
func TestCrashAfterCheckpoint(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB")
	flags := []string{"--store", d.store, "--capacity", "64MiB"}
	want := populate(t, d.mp)
	assertQuietEqual(t, d)
	d.stop()

	// No checkpoint of its own while it runs: the one above is the last.
	d = startDaemon(t, d.mp, append(flags, "--checkpoint-interval", "0")...)
	if r := loaded(t, d); !r.FromSnapshot || r.Stated != 0 {
		t.Fatalf("start after the clean stop: %+v", r)
	}
	changeAfterCheckpoint(t, d.mp, want)
	crash(t, d, openWriters(t, d.mp))

	d = startDaemon(t, d.mp, flags...)
	r := loaded(t, d)
	t.Logf("start after the crash: %+v", r)
	// Stat'ed: the two stores, the rename, the replacement, the new link
	// (two names of one object, from the walk of the new directory and
	// the listing); the rest comes from the checkpoint.
	if !r.FromSnapshot || r.Incomplete != 2 || r.Stated == 0 || r.Stated > 6 || r.Stated >= r.Objects {
		t.Errorf("start after the crash: %+v; want the checkpoint used and only what changed stat'ed", r)
	}
	waitAudited(t, d)
	verifyTree(t, d.mp, want) // partial.data and the temp file are absent
	st := assertQuietEqual(t, d)
	if st.Objects != int64(len(objectsOf(want))) {
		t.Errorf("%d objects, want %d", st.Objects, len(objectsOf(want)))
	}
	d.stop()
	requireCleanFsck(t, d.store, st)
}

// objectsOf counts the distinct objects of want (names sharing a key
// are one).
func objectsOf(want map[string]object) map[string]bool {
	out := map[string]bool{}
	for _, o := range want {
		out[o.key] = true
	}
	return out
}

// TestCrashAfterPeriodicCheckpoint: the running daemon checkpoints by
// itself; kill -9 after one and a few more stores, and the restart
// comes from it, exact.
func TestCrashAfterPeriodicCheckpoint(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB", "--checkpoint-interval", "50ms")
	flags := []string{"--store", d.store, "--capacity", "64MiB"}
	want := populate(t, d.mp)
	n := assertQuietEqual(t, d).Objects
	saved := func(out string) bool {
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "checkpoint saved") && strings.Contains(line, `"objects": `+strconv.FormatInt(n, 10)+",") {
				return true
			}
		}
		return false
	}
	if !d.waitOutput(saved) {
		t.Fatalf("no checkpoint of %d objects:\n%s", n, d.out.String())
	}
	for _, rel := range []string{"top/late1", "a/b/c/late2"} {
		putFile(t, filepath.Join(d.mp, rel), objectBytes(rel, MiB+1))
		want[rel] = object{rel, MiB + 1}
	}
	crash(t, d, nil)

	d = startDaemon(t, d.mp, flags...)
	r := loaded(t, d)
	t.Logf("start after the crash: %+v", r)
	if !r.FromSnapshot || r.Stated >= n {
		t.Errorf("start after the crash: %+v; want the checkpoint used", r)
	}
	verifyTree(t, d.mp, want)
	waitAudited(t, d)
	st := assertQuietEqual(t, d)
	d.stop()
	requireCleanFsck(t, d.store, st)
}

// TestCheckpointNotTrustedOverHalfWrite: an object that existed at the
// checkpoint and was being rewritten in place at the crash is marked,
// so the restart deletes it although the checkpoint lists it complete.
func TestCheckpointNotTrustedOverHalfWrite(t *testing.T) {
	d := mountCache(t, "--capacity", "64MiB")
	flags := []string{"--store", d.store, "--capacity", "64MiB"}
	putFile(t, filepath.Join(d.mp, "kept"), objectBytes("kept", MiB))
	putFile(t, filepath.Join(d.mp, "rewritten"), objectBytes("rewritten", MiB))
	d.stop()
	d = startDaemon(t, d.mp, append(flags, "--checkpoint-interval", "0")...)
	fd, err := unix.Open(filepath.Join(d.mp, "rewritten"), unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFull(fd, objectBytes("half", 2*MiB)[:MiB+7]); err != nil {
		t.Fatal(err)
	}
	crash(t, d, []int{fd})

	d = startDaemon(t, d.mp, flags...)
	if r := loaded(t, d); !r.FromSnapshot || r.Incomplete != 1 {
		t.Errorf("start after the crash: %+v", r)
	}
	verifyTree(t, d.mp, map[string]object{"kept": {"kept", MiB}})
	st := assertQuietEqual(t, d)
	d.stop()
	requireCleanFsck(t, d.store, st)
}
