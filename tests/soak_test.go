package tests

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var (
	soakFor     = flag.Duration("soak", 12*time.Second, "how long TestSoak runs its workload (-soak=10m for a long local run)")
	soakRaceFor = flag.Duration("soak-race", 10*time.Second, "how long TestSoakRace runs against a -race build of the daemon")
)

// soakConfig sizes one soak run.
type soakConfig struct {
	duration                             time.Duration
	capacity                             int64
	keys                                 int
	minSize, maxSize                     int // an object's bytes
	writers, readers, deleters, renamers int
	flags                                []string // more kvfs mount flags
}

// soakCounters is what a soak did, by kind of operation.
type soakCounters struct {
	storeTries                                              progress // the others act every so many
	stored, present, enospc, lostPublish, bytesWritten      atomic.Int64
	loads, loadMisses, bytesRead                            atomic.Int64
	deletes, renames, renameMisses, renamesBack, dirRenames atomic.Int64
	walks, walkedFiles, dfSamples, maxDf, statsSamples      atomic.Int64
}

// soakDirs are the two names one directory of moved objects alternates
// between, renamed while objects in it are being read, moved and deleted.
var soakDirs = [2]string{"moved-a", "moved-b"}

// TestSoak runs many concurrent fs_native writers, readers, deleters and
// renamers of multi-MiB objects over a capacity far below the data for
// -soak (12s by default), sampling all along that df used stays within
// the capacity and that every read is exact or ENOENT; quiesced, df ==
// du == used_bytes == the store's bytes, and fsck finds the store clean.
func TestSoak(t *testing.T) {
	runSoak(t, kvfsBin, soakConfig{duration: *soakFor, capacity: 40 * MiB, keys: 48, minSize: MiB, maxSize: 6 * MiB,
		writers: 4, readers: 3, deleters: 1, renamers: 2})
}

// TestSoakRace is a shorter soak against a daemon built with -race and
// the lock-order checker: it fails on any data race the daemon reports,
// and on a lock taken out of order (the request fails). It reads without
// passthrough and through a RAM tier small enough to keep evicting, so
// the daemon's own read path and the tier's fills and drops race the
// writers, deleters and evictions (TestSoak covers passthrough).
func TestSoakRace(t *testing.T) {
	requireRoot(t)
	bin := filepath.Join(t.TempDir(), "kvfs-race")
	// With the lock-order checker too: the unit tests build every
	// package so (make unit), which the build reuses, and a lock taken
	// out of order in the daemon fails its request.
	build := exec.Command("go", "build", "-race", "-tags", "lockcheck", "-o", bin, "github.com/kvfs/kvfs/cmd/kvfs")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -race: %v\n%s", err, out)
	}
	d := runSoak(t, bin, soakConfig{duration: *soakRaceFor, capacity: 8 * MiB, keys: 32, minSize: 64 << 10, maxSize: 1536 << 10,
		writers: 3, readers: 2, deleters: 1, renamers: 1, flags: []string{"--no-passthrough", "--ram-cache", "4MiB"}})
	if strings.Contains(d.out.String(), "WARNING: DATA RACE") {
		t.Errorf("the -race daemon reported a data race")
	}
}

