// Package mount owns a kvfs mount's options and lifecycle: validating
// what the user asked for, loading the store, mounting, cleaning up a
// mount point left dead by a crashed daemon, and unmounting.
package mount

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/internal/mountinfo"
	"github.com/kvfs/kvfs/internal/usageerr"
	"github.com/kvfs/kvfs/ledger"
	"github.com/kvfs/kvfs/remote"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Options is what `kvfs mount` was asked for.
type Options struct {
	Mountpoint string
	// Store is the store directory; empty means DefaultStore(Mountpoint).
	Store string
	// Capacity in bytes; zero derives it from the store's free space.
	Capacity int64
	// Grace protects a just-closed object from eviction, so the publish
	// step after close (link or rename) cannot lose it.
	Grace time.Duration
	// WaitLimit bounds how long a write waits for space to free up;
	// zero answers ENOSPC at once.
	WaitLimit time.Duration
	// WriteReserve is the least reservation a writer is admitted when it
	// opens (the largest object its process published lately raises
	// it).
	WriteReserve int64
	// StrictCapacity: every written byte passes through the daemon and
	// the ledger first, so used never exceeds the capacity even for a
	// moment (no FUSE passthrough at all).
	StrictCapacity bool
	// CacheTimeout is how long the kernel may cache names and attributes;
	// kvfs invalidates them itself when it evicts.
	CacheTimeout time.Duration
	// AuditInterval is how often the store is walked for changes made
	// behind kvfs's back; zero never.
	AuditInterval time.Duration
	// StopLinger bounds how long a stop that detached a busy mount
	// serves the files still open on it before it ends them (see
	// detached.go); zero: until they close.
	StopLinger time.Duration
	// CheckpointInterval is how often, while the store changes, the
	// index is checkpointed so a start after a crash need not stat every
	// stored file; zero only at a clean stop.
	CheckpointInterval time.Duration
	// ServeWhileLoading: a store expected to hold at least this many
	// objects is served while its index is built (loading.go); 0:
	// DefaultServeWhileLoading; -1: never.
	ServeWhileLoading int64
	// RAMCache is the size of the RAM tier (package ramcache); zero
	// means none. It only serves reads that passthrough does not.
	RAMCache    int64
	AllowOther  bool
	Passthrough bool
	DebugFUSE   bool
	Logger      *zap.Logger
	// Now is the clock of grace periods; tests pass their own.
	Now func() time.Time
	// PollInterval is how often passthrough writers' sizes are read
	// (default 2ms).
	PollInterval time.Duration

	// RequestTimeout: the kernel aborts the FUSE connection when a
	// request goes unanswered this long (0: never); see reqtimeout.go.
	RequestTimeout time.Duration

	// Observer, when set, is told of drops and FUSE requests as they
	// happen (see observe.go); Progress, of a start-up walk's progress.
	Observer Observer
	Progress blob.Progress
	// Remote, when set (Finish called), is the shared remote tier on S3
	// (see remote.go); RemoteClock is its clock (tests pass their own).
	Remote      *remote.Config
	RemoteClock remote.Clock
	// Guard, when set, is the kvfs binary to run as the daemon's guard
	// (guard.go) from before the mount exists until the daemon stops.
	Guard string
	// TakingOver, when set, is called as this daemon takes a live
	// mount over from process from, just before it tells it so (a
	// service manager's main process changes then); undo is called if
	// the old daemon serves on after all.
	TakingOver func(from int) (undo func())
	// ServingOn, when set, is called as this daemon serves on after a
	// successor it offered the mount to was ended for giving no answer
	// (it may have told a service manager it was the main process).
	ServingOn func()
	// Cancel, when set and closed while this daemon takes a live mount
	// over, ends the takeover if it has not yet told the old daemon it
	// is ready: the old daemon serves on (a signal to `kvfs mount`).
	Cancel <-chan struct{}
}

