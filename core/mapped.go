package core

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvfs/kvfs/blob"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Mappings that outlive their handle.
//
// A handle pins its object while it is open, and a mapping of a file
// holds the file open: without passthrough the kernel's RELEASE comes at
// the munmap. With passthrough the kernel serves a mapping from the
// stored file itself (the mapping holds the kernel's own open of it, not
// the FUSE file), so the RELEASE comes at the close(2) of the last
// descriptor: the C way to map a file (open, ftruncate, mmap, close)
// left its object unpinned, and an eviction unlinked it under the
// mapping. What was written through it then went to an unlinked inode,
// msync answered 0, the name and every byte were gone, and the stored
// bytes of such mappings were counted nowhere (an outside tester: an
// 8 MiB shared mapping evicted 3 times in 3; 8 mapped objects of 8 MiB
// held past a 64 MiB cache whose stats said 60 MiB used).
//
// So the release of a handle the kernel served from the stored file, the
// object's last, asks whether any other open file has the stored file's
// inode open: a write lease (fcntl F_SETLEASE) is granted only to the
// inode's one open file, read or write, and is dropped at once. Where
// another is open, a mapping's (or a process's open of the store itself),
// the object keeps a reader's pin and the handle's stored file, and is
// asked again each second (recordLoop) until the other file is closed.
// The pin keeps it from eviction and counts it in pinned_objects, and an
// unlinked one in shadow_bytes, as an open handle's would.

// mappings are the objects kept pinned for a file the kernel opened.
type mappings struct {
	mu   sync.Mutex
	held map[blob.ID]*os.File // GUARDED_BY(mu)
	// unasked: the store's file system grants no leases (or refused one
	// for another reason than another open file), so nothing is asked
	// again; logged once.
	unasked atomic.Bool
}

// openedElsewhere says whether a file other than f has f's inode open,
// or ok false where the store cannot tell.
func openedElsewhere(f *os.File) (elsewhere, ok bool, err error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return false, false, err
	}
	cerr := rc.Control(func(fd uintptr) {
		switch _, err = unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_WRLCK); {
		case err == nil:
			_, err = unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_UNLCK)
			ok = true
		case errors.Is(err, unix.EAGAIN):
			elsewhere, ok, err = true, true, nil
		}
	})
	if cerr != nil {
		return false, false, cerr
	}
	return elsewhere, ok, err
}

// MayBeMapped says that the kernel served h from its stored file itself
// and that h's release is the last of them: a mapping may hold the
// stored file after it (see mappings).
func (h *Handle) MayBeMapped() { h.mayBeMapped = true }

// mayBeMapped asks, at h's release, whether another file has its
// stored file open, and if so pins the object as a reader does and
// says so: the caller then neither closes the file nor is it h's any
// longer, and calls keepMapped once its release is otherwise done (its
// writer's pin dropped, its names published).
func (c *Core) mayBeMapped(h *Handle) bool {
	m := &c.mapped
	if !h.mayBeMapped || m.unasked.Load() {
		return false
	}
	elsewhere, ok, err := openedElsewhere(h.file)
	if !ok {
		if !m.unasked.Swap(true) {
			c.log.Info("the store grants no file leases: an object a passthrough mapping holds after its last close is not kept from eviction", zap.Error(err))
		}
		return false
	}
	return elsewhere && c.ledger.Hold(h.id) == nil
}

// keepMapped keeps the object mayBeMapped pinned while another file has
// its stored file open, with h's stored file to ask again (unmapped).
func (c *Core) keepMapped(h *Handle) {
	// The kernel closes the stored file it opened for the handle just
	// after it sends the RELEASE (that close runs after the FUSE file's,
	// in the closing process), so a first answer is often that file's:
	// 26 of 450 releases of stores and loads here, each gone within
	// 1.1 ms; asked for about 5 ms. A mapping's stays. On a loaded
	// machine the closing process may wait longer for a core, and the
	// next second's look unpins it (asked for 40 ms, releases held their
	// stored files open so long that go-fuse's fd-leak test counted 23
	// of 100). Asked again here, at the end of the release: a wait
	// before its writer's pin went showed the writer's reservation in
	// st_blocks meanwhile (the model test).
	elsewhere, ok := true, true
	for wait := 10 * time.Microsecond; elsewhere && ok && wait <= 3*time.Millisecond; wait *= 2 {
		time.Sleep(wait)
		elsewhere, ok, _ = openedElsewhere(h.file)
	}
	c.holdMapped(h.id, h.file, elsewhere && ok)
}

