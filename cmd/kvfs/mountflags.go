package main

import (
	"flag"

	"github.com/kvfs/kvfs/mount"
	"github.com/kvfs/kvfs/remote"
)

// mountFlags are the flags of `kvfs mount`, and what they set. The mount
// helper's -o options are derived from the same set (helperOptions), so
// a flag added here is an fstab option too, unless notOptions says why
// not.
type mountFlags struct {
	fs            *flag.FlagSet
	opts          mount.Options
	remote        remote.Config
	extra         extraFlags
	noPassthrough bool
	logLevel      string
	cpuProfile    string
	mutexProfile  string
	background    bool
}

func newMountFlags() *mountFlags {
	m := &mountFlags{fs: flag.NewFlagSet("mount", flag.ContinueOnError)}
	fs, o := m.fs, &m.opts
	fs.StringVar(&o.Store, "store", "", "store directory (default: MOUNTPOINT.kvfs-store beside the mount point)")
	fs.Var(sizeFlag{&o.Capacity}, "capacity", "capacity, like 64GiB (default: 90% of the store disk's free space plus what the store already holds)")
	fs.DurationVar(&o.Grace, "grace", mount.DefaultGrace, "how long a just-closed object is safe from eviction")
	fs.DurationVar(&o.WaitLimit, "wait-limit", mount.DefaultWaitLimit, "how long a store waits for space before ENOSPC, all its writes' waits together (0: not at all)")
	fs.Var(sizeFlag{&o.WriteReserve}, "write-reserve", "the least space a writer is admitted when it opens, like 64MiB (default 0: the largest object the writer's process stored lately)")
	fs.BoolVar(&o.StrictCapacity, "strict-capacity", false, "pass every written byte through the daemon, so used never exceeds the capacity even for a moment (slower)")
	fs.DurationVar(&o.CacheTimeout, "cache-timeout", mount.DefaultCacheTimeout, "kernel name and attribute cache timeout")
	fs.DurationVar(&o.AuditInterval, "audit-interval", mount.DefaultAuditInterval, "how often to walk the store for changes made behind kvfs's back (0: never); a walk that took long waits 20 times its duration")
	fs.DurationVar(&o.StopLinger, "stop-linger", 0, "how long a stop (a signal) that found files open, and so detached the mount, serves them before it ends them, like 30s (0: until they close)")
	fs.DurationVar(&o.CheckpointInterval, "checkpoint-interval", mount.DefaultCheckpointInterval, "how often, while the store changes, to checkpoint the index so a restart after a crash is fast (0: only at a clean stop)")
	fs.Int64Var(&o.ServeWhileLoading, "serve-while-loading", mount.DefaultServeWhileLoading, "serve reads at once, while the index is built, when the store is expected to hold at least this many objects (stores of new names, deletes, moves and mkdir are taken too; other changes wait for the index; -1: never)")
	fs.Var(sizeFlag{&o.RAMCache}, "ram-cache", "keep copies of objects plain reads load in this much RAM, like 4GiB; objects over a quarter of it are not copied (default 0: none; passthrough reads never need it)")
	fs.BoolVar(&o.AllowOther, "allow-other", false, "let users other than the mounter in")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", 0, "abort the FUSE connection when a request goes unanswered this long, like 60s (0: never; this mount only, Linux 6.14+)")
	fs.BoolVar(&m.noPassthrough, "no-passthrough", false, "serve reads and writes through the daemon even where FUSE passthrough works")
	fs.BoolVar(&o.DebugFUSE, "debug-fuse", false, "log every FUSE request")
	fs.StringVar(&m.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&m.cpuProfile, "cpuprofile", "", "write a CPU profile of the daemon to this file")
	fs.StringVar(&m.mutexProfile, "mutexprofile", "", "write a profile of the daemon's contended locks to this file")
	fs.BoolVar(&m.background, "background", false, "return once the mount serves, the daemon running on in a session of its own (systemd's ExecReload: a handover)")
	m.extra = mountExtraFlags(fs)
	m.remote.RegisterFlags(fs)
	return m
}
