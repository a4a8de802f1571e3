package core

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvfs/kvfs/blob"
)

// TestWritersStuckBehindReadersGiveWay: writers that together fill the
// cache beside an object readers keep open, each with more to write,
// are stuck: the readers reopen the object before they close it (a
// RELEASE comes after close(2) returns), so its pin never ends, and
// every reader's close wakes the writers without anything moving. Once
// nothing moves for stallWait the youngest gives way and the others
// take the room it frees. Before, each wake started the stall's wait
// again, and every writer waited out --wait-limit, then most were
// refused at once (an outside tester: 8 threads into 16 MiB with two
// readers reopening the one published object, waiting_for_room 8 for
// 4.9 s, then 3-5 refused). In a synctest bubble: its clock moves only
// when every goroutine waits.
func TestWritersStuckBehindReadersGiveWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 5 * time.Second
		tc, id, r := readPinned(t, limit)
		stop := make(chan struct{})
		var readers sync.WaitGroup
		readers.Go(func() {
			for {
				select {
				case <-stop:
					r.Release()
					return
				case <-time.After(50 * time.Millisecond):
				}
				next, err := tc.Open(id, os.O_RDONLY, false, nil)
				if err != nil {
					t.Error(err)
					return
				}
				r.Release()
				r = next
			}
		})
		defer readers.Wait()
		defer close(stop)
		stuckWritersGiveWay(t, tc, limit)
	})
}

// TestNewWriterBehindAWaitingOne: a writer that opens while an older
// writer holding room waits for more is reserved nothing, not the free
// room there is: that room is the older one's first, as at a write
// (Behind). Taken by newcomers' reservations (a refused writer's thread
// storing again), it starved the older writers, which waited out the
// limit (an outside tester: 16 of 120 refused in 16 MiB).
func TestNewWriterBehindAWaitingOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tc := newTestCore(t, Config{Capacity: 16 * mib, PollInterval: time.Hour, WaitLimit: time.Hour})
		// Writers are reserved 4 MiB (a quarter of the capacity), and
		// may grow to twice that admitted.
		id := tc.put("read", 10*mib)
		time.Sleep(time.Second) // its grace over
		r, err := tc.Open(id, os.O_RDONLY, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		older, err := tc.Create(blob.RootID, ".tmp0", 0o644, nobody, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := older.Write(Interrupt{}, make([]byte, 2*mib), 0); err != nil {
			t.Fatal(err)
		}
		// 4 MiB free, 5 wanted: it waits for the reader.
		wrote := make(chan error, 1)
		go func() {
			_, err := older.Write(Interrupt{}, make([]byte, 5*mib), 2*mib)
			wrote <- err
		}()
		synctest.Wait()
		if tc.counters.waiting.Load() != 1 {
			t.Fatalf("the older writer does not wait for room: %+v", tc.Stats())
		}
		reserved := tc.Stats().ReservedBytes
		newer, err := tc.Create(blob.RootID, ".tmp1", 0o644, nobody, true)
		if err != nil {
			t.Fatal(err)
		}
		if st := tc.Stats(); !newer.Unreserved() || st.ReservedBytes != reserved {
			t.Errorf("a writer opened while an older one waits for room: unreserved %v, reserved bytes %d (were %d); want it reserved nothing", newer.Unreserved(), st.ReservedBytes, reserved)
		}
		r.Release()
		if err := <-wrote; err != nil {
			t.Fatalf("the older writer once the reader closed: %v", err)
		}
		for _, h := range []*Handle{older, newer} {
			h.Flush()
			h.Release()
		}
	})
}

// TestWritersStuckBesideEmptyFilesGiveWay: writers stuck beside a
// reader's pin give way after stallWait while another client makes,
// closes and removes empty files all along (a lock file, a marker): its
// writers' reservations come and go, and no room comes of it. Each of
// them restarted the stall's wait, and every writer waited out the
// wait limit (an outside tester: 8 threads into 16 MiB beside a held
// 12 MiB object and an empty-file loop every 20 ms, 4 of 6 runs stalled
// 5 s, then 2-7 stores refused at once).
func TestWritersStuckBesideEmptyFilesGiveWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 5 * time.Second
		tc, _, r := readPinned(t, limit)
		defer r.Release()
		stop := make(chan struct{})
		var marker sync.WaitGroup
		marker.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				h, err := tc.Create(blob.RootID, "lock", 0o644, blob.Owner{UID: -1, GID: -1}, true)
				if err != nil {
					t.Error(err)
					return
				}
				h.Flush()
				h.Release()
				if err := tc.Unlink(blob.RootID, "lock"); err != nil {
					t.Error(err)
					return
				}
			}
		})
		defer marker.Wait()
		defer close(stop)
		stuckWritersGiveWay(t, tc, limit)
	})
}

