package fusefs

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/internal/stats"
)

// notRequests are the RawFileSystem methods that are no FUSE request.
var notRequests = map[string]bool{"String": true, "SetDebug": true, "Init": true, "OnUnmount": true}

// TestInstrumentCountsEveryRequest calls every method of the wrapped
// fuse.RawFileSystem once and requires each request to be counted once,
// under its own type, and timed; the others to be handed on uncounted.
func TestInstrumentCountsEveryRequest(t *testing.T) {
	f := FS{reqs: new(requests)}
	var mu sync.Mutex
	timed := map[stats.Op]int{}
	raw := instrument(fuse.NewDefaultRawFileSystem(), f.reqs, func(op stats.Op, took time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if took < 0 {
			t.Errorf("%v took %v", op, took)
		}
		timed[op]++
	})
	v := reflect.ValueOf(raw)
	iface := reflect.TypeOf((*fuse.RawFileSystem)(nil)).Elem()
	seen := map[string]bool{}
	for i := range iface.NumMethod() {
		name := iface.Method(i).Name
		before := f.reqs.counts()
		call(v.MethodByName(name))
		op, moved := movedOp(t, before, f.reqs.counts())
		switch {
		case notRequests[name] && moved:
			t.Errorf("%s is no request but counted %v", name, op)
		case notRequests[name]:
		case !moved:
			t.Errorf("%s was not counted", name)
		case name != "Writev" && seen[op]:
			t.Errorf("%s counted as %v, which another method already counts as", name, op)
		default:
			seen[op] = true
		}
	}
	if len(seen) != int(stats.NumOps) {
		t.Errorf("%d request types counted, want all %d", len(seen), stats.NumOps)
	}
	for op, n := range f.reqs.counts() {
		if want := map[bool]int{true: 2, false: 1}[op == "WRITE"]; int(n) != want || timedOf(timed, op) != want {
			t.Errorf("%s: counted %d, timed %d, want %d", op, n, timedOf(timed, op), want)
		}
	}
}

// call calls m with zero arguments (nil pointers, empty strings).
func call(m reflect.Value) {
	args := make([]reflect.Value, m.Type().NumIn())
	for i := range args {
		args[i] = reflect.Zero(m.Type().In(i))
	}
	m.Call(args)
}

// movedOp is the one request type whose count moved by one.
func movedOp(t *testing.T, before, after map[string]int64) (string, bool) {
	var moved []string
	for op, n := range after {
		if n != before[op] {
			if n != before[op]+1 {
				t.Errorf("%s moved from %d to %d", op, before[op], n)
			}
			moved = append(moved, op)
		}
	}
	if len(moved) > 1 {
		t.Errorf("one call counted as %v", moved)
	}
	if len(moved) == 0 {
		return "", false
	}
	return moved[0], true
}

func timedOf(timed map[stats.Op]int, name string) int {
	for op, n := range timed {
		if op.String() == name {
			return n
		}
	}
	return 0
}

// TestInstrumentUntimed: without a timer requests are still counted.
func TestInstrumentUntimed(t *testing.T) {
	f := FS{reqs: new(requests)}
	raw := instrument(fuse.NewDefaultRawFileSystem(), f.reqs, nil)
	raw.Lookup(nil, &fuse.InHeader{}, "x", &fuse.EntryOut{})
	raw.Lookup(nil, &fuse.InHeader{}, "y", &fuse.EntryOut{})
	if got := f.reqs.counts(); len(got) != 1 || got["LOOKUP"] != 2 {
		t.Fatalf("counts %v, want LOOKUP 2", got)
	}
}