func runSoak(t *testing.T, bin string, cfg soakConfig) *daemon {
	_, mp, store := mountDirs(t)
	flags := append([]string{"--store", store, "--capacity", fmt.Sprint(cfg.capacity), "--grace", "300ms"}, cfg.flags...)
	d := startDaemonBin(t, bin, mp, flags...)
	if err := os.Mkdir(filepath.Join(mp, soakDirs[0]), 0o755); err != nil {
		t.Fatal(err)
	}
	keys := workloadKeys(cfg.keys, cfg.minSize, cfg.maxSize)
	var total int64
	for _, k := range keys {
		total += int64(k.size)
	}
	start := time.Now()
	s := &soak{t: t, mp: mp, keys: keys, names: keyIndex(keys), seq: &atomic.Int64{}, until: start.Add(cfg.duration),
		ram: slices.Contains(cfg.flags, "--ram-cache")}
	// The writers store until the run's length is up; the others act
	// every so many stores tried, the mix a run of 10 s measured with
	// pauses between operations before.
	tries := &s.c.storeTries
	var writers, others sync.WaitGroup
	for w := range cfg.writers {
		cl := &fsNative{base: mp, direct: w%2 == 1, whole: w%4 >= 2, seq: s.seq}
		buf := alignedBuffer(t, 6*MiB)
		writers.Go(func() { s.writer(w, cl, buf) })
	}
	others.Go(func() { tries.every(1, func() { s.sampleDf(cfg.capacity) }) })
	others.Go(func() { tries.every(64, func() { s.sampleStats(cfg.capacity) }) })
	for r := range cfg.readers {
		others.Go(func() { s.reader(r) })
	}
	for r := range cfg.deleters {
		others.Go(func() { s.deleter(r) })
	}
	for r := range cfg.renamers {
		others.Go(func() { s.renamer(r) })
	}
	others.Go(s.dirRenamer)
	others.Go(s.walker)
	writers.Wait()
	tries.end()
	others.Wait()
	elapsed := time.Since(start)

	st := assertQuietEqual(t, d)
	files := s.verifyAll()
	c := &s.c
	t.Logf("soak of %v (%s daemon): %d MiB of distinct objects over a %d MiB capacity", elapsed.Round(time.Millisecond),
		filepath.Base(bin), total/MiB, cfg.capacity/MiB)
	t.Logf("stores: %d tried, %d written (%d MiB), %d already present, %d ENOSPC, %d temp files evicted before link",
		c.storeTries.Load(), c.stored.Load(), c.bytesWritten.Load()/MiB, c.present.Load(), c.enospc.Load(), c.lostPublish.Load())
	t.Logf("loads: %d verified exact (%d MiB), %d absent; deletes %d; renames %d (+%d back, %d found nothing), directory renames %d; walks %d (%d files)",
		c.loads.Load(), c.bytesRead.Load()/MiB, c.loadMisses.Load(), c.deletes.Load(), c.renames.Load(), c.renamesBack.Load(),
		c.renameMisses.Load(), c.dirRenames.Load(), c.walks.Load(), c.walkedFiles.Load())
	t.Logf("df sampled %d times (max %d MiB), stats %d times; evictions %d (%d MiB); quiesced: %d objects, %d bytes, all %d files exact",
		c.dfSamples.Load(), c.maxDf.Load()/MiB, c.statsSamples.Load(), st.Evictions, st.EvictedBytes/MiB, st.Objects, st.UsedBytes, files)
	if !s.exercised() || st.Evictions == 0 {
		t.Errorf("the soak did not exercise the cache: %d stored, %d loads, %d renames, %d dir renames, %d evictions",
			c.stored.Load(), c.loads.Load(), c.renames.Load(), c.dirRenames.Load(), st.Evictions)
	}
	if n := c.storeTries.Load(); c.enospc.Load()*10 > n {
		t.Errorf("%d of %d stores failed with ENOSPC: backpressure should absorb a load like this", c.enospc.Load(), n)
	}
	if c.bytesWritten.Load() < 3*cfg.capacity {
		t.Errorf("only %d MiB written over a %d MiB capacity", c.bytesWritten.Load()/MiB, cfg.capacity/MiB)
	}
	if slices.Contains(cfg.flags, "--ram-cache") {
		var ram struct {
			R map[string]int64 `json:"ram_cache"`
		}
		out := runKvfs(t, "stats", "--json", d.mp).stdout
		if err := json.Unmarshal([]byte(out), &ram); err != nil || ram.R["fills"] == 0 || ram.R["hits"] == 0 {
			t.Errorf("the RAM tier was not exercised (%v): %s", err, out)
		}
		t.Logf("RAM tier: %v", ram.R)
	}
	requireCleanLog(t, d)
	d.stop()
	requireCleanFsck(t, d.store, st)
	return d
}

type soak struct {
	t     *testing.T
	mp    string
	keys  []kvKey
	names map[string]kvKey
	seq   *atomic.Int64
	until time.Time // the run's end: the workload's length
	stop  atomic.Bool
	c     soakCounters
	// ram: the mount has a RAM tier, which the run must see hit once;
	// ramHit once it has, ramChecked when the stats were last read.
	ram        bool
	ramHit     atomic.Bool
	ramChecked atomic.Int64
}

// fail reports a broken promise and stops the workload.
func (s *soak) fail(format string, args ...any) {
	s.t.Errorf(format, args...)
	s.stop.Store(true)
}