// TestWritersOfObjectsLeaveRoom: passthrough writers of objects that
// exist (read-write opens, shared writable mappings) that write nothing
// leave the next stores their room. Their room to grow (headroom), which
// no one could take back from a passthrough writer, took all that was
// free: one writer of a 12 MiB object in 16 MiB, and every other store
// waited out the wait limit and was refused (an outside tester: 20 of
// 20); then, each leaving one object's room, 12 writers of 1 MiB
// objects together left only that (4 of 20 stores done). Headroom now
// leaves one object's room, and an admission takes back what of it was
// not written.
func TestWritersOfObjectsLeaveRoom(t *testing.T) {
	for _, c := range []struct {
		objects int
		size    int
	}{{1, 12 * mib}, {12, mib}} {
		t.Run(fmt.Sprintf("%dx%dMiB", c.objects, c.size/mib), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tc := newTestCore(t, Config{Capacity: 16 * mib, Passthrough: true, PollInterval: time.Hour, WaitLimit: 5 * time.Second})
				var ids []blob.ID
				for i := range c.objects {
					ids = append(ids, tc.put(fmt.Sprintf("held%d", i), c.size))
				}
				time.Sleep(time.Second) // their grace over
				for _, id := range ids {
					w, err := tc.Open(id, os.O_RDWR, true, nil)
					if err != nil {
						t.Fatal(err)
					}
					defer w.Release()
				}
				for i := range 4 {
					start := time.Now()
					h, err := tc.Create(blob.RootID, fmt.Sprintf("new%d", i), 0o644, nobody, true)
					if err != nil {
						t.Fatal(err)
					}
					if _, err = h.Write(Interrupt{}, make([]byte, 2*mib), 0); err == nil {
						err = h.Flush()
					}
					h.Release()
					if err != nil || time.Since(start) >= time.Second {
						t.Errorf("store %d of 2 MiB beside objects open for writing: %v after %v (%+v)", i, err, time.Since(start), tc.Stats())
					}
				}
			})
		})
	}
}

