package core

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfs/kvfs/blob"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestRestoredIdleFromStore: an object a start restored and nobody used
// since is evicted with the idle time its stored file's times record
// (kvfs keeps the last use there), not the time since the start; one
// used after the start, with the time since that use. Both after a clean
// stop (checkpoint) and after a crash (walk).
func TestRestoredIdleFromStore(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := map[bool]string{false: "checkpoint", true: "crash"}[crash]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := Config{Capacity: 1 << 20, Grace: time.Millisecond}
			tc, _ := openCore(t, dir, cfg)
			tc.put("cold", 256*kib)
			tc.put("warm", 256*kib)
			if crash {
				tc.crash()
			} else if err := tc.Close(); err != nil {
				t.Fatal(err)
			}
			twoHours := time.Now().Add(-2 * time.Hour)
			for _, n := range []string{"cold", "warm"} {
				if err := os.Chtimes(filepath.Join(dir, blob.DataName, n), twoHours, twoHours); err != nil {
					t.Fatal(err)
				}
			}

			tc, _ = openCore(t, dir, cfg)
			tc.Start(func(d Drop) {
				tc.mu.Lock()
				defer tc.mu.Unlock()
				tc.drops = append(tc.drops, d)
			})
			defer tc.Close()
			warm := tc.lookupID("warm")
			h, err := tc.Open(warm, os.O_RDONLY, true, nil)
			if err != nil {
				t.Fatal(err)
			}
			h.Release()
			tc.clock.Skip(time.Minute)
			for _, n := range []string{"a", "b", "c", "d"} {
				tc.put(n, 256*kib)
			}
			tc.mu.Lock()
			defer tc.mu.Unlock()
			idle := map[string]time.Duration{}
			for _, d := range tc.drops {
				if d.Why == Evicted && len(d.Names) == 1 {
					idle[d.Names[0].Name] = d.Idle
				}
			}
			if got := idle["cold"]; got < 2*time.Hour || got > 2*time.Hour+5*time.Minute {
				t.Errorf("cold evicted after %v idle, want about 2h (its stored times)", got)
			}
			if got := idle["warm"]; got < time.Minute || got > 5*time.Minute {
				t.Errorf("warm evicted after %v idle, want about 1m (since its open)", got)
			}
		})
	}
}

// TestStartEvictionsReported: objects a start evicts to fit a smaller
// capacity are reported as evictions once the core starts (the metrics'
// evicted-idle histogram counts them as evictions_total does), each with
// its stored idle time, and each logged at debug with its names.
func TestStartEvictionsReported(t *testing.T) {
	dir := t.TempDir()
	tc, _ := openCore(t, dir, Config{Capacity: 1 << 20, Grace: time.Millisecond})
	for _, n := range []string{"a", "b", "c", "d"} {
		tc.put(n, 256*kib)
	}
	if err := tc.Close(); err != nil {
		t.Fatal(err)
	}
	hour := time.Now().Add(-time.Hour)
	for _, n := range []string{"a", "b", "c", "d"} {
		if err := os.Chtimes(filepath.Join(dir, blob.DataName, n), hour, hour); err != nil {
			t.Fatal(err)
		}
	}
	seen, logs := observer.New(zap.DebugLevel)
	tc, rep := openCore(t, dir, Config{Capacity: 512 * kib, Grace: time.Millisecond, Logger: zap.New(seen)})
	if rep.Evicted != 2 {
		t.Fatalf("start evicted %d, want 2", rep.Evicted)
	}
	// Each logged, as an eviction while serving is (an outside tester
	// could not tell them from losses by the count).
	var logged []string
	for _, e := range logs.FilterMessage("evicted to fit the capacity at the start").All() {
		logged = append(logged, fmt.Sprint(e.ContextMap()["names"]))
	}
	if len(logged) != 2 {
		t.Errorf("start evictions logged: %q; want 2, each with its names", logged)
	}
	tc.Start(func(d Drop) {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		tc.drops = append(tc.drops, d)
	})
	defer tc.Close()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if len(tc.drops) != 2 {
		t.Fatalf("%d drops reported, want the start's 2 evictions: %+v", len(tc.drops), tc.drops)
	}
	for _, d := range tc.drops {
		if d.Why != Evicted || d.Idle < time.Hour || d.Idle > time.Hour+5*time.Minute {
			t.Errorf("drop %+v: want an eviction about 1h idle", d)
		}
	}
	if st := tc.Stats(); st.Evictions != 2 {
		t.Errorf("evictions %d, want 2", st.Evictions)
	}
}