// storing reports whether the writers go on: nothing has failed, and
// the run has time left or, on a machine too starved for its length,
// has not yet done each kind of operation once (within the hang guard
// past its length; CI once ended a 15 s run with no rename, the
// renamers having found nothing to rename in their 4 tries, and a run
// here with no RAM tier hit in its 11 loads).
func (s *soak) storing() bool {
	if s.stop.Load() {
		return false
	}
	now := time.Now()
	return now.Before(s.until) || !s.exercised() && now.Before(s.until.Add(hangGuard))
}

// exercised says whether every kind of operation the verdict asks for
// has happened at least once.
func (s *soak) exercised() bool {
	c := &s.c
	return c.stored.Load() > 0 && c.loads.Load() > 0 && c.renames.Load() > 0 && c.dirRenames.Load() > 0 && s.ramExercised()
}

// ramExercised says whether the RAM tier, if the mount has one, has
// served a hit, from the stats read at most once a second.
func (s *soak) ramExercised() bool {
	if !s.ram || s.ramHit.Load() {
		return true
	}
	now, last := time.Now().UnixNano(), s.ramChecked.Load()
	if now-last < int64(time.Second) || !s.ramChecked.CompareAndSwap(last, now) {
		return false
	}
	var st struct {
		R map[string]int64 `json:"ram_cache"`
	}
	if json.Unmarshal([]byte(runKvfsTimeout(nil, 10*time.Second, "stats", "--json", s.mp).stdout), &st) == nil && st.R["hits"] > 0 {
		s.ramHit.Store(true)
	}
	return s.ramHit.Load()
}

// sampleDf checks that df used stays within the capacity.
func (s *soak) sampleDf(capacity int64) {
	if !s.stop.Load() {
		used, err := dfUsed(s.mp)
		if err != nil {
			s.fail("statfs: %v", err)
			return
		}
		s.c.dfSamples.Add(1)
		if used > s.c.maxDf.Load() {
			s.c.maxDf.Store(used)
		}
		if used > capacity {
			s.fail("df used %d exceeds the capacity %d", used, capacity)
			return
		}
	}
}

// sampleStats checks the ledger itself, through kvfs stats.
func (s *soak) sampleStats(capacity int64) {
	if !s.stop.Load() {
		res := runKvfs(nil, "stats", "--json", s.mp)
		var st kvfsStats
		if err := json.Unmarshal([]byte(res.stdout), &st); res.code != 0 || err != nil {
			s.fail("kvfs stats during the soak: exit %d, %v, stderr %q", res.code, err, res.stderr)
			return
		}
		s.c.statsSamples.Add(1)
		if st.UsedBytes > capacity || st.UsedBytes < 0 || st.PinnedBytes > st.UsedBytes || st.ShadowBytes > st.UsedBytes {
			s.fail("kvfs stats during the soak: %+v", st)
			return
		}
	}
}

func (s *soak) writer(w int, cl *fsNative, buf []byte) {
	r := rand.New(rand.NewPCG(uint64(w), 21))
	for s.storing() {
		k := s.keys[r.IntN(len(s.keys))]
		data := buf[:k.size]
		fillObject(data, k.key)
		s.c.storeTries.Add(1)
		wrote, err := cl.store(k.key, data)
		switch {
		case err == nil && wrote:
			s.c.stored.Add(1)
			s.c.bytesWritten.Add(int64(k.size))
		case err == nil:
			s.c.present.Add(1)
		case errors.Is(err, unix.ENOSPC):
			s.c.enospc.Add(1)
		case errors.Is(err, errLostPublish), errors.Is(err, unix.ENOENT):
			// The temp file was evicted before its link, or a
			// renamer moved the directory away mid-store.
			s.c.lostPublish.Add(1)
		default:
			s.fail("writer %d: store %s: %v", w, k.key, err)
			return
		}
	}
}

// reader loads by key through fs_native, skewed towards hot keys, and
// reads objects from the moved directory; all must be exact or absent.
func (s *soak) reader(id int) {
	r := rand.New(rand.NewPCG(uint64(id), 22))
	zipf := rand.NewZipf(r, 1.2, 1, uint64(len(s.keys)-1))
	s.c.storeTries.every(2, func() {
		if s.stop.Load() {
			return
		}
		p := finalPath(s.mp, s.keys[zipf.Uint64()].key)
		if r.IntN(3) == 0 {
			if p = s.randomMoved(r); p == "" {
				return
			}
		}
		data, err := readObject(p, s.names)
		switch {
		case err != nil:
			s.fail("reader %d: %v", id, err)
			return
		case data == nil:
			s.c.loadMisses.Add(1)
		default:
			s.c.loads.Add(1)
			s.c.bytesRead.Add(int64(len(data)))
		}
	})
}

