package fusefs

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/remote"
	"go.uber.org/zap"
)

// remoteNode is a name the store does not have and the remote tier
// does: to the kernel a regular file sized from the remote object, with
// a node ID of its own (core.NewID, never reused). Its first open
// installs the object (core.Install: fetched, verified, admitted like a
// store) under that same ID, so from then on the kernel's inode is the
// local object's and requests for it are the object's; its attributes
// are invalidated in the kernel to show the charge. A fetch that fails
// (gone, damaged, unreachable) answers ENOENT and drops the name from
// the kernel. It is kept while the kernel keeps it (placeholders).
type remoteNode struct {
	fs     *FS
	id     core.ID // the placeholder's, and the installed object's
	parent core.ID
	name   string // in parent
	path   string // the tier's name for it
	info   remote.Info
	// lookups counts the kernel's lookups not yet forgotten;
	// GUARDED_BY(fs.remotes.mu).
	lookups uint64

	installMu sync.Mutex // see core's lock order; held across the install
	// failed is why the install failed; GUARDED_BY(installMu).
	failed error
	// tries counts the installs tried to their end; noRoom is the last
	// one's miss when it found no room in the cache (GUARDED_BY(
	// installMu)): the openers that came while it ran share its answer.
	tries  atomic.Uint64
	noRoom error
	// installed: the object is local under id; set under installMu.
	installed atomic.Bool
}

// noNegativeEntry is how long the kernel may remember a name that the
// tier was asked about and does not have: effectively not at all (one
// jiffy), so that the tier's negative cache, with its TTL, is the one
// memory of absent names that the remote could publish, and a lookup
// after it expires reaches the tier. (The mount's negative timeout would
// hide a remote publish for the whole --cache-timeout.)
const noNegativeEntry = time.Nanosecond

// lookupRemote answers a lookup that the store missed: a placeholder
// when the tier has the name, ErrNotFound otherwise (with out saying how
// long the kernel may remember that).
func (f *FS) lookupRemote(c *fuse.Caller, parent core.ID, name string, out *fuse.EntryOut) error {
	tier := f.remote
	path, ok := f.core.PathOf(parent, name)
	if !ok || tier.Excluded(path) {
		return core.ErrNotFound
	}
	// The lookup is not the caller's to cancel: the Go runtime signals
	// its own threads, which the kernel turns into FUSE interrupts.
	info, found, err := tier.Lookup(f.life, path)
	if err != nil {
		f.log.Debug("remote lookup", zap.String("name", path), zap.Error(err))
	}
	if found && makingDir(c.Pid) {
		// A local directory is being made under that name: it wins, and
		// hides the remote file here from then on.
		f.log.Debug("remote name hidden by a mkdir", zap.String("name", path))
		found = false
	}
	if !found {
		out.SetEntryTimeout(noNegativeEntry)
		return core.ErrNotFound
	}
	r := f.remotes.lookedUp(nameKey{parent, name}, func(r *remoteNode) bool { return r.placeholderOf(info) }, func() *remoteNode {
		return &remoteNode{fs: f, id: f.core.NewID(), parent: parent, name: name, path: path, info: info}
	})
	f.entry(out, r.id, r.attr())
	return nil
}

// placeholderOf says whether n is still a usable placeholder for info:
// not installed and evicted since, not failed, of the same object; one
// whose install is running is (it is becoming that object).
func (n *remoteNode) placeholderOf(info remote.Info) bool {
	if n.installed.Load() {
		return false
	}
	if !n.installMu.TryLock() {
		return true
	}
	defer n.installMu.Unlock()
	return n.failed == nil && n.info.Size == info.Size && n.info.Checksum == info.Checksum
}

// attr is what the kernel sees of the remote object before it is
// installed: its size, and no charge (it holds no local bytes).
func (n *remoteNode) attr() core.Attr {
	var a core.Attr
	a.Size = n.info.Size
	a.Mode = syscall.S_IFREG | installMode
	a.Links = 1
	t := n.info.ModTime
	if t.IsZero() {
		t = time.Now()
	}
	ts := timespec(t)
	a.Atim, a.Mtim, a.Ctim = ts, ts, ts
	a.Uid, a.Gid = uint32(os.Geteuid()), uint32(os.Getegid())
	return a
}

// installMode is the mode of a remote object, before and after install.
const installMode = 0o644