// readPinned is a 16 MiB cache whose 4 MiB object id, past its grace,
// reader r holds; in a synctest bubble.
func readPinned(t *testing.T, limit time.Duration) (*testCore, blob.ID, *Handle) {
	t.Helper()
	tc := newTestCore(t, Config{Capacity: 16 * mib, PollInterval: time.Hour, WaitLimit: limit})
	id := tc.put("read", 4*mib)
	time.Sleep(time.Second) // its grace over
	r, err := tc.Open(id, os.O_RDONLY, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tc, id, r
}

// stuckWritersGiveWay has three writers that hold 4 MiB each of a
// 16 MiB cache, where the rest is held, write 2 MiB more each; it
// requires that the youngest alone gives way, before the wait limit.
func stuckWritersGiveWay(t *testing.T, tc *testCore, limit time.Duration) {
	t.Helper()
	const n = 3
	var hs []*Handle
	for i := range n {
		h, err := tc.Create(blob.RootID, fmt.Sprintf(".tmp%d", i), 0o644, nobody, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Write(Interrupt{}, make([]byte, 4*mib), 0); err != nil {
			t.Fatalf("writer %d's first 4 MiB: %v", i, err)
		}
		hs = append(hs, h)
	}
	start := time.Now()
	errs := make([]error, n)
	took := make([]time.Duration, n)
	var writers sync.WaitGroup
	for i, h := range hs {
		writers.Go(func() {
			_, errs[i] = h.Write(Interrupt{}, make([]byte, 2*mib), 4*mib)
			if errs[i] != nil {
				h.Flush()
				h.Release()
			}
			took[i] = time.Since(start)
		})
	}
	writers.Wait()
	refused := 0
	for i := range n {
		t.Logf("writer %d: %v after %v", i, errs[i], took[i])
		if errs[i] != nil {
			if !errors.Is(errs[i], ErrNoSpace) {
				t.Errorf("writer %d: %v", i, errs[i])
			}
			refused++
		}
		if took[i] >= limit {
			t.Errorf("writer %d waited %v, the whole wait limit", i, took[i])
		}
	}
	if refused != 1 || errs[n-1] == nil {
		t.Errorf("%d writers refused; want one, the youngest", refused)
	}
	for _, h := range hs[:n-1] {
		h.Flush()
		h.Release()
	}
}

// TestStoreWaitsForAnIdleWriter: a store that needs the room an open,
// idle writer of a stored object holds (opened for writing, writing
// nothing) waits for that writer's close, up to the wait limit, as for
// a reader's; alone, it does not give way after stallWait, as if the
// two were writers stuck on each other: nothing else waits for room,
// so nothing it gives back lets another on (an outside tester: a 2 GiB
// fallocate beside a 5 GiB object held open O_WRONLY by a passthrough
// mount, refused after 0.3 s, 10 of 10). In a synctest bubble.
func TestStoreWaitsForAnIdleWriter(t *testing.T) {
	inBubbleBothModes(t, func(t *testing.T, passthrough bool) {
		tc := newTestCore(t, Config{Capacity: 16 * mib, Passthrough: passthrough, PollInterval: time.Hour, WaitLimit: 10 * time.Second})
		// 2 MiB left: J is reserved nothing at its create (a
		// quarter of the capacity does not fit), as a writer
		// beside a large object in a full cache is.
		id := tc.put("H", 14*mib)
		time.Sleep(time.Second) // its grace over
		w, err := tc.Open(id, os.O_WRONLY, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		j, done := tc.storeBeside(t)
		time.Sleep(2 * time.Second) // past stallWait
		select {
		case err := <-done:
			t.Fatalf("J's fallocate ended while H's writer was open: %v; want it to wait for H's close", err)
		default:
		}
		w.Flush()
		w.Release()
		if err := <-done; err != nil {
			t.Fatalf("J's fallocate once H's writer closed: %v", err)
		}
		j.Flush()
		j.Release()
	})
}

// storeBeside creates J and starts its fallocate of 8 MiB, which says
// on done how it ended.
func (tc *testCore) storeBeside(t *testing.T) (*Handle, <-chan error) {
	j, err := tc.Create(blob.RootID, "J", 0o644, nobody, true)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- j.Allocate(Interrupt{}, 0, 8*mib, 0) }()
	return j, done
}

// TestIdleWriterStartsNoGrace: a writer of a stored object that closes
// having written nothing starts no grace period, so a store waiting for
// the room it held goes on at its close; a writer that wrote starts one
// (its store may have a publish step to come). The idle writer's close
// started a grace, and the store waited it out (an outside tester: 4.0 s
// for a holder closing at 2 s, where a reader's close gave 2.0 s). In a
// synctest bubble.
func TestIdleWriterStartsNoGrace(t *testing.T) {
	for _, wrote := range []bool{false, true} {
		t.Run(fmt.Sprintf("wrote=%v", wrote), func(t *testing.T) {
			inBubbleBothModes(t, func(t *testing.T, passthrough bool) {
				const grace = 5 * time.Second
				tc := newTestCore(t, Config{Capacity: 16 * mib, Passthrough: passthrough, PollInterval: time.Hour, Grace: grace, WaitLimit: time.Hour})
				id := tc.put("H", 14*mib)
				time.Sleep(2 * grace) // its grace over
				w, err := tc.Open(id, os.O_WRONLY, true, nil)
				if err != nil {
					t.Fatal(err)
				}
				if wrote {
					if _, err := w.Write(Interrupt{}, []byte("x"), 0); err != nil {
						t.Fatal(err)
					}
				}
				j, done := tc.storeBeside(t)
				time.Sleep(2 * time.Second)
				w.Flush()
				w.Release()
				closed := time.Now()
				if err := <-done; err != nil {
					t.Fatalf("J's fallocate once H's writer closed: %v", err)
				}
				waited := time.Since(closed)
				if !wrote && waited > 0 {
					t.Errorf("J waited %v past the close of a writer that wrote nothing; want it to go on at the close", waited)
				}
				if wrote && waited < grace {
					t.Errorf("J waited %v past the close of a writer that wrote; want the grace, %v", waited, grace)
				}
				j.Flush()
				j.Release()
			})
		})
	}
}

// TestMetadataBesideItsOwnDataFile: a thread that keeps its data file
// open while it writes its metadata file into a full cache, whose other
// room a reader holds, has the metadata's few bytes admitted by evicting
// a small object: its whole reservation cannot come (the data file's
// unwritten reservation keeps it until the thread closes that file), so
// once that wait is stalled with no other writer waiting, the bytes are
// admitted alone. It waited out the limit and was refused (an outside
// tester: 4 KiB of metadata refused after 5 s, 4 of 4). In a synctest
// bubble.
func TestMetadataBesideItsOwnDataFile(t *testing.T) {
	inBubbleBothModes(t, func(t *testing.T, passthrough bool) {
		const limit = time.Hour
		tc := newTestCore(t, Config{Capacity: 32 * mib, Passthrough: passthrough, PollInterval: time.Hour, WaitLimit: limit})
		held := tc.put("held", 20*mib)
		tc.put("prev0", 4*mib)
		tc.put("prev1", 4*mib)
		time.Sleep(time.Second) // their graces over
		r, err := tc.Open(held, os.O_RDONLY, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		data, err := tc.Create(blob.RootID, "d.tmp", 0o644, nobody, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := data.Write(Interrupt{}, make([]byte, 4*mib), 0); err != nil {
			t.Fatalf("the data file's write: %v", err)
		}
		meta, err := tc.Create(blob.RootID, "d.meta", 0o644, nobody, true)
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		if _, err := meta.Write(Interrupt{}, make([]byte, 4096), 0); err != nil {
			t.Fatalf("the metadata file's 4 KiB beside its open data file: %v after %v", err, time.Since(began))
		}
		if waited := time.Since(began); waited >= limit {
			t.Errorf("the metadata waited %v", waited)
		}
		for _, h := range []*Handle{meta, data, r} {
			h.Flush()
			h.Release()
		}
	})
}

// inBubbleBothModes runs f in a synctest bubble, as a subtest, with
// passthrough and without.
func inBubbleBothModes(t *testing.T, f func(t *testing.T, passthrough bool)) {
	for _, passthrough := range []bool{true, false} {
		t.Run(fmt.Sprint("passthrough=", passthrough), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { f(t, passthrough) })
		})
	}
}

// TestIdleWritersOfTheWaitingProcessLoosen: with passthrough a writer's
// reservation is firm, never taken back for another writer; but where
// the writers that hold the room are the waiting thread's own process's,
// and nothing but that thread can write to them (Config.IdleWriters: a
// process of one thread, its children holding none of them), what they
// have not written is taken back for it. A process that opened 8 files
// into an empty cache before writing any, its first four each reserved
// a quarter, had its fifth file's first write refused at the wait
// limit. Where they may be written meanwhile (IdleWriters says none is
// idle) it waits as before, and asks again while it waits: a child that
// held them may let go (an outside tester: asked once, a write waited
// out the limit though the child exited a second in). Without
// passthrough reservations were never firm, and nothing is asked.
func TestIdleWritersOfTheWaitingProcessLoosen(t *testing.T) {
	const never = time.Duration(-1)
	for _, c := range []struct {
		name        string
		passthrough bool
		idleAfter   time.Duration // IdleWriters says they are idle from then on
	}{
		{"idle", true, 0},
		{"written elsewhere", true, never},
		{"let go after a second", true, time.Second},
		{"no passthrough", false, never},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const limit = 10 * time.Second
				me := Client(os.Getpid())
				var asked []int
				start := time.Now()
				tc := newTestCore(t, Config{Capacity: 64 * mib, Passthrough: c.passthrough, PollInterval: time.Hour, Grace: time.Hour, WaitLimit: limit,
					IdleWriters: func(pid int, ids []blob.ID, _ Waits) []blob.ID {
						asked = append(asked, pid)
						if c.idleAfter != never && time.Since(start) >= c.idleAfter {
							return ids
						}
						return nil
					}})
				hs := tc.eightWriters(me)
				if st := tc.Stats(); st.ReservedBytes != 64*mib {
					t.Fatalf("8 writers with no size known: %+v; want the first 4 reserved a quarter each", st)
				}
				for _, h := range hs[:4] {
					if _, err := h.File().WriteAt(make([]byte, 4096), 0); err != nil {
						t.Fatal(err)
					}
				}
				began := time.Now()
				_, err := hs[4].Write(Interrupt{By: me}, make([]byte, 4096), 0)
				waited := time.Since(began)
				switch {
				case c.passthrough && c.idleAfter == never:
					if !errors.Is(err, ErrNoSpace) || waited < limit {
						t.Errorf("the fifth writer's write beside writers that may write: %v after %v; want ENOSPC at the wait limit, %v", err, waited, limit)
					}
				case c.idleAfter > 0:
					if err != nil || waited < c.idleAfter || waited > c.idleAfter+stallWait {
						t.Errorf("the fifth writer's write beside writers idle from %v on: %v after %v; want it admitted within %v of then", c.idleAfter, err, waited, stallWait)
					}
				case err != nil || waited != 0:
					t.Errorf("the fifth writer's write: %v after %v; want it admitted at once", err, waited)
				}
				if c.passthrough && (len(asked) == 0 || slices.ContainsFunc(asked, func(p int) bool { return p != os.Getpid() })) {
					t.Errorf("IdleWriters asked about %v; want this process (once an admission)", asked)
				}
				if !c.passthrough && len(asked) != 0 {
					t.Errorf("IdleWriters asked about %v without passthrough; want nothing asked", asked)
				}
			})
		})
	}
}

