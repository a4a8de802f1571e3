package blob

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// BenchmarkLoadCheckpoint100k measures a start from a checkpoint over
// 100,000 empty objects named as LMCache names them, 100 a directory:
// ns/op is the load, B/obj the heap the index keeps per object.
func BenchmarkLoadCheckpoint100k(b *testing.B) {
	const n, perDir = 100_000, 100
	dir := b.TempDir()
	s, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	s.racy = 0
	for i := range n {
		d := filepath.Join(dir, DataName, fmt.Sprintf("d%04d", i/perDir))
		if i%perDir == 0 {
			if err := os.Mkdir(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		name := fmt.Sprintf("llama@0x%08x@0@%016x.data", i, i*7919)
		if err := os.WriteFile(filepath.Join(d, name), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	objs, _, err := s.Load()
	if err != nil {
		b.Fatal(err)
	}
	order := make([]ID, len(objs))
	for i, o := range objs {
		order[i] = o.ID
	}
	if _, err := capture(s, order, func(step func()) { step() }, func(ID) bool { return false }); err != nil {
		b.Fatal(err)
	}
	s.Close()
	var perObj float64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		s.racy = 0
		b.StartTimer()
		_, rep, err := s.Load()
		b.StopTimer()
		if err != nil || !rep.FromSnapshot || rep.Objects != n {
			b.Fatalf("load: %v, from the checkpoint %v, %d objects", err, rep.FromSnapshot, rep.Objects)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perObj = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
		runtime.KeepAlive(s)
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(perObj, "B/obj")
}
