package core

import (
	"errors"
	"os"
	"sync/atomic"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/internal/lockorder"
	"github.com/kvfs/kvfs/ledger"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// ErrNotFetched: an object that Install was to bring in could not be had
// (gone from where it was fetched, damaged, or unreachable): a miss,
// answered ENOENT.
var ErrNotFetched = errors.New("the object could not be fetched")

// FetchFunc brings an object's bytes in for Install. It calls create
// exactly once, when it knows the object's exact size and before it
// writes a byte, writes that many bytes into the file create returned
// (which stays Install's: FetchFunc never closes it), and returns nil
// only once they are verified.
type FetchFunc func(create func(size int64) (*os.File, error)) error

// installMode is the mode of an installed object's stored file.
const installMode = 0o644

// NewID hands out a fresh inode ID, never used before in this store's
// life; Install gives it to the object it makes.
func (c *Core) NewID() blob.ID { return c.store.NewID() }

// Install makes name in parent a local object, with ID id, from bytes
// fetched from elsewhere (the remote tier). It is a store like any
// other, done by the daemon: the size is admitted when fetch states it
// (a reservation, evicting, or ErrNoSpace), the bytes go into a file
// that has no name yet and is marked incomplete (a crash mid-fetch
// leaves nothing served, and start-up reclaims it), and the file is
// linked to the name only if the name is still free; otherwise it is
// discarded and Install answers ErrExists: someone stored the name
// meanwhile. One install of a name runs at a time: another caller asking
// for the same name waits for it and gets ErrExists, and then finds the
// name as it is. It never reports the object as published (see
// Config.Published): it came from where it would be published to.
//
// On success the caller holds a read handle of the new object, which
// keeps it from being evicted until the caller has opened it its own
// way; Release it then.
func (c *Core) Install(parent blob.ID, name string, id blob.ID, fetch FetchFunc) (*Handle, error) {
	key := blob.Name{Parent: parent, Name: name}
	if wait, lead := c.startInstall(key); !lead {
		<-wait
		return nil, ErrExists
	}
	defer c.endInstall(key)
	if c.taken(parent, name) {
		return nil, ErrExists
	}
	in := &install{c: c, id: id}
	err := fetch(in.create)
	if err == nil {
		err = in.link(parent, name)
	}
	if err != nil {
		in.discard()
		return nil, err
	}
	return in.finish(), nil
}

// fetchWait is the longest an install waits for room (see create): room
// that a grace or a reader's close frees this soon is taken.
const fetchWait = 250 * time.Millisecond

// installs are the names being installed.
type installs struct {
	mu lockorder.Mutex
	// GUARDED_BY(mu): each install in progress, closed when it ends.
	m map[blob.Name]chan struct{}
}

// startInstall registers an install of key, or returns the channel that
// the one in progress closes when it ends.
func (c *Core) startInstall(key blob.Name) (wait <-chan struct{}, lead bool) {
	c.installing.mu.Lock()
	defer c.installing.mu.Unlock()
	if ch, ok := c.installing.m[key]; ok {
		return ch, false
	}
	if c.installing.m == nil {
		c.installing.m = map[blob.Name]chan struct{}{}
	}
	c.installing.m[key] = make(chan struct{})
	return nil, true
}

func (c *Core) endInstall(key blob.Name) {
	c.installing.mu.Lock()
	defer c.installing.mu.Unlock()
	close(c.installing.m[key])
	delete(c.installing.m, key)
}

// install is one Install in progress.
type install struct {
	c       *Core
	id      blob.ID
	charged bool     // the ledger holds id, pinned by the install as a writer
	file    *os.File // the stored file, under writing/ only until link
	size    int64
	// waited: how long its admissions waited for room (see admit).
	waited atomic.Int64
}

// create is the FetchFunc's create: admission, then the nameless file.
func (in *install) create(size int64) (*os.File, error) {
	c := in.c
	if in.charged || size < 0 {
		return nil, errors.New("core: install: create called twice or with a negative size")
	}
	if err := c.ledger.Create(in.id, true); err != nil {
		return nil, ledgerErr(err)
	}
	in.charged = true
	// A fetch is a reader's cache fill: it waits for room at most
	// fetchWait, not the wait limit a store waits, and its reader then
	// has a miss, not a stall (an outside tester: a read waited 5 s and
	// failed with ENOSPC, which connectors' loads take for an error; a
	// miss they recompute).
	in.waited.Store(int64(max(c.cfg.WaitLimit-fetchWait, 0)))
	err := c.admit(in.id, ledger.Charge(size), &in.waited, Interrupt{}, func() (victims, error) { return c.ledger.Reserve(in.id, size) })
	if err != nil {
		return nil, err
	}
	c.markInstall(in.id)
	f, err := c.store.CreateDetached(in.id, installMode)
	if err != nil {
		c.unmarkInstall(in.id)
		return nil, err
	}
	in.file, in.size = f, size
	return f, nil
}

// link settles the charge at what the file holds and names it, if the
// name is still free.
func (in *install) link(parent blob.ID, name string) error {
	c := in.c
	if in.file == nil {
		return errors.New("core: install: fetch returned without creating the object")
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(in.file.Fd()), &st); err != nil {
		return err
	}
	if st.Size != in.size {
		return errors.New("core: install: fetch left a size other than the one it stated")
	}
	err := c.admit(in.id, ledger.Charge(st.Size), &in.waited, Interrupt{}, func() (victims, error) { return c.ledger.Settle(in.id, st.Size) })
	if err != nil {
		return err
	}
	err = c.linkInstalled(parent, name, in.id, st.Ino)
	if errors.Is(err, unix.EEXIST) {
		return ErrExists
	}
	return err
}

// linkInstalled names an installed file, under its directory's lock
// (see order.go).
func (c *Core) linkInstalled(parent blob.ID, name string, id blob.ID, ino uint64) error {
	rel, unlock, err := c.takeFreeName(parent, name)
	if err != nil {
		return err
	}
	defer unlock()
	if err := c.store.LinkDetachedAt(rel, id); err != nil {
		return err
	}
	c.mu.Lock()
	err = c.store.AddFile(parent, name, id, ino)
	c.mu.Unlock()
	if err != nil {
		c.unlinkStored(rel)
	}
	return err
}

// discard undoes an install that did not complete.
func (in *install) discard() {
	c := in.c
	if in.file != nil {
		in.file.Close()
		c.unmarkInstall(in.id)
	}
	if in.charged {
		c.abandon(in.id, true)
	}
}

// finish pins the named object for the caller, then ends the install's
// writing: the object is complete.
func (in *install) finish() *Handle {
	c := in.c
	c.ledger.Open(in.id, false) // cannot fail: the install's own pin holds id
	c.unmarkInstall(in.id)
	// Named as it was linked, complete: no publish step follows, so no
	// grace, which kept each fetched object from eviction for --grace
	// after its download (an outside tester: a 16 MiB cache reading 12
	// objects of 6 MB from the bucket waited 2 s every other read, and
	// 4 readers got ENOSPC in 12-19 of 96 opens).
	c.ledger.EndGrace(in.id)
	c.closeWrite(in.id)
	c.published(in.size)
	return &Handle{c: c, id: in.id, file: in.file}
}

// markInstall counts an install as one of id's writers, so a writer that
// opens the object by its name before the install ends keeps the crash
// marker the install made (see startWriting).
func (c *Core) markInstall(id blob.ID) {
	m := c.marker(id)
	m.Lock()
	defer m.Unlock()
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	if c.marked[id] == 0 {
		c.base[id] = -1
	}
	c.marked[id]++
}

// unmarkInstall ends an install's writing; the last writer clears the
// marker.
func (c *Core) unmarkInstall(id blob.ID) {
	m := c.marker(id)
	m.Lock()
	defer m.Unlock()
	c.writersMu.Lock()
	last, mark := c.unmarkLocked(id)
	c.writersMu.Unlock()
	if !last {
		return
	}
	if err := c.store.ClearIntact(id, mark); err != nil {
		c.log.Warn("clearing an install's marker", zap.Uint64("id", uint64(id)), zap.Error(err))
	}
}
