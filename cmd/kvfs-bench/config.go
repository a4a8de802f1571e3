package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// config is what one run measures, after --quick and explicit flags.
type config struct {
	dir, passthrough, jsonPath string
	svgFile                    string
	workloads                  map[string]bool
	quick, strict              bool
	rounds                     int
	capacity                   int64
	ramCache                   int64
	objSize, readObjects       int
	warmBytes                  int64
	storeObjects               int
	mixedDur                   time.Duration
	writers, readers           int
	statObjects, statOps       int
	smallObjects, smallSize    int
	ledgerObjects              int
	ledgerRounds               int
	restartObjects             int
	restartRounds              int
	restartParent              string
	mountTimeout               time.Duration
	loopbackBin                string
	overloadDur, turnoverDur   time.Duration
	threadsDur                 time.Duration
}

var allWorkloads = []string{"read", "cold", "store", "mixed", "stat", "small", "direct", "flood", "overload", "turnover", "threads", "ledger", "handover", "restart", "remote"}

// quickValues are the defaults --quick changes, each unless the flag
// was given explicitly.
var quickValues = map[string]string{
	"rounds": "3", "read-objects": "2", "warm-bytes": "256MiB", "store-objects": "2",
	"mixed-duration": "300ms", "stat-objects": "200", "stat-ops": "2000",
	"small-objects": "200", "ledger-objects": "100000", "ledger-rounds": "1",
	"restart-objects": "10000", "restart-rounds": "1",
	"overload-duration": "5s", "turnover-duration": "2s", "threads-duration": "300ms",
}

func parseConfig(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("kvfs-bench", flag.ContinueOnError)
	fs.StringVar(&c.dir, "dir", "", "parent of the work directory, on the disk to measure (default /var/tmp)")
	fs.IntVar(&c.rounds, "rounds", 5, "rounds per workload; targets interleave within each")
	fs.StringVar(&c.passthrough, "passthrough", "both", "kvfs read mode: on, off, or both (two mounts)")
	fs.BoolVar(&c.quick, "quick", false, "small sizes for a smoke test (under a minute)")
	fs.BoolVar(&c.strict, "strict", false, "exit 1 if any row fails its bar")
	fs.StringVar(&c.jsonPath, "json", "", "also write the report as JSON to this file (- for stdout; the table then goes to stderr)")
	fs.StringVar(&c.svgFile, "svg", "", "write the ratio chart (SVG) to this file (default: beside --json FILE, with .svg)")
	work := fs.String("workloads", strings.Join(allWorkloads, ","), "comma-separated subset of "+strings.Join(allWorkloads, ","))
	fs.Var(sizeValue{&c.capacity}, "capacity", "capacity of the kvfs mounts (default 16GiB)")
	fs.Var(sizeValue{&c.ramCache}, "ram-cache", "RAM tier of a third mount, kvfs-ram (no passthrough, --ram-cache SIZE), measured on reads (default 1GiB; 0 leaves it out)")
	objSize := int64(32 << 20)
	fs.Var(sizeValue{&objSize}, "object-size", "size of the large objects")
	fs.IntVar(&c.readObjects, "read-objects", 8, "objects the read workloads load")
	fs.Var(sizeValue{&c.warmBytes}, "warm-bytes", "bytes read per warm-read measurement")
	fs.IntVar(&c.storeObjects, "store-objects", 8, "objects stored per store measurement")
	fs.DurationVar(&c.mixedDur, "mixed-duration", 2*time.Second, "length of each mixed readers/writers measurement")
	fs.IntVar(&c.writers, "writers", 4, "writer threads in the mixed workload")
	fs.IntVar(&c.readers, "readers", 4, "reader threads in the mixed workload")
	fs.IntVar(&c.statObjects, "stat-objects", 1000, "objects the stat workload cycles over")
	fs.IntVar(&c.statOps, "stat-ops", 200000, "stats per measurement (enough that one measurement takes a fraction of a second: shorter ones are mostly scheduling noise here)")
	fs.IntVar(&c.smallObjects, "small-objects", 1000, "small objects stored and unlinked per measurement")
	smallSize := int64(64 << 10)
	fs.Var(sizeValue{&smallSize}, "small-size", "size of a small object")
	fs.IntVar(&c.ledgerObjects, "ledger-objects", 1_000_000, "objects restored into the in-process ledger")
	fs.IntVar(&c.ledgerRounds, "ledger-rounds", 3, "ledger measurements")
	fs.IntVar(&c.restartObjects, "restart-objects", 1_000_000, "objects in the restart store")
	fs.IntVar(&c.restartRounds, "restart-rounds", 3, "restarts timed (each warm, and cold as root)")
	fs.StringVar(&c.restartParent, "restart-dir", "", "where the restart store is built and kept for reuse (default: --dir's)")
	fs.DurationVar(&c.overloadDur, "overload-duration", 10*time.Second, "how long the overload workload's writers start stores")
	fs.DurationVar(&c.turnoverDur, "turnover-duration", 5*time.Second, "length of each turnover measurement (2 protocols x 2 caches)")
	fs.DurationVar(&c.threadsDur, "threads-duration", time.Second, "length of each thread-row measurement (4 operations x 3 thread counts x 3 targets x rounds)")
	fs.DurationVar(&c.mountTimeout, "mount-timeout", 3*time.Minute, "how long a mount may take to appear")
	fs.StringVar(&c.loopbackBin, "loopback-bin", "", "directory holding prebuilt loopback and loopkp binaries (make kit), for a machine without Go (default: build them)")
	c.capacity, c.warmBytes, c.ramCache = 16<<30, 1<<30, 1<<30
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range quickValues {
			if !set[name] {
				fs.Set(name, v)
			}
		}
	}
	c.objSize, c.smallSize = int(objSize), int(smallSize)
	return c, c.check(*work)
}

