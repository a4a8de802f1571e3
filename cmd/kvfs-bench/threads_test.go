package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A thread round stores no more than kvfs holds: on a machine that
// stores the capacity within one measurement (16 cores did 17 GB/s of
// 4 MiB stores), kvfs evicted the small objects the loads then read,
// and the round failed with ENOENT. Here the capacity is small instead
// and the measurement long.
func TestThreadRoundWithinCapacity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts kvfs")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("needs /dev/fuse: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "kvfs")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/kvfs/kvfs/cmd/kvfs").CombinedOutput(); err != nil {
		t.Fatalf("building kvfs: %v\n%s", err, out)
	}
	b := &bench{
		cfg: &config{capacity: 32 << 20, threadsDur: 700 * time.Millisecond, mountTimeout: time.Minute},
		ctx: context.Background(), bin: bin, work: t.TempDir(), log: io.Discard, started: time.Now(),
	}
	k, err := b.startNode("kvfs", "passthrough", "kvfs", b.cfg.capacity)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := k.d.stop(); err != nil {
			t.Error(err)
		}
	}()
	if err := k.d.waitMounted(time.Minute); err != nil {
		t.Fatal(err)
	}
	rates, err := b.threadRound(k, 4)
	if err != nil {
		t.Fatalf("thread round: %v", err)
	}
	for i, r := range rates[:threadsCPU] {
		if r <= 0 {
			t.Errorf("rate %d is %v: %v", i, r, rates)
		}
	}
	s, err := k.d.stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Evictions != 0 || s.Objects != 0 || s.UsedBytes != 0 {
		t.Fatalf("after the round: %d evictions, %d objects, %d bytes used; want none", s.Evictions, s.Objects, s.UsedBytes)
	}
}
