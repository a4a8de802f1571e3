// Command kvfs mounts, unmounts, inspects and checks kvfs, the on-disk
// tier of an LLM KV cache. It only parses flags and wires packages
// together.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/kvfs/kvfs/internal/gctune"
	"github.com/kvfs/kvfs/internal/usageerr"
	"github.com/kvfs/kvfs/mount"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// build names this build of kvfs in its log (go build -ldflags
// "-X main.build=NAME"), so an upgrade in place shows which daemon
// serves.
var build = "dev"

const usage = `usage:
  kvfs mount [--store DIR] [--capacity SIZE] [flags] MOUNTPOINT
      (where a live kvfs serves DIR at MOUNTPOINT: takes its mount over)
  kvfs unmount [--timeout D] [--force] MOUNTPOINT
  kvfs stats [--json | --watch [--interval D] [--count N]] [--timeout D] MOUNTPOINT
  kvfs fsck --store DIR [--repair] [--json] [--progress-interval D]
  kvfs cat --direct [--gpu N] [--chunk SIZE] [--depth N] [--verify] PATH...
  kvfs put --direct [--gpu N] [--chunk SIZE] [--depth N] [--verify] SRC DST
  kvfs version
  kvfs STORE MOUNTPOINT -o OPTION[,OPTION...]
      (mount(8)'s form, for fstab's fuse.kvfs: the mount flags as options)
Run "kvfs COMMAND -h" for a command's flags.`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command and returns the exit status: 0 success, 1 a
// failure while doing it, 2 a bad command line.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	cmds := map[string]func([]string, io.Writer) error{
		"mount":   cmdMount,
		"unmount": cmdUnmount,
		"umount":  cmdUnmount,
		"stats":   cmdStats,
		"fsck":    cmdFsck,
		"cat":     cmdCat,
		"put":     cmdPut,
		"version": cmdVersion,
	}
	if args[0] == mount.GuardCommand {
		return guard(args[1:], stderr)
	}
	cmd, ok := cmds[args[0]]
	if !ok && isHelperForm(args) {
		return helperMount(args, stdout, stderr)
	}
	if !ok {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			if len(args) > 1 && cmds[args[1]] != nil {
				// `kvfs help mount` is `kvfs mount --help` (it printed
				// the general usage: an outside tester).
				return run([]string{args[1], "--help"}, stdout, stderr)
			}
			if len(args) > 1 {
				// Exit 0 and the general usage for a command that is
				// none (an outside tester).
				fmt.Fprintf(stderr, "kvfs: no help for %q, which is no command (commands: mount, unmount, stats, fsck, cat, put, version)\n", args[1])
				return 2
			}
			fmt.Fprintln(stdout, usage)
			return 0
		}
		if args[0] == "--version" || args[0] == "-version" {
			return run([]string{"version"}, stdout, stderr)
		}
		if slices.Contains(args, "-o") {
			// Near the helper's form, not in it (an outside tester's
			// `kvfs S M -o`, `-o a -o b`: "unknown command S").
			fmt.Fprintf(stderr, "kvfs: %q is no command, and the mount helper's form (mount(8), fstab) is exactly `kvfs STORE MOUNTPOINT -o OPT[,OPT...]`; or `kvfs mount --store STORE MOUNTPOINT`\n", args[0])
			return 2
		}
		fmt.Fprintf(stderr, "kvfs: unknown command %q (commands: mount, unmount, stats, fsck, cat, put, version; `kvfs -h` for usage)\n", args[0])
		return 2
	}
	err := cmd(args[1:], stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, usageerr.ErrUsage):
		if !backgroundFailed(err) {
			fmt.Fprintf(stderr, "kvfs %s: %v\n", args[0], err)
		}
		return 2
	default:
		if !backgroundFailed(err) {
			fmt.Fprintf(stderr, "kvfs %s: %v\n", args[0], err)
		}
		return 1
	}
}

