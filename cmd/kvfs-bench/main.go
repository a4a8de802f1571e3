// Command kvfs-bench measures kvfs against a plain directory on the same
// disk, side by side in one run, with the I/O that KV-cache connectors
// do, and prints medians, kvfs/plain ratios and the spec's bars.
//
//	go run ./cmd/kvfs-bench [--quick] [--dir DIR] [--rounds N] [--passthrough on|off|both] [--json FILE] [--svg FILE]
//
// With --json FILE it also draws the ratios as a chart, FILE with .svg
// (or --svg's): kvfs against plain and against the loopback, per row.
//
// It mounts kvfs itself with $KVFS_BIN (bin/kvfs) and always unmounts
// and removes its work directory at exit, on errors and on Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// bench is one run.
type bench struct {
	cfg     *config
	ctx     context.Context
	bin     string
	work    string
	plain   *target
	loop    *target // go-fuse's example/loopback: the floor
	loopKP  *target // the same with CAP_HANDLE_KILLPRIV_V2: the thread rows' floor
	kvfs    []*target
	all     []*target
	data    []byte // what stores write
	buf     []byte // what the main thread reads into
	rows    []*row
	info    runInfo
	log     io.Writer
	started time.Time
}

// runInfo is the context of the numbers, in the table's header and the
// JSON.
type runInfo struct {
	WorkDir             string       `json:"work_dir"`
	FS                  fsInfo       `json:"fs"`
	Kernel              string       `json:"kernel"`
	CPUs                int          `json:"cpus"`
	GoVersion           string       `json:"go_version"`
	KvfsBin             string       `json:"kvfs_bin"`
	Targets             []targetInfo `json:"targets"`
	ShortReads          int64        `json:"short_reads"`
	RestartStore        string       `json:"restart_store,omitempty"`
	RestartBuildSeconds float64      `json:"restart_build_seconds,omitempty"`
	LoadAvgStart        string       `json:"loadavg_start"`
	LoadAvgEnd          string       `json:"loadavg_end"`
	// CPUPressure is the share of the run during which some task waited
	// for a CPU (PSI "some"), this bench's own threads included;
	// well above what the bench itself causes means others competed.
	CPUPressure float64 `json:"cpu_pressure"`
	psiStart    int64
	Checks      []string `json:"checks,omitempty"`
	Notes       []string `json:"notes,omitempty"`
	Seconds     float64  `json:"seconds"`
}

type targetInfo struct {
	Name        string `json:"name"`
	Mode        string `json:"mode,omitempty"`
	Root        string `json:"root"`
	Passthrough string `json:"passthrough,omitempty"`
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg, err := parseConfig(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvfs-bench:", err)
		return 2
	}
	b := &bench{cfg: cfg, log: os.Stderr, started: time.Now()}
	var cl cleanups
	defer cl.run()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ctx = ctx
	onSignal(cancel, &cl, 30*time.Second)
	err = b.setup(&cl)
	if err == nil {
		err = b.measure()
	}
	cl.run() // unmount before reporting, so the report can say so
	if left := kvfsMountsUnder(b.work); b.work != "" && len(left) > 0 {
		err = errors.Join(err, fmt.Errorf("mounts left behind: %v", left))
	}
	b.info.Seconds = time.Since(b.started).Seconds()
	b.info.LoadAvgEnd = loadAvg()
	if t := psiCPU(); t >= 0 && b.info.psiStart >= 0 {
		b.info.CPUPressure = float64(t-b.info.psiStart) / 1e6 / b.info.Seconds
	}
	b.info.ShortReads = shortReads.Load()
	if b.info.ShortReads > 0 {
		b.note("%d read() calls returned short and were continued (a connector doing one readinto would have got a short object)", b.info.ShortReads)
	}
	if len(b.rows) > 0 {
		b.report()
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "kvfs-bench: interrupted; the table above is partial")
		return 130
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvfs-bench: FAILED:", err)
		return 1
	}
	if cfg.strict && b.count("FAIL") > 0 {
		return 1
	}
	return 0
}

