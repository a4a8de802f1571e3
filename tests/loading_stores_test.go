package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/loopfs"
	"github.com/kvfs/kvfs/internal/s3test"
	"golang.org/x/sys/unix"
)

// storesWhileLoadingFS is an ext4 of its own for the store: stores while
// the index loads take at most the capacity less what the store's file
// system holds, so on the machine's shared disk they would all wait.
func storesWhileLoadingFS(t *testing.T) (store, dir, mp string) {
	requireRoot(t)
	root := loopfs.Mount(t, loopfs.Spec{Mkfs: []string{"mkfs.ext4", "-q", "-F"}, Size: 256 << 20,
		NoMkfs: "this mkfs.ext4 cannot make the file system"})
	dir, mp = loadingDirs(t)
	store = filepath.Join(root, "store")
	t.Cleanup(func() {
		// After the daemons' cleanups, before the loop file system's
		// unmount: a killed daemon's guard holds the files its writers
		// had open until it sees no file of the mount held
		// (mount/guard.go), and the unmount waits for it to let go.
		if !waitFor(func() bool { return len(holdersOf(store)) == 0 }) {
			t.Errorf("files of the store still held open by processes %v", holdersOf(store))
		}
	})
	return store, dir, mp
}

// diskUsed is what the file system holding dir holds, in bytes.
func diskUsed(t *testing.T, dir string) int64 {
	var sf unix.Statfs_t
	if err := unix.Statfs(dir, &sf); err != nil {
		t.Fatal(err)
	}
	return int64(sf.Blocks-sf.Bfree) * sf.Bsize
}

