package core

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLastUseOncePerSecond: an object is recorded once in a second,
// whoever asks, and again in the next.
func TestLastUseOncePerSecond(t *testing.T) {
	var u lastUse
	for _, c := range []struct {
		id    ID
		sec   int64
		first bool
	}{{7, 100, true}, {7, 100, false}, {8, 100, true}, {7, 101, true}, {7, 101, false}, {8, 100, true}} {
		if got := u.first(c.id, time.Unix(c.sec, 0)); got != c.first {
			t.Fatalf("object %d in second %d: first %v, want %v", c.id, c.sec, got, c.first)
		}
	}
}

// TestReaderOpenRecordsUse: a reader's open records the core's clock in
// the stored file's atime (what a load after a crash orders by) once its
// second has ended; a writer's open and the remote tier's reads
// (OpenPath) do not.
func TestReaderOpenRecordsUse(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib})
	id := tc.put("a", 10)
	path, _ := tc.BackingPath(id)
	long := time.Unix(1_000_000, 0)
	atime := func() time.Time {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return time.Unix(st.Atim.Unix())
	}
	open := func(what string, open func() (*Handle, error)) time.Time {
		t.Helper()
		if err := os.Chtimes(path, long, time.Time{}); err != nil {
			t.Fatal(err)
		}
		// A second later than any record so far, so this one is a first.
		tc.clock.Skip(time.Second)
		h, err := open()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		h.Release()
		if got := atime(); !got.Equal(long) {
			t.Fatalf("%s: the atime is %v before its second ended; want the record off the open's path", what, got)
		}
		tc.clock.Skip(time.Second)
		tc.recordUses()
		return atime()
	}
	before := tc.clock.Now().Add(time.Second)
	if got := open("reader", func() (*Handle, error) { return tc.Open(id, os.O_RDONLY, false, nil) }); got.Before(before) {
		t.Fatalf("after a reader's open the atime is %v; want the core's clock, at least %v", got, before)
	}
	if got := open("writer", func() (*Handle, error) { return tc.Open(id, os.O_RDWR, true, nil) }); !got.Equal(long) {
		t.Fatalf("after a writer's open the atime is %v; want it untouched (%v)", got, long)
	}
	if got := open("upload", func() (*Handle, error) { return tc.OpenPath("a") }); !got.Equal(long) {
		t.Fatalf("after OpenPath the atime is %v; want it untouched (%v)", got, long)
	}
}
