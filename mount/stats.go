package mount

import (
	"encoding/json"

	"github.com/kvfs/kvfs/internal/stats"
)

// Stats is a snapshot of the mount: gathered here, where the core, the
// tiers and the FUSE front end are wired, so that none of them needs to
// know of the others' figures.
func (m *Mount) Stats() stats.Snapshot {
	s := stats.Snapshot{Stats: m.core.Stats(), FuseRequests: m.fs.Requests()}
	if m.PassthroughActive() {
		s.Passthrough = 1
	}
	if m.ram != nil {
		r := m.ram.Stats()
		s.RAMCache = &r
	}
	if m.tier != nil {
		r := m.tier.Stats()
		s.RemoteStats = &r
	}
	return s
}

// statsJSON is what the root's stats attribute holds: `kvfs stats --json`.
func (m *Mount) statsJSON() ([]byte, error) { return json.Marshal(m.Stats()) }
