package gctune

import (
	"context"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 100},
		{16 << 20, 100},
		{Headroom, 100},
		{128 << 20, 50},
		{256 << 20, 25},
		{640 << 20, 10},
		{3 << 30, 10},
	} {
		if got := Percent(c.live); got != c.want {
			t.Errorf("Percent(%d MiB) = %d, want %d", c.live>>20, got, c.want)
		}
	}
}

func TestOverridden(t *testing.T) {
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	if Overridden(get) {
		t.Fatal("empty environment overrides")
	}
	env["GOMEMLIMIT"] = "4GiB"
	if !Overridden(get) {
		t.Fatal("GOMEMLIMIT does not override")
	}
	delete(env, "GOMEMLIMIT")
	env["GOGC"] = "50"
	if !Overridden(get) {
		t.Fatal("GOGC does not override")
	}
}

// TestRunLowersThePercentForALargeHeap: with 512 MiB live, Run sets the
// collector to 12%, gives 256 MiB of garbage's pages back, and a
// cancelled Run returns.
func TestRunLowersThePercentForALargeHeap(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	defer debug.SetGCPercent(debug.SetGCPercent(DefaultPercent))
	big := make([]byte, 512<<20)
	garbage := make([]byte, 256<<20)
	garbage[len(garbage)-1] = 1
	garbage = nil
	runtime.GC()
	if live, _ := heap(); live < 512<<20 {
		t.Fatalf("live heap %d after holding 512 MiB", live)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	Run(ctx, zap.NewNop())
	runtime.KeepAlive(big)
	if got := debug.SetGCPercent(DefaultPercent); got != 12 {
		t.Fatalf("GOGC after Run = %d, want 12", got)
	}
	// The pages the garbage held went back to the system.
	if _, free := heap(); free > 64<<20 {
		t.Fatalf("%d MiB of free heap pages still resident after lowering the percent", free>>20)
	}
}

// TestRunLeavesAnOperatorsGOGC: with GOGC set, Run changes nothing.
func TestRunLeavesAnOperatorsGOGC(t *testing.T) {
	t.Setenv("GOGC", "77")
	defer debug.SetGCPercent(debug.SetGCPercent(77))
	big := make([]byte, 512<<20)
	runtime.GC()
	Run(context.Background(), zap.NewNop())
	runtime.KeepAlive(big)
	if got := debug.SetGCPercent(77); got != 77 {
		t.Fatalf("GOGC after Run = %d, want the operator's 77", got)
	}
}

// TestStepReleasesFreePagesAtMostOnceAMinute: a step with more than
// the headroom of free pages resident gives them back, and a step
// within ReleaseEvery of it does not. The runtime's own scavenger may
// give pages back at any moment too (on a loaded machine, often), so
// the garbage is made again until it stays resident, and a step's
// restraint is judged by its decision, not by what is resident after.
func TestStepReleasesFreePagesAtMostOnceAMinute(t *testing.T) {
	t.Setenv("GOGC", "")
	defer debug.SetGCPercent(debug.SetGCPercent(DefaultPercent))
	tn := tuner{set: DefaultPercent, log: zap.NewNop()}
	now := time.Unix(1000, 0)
	garbage := func() {
		t.Helper()
		for range 20 {
			g := make([]byte, 256<<20)
			g[len(g)-1] = 1
			runtime.KeepAlive(g)
			runtime.GC()
			if _, free := heap(); free >= 128<<20 {
				return
			}
		}
		t.Skip("the runtime released 256 MiB of garbage pages itself 20 times running")
	}
	garbage()
	tn.step(now)
	if _, free := heap(); free > 64<<20 || !tn.released.Equal(now) {
		t.Fatalf("%d MiB free resident after a step (released at %v)", free>>20, tn.released)
	}
	garbage()
	tn.step(now.Add(ReleaseEvery / 2))
	if !tn.released.Equal(now) {
		t.Fatalf("released again %v after the last release", ReleaseEvery/2)
	}
	garbage()
	tn.step(now.Add(ReleaseEvery))
	if _, free := heap(); free > 64<<20 || !tn.released.Equal(now.Add(ReleaseEvery)) {
		t.Fatalf("%d MiB free resident a minute after the last release (released at %v)", free>>20, tn.released)
	}
}