// holdMapped keeps object id, held (ledger.Hold), pinned with its stored
// file f while another file has f's inode open (mapped), asking again
// from now on; where none has (!mapped) it lets both go.
func (c *Core) holdMapped(id blob.ID, f *os.File, mapped bool) {
	if !mapped {
		f.Close()
		c.ledger.Unhold(id)
		return
	}
	m := &c.mapped
	m.mu.Lock()
	if m.held == nil {
		m.held = map[blob.ID]*os.File{}
	}
	old, held := m.held[id]
	m.held[id] = f
	m.mu.Unlock()
	if held {
		// Held already, for an earlier handle's mapping: one pin is
		// enough, and f, the newer, is asked from now on (an earlier
		// mapping still there holds the inode for it too).
		old.Close()
		c.ledger.Unhold(id)
	}
	c.wg.Add(1)
	go c.askSoon(id, f)
}

// Mapped lists the objects kept for mappings, each with the stored file
// kept for it, for a handover to pass on (see AdoptMapped).
func (c *Core) Mapped() (ids []blob.ID, files []*os.File) {
	m := &c.mapped
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, f := range m.held {
		ids = append(ids, id)
		files = append(files, f)
	}
	return ids, files
}

// AdoptMapped keeps object id pinned for the mapping a predecessor kept
// it for, over the stored file f it passed (see Mapped): an object with
// no name left is made again, as a handle's is (AdoptHandle). Asked once,
// not waited for as at a release (the handover's pause): the file the
// predecessor passed is the very file it kept, and counts once. Dropped
// at the freeze instead (before 2026-12-07), such an object could be
// evicted under its mapping after the takeover, and what was written
// through the mapping lost.
func (c *Core) AdoptMapped(id blob.ID, f *os.File) error {
	h, err := c.AdoptHandle(HandleState{ID: id}, f)
	if err != nil {
		return err
	}
	err = c.ledger.Hold(id)
	h.unpin()
	if err != nil {
		return ledgerErr(err)
	}
	elsewhere, ok, _ := openedElsewhere(f)
	c.holdMapped(id, f, elsewhere && ok)
	return nil
}

// askSoon asks again whether the file kept for object id is open
// elsewhere, at 20 ms and doubling, until the record loop's look each
// second takes over: on a loaded machine the kernel's own file for a
// handle may close a good while after its RELEASE, and the object stayed
// pinned (an unlinked one's bytes charged as shadow bytes) until the
// next second (an outside tester: open, read, unlink, close; the shadow
// bytes went after 0.58-0.70 s, and a store meanwhile evicted an object
// for room that was about to come free, 6 of 8 runs).
func (c *Core) askSoon(id blob.ID, f *os.File) {
	defer c.wg.Done()
	for wait := 20 * time.Millisecond; wait < time.Second; wait *= 2 {
		select {
		case <-c.done:
			return
		case <-c.cfg.After(wait):
		}
		if !c.stillMapped(id, f) {
			return
		}
	}
}

// unmapped unpins the objects kept for files the kernel opened that no
// other file has open any longer.
func (c *Core) unmapped() {
	m := &c.mapped
	m.mu.Lock()
	held := make(map[blob.ID]*os.File, len(m.held))
	for id, f := range m.held {
		held[id] = f
	}
	m.mu.Unlock()
	for id, f := range held {
		c.stillMapped(id, f)
	}
}

// stillMapped unpins object id, kept with file f, if no other file has
// f's stored file open any longer, and says whether f is still kept.
func (c *Core) stillMapped(id blob.ID, f *os.File) bool {
	m := &c.mapped
	m.mu.Lock()
	mine := m.held[id] == f // not taken over by a later handle's, nor unpinned
	m.mu.Unlock()
	if !mine {
		return false
	}
	if elsewhere, ok, _ := openedElsewhere(f); ok && elsewhere {
		return true
	}
	m.mu.Lock()
	mine = m.held[id] == f
	if mine {
		delete(m.held, id)
	}
	m.mu.Unlock()
	if mine {
		f.Close()
		c.ledger.Unhold(id)
	}
	return false
}

// dropMapped unpins every object kept for a mapping, at the core's end.
func (c *Core) dropMapped() {
	m := &c.mapped
	m.mu.Lock()
	held := m.held
	m.held = nil
	m.mu.Unlock()
	for id, f := range held {
		f.Close()
		c.ledger.Unhold(id)
	}
}
