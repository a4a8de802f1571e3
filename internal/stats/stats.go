// Package stats is a mount's figures: one Snapshot of the core, the RAM
// tier, the remote tier and the FUSE requests, gathered where those
// parts are wired (package mount), and Fields, the table that names each
// figure once. `kvfs stats` (its JSON and its text), `kvfs stats
// --watch` and the Prometheus metrics are all derived from the table.
package stats

import (
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/ramcache"
	"github.com/kvfs/kvfs/remote"
)

// Xattr is the mount root's extended attribute that holds a Snapshot as
// JSON; `kvfs stats` reads it.
const Xattr = "user.kvfs.stats"

// Snapshot is one reading of a mount. Its JSON (MarshalJSON) is what
// `kvfs stats --json` prints, laid out by Fields.
type Snapshot struct {
	core.Stats
	// Passthrough is 1 when the mount's handles use FUSE passthrough
	// (asked for, allowed, and granted by the kernel), 0 when every
	// byte goes through the daemon.
	Passthrough int64
	// RAMCache is the RAM tier's figures; nil: no RAM tier.
	RAMCache *ramcache.Stats
	// FuseRequests counts the requests answered so far by type (a
	// request still being answered is not in it).
	FuseRequests map[string]int64
	// RemoteStats is the remote tier's figures; nil: no remote tier.
	*RemoteStats

	// absent names the figures the JSON this snapshot was read from
	// lacked: a daemon older than the figure.
	absent map[string]bool
}

// RemoteStats are the remote tier's figures. The alias lets Snapshot
// embed them beside core.Stats (two embedded fields named Stats would
// hide each other's fields).
type RemoteStats = remote.Stats