func (b *bench) report() {
	out := io.Writer(os.Stdout)
	if b.cfg.jsonPath == "-" {
		out = os.Stderr
	}
	b.printTable(out)
	if b.cfg.jsonPath != "" {
		if err := b.writeJSON(b.cfg.jsonPath); err != nil {
			fmt.Fprintln(os.Stderr, "kvfs-bench: writing JSON:", err)
		}
	}
	if path := b.cfg.svgPath(); path != "" {
		if err := b.writeSVG(path); err != nil {
			fmt.Fprintln(os.Stderr, "kvfs-bench: writing the chart:", err)
		}
	}
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.log, "[%6.1fs] %s\n", time.Since(b.started).Seconds(), fmt.Sprintf(format, args...))
}

func (b *bench) note(format string, args ...any) {
	b.info.Notes = append(b.info.Notes, fmt.Sprintf(format, args...))
}

func (b *bench) check(format string, args ...any) {
	b.info.Checks = append(b.info.Checks, fmt.Sprintf(format, args...))
}

// setup makes the work directory, the plain directory and the kvfs
// mounts, registering each teardown as it goes.
func (b *bench) setup(cl *cleanups) error {
	var err error
	if b.bin, err = kvfsBin(); err != nil {
		return err
	}
	work, remove, err := makeWorkDir(b.cfg.dir)
	if err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	b.work = work
	cl.add(remove)
	fs, err := whichFS(work)
	if err != nil {
		return err
	}
	b.info = runInfo{WorkDir: work, FS: fs, Kernel: kernelRelease(), CPUs: runtime.NumCPU(),
		GoVersion: runtime.Version(), KvfsBin: b.bin, LoadAvgStart: loadAvg(), psiStart: psiCPU()}
	b.progress("work directory %s on %s (%s)", work, fs.Type, fs.Source)
	if fs.Type == "ext4" && !ext4Journaled(fs.Source) {
		b.note("%s's ext4 has no journal: each create scans the inodes deleted in the last minutes (ext4's recently_deleted, about 28%% of all CPU in the thread rows here), so the store rows depend on what earlier rounds deleted; a journaled ext4 (--dir) measures what a deployment sees", fs.Source)
	}
	b.data = make([]byte, b.cfg.objSize)
	pattern(b.data, 0xdada)
	b.buf = make([]byte, b.cfg.objSize)
	b.plain = &target{name: "plain", root: filepath.Join(work, "plain")}
	if err := os.Mkdir(b.plain.root, 0o755); err != nil {
		return err
	}
	b.all = []*target{b.plain}
	if !b.needMounts() {
		return nil
	}
	if b.loop, err = b.mountLoopback(cl); err != nil {
		return err
	}
	b.all = append(b.all, b.loop)
	if b.cfg.workloads["threads"] {
		if b.loopKP, err = b.mountLoopKP(cl); err != nil {
			return err
		}
		b.all = append(b.all, b.loopKP)
	}
	modes := map[string][]string{"on": {"passthrough"}, "off": {"no-passthrough"},
		"both": {"passthrough", "no-passthrough"}}[b.cfg.passthrough]
	if b.cfg.workloads["store"] || b.cfg.workloads["mixed"] || b.cfg.workloads["small"] {
		modes = append(modes, "strict")
	}
	if b.cfg.ramCache > 0 && (b.cfg.workloads["read"] || b.cfg.workloads["cold"]) {
		modes = append(modes, "ram")
	}
	for _, mode := range modes {
		t, err := b.mountTarget(cl, mode)
		if err != nil {
			return err
		}
		b.kvfs = append(b.kvfs, t)
		b.all = append(b.all, t)
	}
	for _, t := range b.all {
		b.info.Targets = append(b.info.Targets, t.describe())
	}
	return nil
}