// parse parses a command's flags, before or after its positional
// arguments (`kvfs mount --store S MNT --background` as well; after
// "--", everything is positional), and requires exactly n positional
// arguments (n < 0: at least one).
func parse(fs *flag.FlagSet, args []string, n int, what string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				// The command's lines of the usage, then its flags
				// (`kvfs help mount` printed the flags alone: an
				// outside tester), spelt with two dashes as the README
				// spells them.
				for _, line := range strings.Split(usage, "\n") {
					// (`kvfs version` has no arguments: -h printed
					// nothing, an outside tester.)
					if l := strings.TrimSpace(line); l == "kvfs "+fs.Name() || strings.HasPrefix(l, "kvfs "+fs.Name()+" ") {
						fmt.Fprintln(os.Stdout, "usage: "+strings.TrimSpace(line))
					}
				}
				var flags strings.Builder
				fs.SetOutput(&flags)
				fs.PrintDefaults()
				fmt.Fprint(os.Stdout, strings.ReplaceAll("\n"+flags.String(), "\n  -", "\n  --")[1:])
				return nil, err
			}
			if undefined := undefinedFlag(fs, args, err); undefined != nil {
				return nil, undefined
			}
			return nil, usageerr.Errorf("%s", twoDashes(explainValue(fs, err)))
		}
		left := fs.Args()
		if len(left) == 0 {
			break
		}
		if used := len(args) - len(left); used > 0 && args[used-1] == "--" {
			rest = append(rest, left...)
			break
		}
		rest, args = append(rest, left[0]), left[1:]
	}
	if err := flagAsValue(fs); err != nil {
		return nil, err
	}
	if n >= 0 && len(rest) > n {
		for _, a := range rest {
			if sizeUnit(a) {
				// `--capacity 1 G MNT` (an outside tester: the answer
				// spoke of arguments, not of the size).
				return nil, usageerr.Errorf("%q looks like the unit of a size set apart from its number: write a size as one word (like --capacity 10GiB)", a)
			}
		}
	}
	if (n >= 0 && len(rest) != n) || (n < 0 && len(rest) == 0) {
		return nil, usageerr.Errorf("want %s, got %d arguments", what, len(rest))
	}
	// Every argument is a path: "" is an unset variable, which the
	// commands took for the current directory or printed as "stat :"
	// (an outside tester).
	if slices.Contains(rest, "") {
		return nil, usageerr.Errorf("an empty argument: want %s", what)
	}
	return rest, nil
}

// repeatable are the flags that may be given more than once: each adds
// to the last.
var repeatable = map[string]bool{"remote-exclude": true}

// givenTwice lists the flags of args given more than once (but the
// repeatable ones), each as "--NAME (FIRST, then LAST)": the flag package
// takes the last, which a wrapper's defaults rely on (the systemd unit's
// --stop-linger before the user's $KVFS_OPTS), so the mount warns of
// them rather than refuse: `--store a --store b` served b unsaid (an
// outside tester).
func givenTwice(fs *flag.FlagSet, args []string) []string {
	var twice []string
	first := map[string]string{}
	for i := 0; i < len(args) && args[i] != "--"; i++ {
		a := args[i]
		name, _, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if !strings.HasPrefix(a, "-") || f == nil {
			continue
		}
		text := a
		if !inline && !isBoolFlag(f) && i+1 < len(args) {
			i++ // its value, whatever it looks like
			text = a + " " + args[i]
		}
		if before, ok := first[name]; ok && !repeatable[name] {
			twice = append(twice, fmt.Sprintf("--%s (%s, then %s)", name, before, text))
		} else if !ok {
			first[name] = text
		}
	}
	return twice
}

// flagAsValue refuses a flag whose value is another of the command's
// flags: a value left out takes the next argument (an outside tester's
// `--store --background` made a store named --background and served in
// the foreground).
func flagAsValue(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		v, ok := g.Get().(string)
		name, _, _ := strings.Cut(strings.TrimLeft(v, "-"), "=")
		if ok && err == nil && strings.HasPrefix(v, "-") && fs.Lookup(name) != nil {
			err = usageerr.Errorf("--%s took %q, another flag, as its value: give --%s its value", f.Name, v, f.Name)
		}
	})
	return err
}

