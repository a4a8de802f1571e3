package tests

// A random-operation model checker (issue 8 "Also"): random operations on
// the mounted binary, each checked byte for byte against an in-memory
// model of the namespace, under eviction pressure. The model cannot know
// when kvfs evicts; it knows what eviction may do: make an object vanish
// whole (every name at once), never while a descriptor holds it, and
// never leave it served partially.

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

var (
	modelOps  = flag.Int("modelops", 1000, "operations TestModel runs in each mode (-modelops=20000 for a long local run)")
	modelSeed = flag.Uint64("modelseed", 1, "TestModel's random seed (replays a run; eviction timing still varies)")
)

const (
	modelCapacity = 4 * MiB
	modelMaxSize  = 512 << 10 // no object grows past it
	modelMaxHeld  = 3         // descriptors held across operations
	modelRestEach = 100       // steps between checks at rest
)

// modelDirs are where the model's names live; they are never removed.
var modelDirs = []string{"", "a", "b", "a/c"}

// mInode is one object of the model: its bytes and its names.
type mInode struct {
	id    int
	data  []byte
	names map[string]bool
}

func (o *mInode) resize(n int) {
	if n <= len(o.data) {
		o.data = o.data[:n]
		return
	}
	o.data = append(o.data, make([]byte, n-len(o.data))...)
}

func (o *mInode) write(off int, b []byte) {
	if end := off + len(b); end > len(o.data) {
		o.resize(end)
	}
	copy(o.data[off:], b)
}

