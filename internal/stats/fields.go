package stats

import (
	"strings"

	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/ramcache"
)

// Kind is what a figure is, which says how each listing shows it.
type Kind uint8

const (
	Gauge   Kind = iota // a level, up and down
	Counter             // a count since the mount started: only grows
	ByOp                // counts by FUSE request type
	State               // a word, one of a few
)

// Field is one figure of a Snapshot. Its Name is the figure's only
// spelling: the JSON key of `kvfs stats --json` (a dot nests it in an
// object: ram_cache.hits), the row of `kvfs stats`, and, after kvfs_,
// with dots as underscores and _total for a counter, its metric.
type Field struct {
	Name string
	Kind Kind
	// Help says what the figure counts (the metric's help). Fields that
	// share a Label share their first one's Help.
	Help string
	// Label, when set, makes the figure one series of a metric family
	// it shares with its siblings: Name is FAMILY_VALUE, exported as
	// kvfs_FAMILY{Label="VALUE"}.
	Label string
	// Watch is the figure's column in `kvfs stats --watch`; empty: none.
	// A counter's rate is its column with /s.
	Watch string

	num  func(s *Snapshot, grow bool) *int64 // Gauge, Counter
	word func(s *Snapshot, grow bool) *string
	ops  func(s *Snapshot) *map[string]int64
}

// Group is the object a nested field sits in ("" for a top-level one),
// and Key its key there.
func (f Field) Group() string {
	if g, _, nested := strings.Cut(f.Name, "."); nested {
		return g
	}
	return ""
}

// Key is the field's key in its group's object.
func (f Field) Key() string { return f.Name[strings.LastIndex(f.Name, ".")+1:] }

// Int is a Gauge's or a Counter's value, and whether s has it (its tier
// exists, and the daemon it was read from reported it).
func (f Field) Int(s *Snapshot) (int64, bool) {
	if f.num == nil || s.absent[f.Name] {
		return 0, false
	}
	if p := f.num(s, false); p != nil {
		return *p, true
	}
	return 0, false
}

// Word is a State's value, and whether s has it.
func (f Field) Word(s *Snapshot) (string, bool) {
	if f.word == nil || s.absent[f.Name] {
		return "", false
	}
	if p := f.word(s, false); p != nil {
		return *p, true
	}
	return "", false
}

// Ops is a ByOp's counts.
func (f Field) Ops(s *Snapshot) map[string]int64 {
	if f.ops == nil {
		return nil
	}
	return *f.ops(s)
}

func coreField(name string, kind Kind, watch, help string, v func(*core.Stats) *int64) Field {
	return Field{Name: name, Kind: kind, Help: help, Watch: watch,
		num: func(s *Snapshot, _ bool) *int64 { return v(&s.Stats) }}
}

func ramField(key string, kind Kind, help string, v func(*ramcache.Stats) *int64) Field {
	return Field{Name: "ram_cache." + key, Kind: kind, Help: help,
		num: func(s *Snapshot, grow bool) *int64 {
			if s.RAMCache == nil && grow {
				s.RAMCache = new(ramcache.Stats)
			}
			if s.RAMCache == nil {
				return nil
			}
			return v(s.RAMCache)
		}}
}

func remoteField(name string, kind Kind, help string, v func(*RemoteStats) *int64) Field {
	return Field{Name: name, Kind: kind, Help: help, num: func(s *Snapshot, grow bool) *int64 {
		if r := remoteOf(s, grow); r != nil {
			return v(r)
		}
		return nil
	}}
}

func remoteOf(s *Snapshot, grow bool) *RemoteStats {
	if s.RemoteStats == nil && grow {
		s.RemoteStats = new(RemoteStats)
	}
	return s.RemoteStats
}

// Passthrough says whether the mount's handles use FUSE passthrough:
// what a reader of the stats (kvfs-bench) asks rather than the log.
var Passthrough = Field{Name: "passthrough", Kind: Gauge,
	Help: "1 when the mount's handles use FUSE passthrough (asked for, not --strict-capacity, run as root, and granted by the kernel); 0 when every byte goes through the daemon.",
	num:  func(s *Snapshot, _ bool) *int64 { return &s.Passthrough }}