func (b *bench) needMounts() bool {
	for _, w := range []string{"read", "cold", "store", "mixed", "stat", "small", "direct", "threads"} {
		if b.cfg.workloads[w] {
			return true
		}
	}
	return false
}

func (b *bench) mountTarget(cl *cleanups, mode string) (*target, error) {
	name := map[string]string{"passthrough": "kvfs", "no-passthrough": "kvfs-nopt", "ram": "kvfs-ram", "strict": "kvfs-strict"}[mode]
	var extra []string
	var only map[string]bool
	switch mode {
	case "no-passthrough":
		extra = []string{"--no-passthrough"}
	case "ram":
		// The RAM tier is for reads passthrough does not serve; it
		// is measured where it could win, on the read workloads.
		extra = []string{"--no-passthrough", "--ram-cache", fmt.Sprint(b.cfg.ramCache)}
		only = map[string]bool{"read": true, "cold": true}
	case "strict":
		// Every byte through the daemon: what the store rows cost when
		// the capacity may never be passed even for a moment.
		extra = []string{"--strict-capacity"}
		only = map[string]bool{"store": true, "mixed": true, "small": true}
	}
	t, err := b.startNode(name, mode, name, b.cfg.capacity, extra...)
	if err != nil {
		return nil, err
	}
	t.only = only
	cl.add(func() { b.stopTarget(t) })
	d := t.d
	if err := d.waitMounted(b.cfg.mountTimeout); err != nil {
		return nil, err
	}
	if err := sameDisk(d.store, b.plain.root); err != nil {
		return nil, err
	}
	if t.passthrough, err = d.passthrough(); err != nil {
		return nil, err
	}
	b.progress("mounted %s (%s) at %s, store %s; the daemon's stats say passthrough: %s",
		t.name, mode, t.root, d.store, t.passthrough)
	return t, nil
}

// startNode makes a kvfs node's mount point and store in the work
// directory, mnt-DIR and store-DIR, and starts its daemon; the caller
// arranges its stop (stopTarget) and waits for the mount.
func (b *bench) startNode(name, mode, dir string, capacity int64, extra ...string) (*target, error) {
	t := &target{name: name, mode: mode, root: filepath.Join(b.work, "mnt-"+dir)}
	store := filepath.Join(b.work, "store-"+dir)
	for _, d := range []string{t.root, store} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	d, err := startDaemon(b.bin, store, t.root, capacity, extra...)
	if err != nil {
		return nil, err
	}
	t.d = d
	return t, nil
}

// stopTarget unmounts a kvfs target once; errors become checks.
func (b *bench) stopTarget(t *target) {
	if t.d == nil {
		return
	}
	d := t.d
	t.d = nil
	if err := d.stop(); err != nil {
		b.check("FAIL %s: stopping the daemon: %v", t.name, err)
		fmt.Fprintf(os.Stderr, "kvfs-bench: stopping %s: %v\n", t.name, err)
		return
	}
	b.progress("unmounted %s", t.root)
}

func (t *target) describe() targetInfo {
	return targetInfo{Name: t.name, Mode: t.mode, Root: t.root, Passthrough: t.passthrough}
}

func sameDisk(a, b string) error {
	fa, err := whichFS(a)
	if err != nil {
		return err
	}
	fb, err := whichFS(b)
	if err != nil {
		return err
	}
	if fa.Dev != fb.Dev {
		return fmt.Errorf("%s and %s are on different devices", a, b)
	}
	return nil
}

// loadAvg is /proc/loadavg's first three fields: other work on the
// machine shows up as noise in every number.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// psiCPU is the total microseconds some task has waited for a CPU, or
// -1 where the kernel does not say.
func psiCPU() int64 {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return -1
	}
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "total="); ok {
			var n int64
			if _, err := fmt.Sscan(v, &n); err == nil {
				return n
			}
		}
	}
	return -1
}

func absPath(p string) (string, error) { return filepath.Abs(p) }
