package gctune

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"

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
		{320 << 20, 20},
		{3 << 30, 20},
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
// collector to MinPercent, and a cancelled Run returns.
func TestRunLowersThePercentForALargeHeap(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	defer debug.SetGCPercent(debug.SetGCPercent(DefaultPercent))
	big := make([]byte, 512<<20)
	garbage := make([]byte, 256<<20)
	garbage[len(garbage)-1] = 1
	garbage = nil
	runtime.GC()
	if live := Live(); live < 512<<20 {
		t.Fatalf("live heap %d after holding 512 MiB", live)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	Run(ctx, zap.NewNop())
	runtime.KeepAlive(big)
	if got := debug.SetGCPercent(DefaultPercent); got != MinPercent {
		t.Fatalf("GOGC after Run = %d, want %d", got, MinPercent)
	}
	// The pages the garbage held went back to the system.
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	if free := s[0].Value.Uint64(); free > 64<<20 {
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