// Defaults for the options a user leaves out.
const (
	DefaultGrace         = 2 * time.Second
	DefaultWaitLimit     = 5 * time.Second
	DefaultCacheTimeout  = time.Minute
	DefaultAuditInterval = 10 * time.Minute
	// DefaultCheckpointInterval: a checkpoint of a million objects takes
	// about a second of one core, written while the store changes.
	DefaultCheckpointInterval = 30 * time.Second
	// MinCheckpointInterval is the shortest --checkpoint-interval.
	MinCheckpointInterval = 10 * time.Millisecond
	// DefaultCapacityShare is the part of the store's free space (plus
	// what it already holds) a capacity defaults to.
	DefaultCapacityShare = 0.9
)

// ErrUsage marks errors in what the user asked for (exit status 2), as
// opposed to failures while doing it: errors.Is(err, ErrUsage).
var ErrUsage = usageerr.ErrUsage

func usagef(format string, args ...any) error { return usageerr.Errorf(format, args...) }

// DefaultStore is the store directory used when none is given: beside
// the mount point (its symlinks resolved), named after it.
func DefaultStore(mountpoint string) string {
	clean := filepath.Clean(mountpoint)
	return filepath.Join(filepath.Dir(clean), filepath.Base(clean)+".kvfs-store")
}

// ParseSize reads a size: plain bytes, or a number with K, M, G, T or P, with
// or without "iB", "i" or "B" (all binary: 64MiB, 64Mi, 64M and 64MB are
// 64<<20; 64Mi as Kubernetes writes it), in either case, with spaces
// around the unit ("64 mib").
func ParseSize(s string) (int64, error) {
	upper := strings.ToUpper(strings.TrimSpace(s))
	digits := strings.IndexFunc(upper, func(r rune) bool { return r < '0' || r > '9' })
	if digits < 0 {
		digits = len(upper)
	}
	// The unit: none or B (bytes), or K, M, G, T or P, alone or with B,
	// I or iB (64M, 64MB, 64Mi, 64MiB: all 2^20), and nothing else: a
	// stray letter ("64iB") is not bytes.
	unit, shift := strings.TrimSpace(upper[digits:]), 0
	if unit != "" && unit != "B" {
		i := strings.IndexByte("KMGTP", unit[0])
		if rest := unit[1:]; i < 0 || rest != "" && rest != "B" && rest != "I" && rest != "IB" {
			unit = "?"
		} else {
			shift = 10 * (i + 1)
		}
	}
	v, err := strconv.ParseUint(upper[:digits], 10, 63)
	if errors.Is(err, strconv.ErrRange) && unit != "?" {
		// A number, too large for bytes (it said "want bytes": an
		// outside tester's 9223372036854775808).
		return 0, usagef("size %q is too large", s)
	}
	if err != nil || unit == "?" {
		return 0, usagef("bad size %q: want bytes or a number with K, M, G, T or P (like 64MiB or 10G)", s)
	}
	if shift > 0 && v > (1<<63-1)>>shift {
		return 0, usagef("size %q is too large", s)
	}
	return int64(v << shift), nil
}

