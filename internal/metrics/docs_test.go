package metrics

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/internal/stats"
)

// TestEveryMetricDocumented: README.md and docs/metrics.md name every
// kvfs_* series a mount with a RAM tier exports.
func TestEveryMetricDocumented(t *testing.T) {
	m := New("dev")
	m.Watch(Source{Stats: distinctStats})
	m.Dropped(core.Drop{Why: core.Evicted, Idle: time.Second})
	m.Request(stats.OpLookup, time.Millisecond)
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{"../../README.md", "../../docs/metrics.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range fams {
			if name := f.GetName(); strings.HasPrefix(name, "kvfs_") {
				n++
				if !strings.Contains(string(b), "`"+name) {
					t.Errorf("%s does not name %s", doc, name)
				}
			}
		}
		if n < 30 {
			t.Fatalf("only %d kvfs_ series gathered", n)
		}
	}
}