// markers counts the crash markers under the store's writing/.
func markers(t *testing.T, store string) int {
	names, err := markerNames(filepath.Join(store, "writing"))
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

// waitMarkersCleared waits for every writer's crash marker to go: each
// goes at its writer's RELEASE, which the kernel sends after close(2)
// returns.
func waitMarkersCleared(t *testing.T, store string) {
	t.Helper()
	if !waitFor(func() bool { return markers(t, store) == 0 }) {
		t.Fatalf("%d crash markers left %v after the writers' close", markers(t, store), hangGuard)
	}
}

// TestStoresWhileLoading: a start that serves while its index loads
// takes stores of new names too, the way connectors make them: LMCache's
// fs_native (a temporary name, written and closed, linked to the final
// name and unlinked), SGLang's (written, then renamed) and vLLM's file
// tier's (directories made, written, replaced), and rm and mv of stored
// names. Each reads back while loading. A writer still open when the index is built goes
// on through the core; a write past the budget (the capacity less what
// the store's disk holds) waits for the index and then completes; a
// store over an existing name waits as before. Once loaded, the ledger
// counts exactly what is stored, no marker is left, and fsck finds the
// store sound.
func TestStoresWhileLoading(t *testing.T) {
	store, dir, mp := storesWhileLoadingFS(t)
	d := startDaemon(t, mp, "--store", store, "--capacity", "64MiB", "--serve-while-loading", "-1")
	if err := os.Mkdir(filepath.Join(mp, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for i := range 40 {
		name := fmt.Sprintf("d/o%d.data", i)
		want[name] = bytes.Repeat([]byte{byte(i + 1)}, 256<<10)
		if err := os.WriteFile(filepath.Join(mp, name), want[name], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d.stop()

	// The budget: 3 MiB past what the disk holds now.
	capacity := ceil4096(diskUsed(t, store)) + 3<<20
	d, open := startLoading(t, dir, mp, "--store", store, "--capacity", strconv.FormatInt(capacity, 10),
		"--serve-while-loading", "40")

	cl := &fsNative{base: filepath.Join(mp, "d"), seq: new(atomic.Int64)}
	a := bytes.Repeat([]byte("A"), 256<<10)
	if wrote, err := cl.store("A", a); !wrote || err != nil {
		t.Fatalf("fs_native store while loading: wrote %v, %v", wrote, err)
	}
	want["d/A.data"] = a
	b := bytes.Repeat([]byte("B"), 200<<10+17)
	if err := os.WriteFile(filepath.Join(mp, "d/B.tmp"), b, 0o644); err != nil {
		t.Fatalf("write while loading: %v", err)
	}
	if err := os.Rename(filepath.Join(mp, "d/B.tmp"), filepath.Join(mp, "d/B.data")); err != nil {
		t.Fatalf("rename while loading: %v", err)
	}
	want["d/B.data"] = b
	if err := os.WriteFile(filepath.Join(mp, "d/gone.data"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mp, "d/gone.data")); err != nil {
		t.Fatalf("unlink of a name made while loading: %v", err)
	}
	// Stored names, deleted and moved as rm and mv do: served while
	// loading, not held until the index is built; a reader of the one
	// deleted holds it open across its deletion, its name's next store
	// and the switch.
	oldO1 := want["d/o1.data"]
	reader, err := os.Open(filepath.Join(mp, "d/o1.data"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	readHeld := func(when string) {
		t.Helper()
		got := make([]byte, len(oldO1)+1)
		n, err := reader.ReadAt(got, 0)
		var st unix.Stat_t
		if serr := unix.Fstat(int(reader.Fd()), &st); n != len(oldO1) || !bytes.Equal(got[:n], oldO1) || serr != nil || st.Size != int64(len(oldO1)) {
			t.Fatalf("%s, a reader of the deleted d/o1.data read %d bytes (%v), fstat size %d (%v); want the %d it had",
				when, n, err, st.Size, serr, len(oldO1))
		}
	}
	for _, cmd := range [][]string{
		{"rm", filepath.Join(mp, "d/o1.data")},
		{"mv", filepath.Join(mp, "d/o2.data"), filepath.Join(mp, "d/o2moved.data")},
	} {
		servedWhileLoading(t, fmt.Sprint(cmd), func() error {
			if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
				return fmt.Errorf("%v\n%s", err, out)
			}
			return nil
		})
	}
	want["d/o2moved.data"] = want["d/o2.data"]
	delete(want, "d/o2.data")
	// A name deleted while loading is stored again, as a connector's
	// next store of the key does.
	want["d/o1.data"] = bytes.Repeat([]byte("1"), 100<<10)
	if wrote, err := cl.store("o1", want["d/o1.data"]); !wrote || err != nil {
		t.Fatalf("fs_native store of a name deleted while loading: wrote %v, %v", wrote, err)
	}
	readHeld("while loading")
	// vLLM's file tier makes two levels of directories by hash as it
	// stores (makedirs), then writes a temporary name and replaces.
	vdir := filepath.Join(mp, "m_r0", "a1c", "de_g0")
	want["m_r0/a1c/de_g0/h.bin"] = bytes.Repeat([]byte("V"), 128<<10)
	servedWhileLoading(t, "vLLM's makedirs and store", func() error {
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		tmp := filepath.Join(vdir, "h.bin_1.tmp")
		if err := os.WriteFile(tmp, want["m_r0/a1c/de_g0/h.bin"], 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, filepath.Join(vdir, "h.bin"))
	})
	// Clients as the world writes them: a shell's redirect (the shell
	// closes its copy of the descriptor while the child writes), and dd.
	for _, cmd := range [][]string{
		{"sh", "-c", "printf 'shell %s' \"$0\" > " + filepath.Join(mp, "d/sh.data"), "redirect"},
		{"dd", "if=/dev/zero", "of=" + filepath.Join(mp, "d/dd.data"), "bs=64k", "count=4", "status=none"},
	} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v while loading: %v\n%s", cmd, err, out)
		}
	}
	want["d/sh.data"], want["d/dd.data"] = []byte("shell redirect"), make([]byte, 256<<10)
	// A writer held open across the switch.
	held, err := os.OpenFile(filepath.Join(mp, "d/C.data"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	c := bytes.Repeat([]byte("C"), 150<<10)
	if _, err := held.Write(c[:100<<10]); err != nil {
		t.Fatalf("a held writer's write while loading: %v", err)
	}
	if err := held.Sync(); err != nil {
		t.Fatalf("a held writer's fsync while loading: %v", err)
	}
	want["d/C.data"] = c[:100<<10] // so far
	for name, data := range want {
		if got, err := os.ReadFile(filepath.Join(mp, name)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("while loading, %s read %d bytes (%v), want %d", name, len(got), err, len(data))
		}
	}
	want["d/C.data"] = c
	gone := []string{"d/B.tmp", "d/gone.data", "d/o2.data"}
	for _, name := range gone {
		if _, err := os.Stat(filepath.Join(mp, name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("while loading, %s: %v, want ENOENT", name, err)
		}
	}
	if s := dirNames(t, filepath.Join(mp, "d")); len(s) != 45 { // 38 old, o1 again, o2moved, A, B, C, sh, dd (fs_native's temp names unlinked)
		t.Fatalf("listing while loading: %v", s)
	}
	// Past the budget: a 4 MiB object waits for the index, part written.
	big := bytes.Repeat([]byte("E"), 4<<20)
	bigDone := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(filepath.Join(mp, "d/E.data"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			for off := 0; off < len(big) && err == nil; off += 1 << 20 {
				_, err = f.Write(big[off : off+1<<20])
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		bigDone <- err
	}()
	want["d/E.data"] = big
	// A store over a name the store held waits for the index.
	over := bytes.Repeat([]byte{0x5a}, 4096)
	overDone := make(chan error, 1)
	go func() { overDone <- os.WriteFile(filepath.Join(mp, "d/o0.data"), over, 0o644) }()
	if !waitFor(func() bool {
		st, err := os.Stat(filepath.Join(store, "data/d/E.data"))
		return err == nil && st.Size() >= 1<<20
	}) {
		t.Fatal("the store past the budget never wrote its first MiB")
	}
	select {
	case err := <-bigDone:
		t.Fatalf("a store past the budget finished while loading (%v)", err)
	case err := <-overDone:
		t.Fatalf("a store over a stored name finished while loading (%v)", err)
	default:
	}
	if got, _ := os.ReadFile(filepath.Join(store, "data/d/o0.data")); !bytes.Equal(got, want["d/o0.data"]) {
		t.Fatal("a store over a stored name reached the store while loading")
	}
	var loading struct {
		Loading bool `json:"loading"`
	}
	statsJSON(t, mp, &loading)
	if !loading.Loading {
		t.Fatal("kvfs stats: not loading while the load is held")
	}

	open()
	for what, ch := range map[string]chan error{"store past the budget": bigDone, "store over a stored name": overDone} {
		finishes(t, ch, "the "+what+", once loaded")
	}
	want["d/o0.data"] = over
	if !d.printed("stores taken while the index loaded are in it") {
		t.Fatalf("the daemon did not settle the stores taken while loading:\n%s", d.out)
	}
	// The stored names deleted and moved here, before the held load
	// listed their directory, are gone from the clean stop's
	// checkpoint: the clients' own, not changes behind kvfs's back (an
	// outside tester read that warning).
	if out := d.outSoFar(); strings.Contains(out, "behind kvfs's back") || !strings.Contains(out, "removed or moved by clients while the index loaded") {
		t.Errorf("the start's word on the names removed while loading:\n%s", out)
	}
	readHeld("once loaded")
	reader.Close()
	if _, err := held.Write(c[100<<10:]); err != nil {
		t.Fatalf("the held writer's write once loaded: %v", err)
	}
	if err := held.Sync(); err != nil {
		t.Fatalf("the held writer's fsync once loaded: %v", err)
	}
	if err := held.Close(); err != nil {
		t.Fatalf("the held writer's close once loaded: %v", err)
	}
	// The stores past the budget made room by evicting the oldest
	// objects; everything stored while loading, or since, is there.
	var sum, n, evicted int64
	for name, data := range want {
		got, err := os.ReadFile(filepath.Join(mp, name))
		if errors.Is(err, os.ErrNotExist) && name != "d/o0.data" && name != "d/o2moved.data" && len(data) == 256<<10 && name[2] == 'o' {
			evicted++
			continue
		}
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("loaded, %s read %d bytes (%v), want %d", name, len(got), err, len(data))
		}
		sum += ceil4096(int64(len(data)))
		n++
	}
	s := stats(t, mp)
	if s.Objects != n || s.UsedBytes != sum || sum > capacity || evicted == 0 {
		t.Fatalf("loaded: %d objects, %d bytes used of %d; want %d, %d (%d evicted to make room)",
			s.Objects, s.UsedBytes, capacity, n, sum, evicted)
	}
	for _, name := range gone {
		if _, err := os.Stat(filepath.Join(mp, name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("loaded, %s: %v, want ENOENT", name, err)
		}
	}
	waitMarkersCleared(t, store)
	d.stop()
	requireCleanFsck(t, store, s)
}

// TestStoresWhileLoadingCrash: a crash while the index loads keeps what
// a crash keeps: a store taken while loading and finished is there at the
// next start, one whose writer was still open is deleted, so is a stored
// name deleted while loading, and the ledger counts exactly what is left.
func TestStoresWhileLoadingCrash(t *testing.T) {
	store, dir, mp := storesWhileLoadingFS(t)
	d := startDaemon(t, mp, "--store", store, "--capacity", "64MiB", "--serve-while-loading", "-1")
	old := bytes.Repeat([]byte("o"), 64<<10)
	for _, name := range []string{"old.data", "rm.data"} {
		if err := os.WriteFile(filepath.Join(mp, name), old, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d.stop()
	d, _ = startLoading(t, dir, mp, "--store", store, "--capacity", "64MiB", "--serve-while-loading", "1")
	servedWhileLoading(t, "an unlink of a stored name", func() error { return os.Remove(filepath.Join(mp, "rm.data")) })
	done := bytes.Repeat([]byte("F"), 300<<10)
	if err := os.WriteFile(filepath.Join(mp, "done.data"), done, 0o644); err != nil {
		t.Fatalf("a store while loading: %v", err)
	}
	// Finished at its RELEASE: a kill before it would leave done.data
	// marked. (While the index loads, the stats count no pins.)
	waitMarkersCleared(t, store)
	half, err := os.Create(filepath.Join(mp, "half.data"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := half.Write(done[:100<<10]); err != nil {
		t.Fatal(err)
	}
	d.kill9()
	half.Close()
	d = startDaemon(t, mp, "--store", store, "--capacity", "64MiB", "--serve-while-loading", "-1")
	for name, data := range map[string][]byte{"old.data": old, "done.data": done} {
		if got, err := os.ReadFile(filepath.Join(mp, name)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("after a crash while loading, %s read %d bytes (%v), want %d", name, len(got), err, len(data))
		}
	}
	if _, err := os.Stat(filepath.Join(mp, "half.data")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the store whose writer was open at the crash: %v, want ENOENT", err)
	}
	if _, err := os.Stat(filepath.Join(mp, "rm.data")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a stored name deleted while loading, after a crash: %v, want ENOENT", err)
	}
	if s := stats(t, mp); s.Objects != 2 || s.UsedBytes != ceil4096(int64(len(old)))+ceil4096(int64(len(done))) {
		t.Fatalf("after a crash while loading: %d objects, %d bytes used", s.Objects, s.UsedBytes)
	}
	if n := markers(t, store); n != 0 {
		t.Fatalf("%d crash markers left after the start", n)
	}
	d.stop()
}

// servedWhileLoading runs what, a request the load serves, and fails if
// it errs or waits for the index. One that waits is not killed (the
// kernel holds a request the daemon has read until it answers): the
// test's cleanup stops the daemon, which ends it.
func servedWhileLoading(t *testing.T, what string, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	finishes(t, done, what+" while loading")
}

// finishes fails t if what, which reports on ch, fails or does not
// finish within hangGuard (a request that waits for the index, say).
func finishes(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(hangGuard):
		t.Fatalf("%s: not done after %v (waiting for the index?)", what, hangGuard)
	}
}

// holdersOf lists the processes that hold a file under dir open.
func holdersOf(dir string) []string {
	procs, _ := os.ReadDir("/proc")
	var out []string
	for _, p := range procs {
		fds, err := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name()))
			if err == nil && (target == dir || len(target) > len(dir) && target[:len(dir)+1] == dir+"/") {
				out = append(out, p.Name())
				break
			}
		}
	}
	return out
}

// TestStoresAcrossTheSwitch: four connector threads store 2 MiB objects
// the fs_native way (1 MiB writes) while the index loads, and go on
// storing while it is built and handed over: the switch comes with
// stores in flight, some of them past the loading budget and waiting.
// Every store that succeeded reads back byte for byte unless evicted,
// the ledger charges exactly what is stored, within the capacity, and
// fsck finds the store sound.
func TestStoresAcrossTheSwitch(t *testing.T) {
	store, dir, mp := storesWhileLoadingFS(t)
	d := startDaemon(t, mp, "--store", store, "--capacity", "64MiB", "--serve-while-loading", "-1")
	if err := os.WriteFile(filepath.Join(mp, "old.data"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	d.stop()
	capacity := ceil4096(diskUsed(t, store)) + 40<<20
	d, open := startLoading(t, dir, mp, "--store", store, "--capacity", strconv.FormatInt(capacity, 10),
		"--serve-while-loading", "1", "--grace", "0s")

	const writers, each = 4, 10
	var stored, seq atomic.Int64
	done := make(chan error, writers)
	for w := range writers {
		go func() {
			// One process's temporary names: a name made and removed
			// while loading is not made again before the index is built.
			cl := &fsNative{base: mp, seq: &seq}
			for i := range each {
				key := fmt.Sprintf("w%d-%02d", w, i)
				data := bytes.Repeat([]byte(key[:4]), (2<<20)/4)
				if wrote, err := cl.store(key, data); err != nil && !errors.Is(err, errLostPublish) {
					done <- fmt.Errorf("store %s: %w", key, err)
					return
				} else if wrote {
					stored.Add(1)
				}
			}
			done <- nil
		}()
	}
	// The switch while the writers are busy: some stores are through,
	// and more are under way or waiting past the budget.
	if !waitFor(func() bool { return stored.Load() >= writers }) {
		t.Fatal("no stores while loading")
	}
	open()
	for range writers {
		finishes(t, done, "a writer")
	}
	if !d.printed("stores taken while the index loaded are in it") {
		t.Fatalf("the daemon did not settle the stores taken while loading:\n%s", d.out)
	}
	for _, line := range strings.Split(d.outSoFar(), "\n") {
		if strings.Contains(line, "stores taken while the index loaded") {
			t.Logf("the switch: %s", line[strings.IndexByte(line, '{'):]) // writers open then, budget used
		}
	}
	var sum, n int64
	for w := range writers {
		for i := range each {
			key := fmt.Sprintf("w%d-%02d", w, i)
			got, err := os.ReadFile(filepath.Join(mp, key+".data"))
			if errors.Is(err, os.ErrNotExist) {
				continue // evicted to make room
			}
			if err != nil || !bytes.Equal(got, bytes.Repeat([]byte(key[:4]), (2<<20)/4)) {
				t.Fatalf("%s read %d bytes (%v)", key, len(got), err)
			}
			sum += 2 << 20
			n++
		}
	}
	if _, err := os.Stat(filepath.Join(mp, "old.data")); err == nil {
		sum += 64 << 10
		n++
	}
	s := stats(t, mp)
	if s.Objects != n || s.UsedBytes != sum || sum > capacity || n < 10 {
		t.Fatalf("%d objects, %d bytes used of %d; want %d, %d (%d stores succeeded)", s.Objects, s.UsedBytes, capacity, n, sum, stored.Load())
	}
	waitMarkersCleared(t, store)
	d.stop()
	requireCleanFsck(t, store, s)
}

// TestLoadingNameGoneByTheIndex: an open with O_CREAT of a stored name,
// looked up while loading, waits for the index; if the name is gone by
// then (evicted, or deleted in the store), the open creates it, as on
// any mount, rather than failing ENOENT.
func TestLoadingNameGoneByTheIndex(t *testing.T) {
	dir, mp := loadingDirs(t)
	d := startDaemon(t, mp, "--capacity", "64MiB", "--serve-while-loading", "-1")
	if err := os.WriteFile(filepath.Join(mp, "gone.data"), []byte("old bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.stop()
	d, open := startLoading(t, dir, mp, "--capacity", "64MiB", "--serve-while-loading", "1")
	if _, err := os.Stat(filepath.Join(mp, "gone.data")); err != nil {
		t.Fatalf("a stored name while loading: %v", err)
	}
	wrote := make(chan error, 1)
	go func() { wrote <- os.WriteFile(filepath.Join(mp, "gone.data"), []byte("new bytes"), 0o644) }()
	// The open waits for the index; the name goes behind kvfs's back
	// meanwhile, before the load lists its directory.
	if !waitFor(inFuseRequest) {
		t.Fatal("the open never reached the daemon")
	}
	if err := os.Remove(filepath.Join(d.store, "data", "gone.data")); err != nil {
		t.Fatal(err)
	}
	open()
	finishes(t, wrote, "open(O_CREAT) of a name gone by the time the index was built")
	if got, err := os.ReadFile(filepath.Join(mp, "gone.data")); err != nil || string(got) != "new bytes" {
		t.Fatalf("after: %q (%v)", got, err)
	}
	d.stop()
}

// inFuseRequest says whether a thread of this process waits in the
// kernel for a FUSE daemon's answer.
func inFuseRequest() bool {
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		if w, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "wchan")); err == nil &&
			strings.Contains(string(w), "request_wait_answer") {
			return true
		}
	}
	return false
}

// TestLoadingKeepsStoredNamesWithRemote: with a shared tier, a delete of
// a stored name waits for the index while loading, as before deletes
// were taken then: the FS deletes the name from the bucket too, and a
// delete served before it exists would leave the object there for a
// later miss to fetch back. Once loaded, the name is gone from the mount
// and from the bucket.
func TestLoadingKeepsStoredNamesWithRemote(t *testing.T) {
	srv := s3test.New(t)
	dir := t.TempDir()
	a := startRemoteNode(t, srv, dir, "a")
	a.put("kept", objectBytes("kept", 64<<10))
	if f := a.uploaded(); f.Uploads != 1 {
		t.Fatalf("uploads before the restart: %+v", f)
	}
	mp := a.mp
	a.stop()
	d, open := startGatedEnv(t, dir, mp, srv.Env(), "--remote", srv.URL(remotePrefix), "--capacity", "64MiB",
		"--grace", "0s", "--serve-while-loading", "1")
	if !d.printed("while its index loads") {
		t.Fatalf("the start did not serve while loading:\n%s", d.out)
	}
	p := finalPath(mp, "kept")
	removed := make(chan error, 1)
	go func() { removed <- os.Remove(p) }()
	waitFor(func() bool {
		select {
		case err := <-removed:
			t.Fatalf("with a shared tier, a delete of a stored name finished while loading (%v)", err)
		default:
		}
		return inFuseRequest()
	})
	select {
	case err := <-removed:
		t.Fatalf("with a shared tier, a delete of a stored name finished while loading (%v)", err)
	default:
	}
	open()
	finishes(t, removed, "the delete that waited for the index")
	n := &remoteNode{daemon: d}
	if f := n.uploaded(); f.Deletes != 1 {
		t.Fatalf("remote figures once loaded: %+v, want the delete done", f)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the deleted name once loaded: %v, want ENOENT", err)
	}
	d.stop()
}