// sortedNames are o's names in order, for a replayable run.
func (o *mInode) sortedNames() []string {
	out := make([]string, 0, len(o.names))
	for n := range o.names {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// mHandle is a descriptor the model holds across operations.
type mHandle struct {
	fd     int
	ino    *mInode
	read   bool
	write  bool
	append bool // O_APPEND: writes go to the end, whatever the offset
}

// model is one run: the mount, the model of what it holds, and counts.
type model struct {
	t      *testing.T
	d      *daemon
	flags  []string // the mount's, after --store
	strict bool
	seed   uint64
	r      *rand.Rand
	all    []string // every name the model may use, in order
	names  map[string]*mInode
	held   []*mHandle
	// opened are the objects of descriptors open for one operation.
	opened []*mInode
	nextID int
	step   int
	recent []string // the last operations, for a failure's message
	counts map[string]int
	// vanished counts objects seen evicted; rests counts checks at rest.
	vanished, rests int
}

// TestModel runs -modelops random operations (pwrite, truncate,
// fallocate, writes through a shared writable mmap, O_APPEND writes,
// copy_file_range, rename, link, unlink, held readers and writers) with
// a 4 MiB capacity, no grace and objects up to 512 KiB, so objects keep
// being evicted; every read must return the model's bytes, every object
// that vanishes must vanish whole and unheld, and after each step the
// ledger's stats are sane; every 100 steps, with nothing open, df == du
// == used_bytes == the store's bytes and the mount's tree is exactly the
// model's (less what was evicted). Once in each write mode: passthrough
// (the default) and --strict-capacity.
func TestModel(t *testing.T) {
	for _, mode := range []struct {
		name  string
		flags []string
	}{{"passthrough", nil}, {"strict", []string{"--strict-capacity"}}} {
		t.Run(mode.name, func(t *testing.T) {
			m := newModel(t, *modelSeed, mode.flags)
			m.run(*modelOps)
		})
	}
}

func newModel(t *testing.T, seed uint64, flags []string) *model {
	args := append([]string{"--capacity", fmt.Sprint(modelCapacity), "--grace", "0s", "--write-reserve", "64KiB"}, flags...)
	d := mountCache(t, args...)
	m := &model{t: t, d: d, flags: args, strict: len(flags) > 0, seed: seed, r: rand.New(rand.NewPCG(seed, 0x6b766673)),
		names: map[string]*mInode{}, counts: map[string]int{}}
	// Registered after the daemon's cleanup, so it runs first: a failed
	// run leaves no descriptor to keep the mount busy.
	t.Cleanup(func() {
		for _, h := range m.held {
			unix.Close(h.fd)
		}
	})
	for _, dir := range modelDirs {
		if dir != "" {
			if err := os.Mkdir(filepath.Join(d.mp, dir), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 16 {
			m.all = append(m.all, filepath.Join(dir, fmt.Sprintf("k%d", i)))
		}
	}
	t.Logf("seed %d (-modelseed=%d replays it)", seed, seed)
	return m
}

// modelOpsTable is the operations and how often each is chosen.
var modelOpsTable = []struct {
	name   string
	weight int
	run    func(*model)
}{
	{"create", 10, (*model).create},
	{"pwrite", 14, (*model).pwrite},
	{"read", 12, (*model).read},
	{"truncate", 6, (*model).truncate},
	{"fallocate", 6, (*model).fallocate},
	{"mmap", 6, (*model).mmapWrite},
	{"append", 6, (*model).appendWrite},
	{"copy_file_range", 6, (*model).copyRange},
	{"rename", 8, (*model).rename},
	{"link", 5, (*model).link},
	{"unlink", 5, (*model).unlink},
	{"hold", 6, (*model).hold},
	{"close", 6, (*model).closeHeld},
	{"fsync", 2, (*model).fsync},
}

func (m *model) run(n int) {
	total := 0
	for _, op := range modelOpsTable {
		total += op.weight
	}
	for m.step = 1; m.step <= n; m.step++ {
		pick := m.r.IntN(total)
		for _, op := range modelOpsTable {
			if pick -= op.weight; pick < 0 {
				op.run(m)
				break
			}
		}
		m.checkStats()
		if m.step%modelRestEach == 0 {
			m.rest()
		}
	}
	m.rest()
	st := stats(m.t, m.d.mp)
	m.restart()
	ops := make([]string, 0, len(m.counts))
	for _, op := range modelOpsTable {
		ops = append(ops, fmt.Sprintf("%s %d", op.name, m.counts[op.name]))
	}
	m.t.Logf("%d steps: %s", n, strings.Join(ops, ", "))
	m.t.Logf("%d objects seen evicted whole; %d operations skipped (nothing to act on); %d checks at rest; ledger: %d evictions (%d KiB), %d ENOSPC",
		m.vanished, m.counts["skipped"], m.rests, st.Evictions, st.EvictedBytes>>10, st.AdmissionFailures)
	if m.vanished == 0 || st.Evictions == 0 {
		m.t.Errorf("no object was evicted: the run put no pressure on the capacity")
	}
	if int64(m.vanished) > st.Evictions {
		m.t.Errorf("%d objects vanished, but kvfs evicted only %d: objects were lost", m.vanished, st.Evictions)
	}
	requireCleanLog(m.t, m.d)
	m.d.stop()
}

// note records an operation for a failure's message.
func (m *model) note(format string, args ...any) {
	if len(m.recent) == 20 {
		m.recent = m.recent[1:]
	}
	m.recent = append(m.recent, fmt.Sprintf("%d: ", m.step)+fmt.Sprintf(format, args...))
}

// failf stops the run with what it was doing.
func (m *model) failf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("step %d (seed %d, -modelseed=%d replays it): %s\nlast operations:\n  %s",
		m.step, m.seed, m.seed, fmt.Sprintf(format, args...), strings.Join(m.recent, "\n  "))
}

func (m *model) path(name string) string { return filepath.Join(m.d.mp, name) }

// present picks a name the model holds, or "".
func (m *model) present() string {
	var out []string
	for _, n := range m.all {
		if m.names[n] != nil {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return out[m.r.IntN(len(out))]
}

// absent picks a name the model does not hold, or "".
func (m *model) absent() string {
	var out []string
	for _, n := range m.all {
		if m.names[n] == nil {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return out[m.r.IntN(len(out))]
}

// pickHeld picks a held descriptor that ok accepts, or nil.
func (m *model) pickHeld(ok func(*mHandle) bool) *mHandle {
	var out []*mHandle
	for _, h := range m.held {
		if ok(h) {
			out = append(out, h)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out[m.r.IntN(len(out))]
}

// isHeld says whether a descriptor holds o.
func (m *model) isHeld(o *mInode) bool {
	return slices.ContainsFunc(m.held, func(h *mHandle) bool { return h.ino == o })
}

// randomBytes is n bytes from the run's generator.
func (m *model) randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := m.r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// span picks an offset and a length with off+n <= modelMaxSize, the
// offset at most a little past size (a hole), n at least 1.
func (m *model) span(size int) (off, n int) {
	off = m.r.IntN(min(size+16<<10, modelMaxSize-1) + 1)
	n = 1 + m.r.IntN(min(64<<10, modelMaxSize-off))
	return off, n
}