// validate checks the paths and numbers before anything is touched.
func (o *Options) validate() error {
	if o.Mountpoint == "" {
		return usagef("no mount point given")
	}
	mp, err := filepath.Abs(o.Mountpoint)
	if err != nil {
		return usagef("mount point %q: %v", o.Mountpoint, err)
	}
	paths := []string{mp}
	if o.Store != "" {
		if o.Store, err = filepath.Abs(o.Store); err != nil {
			return usagef("store %q: %v", o.Store, err)
		}
		paths = append(paths, o.Store)
	}
	// Before anything looks at them: a path on a FUSE mount whose daemon
	// is hung or stopped waits for it, where no signal ends the wait.
	// Each is probed as given, then with its symlinks read (never
	// through a mount point: quietResolve), as a link may lead onto one.
	for _, p := range paths {
		if err := answers(p); err != nil {
			return err
		}
		if q := quietResolve(p); q != p {
			if err := answers(q); err != nil {
				return err
			}
		}
	}
	// The kernel mounts on, and mountinfo names, the real path; a store
	// reached through a symlink into the mount point is inside it.
	mp = resolved(mp)
	if o.Store == "" {
		// Beside the directory the kernel mounts on: a mount point
		// reached through a symlink names the same store (an outside
		// tester's mount through one came up empty, on a new store
		// named after the link).
		o.Store = DefaultStore(mp)
	}
	o.Store = resolved(o.Store)
	o.Mountpoint = mp
	if within(o.Store, mp) || within(mp, o.Store) {
		return usagef("store %s and mount point %s must not contain each other", o.Store, mp)
	}
	if err := StoreAccess(o.Store); err != nil {
		return err
	}
	if e, ok := holding(o.Store); ok && e.FSType == FSType {
		// Its bytes would be counted twice, and the outer cache would
		// evict the store's own files as objects.
		return usagef("store %s is inside the kvfs mount %s; a store must be on the node's own file system", o.Store, e.Point)
	}
	if o.Capacity < 0 || (o.Capacity > 0 && o.Capacity < ledger.BlockSize) {
		return usagef("capacity %d is below one block (%d bytes)", o.Capacity, ledger.BlockSize)
	}
	// Objects are charged in whole blocks, so the rest of a capacity
	// that is not a multiple of one could never be used: df showed the
	// blocks and kvfs stats the bytes asked for. The serving line says
	// the capacity taken.
	o.Capacity -= o.Capacity % ledger.BlockSize
	// A writer is reserved at most a quarter of the capacity (core's
	// Reservation), so more asked for is refused, not cut unsaid.
	if o.WriteReserve < 0 || o.WriteReserve > o.Capacity/4 && o.Capacity > 0 {
		return usagef("--write-reserve %d must be between 0 and a quarter of the capacity (%d): a writer is reserved at most that", o.WriteReserve, o.Capacity/4)
	}
	if most := largestDefaultCapacity(o.Store); o.Capacity == 0 && most > 0 && o.WriteReserve > most/4 {
		// The default capacity is known only once the store is read,
		// but it is never more than this (an outside tester's
		// --write-reserve 100T was taken, unsaid).
		return usagef("--write-reserve %d is more than a quarter of any capacity the store's disk allows (%d): a writer is reserved at most that; give a smaller one, or --capacity", o.WriteReserve, most/4)
	}
	if o.ServeWhileLoading == 0 {
		o.ServeWhileLoading = DefaultServeWhileLoading
	}
	if o.ServeWhileLoading < -1 {
		return usagef("--serve-while-loading %d must be a number of objects, or -1 (never)", o.ServeWhileLoading)
	}
	if o.RAMCache < 0 || (o.RAMCache > 0 && o.RAMCache < 1<<20) {
		return usagef("--ram-cache %d is below 1 MiB (0 turns the RAM tier off)", o.RAMCache)
	}
	if total := physicalMemory(); total > 0 && o.RAMCache > total {
		// Its counters alone are sized by it: a petabyte asked for
		// gigabytes before the first object.
		return usagef("--ram-cache %d is more than this machine's memory (%d bytes)", o.RAMCache, total)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"grace", o.Grace}, {"wait-limit", o.WaitLimit}, {"cache-timeout", o.CacheTimeout}, {"audit-interval", o.AuditInterval},
		{"checkpoint-interval", o.CheckpointInterval}, {"request-timeout", o.RequestTimeout}, {"stop-linger", o.StopLinger}} {
		if d.v < 0 {
			return usagef("--%s %v: durations must not be negative", d.flag, d.v)
		}
	}
	if o.CheckpointInterval > 0 && o.CheckpointInterval < MinCheckpointInterval {
		// Each wake of an idle daemon costs a look at the store: 1ns
		// took a whole core, 1ms 5.6% of one (an outside tester).
		return usagef("--checkpoint-interval %v: at least %v (0: only at a clean stop)", o.CheckpointInterval, MinCheckpointInterval)
	}
	if err := checkRequestTimeout(o.RequestTimeout); err != nil {
		return err
	}
	// The mount point first: its default store (beside it) is inside the
	// same store, and that store's refusal named the derived path, never
	// the mount point the user gave (an outside tester's finding).
	from := mp
	if e, ok := mountinfo.At(mp); ok && e.FSType == FSType {
		// A kvfs mount (a handover's, or a dead one's to replace): a
		// kvfs.format in it is an object of that cache, not a store's
		// mark (an outside tester's object of that name refused every
		// takeover, and the restart after a kill -9).
		from = filepath.Dir(mp)
	}
	if outer, ok := blob.StoreAbove(Unbound(from)); ok {
		return usagef("mount point %s is inside the kvfs store %s", mp, outer)
	}
	// Inside another kvfs mount: its directory is an object directory of
	// that cache, which may evict or remove it, and the inner mount dies
	// with the outer daemon (an outside tester's ended at the outer's
	// restart after a crash). The mount point itself is the kvfs mount
	// a handover or a dead mount's replacement is for.
	if e, ok := holding(filepath.Dir(mp)); ok && e.FSType == FSType {
		return usagef("mount point %s is inside the kvfs mount %s: mount it elsewhere", mp, e.Point)
	}
	if outer, ok := blob.StoreAbove(filepath.Dir(Unbound(o.Store))); ok {
		// Reached through a bind mount (symlinks are resolved above):
		// a store's data directory bound elsewhere, with an object
		// named kvfs.format at the cache's root, was taken for a store
		// and written into (an outside tester, 3 of 3).
		return usagef("store %s is inside the kvfs store %s", o.Store, outer)
	}
	if target, err := os.Readlink(o.Store); err == nil {
		// resolved reads every link that leads somewhere: this one does
		// not (was: "mkdir ...: file exists", exit 1).
		return usagef("store %s is a symbolic link to %s, which does not exist: make that directory, or give another --store", o.Store, target)
	}
	st, err := os.Stat(o.Store)
	if err == nil && !st.IsDir() {
		return usagef("store %s is not a directory", o.Store)
	}
	if parent := filepath.Dir(o.Store); errors.Is(err, fs.ErrNotExist) && !dirExists(parent) {
		// The store itself is made, not the path to it: a typo in
		// --store made the whole chain, and a fresh empty cache there
		// (an outside tester's /nonexist/deep/store).
		return usagef("store %s: its parent directory %s does not exist: make it first, or give another --store", o.Store, parent)
	}
	if _, err := blob.CheckDir(o.Store); err != nil {
		return usagef("%v", err)
	}
	return nil
}