func (c *config) check(work string) error {
	switch c.passthrough {
	case "on", "off", "both":
	default:
		return fmt.Errorf("--passthrough %q: want on, off or both", c.passthrough)
	}
	c.workloads = map[string]bool{}
	for _, w := range strings.Split(work, ",") {
		if w = strings.TrimSpace(w); w == "" {
			continue
		}
		if !contains(allWorkloads, w) {
			return fmt.Errorf("--workloads: unknown %q (know %s)", w, strings.Join(allWorkloads, ","))
		}
		c.workloads[w] = true
	}
	for name, v := range map[string]int{"rounds": c.rounds, "read-objects": c.readObjects,
		"store-objects": c.storeObjects, "stat-objects": c.statObjects, "stat-ops": c.statOps,
		"small-objects": c.smallObjects, "ledger-objects": c.ledgerObjects, "ledger-rounds": c.ledgerRounds,
		"restart-objects": c.restartObjects, "restart-rounds": c.restartRounds, "object-size": c.objSize,
		"writers": c.writers, "readers": c.readers} {
		if v <= 0 {
			return fmt.Errorf("--%s must be positive, got %d", name, v)
		}
	}
	if c.overloadDur <= 0 || c.turnoverDur <= 0 || c.threadsDur <= 0 {
		return fmt.Errorf("--overload-duration, --turnover-duration and --threads-duration must be positive")
	}
	if c.smallSize <= 0 || c.smallSize > c.objSize {
		return fmt.Errorf("--small-size must be between 1 and --object-size")
	}
	if c.restartParent == "" {
		c.restartParent = c.dir
		if c.restartParent == "" {
			c.restartParent = "/var/tmp"
		}
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// public is the configuration as the JSON report shows it.
func (c *config) public() map[string]any {
	return map[string]any{
		"rounds": c.rounds, "passthrough": c.passthrough, "ram_cache": c.ramCache, "quick": c.quick, "capacity": c.capacity,
		"object_size": c.objSize, "read_objects": c.readObjects, "warm_bytes": c.warmBytes,
		"store_objects": c.storeObjects, "mixed_duration_s": c.mixedDur.Seconds(),
		"writers": c.writers, "readers": c.readers, "stat_objects": c.statObjects, "stat_ops": c.statOps,
		"small_objects": c.smallObjects, "small_size": c.smallSize, "ledger_objects": c.ledgerObjects,
		"ledger_rounds": c.ledgerRounds, "restart_objects": c.restartObjects, "restart_rounds": c.restartRounds,
		"workloads": c.workloads, "overload_duration_s": c.overloadDur.Seconds(), "turnover_duration_s": c.turnoverDur.Seconds(),
		"threads_duration_s": c.threadsDur.Seconds(),
	}
}

// sizeValue is a flag.Value for sizes: bytes, or a number with K, M, G
// or T, with or without "iB" or "B" (all binary).
type sizeValue struct{ v *int64 }

func (s sizeValue) String() string {
	if s.v == nil {
		return "0"
	}
	return strconv.FormatInt(*s.v, 10)
}

func (s sizeValue) Set(v string) error {
	u := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(v)), "IB"), "B")
	shift := 0
	if n := len(u); n > 0 {
		if i := strings.IndexByte("KMGT", u[n-1]); i >= 0 {
			shift, u = 10*(i+1), u[:n-1]
		}
	}
	n, err := strconv.ParseInt(u, 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return fmt.Errorf("bad size %q", v)
	}
	*s.v = n << shift
	return nil
}

// kvfsBin finds the kvfs binary: $KVFS_BIN (make sets it), else
// bin/kvfs under the working directory.
func kvfsBin() (string, error) {
	bin := os.Getenv("KVFS_BIN")
	if bin == "" {
		bin = "bin/kvfs"
	}
	st, err := os.Stat(bin)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("kvfs binary %q not found or not executable (set KVFS_BIN or run `make build`)", bin)
	}
	return absPath(bin)
}
