package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/internal/mountinfo"
	"github.com/kvfs/kvfs/internal/stats"
	"github.com/kvfs/kvfs/internal/usageerr"
	"github.com/kvfs/kvfs/mount"
	"golang.org/x/sys/unix"
)

func cmdStats(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	watch := fs.Bool("watch", false, "refresh a compact view (a line per refresh when stdout is not a terminal)")
	interval := fs.Duration("interval", time.Second, "with --watch: time between refreshes")
	count := fs.Int("count", 0, "with --watch: stop after this many refreshes (0: until interrupted)")
	fs.DurationVar(&statsWait, "timeout", statsWait, "how long to wait for the daemon to answer")
	rest, err := parse(fs, args, 1, "one MOUNTPOINT")
	if err != nil {
		return err
	}
	if statsWait <= 0 {
		return usageerr.Errorf("--timeout %v must be positive", statsWait)
	}
	watchOnly := ""
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "interval" || f.Name == "count" {
			watchOnly = f.Name
		}
	})
	if watchOnly != "" && !*watch {
		return usageerr.Errorf("--%s is for --watch", watchOnly)
	}
	if *watch {
		// One at a time, naming it (an outside tester was left to guess).
		switch {
		case *interval <= 0:
			return usageerr.Errorf("--watch --interval %v: want a positive duration", *interval)
		case *count < 0:
			return usageerr.Errorf("--watch --count %d: want 0 (no end) or more", *count)
		case *asJSON:
			return usageerr.Errorf("--watch prints a table: leave out --json (or run --json alone, once a sample)")
		}
		if _, err := readSample(rest[0]); err != nil {
			return err
		}
		return watchStats(rest[0], *interval, *count, stdout)
	}
	s, err := readSample(rest[0])
	if err != nil {
		return err
	}
	var rows []stats.Row
	switch {
	case s.loading != nil && *asJSON:
		return printJSON(stdout, s.loading)
	case s.loading != nil:
		rows = s.loading.Rows()
	case *asJSON:
		return printJSON(stdout, s.Snapshot)
	default:
		rows = s.Rows()
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\n", r.Name, r.Value)
	}
	return w.Flush()
}

// statsWait bounds how long kvfs stats waits for the daemon (--timeout).
var statsWait = 10 * time.Second

// statsJSON is the root's stats extended attribute. A daemon that is
// hung or stopped would keep the stat and the getxattr waiting where no
// signal but SIGKILL ends them: they run in a goroutine, abandoned after
// statsWait (the process's exit ends them).
func statsJSON(mp string) ([]byte, error) {
	var b []byte
	err := mount.InTime(statsWait, func() (err error) { b, err = readStatsXattr(mp); return err })
	if errors.Is(err, mount.ErrTimedOut) {
		return nil, fmt.Errorf("%s: the daemon did not answer within %v (hung or stopped); %s", mp, statsWait, mount.ForceHint(mp))
	}
	return b, err
}

// readStatsXattr reads the root's stats extended attribute.
func readStatsXattr(mp string) ([]byte, error) {
	// A mount whose daemon died answers ENOTCONN (the kernel may still
	// answer a stat of its root from its cache).
	gone := func() error {
		return fmt.Errorf("%s: the daemon that served this mount is gone (%v); `kvfs unmount %s` detaches it, and `kvfs mount` of its store serves it again", mp, unix.ENOTCONN, mp)
	}
	if _, err := os.Stat(mp); errors.Is(err, unix.ENOTCONN) {
		return nil, gone()
	} else if errors.Is(err, unix.EACCES) {
		// Not a bad argument (exit 2): this user may not reach the
		// mount, or enter it (without --allow-other, only its mounter
		// may).
		if e, ok := mountinfo.At(mp); ok && e.FSType == mount.FSType && !slices.Contains(strings.Split(e.SuperOptions, ","), "allow_other") {
			return nil, fmt.Errorf("%v: a kvfs mount admits only the user who mounted it, not even root, unless mounted with --allow-other", err)
		}
		return nil, err
	} else if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, usageerr.Errorf("%v", err)
	} else if err != nil {
		// Not a bad argument (exit 2) either: the mount answered, with
		// an error (EIO from a store whose file system failed: an
		// outside tester).
		return nil, err
	}
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(mp, stats.Xattr, buf)
	for errors.Is(err, unix.ERANGE) && len(buf) < 1<<20 {
		buf = make([]byte, 4*len(buf))
		n, err = unix.Getxattr(mp, stats.Xattr, buf)
	}
	if err != nil {
		if errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP) {
			return nil, usageerr.Errorf("%s is not the root of a kvfs mount", mp)
		}
		if errors.Is(err, unix.ENOTCONN) {
			return nil, gone()
		}
		return nil, fmt.Errorf("reading stats of %s: %w", mp, err)
	}
	return buf[:n], nil
}