// undefinedFlag names a flag the command does not have as it was typed
// (the flag package says -o for --o and -o alike, which twoDashes made
// --o), and points `-o` given to `kvfs mount` at the mount helper's form,
// where options are mount(8)'s (an outside tester typed `kvfs mount -o
// capacity=1G MNT` and was told only of a flag --o). Nil for other errors.
func undefinedFlag(fs *flag.FlagSet, args []string, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return nil
	}
	typed := "--" + name
	for _, a := range args {
		if a == "--" {
			break
		}
		if flagName, _, _ := strings.Cut(a, "="); strings.HasPrefix(flagName, "-") && strings.TrimLeft(flagName, "-") == name {
			typed = flagName
			break
		}
	}
	if fs.Name() == "mount" && (name == "o" || strings.HasPrefix(typed, "-o") && !strings.HasPrefix(typed, "--")) {
		// -o OPTS, -o=OPTS, or mount(8)'s joined -oOPTS: shown back as
		// the helper's form with the options given.
		opts := "capacity=1GiB"
		for i, a := range args {
			if a == typed || strings.HasPrefix(a, typed+"=") {
				switch _, v, inline := strings.Cut(a, "="); {
				case name != "o":
					opts = strings.TrimPrefix(a, "-o")
				case inline:
					opts = v
				case i+1 < len(args):
					opts = args[i+1]
				}
				break
			}
		}
		return usageerr.Errorf("%s: kvfs mount takes flags (--capacity 1GiB); -o OPTION[,OPTION...] is mount(8)'s form, for fstab: `kvfs STORE MOUNTPOINT -o %s`", typed, opts)
	}
	return usageerr.Errorf("%s: no such flag; run \"kvfs %s -h\" for its flags", typed, fs.Name())
}

// twoDashes spells the flag in the flag package's errors as the README
// and the help do, --capacity (it printed -capacity: an outside tester
// took it for a disagreement with the docs).
func twoDashes(err error) string {
	return strings.NewReplacer("flag -", "flag --", "for -", "for --",
		"argument: -", "argument: --", "defined: -", "defined: --").Replace(err.Error())
}

// explainValue replaces the flag package's bare "parse error" for a
// duration or a number flag with the form it wants (an outside tester:
// `--grace 2` said only "parse error").
func explainValue(fs *flag.FlagSet, err error) error {
	var value, name string
	if !strings.HasSuffix(err.Error(), ": parse error") {
		return err
	}
	if _, serr := fmt.Sscanf(err.Error(), "invalid value %q for flag -%s", &value, &name); serr != nil {
		return err
	}
	name = strings.TrimSuffix(name, ":")
	f := fs.Lookup(name)
	if f == nil {
		return err
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err
	}
	switch g.Get().(type) {
	case time.Duration:
		if _, perr := time.ParseDuration(value); perr != nil {
			return fmt.Errorf("invalid value %q for flag -%s: %v; a duration has a unit, like 2s, 500ms or 10m", value, name, perr)
		}
	case int, int64, uint, uint64:
		return fmt.Errorf("invalid value %q for flag -%s: not a whole number", value, name)
	}
	return err
}

// sizeFlag is a flag.Value for sizes like 64MiB.
type sizeFlag struct{ v *int64 }

func (s sizeFlag) String() string {
	if s.v == nil {
		return "0"
	}
	return fmt.Sprint(*s.v)
}

func (s sizeFlag) Set(v string) error {
	n, err := mount.ParseSize(v)
	if err != nil {
		return err
	}
	*s.v = n
	return nil
}

// explicitDefaults refuses a mount flag given a value that, had the flag
// been left out, would have meant its default: the mount took it for that
// default, unsaid. Visited once, one rule a flag (explicitDefault).
func explicitDefaults(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err == nil {
			err = explicitDefault(f.Name, f.Value.String())
		}
	})
	return err
}