// TestIdleWritersBesideAWaitingChild: the writers a waiting process of
// one thread holds are idle too where the only other process holding
// them waits for room itself (Config.IdleWriters' waits): a child
// forked after the opens, writing into the very file its parent waits
// on, and the parent both waited out the wait limit (an outside
// tester, 2 of 2). The core tells IdleWriters which threads wait.
func TestIdleWritersBesideAWaitingChild(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 10 * time.Second
		me, child := Client(os.Getpid()), Client(1<<30-7)
		var hs []*Handle
		tc := newTestCore(t, Config{Capacity: 64 * mib, Passthrough: true, PollInterval: time.Hour, Grace: time.Hour, WaitLimit: limit,
			IdleWriters: func(pid int, ids []blob.ID, waits Waits) []blob.ID {
				// The child holds them all: idle only while it waits, for
				// room to write the fifth object.
				if id, ok := waits[int(child)]; ok && id == hs[4].ID() {
					return ids
				}
				return nil
			}})
		hs = tc.eightWriters(me)
		for _, h := range hs[:4] {
			if _, err := h.File().WriteAt(make([]byte, 4096), 0); err != nil {
				t.Fatal(err)
			}
		}
		began := time.Now()
		childErr := make(chan error, 1)
		go func() {
			_, err := hs[4].Write(Interrupt{By: child}, make([]byte, 4096), 4096)
			childErr <- err
		}()
		synctest.Wait() // the child's write waits for room
		if _, err := hs[4].Write(Interrupt{By: me}, make([]byte, 4096), 8192); err != nil || time.Since(began) != 0 {
			t.Errorf("the parent's write beside its waiting child: %v after %v; want it admitted at once", err, time.Since(began))
		}
		if err := <-childErr; err != nil || time.Since(began) > stallWait {
			t.Errorf("the child's write: %v after %v; want it admitted within %v", err, time.Since(began), stallWait)
		}
		if w := tc.clients.waitsNow(); len(w) != 0 {
			t.Errorf("threads still counted as waiting for room after their admissions: %v", w)
		}
	})
}

// eightWriters creates o0 ... o7 for writing, as client by; they are
// released as the test ends.
func (tc *testCore) eightWriters(by Client) []*Handle {
	tc.t.Helper()
	var hs []*Handle
	for i := range 8 {
		h, err := tc.createBy(by, fmt.Sprintf("o%d", i))
		if err != nil {
			tc.t.Fatal(err)
		}
		tc.t.Cleanup(h.Release)
		hs = append(hs, h)
	}
	return hs
}