// dirExists says whether p is a directory.
func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// holding is the mount that holds path p (the top one at the deepest
// mount point at or above it), from mountinfo alone.
func holding(p string) (mountinfo.Entry, bool) {
	point := ""
	for _, e := range mountinfo.Read() {
		if (p == e.Point || within(p, e.Point)) && len(e.Point) > len(point) {
			point = e.Point
		}
	}
	if point == "" {
		return mountinfo.Entry{}, false
	}
	return mountinfo.At(point)
}

// Unbound is path with its symlinks resolved and, where it lies in a
// bind mount of a directory, reached through a mount of its file
// system's root instead: a store's data directory reached through a
// symlink or a bind mount is then seen inside its store (an outside
// tester's fsck through either checked a cache's data directory, which
// held an object named kvfs.format, as a store, and wrote into it).
func Unbound(path string) string {
	p := resolved(path)
	e, ok := holding(p)
	if !ok || e.Root == "/" || e.Root == "" {
		return p
	}
	rel, err := filepath.Rel(e.Point, p)
	if err != nil {
		return p
	}
	for _, m := range mountinfo.Read() {
		if m.Dev == e.Dev && m.Root == "/" {
			return filepath.Join(m.Point, e.Root, rel)
		}
	}
	return p
}

// StoreAccess refuses a store that exists but that this user may not
// enter, naming its owner and mode: another user's store said "open
// .../kvfs.format: permission denied" to mount, and to fsck that a
// daemon no longer held its lock (it did, and the lock file was not
// readable: an outside tester).
func StoreAccess(store string) error {
	var st unix.Stat_t
	if unix.Stat(store, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil // absent, or not a directory: made, or refused, later
	}
	if err := unix.Access(store, unix.R_OK|unix.X_OK); errors.Is(err, unix.EACCES) {
		return usagef("store %s belongs to uid %d (mode %04o), and this user (uid %d) may not enter it: run kvfs as its owner or root",
			store, st.Uid, st.Mode&0o7777, os.Geteuid())
	}
	return nil
}