// explicitDefault is the rule for flag name given value v:
//   - a capacity of 0 asked for is below one block (left out, one is
//     derived);
//   - a path, level or address given as "" is an unset variable in
//     `--store $DIR`, not a request for the default (an outside tester's
//     `--store ""` served MOUNTPOINT.kvfs-store at 90% of the disk, and
//     `--metrics-addr ""` mounted with no endpoint, unsaid);
//   - 0 for a count or bound of the remote tier that must be at least 1
//     (an outside tester's `--remote-uploaders 0` mounted with 2;
//     `--remote-breaker-cooldown 0s`, 10s).
func explicitDefault(name, v string) error {
	switch {
	case name == "capacity" && v == "0":
		return usageerr.Errorf("capacity 0 is below one block (4096 bytes)")
	case (name == "store" || name == "log-level" || name == "metrics-addr") && v == "":
		return usageerr.Errorf("--%s is empty: leave it out for its default", name)
	case slices.Contains([]string{"remote-uploaders", "remote-queue", "remote-breaker-failures", "remote-timeout", "remote-breaker-cooldown"}, name) && (v == "0" || v == "0s"):
		if v == "0s" {
			return usageerr.Errorf("--%s %s: want more than 0 (leave it out for its default)", name, v)
		}
		return usageerr.Errorf("--%s %s: want at least 1 (leave it out for its default)", name, v)
	}
	return nil
}

func newLogger(level string) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.Set(level); err != nil {
		return nil, usageerr.Errorf("bad --log-level %q: want debug, info, warn or error", level)
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Encoding = "console"
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.Sampling = nil
	return cfg.Build()
}