// LookupHits and LookupMisses are the lookups that reached kvfs and found
// an object, and those that found nothing. Not a connector's hit ratio:
// the kernel answers repeated lookups of a present name from its name
// cache, and every store looks its names up first (an outside tester saw
// 0% under plain use).
var (
	LookupHits = Field{Name: "lookups_hit", Kind: Counter, Label: "result",
		Help: "Lookups that reached kvfs and found an object (result=\"hit\") or nothing (result=\"miss\"). Not a connector's hit ratio: the kernel answers repeated lookups of a present name from its name cache (--cache-timeout) without asking kvfs, and each store looks its names up first (misses).",
		num:  func(s *Snapshot, _ bool) *int64 { return &s.LookupHits }}
	LookupMisses = Field{Name: "lookups_miss", Kind: Counter, Label: "result",
		num: func(s *Snapshot, _ bool) *int64 { return &s.LookupMisses }}
)

// Fields are every figure of a snapshot, in the order `kvfs stats`
// prints them.
var Fields = []Field{
	coreField("capacity_bytes", Gauge, "capacity", "The capacity the ledger keeps used bytes under.", func(s *core.Stats) *int64 { return &s.CapacityBytes }),
	coreField("used_bytes", Gauge, "used", "Bytes charged: every object's size rounded up to 4096, plus open writers' reservations (df's used).", func(s *core.Stats) *int64 { return &s.UsedBytes }),
	coreField("objects", Gauge, "objects", "Objects (inodes) held, hard links counted once.", func(s *core.Stats) *int64 { return &s.Objects }),
	coreField("pinned_objects", Gauge, "pinned", "Objects with an open handle: never evicted.", func(s *core.Stats) *int64 { return &s.PinnedObjects }),
	coreField("pinned_bytes", Gauge, "", "Bytes charged to pinned objects, an open writer's reservation included.", func(s *core.Stats) *int64 { return &s.PinnedBytes }),
	coreField("shadow_bytes", Gauge, "", "Bytes of objects unlinked while still open.", func(s *core.Stats) *int64 { return &s.ShadowBytes }),
	coreField("evictions", Counter, "evictions", "Objects evicted to make room (also at start-up, to fit the capacity).", func(s *core.Stats) *int64 { return &s.Evictions }),
	coreField("evicted_bytes", Counter, "", "Bytes freed by evictions.", func(s *core.Stats) *int64 { return &s.EvictedBytes }),
	coreField("admission_failures", Counter, "enospc", "Creates, opens, writes, truncates, fallocates and closes refused with ENOSPC.", func(s *core.Stats) *int64 { return &s.AdmissionFailures }),
	coreField("waiting_for_room", Gauge, "waiting", "Writes, closes, truncates and fallocates waiting for room now (up to --wait-limit, or until their client is killed).", func(s *core.Stats) *int64 { return &s.WaitingForRoom }),
	coreField("reconciliations", Counter, "", "Times the ledger followed an object changed behind kvfs's back.", func(s *core.Stats) *int64 { return &s.Reconciliations }),
	coreField("reserved_bytes", Gauge, "", "Space admitted to open writers beyond what they have written.", func(s *core.Stats) *int64 { return &s.ReservedBytes }),
	coreField("kept_bytes", Gauge, "", "Reservations not shown for the moment after a close of a copy of a writer's descriptor by its opener or an exiting process (until its release, or 100 ms): admission counts them.", func(s *core.Stats) *int64 { return &s.KeptBytes }),
	coreField("unadmitted_bytes", Gauge, "", "Bytes writers wrote beyond what could be admitted: passthrough writers, and without --strict-capacity writers through the daemon past their budget (over the capacity until they close).", func(s *core.Stats) *int64 { return &s.UnadmittedBytes }),
	coreField("overshoot_max_bytes", Gauge, "", "The most used bytes have been over the capacity in the last 10 to 20 s (0 in normal operation; a writer past its budget, twice its reservation or a quarter of the capacity, is over until its close, unless --strict-capacity).", func(s *core.Stats) *int64 { return &s.OvershootMaxBytes }),
	LookupHits,
	LookupMisses,
	coreField("stores", Counter, "stores", "Writers that stored: each handle opened for writing and admitted, counted once at its release.", func(s *core.Stats) *int64 { return &s.Stores }),
	coreField("loads", Counter, "loads", "Opens of objects for reading.", func(s *core.Stats) *int64 { return &s.Loads }),
	Passthrough,

	ramField("capacity_bytes", Gauge, "The RAM tier's size.", func(r *ramcache.Stats) *int64 { return &r.CapacityBytes }),
	ramField("bytes", Gauge, "Bytes of object copies the RAM tier holds.", func(r *ramcache.Stats) *int64 { return &r.Bytes }),
	ramField("hits", Counter, "Opens served from a copy in RAM.", func(r *ramcache.Stats) *int64 { return &r.Hits }),
	ramField("misses", Counter, "Opens that found no copy in RAM.", func(r *ramcache.Stats) *int64 { return &r.Misses }),
	ramField("fills", Counter, "Copies made from reads passing through the daemon.", func(r *ramcache.Stats) *int64 { return &r.Fills }),
	ramField("drops", Counter, "Copies dropped because their object changed or went.", func(r *ramcache.Stats) *int64 { return &r.Drops }),
	ramField("stale", Counter, "Copies found outdated by their stamp (the store changed behind kvfs's back).", func(r *ramcache.Stats) *int64 { return &r.Stale }),

	{Name: "fuse_requests", Kind: ByOp, Help: "FUSE requests answered, by type (the metrics' kvfs_fuse_request_duration_seconds_count).",
		ops: func(s *Snapshot) *map[string]int64 { return &s.FuseRequests }},

	remoteField("remote_hits", Counter, "Remote lookups that found the name in the bucket.", func(r *RemoteStats) *int64 { return &r.Hits }),
	remoteField("remote_misses", Counter, "Remote lookups that did not (absent, excluded, or the server unavailable).", func(r *RemoteStats) *int64 { return &r.Misses }),
	remoteField("remote_heads", Counter, "HEAD requests sent (lookups and the check before an upload).", func(r *RemoteStats) *int64 { return &r.Heads }),
	remoteField("remote_fetches", Counter, "Downloads that completed and verified.", func(r *RemoteStats) *int64 { return &r.Fetches }),
	remoteField("remote_fetched_bytes", Counter, "Bytes of those downloads.", func(r *RemoteStats) *int64 { return &r.FetchedBytes }),
	remoteField("remote_corrupt", Counter, "Fetched objects whose size or checksum was wrong.", func(r *RemoteStats) *int64 { return &r.Corrupt }),
	remoteField("remote_uploads", Counter, "Objects uploaded.", func(r *RemoteStats) *int64 { return &r.Uploads }),
	remoteField("remote_uploaded_bytes", Counter, "Bytes uploaded.", func(r *RemoteStats) *int64 { return &r.UploadedBytes }),
	remoteField("remote_upload_already_present", Counter, "Uploads not needed because the key was there (the first writer won), or held the bytes a replacement would have sent.", func(r *RemoteStats) *int64 { return &r.AlreadyPresent }),
	remoteField("remote_upload_failures", Counter, "Failed upload attempts (each retry counts).", func(r *RemoteStats) *int64 { return &r.UploadFailures }),
	remoteField("remote_upload_dropped", Counter, "Uploads and deletes given up because the queue was full.", func(r *RemoteStats) *int64 { return &r.UploadDropped }),
	remoteField("remote_rejected", Counter, "Uploads and deletes refused for good (a name no key can hold, or the server's refusal of the key); dropped, logged once.", func(r *RemoteStats) *int64 { return &r.Rejected }),
	remoteField("remote_upload_reads", Counter, "Reads of stored files for upload: one per PUT sent.", func(r *RemoteStats) *int64 { return &r.UploadReads }),
	remoteField("remote_upload_changed", Counter, "Uploads cut because the stored file changed while it was read (tried again).", func(r *RemoteStats) *int64 { return &r.UploadChanged }),
	remoteField("remote_deletes", Counter, "Keys deleted from the bucket for an rm (a key already absent counts).", func(r *RemoteStats) *int64 { return &r.Deletes }),
	remoteField("remote_delete_requests", Counter, "DELETE requests sent, retries included.", func(r *RemoteStats) *int64 { return &r.DeleteRequests }),
	remoteField("remote_upload_skipped", Counter, "Uploads not needed: temp names, names known remote, local objects gone.", func(r *RemoteStats) *int64 { return &r.UploadSkipped }),
	remoteField("remote_queue_depth", Gauge, "Uploads and deletes pending now, the ones in progress included.", func(r *RemoteStats) *int64 { return &r.QueueDepth }),
	{Name: "remote_breaker_state", Kind: State,
		Help: "The remote tier's circuit breaker: 1 for its state now (closed: requests go to the server; open: they are not sent; half-open: one probe is), 0 for the others.",
		word: func(s *Snapshot, grow bool) *string {
			if r := remoteOf(s, grow); r != nil {
				return &r.BreakerState
			}
			return nil
		}},
}