// randomMoved is the path of a random object in the moved directory, or
// "" if it holds none right now.
func (s *soak) randomMoved(r *rand.Rand) string {
	for _, dn := range soakDirs {
		ents, err := os.ReadDir(filepath.Join(s.mp, dn))
		if err == nil && len(ents) > 0 {
			return filepath.Join(s.mp, dn, ents[r.IntN(len(ents))].Name())
		}
	}
	return ""
}

func (s *soak) deleter(id int) {
	r := rand.New(rand.NewPCG(uint64(id), 23))
	s.c.storeTries.every(16, func() {
		if s.stop.Load() {
			return
		}
		p := finalPath(s.mp, s.keys[r.IntN(len(s.keys))].key)
		if r.IntN(3) == 0 {
			if p = s.randomMoved(r); p == "" {
				return
			}
		}
		if err := unix.Unlink(p); err != nil && err != unix.ENOENT {
			s.fail("deleter %d: unlink %s: %v", id, p, err)
			return
		}
		s.c.deletes.Add(1)
	})
}

// renamer moves published objects into the moved directory (replacing a
// copy there) and back to their final path.
func (s *soak) renamer(id int) {
	r := rand.New(rand.NewPCG(uint64(id), 24))
	s.c.storeTries.every(5, func() {
		if s.stop.Load() {
			return
		}
		if r.IntN(2) == 0 {
			k := s.keys[r.IntN(len(s.keys))]
			src := finalPath(s.mp, k.key)
			moved := false
			for _, dn := range soakDirs {
				err := unix.Rename(src, filepath.Join(s.mp, dn, filepath.Base(src)))
				if err == nil {
					moved = true
					break
				}
				if err != unix.ENOENT {
					s.fail("renamer %d: rename %s: %v", id, src, err)
					return
				}
			}
			if moved {
				s.c.renames.Add(1)
			} else {
				s.c.renameMisses.Add(1)
			}
			return
		}
		src := s.randomMoved(r)
		if src == "" {
			return
		}
		k := s.names[filepath.Base(src)]
		dst := finalPath(s.mp, k.key)
		os.MkdirAll(filepath.Dir(dst), 0o755)
		switch err := unix.Rename(src, dst); err {
		case nil:
			s.c.renamesBack.Add(1)
		case unix.ENOENT:
			s.c.renameMisses.Add(1)
		default:
			s.fail("renamer %d: rename %s back: %v", id, src, err)
			return
		}
	})
}

// dirRenamer flips the moved directory's name while objects in it are
// open, being moved in and out and deleted.
func (s *soak) dirRenamer() {
	i := 0
	s.c.storeTries.every(8, func() {
		if s.stop.Load() {
			return
		}
		from, to := filepath.Join(s.mp, soakDirs[i%2]), filepath.Join(s.mp, soakDirs[(i+1)%2])
		i++
		if err := unix.Rename(from, to); err != nil {
			s.fail("rename directory %s: %v", from, err)
			return
		}
		s.c.dirRenames.Add(1)
	})
}

// walker lists the whole tree now and then, as du and the restart scan
// do: only directories and regular files, and no errors but ENOENT.
func (s *soak) walker() {
	s.c.storeTries.every(64, func() {
		if s.stop.Load() {
			return
		}
		n := 0
		err := filepath.WalkDir(s.mp, func(p string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			if !d.IsDir() && !d.Type().IsRegular() {
				return fmt.Errorf("%s has type %v", p, d.Type())
			}
			n++
			return nil
		})
		if err != nil {
			s.fail("walking the mount: %v", err)
			return
		}
		s.c.walks.Add(1)
		s.c.walkedFiles.Add(int64(n))
	})
}

// verifyAll reads every file left after the workload: each is a
// published object, exact; no temp file is left behind.
func (s *soak) verifyAll() int {
	n := 0
	err := filepath.WalkDir(s.mp, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		if strings.HasPrefix(d.Name(), tmpPrefix) {
			s.t.Errorf("temp file left after every writer finished: %s", p)
			return nil
		}
		data, err := readObject(p, s.names)
		if err == nil && data == nil {
			err = fmt.Errorf("%s listed but absent", p)
		}
		if err != nil {
			s.t.Errorf("after the soak: %v", err)
		}
		return nil
	})
	if err != nil {
		s.t.Fatalf("walking the mount after the soak: %v", err)
	}
	return n
}