func cmdMount(args []string, stdout io.Writer) error {
	mf := newMountFlags()
	rest, err := parse(mf.fs, args, 1, "one MOUNTPOINT")
	if err != nil {
		return err
	}
	if err := explicitDefaults(mf.fs); err != nil {
		return err
	}
	// A log or status line to a pipe whose reader went (`| grep -m1`,
	// `| head -1`) is lost, not the end of the cache: unignored, Go's
	// runtime kills the process on a write to a broken pipe on
	// descriptor 1 or 2, and the daemon died after it had mounted,
	// leaving a dead mount (an outside tester).
	signal.Ignore(syscall.SIGPIPE)
	if mf.background && os.Getenv(backgroundChildEnv) == "" {
		return background(stdout)
	}
	o := mf.opts
	if o.Remote, err = remoteConfig(mf.fs, &mf.remote); err != nil {
		return err
	}
	o.Mountpoint = rest[0]
	mount.CloseHeldOn(o.Mountpoint)
	o.Passthrough = !mf.noPassthrough
	log, err := newLogger(mf.logLevel)
	if err != nil {
		return err
	}
	defer log.Sync()
	o.Logger = log.Named("mount")
	for _, twice := range givenTwice(mf.fs, args) {
		o.Logger.Warn("a flag given twice: the last is taken", zap.String("flag", twice))
		// Said on the output too, which mount(8)'s helper passes on
		// where the log goes nowhere (an outside tester's fstab line
		// with capacity= twice).
		fmt.Fprintf(stdout, "kvfs: warning: a flag given twice, the last is taken: %s\n", twice)
	}
	mount.ShedQuotaExemption(o, o.Logger)
	x, err := mf.extra.start(&o, log)
	if err != nil {
		return err
	}
	defer x.close()
	if mf.cpuProfile != "" {
		stop, err := startProfile(mf.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if mf.mutexProfile != "" {
		stop, err := startMutexProfile(mf.mutexProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	// Signals are caught before the mount exists: one that lands while the
	// store loads or the kernel mounts waits in the channel and unmounts as
	// soon as there is something to unmount, instead of killing the daemon
	// and leaving a dead mount behind.
	// SIGHUP too: a foreground daemon whose terminal closed (an ssh
	// session that dropped) stops as for Ctrl-C, where it died and left
	// a dead mount (an outside tester).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if bin, err := os.Executable(); err == nil {
		o.Guard = bin
	}
	o.TakingOver = func(from int) (undo func()) {
		// Under systemd (ExecReload), this process is the service from
		// now on, before the old daemon exits (NotifyAccess=all).
		if err := sdNotify(fmt.Sprintf("MAINPID=%d", os.Getpid())); err != nil {
			log.Warn("sd_notify MAINPID", zap.Error(err))
		}
		return func() { sdNotify(fmt.Sprintf("MAINPID=%d", from)) }
	}
	o.ServingOn = func() {
		// A successor that did not answer was killed, perhaps after it
		// told systemd it was the main process: this one is again.
		if err := sdNotify(fmt.Sprintf("MAINPID=%d", os.Getpid())); err != nil {
			log.Warn("sd_notify MAINPID", zap.Error(err))
		}
	}
	m, err := startCancellable(o, sigs)
	if err != nil {
		return err
	}
	life := &lifecycle{log: log}
	if m.Loading() {
		fmt.Fprintf(stdout, "kvfs: serving reads of %s on %s while its index loads, and stores of new names, deletes, moves and mkdir; other changes wait for it\n",
			m.Store, m.Mountpoint)
		stopped, err := waitLoaded(m, sigs, life)
		if errors.Is(err, mount.ErrLoadStopped) {
			m.Wait()
			fmt.Fprintf(stdout, "kvfs: unmounted %s before its index was built; the next start loads it\n", m.Mountpoint)
			return nil
		}
		if err != nil {
			m.Wait()
			return err
		}
		if stopped {
			m.Wait()
			fmt.Fprintf(stdout, "kvfs: unmounted %s\n", m.Mountpoint)
			return nil
		}
	}
	o.Logger.Info("kvfs serving", zap.String("build", build), zap.Int("pid", os.Getpid()))
	restored := fmt.Sprintf("%d objects restored", m.Loaded.Objects-int64(m.Loaded.Evicted))
	if m.Loaded.Evicted > 0 {
		restored += fmt.Sprintf(" (%d more evicted to fit the capacity)", m.Loaded.Evicted)
	}
	stop := "Ctrl-C or "
	if os.Getenv(backgroundChildEnv) != "" || os.Getenv(helperChildEnv) != "" {
		stop = "" // a daemon in a session of its own: no terminal sends it Ctrl-C
	}
	fmt.Fprintf(stdout, "kvfs: serving %s on %s, capacity %d bytes, %s; %s`kvfs unmount %s` to stop\n",
		m.Store, m.Mountpoint, m.Capacity, restored, stop, m.Mountpoint)
	if m.DiskRoom > 0 {
		// Said here too: a --background daemon's log may be discarded.
		fmt.Fprintf(stdout, "kvfs: warning: the capacity is more than the store's file system can hold (%d bytes): kvfs lowers the capacity to what the disk can hold, evicting, and follows the disk from then on (README, Known limits); give a smaller --capacity\n", m.DiskRoom)
	}
	x.serve(m, stdout, log)
	tuning, stopTuning := context.WithCancel(context.Background())
	defer stopTuning()
	go gctune.Run(tuning, log.Named("gc"))
	if err := life.ready(m); err != nil {
		m.Unmount()
		m.Wait()
		return err
	}
	backgroundReady()
	go func() {
		for range sigs {
			life.stopping()
			// A second signal ends a mount the first detached while
			// files were open (mount/detached.go).
			stop := m.Unmount
			if m.Detached() {
				stop = m.EndDetached
			}
			if err := stop(); err != nil {
				log.Error("unmount", zap.Error(err))
			}
		}
	}()
	m.Wait()
	life.stopping()
	fmt.Fprintf(stdout, "kvfs: unmounted %s\n", m.Mountpoint)
	return nil
}

// waitLoaded waits for a mount that serves while it loads to finish its
// load. A signal meanwhile unmounts at once, which stops the load
// (mount.ErrLoadStopped) unless it was done: stopped.
func waitLoaded(m *mount.Mount, sigs <-chan os.Signal, life *lifecycle) (stopped bool, err error) {
	loaded := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-sigs:
			stopped = true
			life.stopping()
			// Stopped first: the load may go on the moment the mount
			// is gone, before the server's end is seen (a CI run met it).
			m.StopLoading()
			if err := m.Unmount(); err != nil {
				life.log.Error("unmount", zap.Error(err))
			}
		case <-loaded:
		}
	})
	err = m.WaitLoaded()
	close(loaded)
	wg.Wait()
	return stopped, err
}