func cmdFsck(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("fsck", flag.ContinueOnError)
	store := fs.String("store", "", "store directory to check (required)")
	repair := fs.Bool("repair", false, "fix what can be fixed safely")
	asJSON := fs.Bool("json", false, "print JSON")
	every := progressFlag(fs)
	if _, err := parse(fs, args, 0, "no arguments besides flags (the store is --store STORE)"); err != nil {
		return err
	}
	if err := checkProgressEvery(*every); err != nil {
		return err
	}
	if *store == "" {
		return usageerr.Errorf("--store DIR is required")
	}
	// No wrapper's defaults come before a check's flags, and a repair of
	// the store given last where the first was meant is no slip to take
	// (mount warns instead: an outside tester found fsck silent).
	if twice := givenTwice(fs, args); len(twice) > 0 {
		return usageerr.Errorf("a flag given twice: %s; give it once", strings.Join(twice, "; "))
	}
	if st, err := os.Stat(*store); errors.Is(err, os.ErrNotExist) {
		return usageerr.Errorf("store %s does not exist", *store)
	} else if errors.Is(err, os.ErrPermission) {
		// Inside another user's store, say: "is not a directory" was
		// untrue (an outside tester).
		return usageerr.Errorf("store %s: this user (uid %d) may not reach it: a directory on its path is not this user's to enter", *store, os.Geteuid())
	} else if err != nil || !st.IsDir() {
		return usageerr.Errorf("store %s is not a directory", *store)
	}
	if err := mount.StoreAccess(*store); err != nil {
		return err
	}
	if abs, err := filepath.Abs(*store); err == nil {
		if err := blob.InsideStore(*store, mount.Unbound(abs)); err != nil {
			return usageerr.Errorf("%v", err)
		}
		if _, held := mount.StoreHolder(abs); !held {
			if mp, live := mount.LiveMount(abs); live {
				return usageerr.Errorf("%s is served at %s by a kvfs daemon that no longer holds its lock (was %s removed?): unmount it first",
					abs, mp, blob.LockName)
			}
		}
	}
	rep, err := core.Fsck(*store, *repair, fsckProgress(*every))
	if errors.Is(err, blob.ErrNotStore) || errors.Is(err, blob.ErrLocked) {
		return usageerr.Errorf("%v", err)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		if err := printJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		for _, p := range rep.Problems {
			fmt.Fprintln(stdout, "problem:", p)
		}
		for _, n := range rep.Foreign {
			fmt.Fprintf(stdout, "not kvfs's: %q in the store directory, left as it is (kvfs neither serves nor counts it)\n", n)
		}
		fmt.Fprintf(stdout, "%s: %d objects, %d bytes charged, %d directories, %d problems",
			*store, rep.Objects, rep.Bytes, rep.Dirs, len(rep.Problems))
		if rep.Repaired {
			fmt.Fprint(stdout, ", repaired")
		}
		if rep.PendingUploads > 0 {
			fmt.Fprintf(stdout, "; %d uploads to the remote tier pending (the next mount with --remote sends them)", rep.PendingUploads)
		}
		fmt.Fprintln(stdout)
	}
	if len(rep.Problems) > 0 && !rep.Repaired {
		return errors.New("the store has problems; run with --repair to fix them")
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
