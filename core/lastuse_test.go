package core

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfs/kvfs/blob"

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

// TestReaderOpenRecordsUse: a reader's open journals the core's clock
// for the stored inode (what a load after a crash orders by) once its
// second has ended, and leaves the stored file's times alone (a record
// in its atime moved its ctime: git and tar took read files for
// changed); a writer's open and the remote tier's reads (OpenPath)
// journal nothing.
func TestReaderOpenRecordsUse(t *testing.T) {
	tc := newTestCore(t, Config{Capacity: 4 * mib})
	id := tc.put("a", 10)
	path, _ := tc.BackingPath(id)
	journal := filepath.Join(tc.store.Dir(), blob.UsesName)
	journaled := func() []byte {
		b, err := os.ReadFile(journal)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return b
	}
	var before unix.Stat_t
	if err := unix.Stat(path, &before); err != nil {
		t.Fatal(err)
	}
	open := func(what string, open func() (*Handle, error)) []byte {
		t.Helper()
		// A second later than any record so far, so this one is a first.
		tc.clock.Skip(time.Second)
		was := journaled()
		h, err := open()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		h.Release()
		if got := journaled(); len(got) != len(was) {
			t.Fatalf("%s: journaled before its second ended; want the record off the open's path", what)
		}
		tc.clock.Skip(time.Second)
		tc.recordUses()
		return journaled()[len(was):]
	}
	at := tc.clock.Now().Add(time.Second)
	got := open("reader", func() (*Handle, error) { return tc.Open(id, os.O_RDONLY, false, nil) })
	if len(got) != 16 || binary.LittleEndian.Uint64(got) != before.Ino || int64(binary.LittleEndian.Uint64(got[8:])) < at.UnixNano() {
		t.Fatalf("a reader's open journaled %x; want inode %d at the core's clock, at least %v", got, before.Ino, at)
	}
	var after unix.Stat_t
	if err := unix.Stat(path, &after); err != nil {
		t.Fatal(err)
	}
	if after.Ctim != before.Ctim || after.Mtim != before.Mtim {
		t.Fatalf("the read moved the stored file's times: ctime %v to %v, mtime %v to %v", before.Ctim, after.Ctim, before.Mtim, after.Mtim)
	}
	if got := open("writer", func() (*Handle, error) { return tc.Open(id, os.O_RDWR, true, nil) }); len(got) != 0 {
		t.Fatalf("a writer's open journaled %x; want nothing", got)
	}
	if got := open("upload", func() (*Handle, error) { return tc.OpenPath("a") }); len(got) != 0 {
		t.Fatalf("OpenPath journaled %x; want nothing", got)
	}
}