// answers refuses a path on a FUSE mount whose daemon does not answer a
// statfs within unmountProbe; a dead one (ENOTCONN) answers at once.
func answers(p string) error {
	e, ok := holding(p)
	if !ok || !strings.HasPrefix(e.FSType, "fuse") {
		return nil
	}
	if InTime(unmountProbe, func() error { return unix.Statfs(e.Point, new(unix.Statfs_t)) }) == ErrTimedOut {
		return usagef("%s is on the FUSE mount %s, whose daemon did not answer within %v (hung or stopped); %s", p, e.Point, unmountProbe, ForceHint(e.Point))
	}
	return nil
}

// resolved is an absolute path with its symlinks resolved as far as it
// exists.
func resolved(p string) string { return resolvedWithin(p, 40) }

// resolvedWithin is resolved following at most links more symlinks of
// its own (a loop ends there). A symlink to a dead mount, which no stat
// reaches (ENOTCONN), is followed all the same: a restart after a crash
// through a symlinked mount point took the link for the mount point,
// found no mount at it, and refused the dead one (an outside tester).
func resolvedWithin(p string, links int) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	if target, err := os.Readlink(p); err == nil && links > 0 {
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		// Not a dangling one: Check refuses that by its own name.
		if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
			return resolvedWithin(target, links-1)
		}
	}
	if dir := filepath.Dir(p); dir != p {
		return filepath.Join(resolvedWithin(dir, links), filepath.Base(p))
	}
	return p
}

func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// checkMountpoint requires an existing, empty directory that is not
// already a live mount. A mount point that a crashed daemon left dead
// ("transport endpoint is not connected") passes, and dead says so: it
// is replaced when the new mount is made (newServer), not now, so that
// the directory under it never shows while the store loads.
func checkMountpoint(mp, store string, log *zap.Logger) (dead bool, err error) {
	if isDeadMount(mp) {
		// Of another store: a typo in --store on a restart after a
		// crash swapped an empty cache in for the user's, with a
		// warning that did not say which (an outside tester), where a
		// live mount of another store is refused.
		if e, ok := mountinfo.At(mp); ok && e.FSType == FSType && e.Source != store {
			return true, usagef("%s is the dead mount of the store %s (its daemon is gone), not of %s: mount that store to take its place, or `kvfs unmount %s` first", mp, e.Source, store, mp)
		}
		// A directory that cannot be read here is read again, or the
		// dead mount detached, when the new mount is made.
		if err := coveredEmpty(mp); errors.Is(err, usageerr.ErrUsage) {
			return true, err
		}
		log.Warn("mount point is dead (crashed daemon?); replacing it once the store is loaded", zap.String("mountpoint", mp))
		return true, nil
	}
	return false, emptyMountpoint(mp)
}

// prepareMountpoint detaches the dead mounts at mp and checks what they
// covered as checkMountpoint does: the way to a new mount where one
// cannot be made beneath the dead one.
func prepareMountpoint(mp string, log *zap.Logger) error {
	if err := detachDead(mp, 0, "detaching the dead mount", log); err != nil {
		return err
	}
	return emptyMountpoint(mp)
}