// local makes the object local, once. Call release once the caller's
// own open holds it: it drops the pin of the install this call made
// (nothing when the object was local already). emptied: the caller
// discards the bytes at once (an open with O_TRUNC), so the object is
// made local empty, with nothing fetched: fetched first, such an
// overwrite failed with ENOENT where another node had deleted the key
// (its placeholder still in the kernel), or the server was down (an
// outside tester: 7 of 7 first tries of `open(key, "wb")`, `>`, dd).
func (n *remoteNode) local(emptied bool) (release func(), err error) {
	seen := n.tries.Load()
	n.installMu.Lock()
	defer n.installMu.Unlock()
	switch {
	case n.installed.Load():
		return func() {}, nil
	case n.failed != nil && !emptied:
		return nil, n.failed
	case n.noRoom != nil && n.tries.Load() != seen:
		// It came while another opener's try ran, which found no room:
		// the same miss, at once (each tried again, waiting its own
		// 250 ms behind the others': 8 openers of one name, the last
		// after 2 s; an outside tester).
		return nil, n.noRoom
	}
	n.noRoom = nil
	fetch := n.fetch
	if emptied {
		fetch = func(create func(int64) (*os.File, error)) error {
			_, err := create(0)
			return err
		}
	}
	hold, err := n.fs.core.Install(n.parent, n.name, n.id, fetch)
	n.tries.Add(1)
	if errors.Is(err, core.ErrExists) {
		// Stored (or installed through another placeholder) meanwhile:
		// the kernel looks the name up again and finds that object.
		err = core.ErrStale
	}
	if errors.Is(err, core.ErrNoSpace) {
		// No room for it within the fetch's short wait (readers and
		// graces hold the cache), or never (larger than the capacity).
		// The name stays; a later open fetches again. A reader's open
		// takes it for a miss (see missed).
		n.fs.log.Debug("remote object not fetched: no room in the cache", zap.String("name", n.path))
		n.noRoom = fmt.Errorf("%s: no room in the cache for it: %w", n.path, err)
		return nil, n.noRoom
	}
	if errors.Is(err, core.ErrNotFetched) || errors.Is(err, core.ErrStale) {
		// The placeholder is done for: its name leaves the kernel, and
		// the next lookup asks again.
		n.failed = err
		n.fs.queue(notice{node: n.parent, name: n.name})
	}
	if err != nil {
		return nil, err
	}
	n.failed = nil
	n.installed.Store(true)
	n.fs.changed(n.id)
	return hold.Release, nil
}

// fetch is the install's download: the tier fetches into the file the
// core admitted and made. What the tier calls a miss (remote.Missed) is
// the core's ErrNotFetched.
func (n *remoteNode) fetch(create func(size int64) (*os.File, error)) error {
	// Bound by the tier's own timeouts and the mount's life, not by the
	// opener's request.
	_, err := n.fs.remote.Fetch(n.fs.life, n.path, func(info remote.Info) (*os.File, error) {
		return create(info.Size)
	})
	if remote.Missed(err) {
		log := n.fs.log.Info
		if errors.Is(err, remote.ErrCorrupt) {
			log = n.fs.log.Warn // the bucket's bytes are damaged: someone must look
		}
		log("remote object not fetched", zap.String("name", n.path), zap.Error(err))
		return fmt.Errorf("%w: %s: %v", core.ErrNotFetched, n.path, err)
	}
	return err
}

// remoteFile is the tier's name for the file name in parent, when there is
// a tier, name is not a temp name, and it is not a local directory (a
// directory has no key).
func (f *FS) remoteFile(parent core.ID, name string) (string, bool) {
	if f.remote == nil {
		return "", false
	}
	path, ok := f.core.PathOf(parent, name)
	if !ok || f.remote.Excluded(path) {
		return "", false // a temp name was never uploaded
	}
	if e, _, err := f.core.Lookup(parent, name); err == nil && e.Dir {
		return "", false
	}
	return path, true
}

// removedRemote is an rm (or the source of a rename) of path with a
// shared tier: the name leaves the bucket too, so that no node finds it
// there any more, and this node answers it absent at once, while the
// delete is in flight or the server is down (the tier's tombstone,
// kept in its journal across restarts). A temp name was never uploaded.
// A name that is a directory has no key: Rmdir does not come here.
func (f *FS) removedRemote(path string) {
	if f.remote == nil || f.remote.Excluded(path) {
		return
	}
	f.remote.Delete(path)
}

// replaced is a change on this node of a complete file id's bytes by a
// truncate by name with no writer (a writer's change is the core's to
// report, at its release: core.Config.Rewritten): with a shared tier,
// each of its names supersedes the bucket's copy under it
// (remote.Tier.Replace), which its publish alone would not do, since
// the tier knows the key is there. A creator's
// writes and truncates are not a change of anything published: they
// leave the fleet's first upload of the key alone.
func (f *FS) replaced(id core.ID) {
	if f.remote == nil {
		return
	}
	for _, path := range f.core.PathsOf(id) {
		f.remote.Replace(path)
	}
}