// guard runs a daemon's guard (see mount.RunGuard): PID MOUNTPOINT
// STORE, with the daemon's pipe as descriptor 3.
func guard(args []string, stderr io.Writer) int {
	if len(args) != 3 {
		fmt.Fprintln(stderr, "kvfs: the guard is started by kvfs mount")
		return 2
	}
	pid, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintln(stderr, "kvfs: the guard is started by kvfs mount")
		return 2
	}
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	log, _ := newLogger("info")
	mount.RunGuard(pid, args[1], args[2], os.NewFile(3, "daemon"), log.Named("guard"))
	return 0
}

func cmdUnmount(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("unmount", flag.ContinueOnError)
	o := mount.UnmountOptions{Report: func(s string) { fmt.Fprintf(stdout, "kvfs unmount: %s\n", s) }}
	fs.DurationVar(&o.Timeout, "timeout", mount.DefaultUnmountTimeout, "return within this long: a daemon that does not answer has its FUSE connection aborted and the mount detached")
	fs.BoolVar(&o.Force, "force", false, "abort the FUSE connection and detach without waiting for the daemon")
	rest, err := parse(fs, args, 1, "one MOUNTPOINT")
	if err != nil {
		return err
	}
	if o.Timeout <= 0 {
		return usageerr.Errorf("--timeout %v: want a positive duration", o.Timeout)
	}
	// Out of the mount, so that this process is not what keeps it busy
	// (`cd MNT; exec kvfs unmount .`).
	mp, err := filepath.Abs(rest[0])
	if err != nil {
		return usageerr.Errorf("%v", err)
	}
	os.Chdir("/")
	return mount.UnmountWithin(mp, o)
}

// startCancellable is mount.Start, where a signal that comes meanwhile
// cancels a takeover of a live mount that has not yet told the old
// daemon it is ready, which then serves on (Ctrl-C of a handover's
// `kvfs mount`, or a service manager's stop, took the mount over and
// then unmounted it, leaving no daemon: an outside tester). Any other
// start goes on, and the signal is handled once it has: a stop.
func startCancellable(o mount.Options, sigs chan os.Signal) (*mount.Mount, error) {
	cancel, started, watched := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var early os.Signal
	go func() {
		defer close(watched)
		select {
		case early = <-sigs:
			close(cancel)
		case <-started:
		}
	}()
	o.Cancel = cancel
	m, err := mount.Start(o)
	close(started)
	<-watched
	if early != nil {
		select {
		case sigs <- early: // handled as a stop once serving
		default:
		}
	}
	return m, err
}

// cmdVersion prints the build (make's -X main.build, or "dev") and the
// module's version and commit where Go recorded them: the daemon's
// kvfs_build_info metric says the same of a running one (an outside
// tester found no way to ask the binary).
func cmdVersion(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if _, err := parse(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	var parts []string
	if info, ok := debug.ReadBuildInfo(); ok {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			parts = append(parts, v)
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				parts = append(parts, "commit "+s.Value)
			}
		}
		parts = append(parts, info.GoVersion)
	}
	fmt.Fprintf(stdout, "kvfs %s (%s)\n", build, strings.Join(parts, ", "))
	return nil
}

// sizeUnit says whether a is a size's unit alone (G, MiB, Ki, ...).
func sizeUnit(a string) bool {
	if a == "" || strings.IndexFunc(a, func(r rune) bool { return !unicode.IsLetter(r) }) >= 0 {
		return false
	}
	_, err := mount.ParseSize("1" + a)
	return err == nil
}