// emptyMountpoint requires an existing, empty directory that is not a
// mount point.
func emptyMountpoint(mp string) error {
	var st unix.Stat_t
	err := unix.Stat(mp, &st)
	switch {
	case errors.Is(err, unix.ENOENT):
		return usagef("mount point %s does not exist", mp)
	case errors.Is(err, unix.ENOTCONN):
		return usagef("mount point %s is a dead mount that could not be detached", mp)
	case err != nil:
		return usagef("mount point %s: %v", mp, err)
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return usagef("mount point %s is not a directory", mp)
	}
	if mounted, fstype := mountedAt(mp); mounted {
		if !strings.HasPrefix(fstype, "fuse") {
			// A container's volume at the mount point itself: a
			// restart after a crash could not reach the host (see
			// docs/operations.md, Kubernetes).
			return usagef("%s is already a mount point (%s: a volume or bind mount?); unmount it first, "+
				"or make its parent the volume and mount kvfs on a directory inside it", mp, fstype)
		}
		if e, ok := mountinfo.At(mp); ok && e.FSType == FSType {
			// Its daemon did not take a handover: another store, another
			// user, or a handover under way.
			who := ""
			if uid, ok := mountOwner(e); ok {
				who = fmt.Sprintf(" run by uid %d", uid)
			}
			return usagef("%s is already served by a kvfs daemon%s, of the store %s; only a kvfs mount of that store, by root or that daemon's user, takes it over (one at a time); or unmount it first", mp, who, e.Source)
		}
		return usagef("%s is already a mount point (%s); unmount it first", mp, fstype)
	}
	ents, err := os.ReadDir(mp)
	if err != nil {
		return usagef("mount point %s: %v", mp, err)
	}
	if len(ents) > 0 {
		return usagef("mount point %s is not empty (%s); kvfs would hide them", mp, usageerr.Entries(len(ents)))
	}
	return nil
}

// isDeadMount: a FUSE mount whose daemon died still answers stat of its
// root from the kernel's cache, but nothing that needs the daemon.
func isDeadMount(mp string) bool {
	mounted, fstype := mountedAt(mp)
	if !mounted || !strings.HasPrefix(fstype, "fuse") {
		return false
	}
	var sf unix.Statfs_t
	return errors.Is(unix.Statfs(mp, &sf), unix.ENOTCONN)
}

// capacityFor derives a capacity from the store's file system: a share
// of its free space plus what the store already holds.
func capacityFor(store string, held int64) (int64, error) {
	room, size, err := roomOn(store, held)
	return defaultCapacity(room, size), err
}

// defaultCapacity is the capacity that room bytes on a file system of
// size bytes give: DefaultCapacityShare of it, and never into the free
// space the core keeps on the disk (core.DiskFloor), which a small disk's
// share reached: a 20 MiB store's capacity was said as 18 MiB, then
// lowered to 16 MiB by the first stores (an outside tester).
func defaultCapacity(room, size int64) int64 {
	c := min(int64(float64(room)*DefaultCapacityShare), room-core.DiskFloor(size))
	return max(c, 0) / ledger.BlockSize * ledger.BlockSize
}

// diskRoom is what the file system holding store can give objects:
// held bytes of them on it now, and its free space less what the core
// keeps free (core.DiskFloor).
func diskRoom(store string, held int64) (int64, error) {
	room, size, err := roomOn(store, held)
	return room - core.DiskFloor(size), err
}

// roomOn is held bytes of objects on the file system holding store and
// its free space, and the size of that file system.
func roomOn(store string, held int64) (room, size int64, err error) {
	var sf unix.Statfs_t
	if err := unix.Statfs(store, &sf); err != nil {
		return 0, 0, err
	}
	return held + int64(sf.Bavail)*sf.Bsize, int64(sf.Blocks) * sf.Bsize, nil
}

// largestDefaultCapacity bounds the capacity capacityFor can give store
// (0: unknown): its share of the whole file system that holds store, or
// will once it is made.
func largestDefaultCapacity(store string) int64 {
	var sf unix.Statfs_t
	for p := store; ; p = filepath.Dir(p) {
		if unix.Statfs(p, &sf) == nil {
			size := int64(sf.Blocks) * sf.Bsize
			return defaultCapacity(size, size)
		}
		if p == filepath.Dir(p) {
			return 0
		}
	}
}

// physicalMemory is the machine's RAM in bytes (0: unknown).
func physicalMemory() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}