// placeholderAt is the placeholder of name in parent when the store
// holds nothing there: a name the kernel knows only from the remote.
func (f *FS) placeholderAt(parent core.ID, name string) *remoteNode {
	r := f.remotes.named(nameKey{parent, name})
	if r == nil {
		return nil
	}
	if _, _, err := f.core.Lookup(parent, name); err == nil {
		return nil // local now: the store's object is what moves
	}
	return r
}

// localize makes the remote-only names a rename moves local first (see
// remoteNode.local), as Link does for the name it links from: from, and
// for an exchange to as well. release drops the installs' pins once the
// rename is made.
func (f *FS) localize(from, to nameKey, exchange bool) (release func(), err error) {
	release = func() {}
	names := []nameKey{from}
	if exchange {
		names = append(names, to)
	}
	for _, k := range names {
		r := f.placeholderAt(k.parent, k.name)
		if r == nil {
			continue
		}
		done, err := r.local(false)
		if err != nil {
			release()
			return nil, err
		}
		prev := release
		release = func() { prev(); done() }
	}
	return release, nil
}

// renamingRemote looks, before a rename of from to to, at what it does to
// the bucket, and returns what to tell the tier once it is made: the old
// name is gone, as after an rm; a file the new name held, local or only
// in the bucket, is replaced (see Tier.Replace); after an exchange each name holds the
// other's object. A file made at the new name between this look and the
// rename is not seen.
func (f *FS) renamingRemote(from, to nameKey, exchange bool) func() {
	if f.remote == nil {
		return func() {}
	}
	path, moves := f.remoteFile(from.parent, from.name)
	newPath, replacing := f.localFile(to.parent, to.name)
	if !replacing && f.placeholderAt(to.parent, to.name) != nil {
		// A name this node knows only from the bucket (the kernel looked
		// it up for the rename, if no one had): replaced as a local
		// file is, unfetched. Before, the upload found the key present
		// and left the fleet's copy, to which this node's own object
		// reverted once evicted (an outside tester).
		newPath, replacing = f.remoteFile(to.parent, to.name)
	}
	return func() {
		switch {
		case exchange && moves && replacing:
			f.remote.Replace(path)
		case !exchange && moves:
			f.removedRemote(path)
		}
		if replacing {
			f.remote.Replace(newPath)
		}
	}
}

// movesRemoteDir says whether a rename would move a directory while a
// shared tier holds its objects under their paths: it is refused with
// EXDEV, which mv and shutil.move answer by copying the tree and
// removing it, object by object, each a store and a delete the tier
// follows. Renamed, the bucket kept every key under the old path and
// got none under the new one: other nodes read the old names, found
// none of the new, and an rm after the move left the old keys for
// good (an outside tester).
func (f *FS) movesRemoteDir(from, to nameKey, exchange bool) bool {
	if f.remote == nil {
		return false
	}
	dir := func(k nameKey) bool {
		e, _, err := f.core.Lookup(k.parent, k.name)
		return err == nil && e.Dir
	}
	return dir(from) || exchange && dir(to)
}

// localFile is the tier's name for name in parent when it holds a local
// file now: what a rename over it replaces.
func (f *FS) localFile(parent core.ID, name string) (string, bool) {
	if f.remote == nil {
		return "", false
	}
	e, _, err := f.core.Lookup(parent, name)
	if err != nil || e.Dir {
		return "", false
	}
	return f.core.PathOf(parent, name)
}

// placeholders are the remote names the kernel knows, by node ID and by
// name; a name's newest placeholder is the one a lookup finds again.
type placeholders = kernelNodes[*remoteNode]

func (n *remoteNode) nodeID() core.ID      { return n.id }
func (n *remoteNode) key() nameKey         { return nameKey{n.parent, n.name} }
func (n *remoteNode) lookupCount() *uint64 { return &n.lookups }

// missed is what a reader's open answers for an object local could not
// make local: where that was for want of room, a miss (ENOENT), as
// connectors' loads take one, not ENOSPC on a read, which they take for
// an error (an outside tester); a writer, a truncate or a link gets
// ENOSPC, the room being the cache's.
func missed(err error) error {
	if errors.Is(err, core.ErrNoSpace) {
		return fmt.Errorf("%w: %v", core.ErrNotFetched, err)
	}
	return err
}
