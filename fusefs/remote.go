package fusefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/remote"
	"go.uber.org/zap"
)

// remoteNode is a name the store does not have and the remote tier
// does: to the kernel a regular file sized from the remote object, with
// an inode number of its own (core.NewID, never reused). Its first open
// installs the object (core.Install: fetched, verified, admitted like a
// store) under that same ID, so from then on the kernel's inode is the
// local object's and the node behaves as a fileNode; its attributes are
// invalidated in the kernel to show the charge. A fetch that fails
// (gone, damaged, unreachable) answers ENOENT and drops the name from
// the kernel.
type remoteNode struct {
	fileNode // id: the placeholder's, and the installed object's
	parent   core.ID
	name     string // in parent
	path     string // the tier's name for it
	info     remote.Info

	installMu sync.Mutex // see core's lock order; held across the install
	// failed is why the install failed; GUARDED_BY(installMu).
	failed error
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
// when the tier has the name, ENOENT otherwise.
func (n *dirNode) lookupRemote(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	tier := n.fs.remote
	path, ok := n.fs.core.PathOf(n.id, name)
	if !ok || tier.Excluded(path) {
		return nil, n.fs.errno("lookup", core.ErrNotFound)
	}
	// The lookup is not the caller's to cancel: the Go runtime signals
	// its own threads, which the kernel turns into FUSE interrupts.
	info, found, err := tier.Lookup(n.fs.life, path)
	if err != nil {
		n.fs.log.Debug("remote lookup", zap.String("name", path), zap.Error(err))
	}
	if found && makingDir(ctx) {
		// A local directory is being made under that name: it wins, and
		// hides the remote file here from then on.
		n.fs.log.Debug("remote name hidden by a mkdir", zap.String("name", path))
		found = false
	}
	if !found {
		out.SetEntryTimeout(noNegativeEntry)
		return nil, n.fs.errno("lookup", core.ErrNotFound)
	}
	if ch := n.GetChild(name); ch != nil {
		if r, ok := ch.Operations().(*remoteNode); ok && r.placeholderOf(info) {
			r.fillAttr(&out.Attr)
			return ch, 0
		}
	}
	r := &remoteNode{fileNode: fileNode{fs: n.fs, id: n.fs.core.NewID()}, parent: n.id, name: name, path: path, info: info}
	r.fillAttr(&out.Attr)
	return n.NewInode(ctx, r, fs.StableAttr{Mode: syscall.S_IFREG, Ino: uint64(r.id)}), 0
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

// fillAttr is what the kernel sees of the remote object before it is
// installed: its size, and no charge (it holds no local bytes).
func (n *remoteNode) fillAttr(out *fuse.Attr) {
	out.Ino = uint64(n.id)
	out.Size = uint64(n.info.Size)
	out.Blocks = 0
	out.Mode = syscall.S_IFREG | installMode
	out.Nlink = 1
	t := n.info.ModTime
	if t.IsZero() {
		t = time.Now()
	}
	out.SetTimes(&t, &t, &t)
	out.Uid, out.Gid = uint32(os.Geteuid()), uint32(os.Getegid())
	out.Blksize = core.BlockSize
}

// installMode is the mode of a remote object, before and after install.
const installMode = 0o644

func (n *remoteNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if fh != nil || n.installed.Load() {
		return n.fileNode.Getattr(ctx, fh, out)
	}
	n.fillAttr(&out.Attr)
	return 0
}

func (n *remoteNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	release, err := n.local()
	if err != nil {
		return nil, 0, n.fs.errno("open", err)
	}
	// Pinned until the open has its own pin.
	defer release()
	return n.fileNode.Open(ctx, flags)
}

// Setattr (a truncate, chmod, utimes) changes the local object: it is
// installed first.
func (n *remoteNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if fh == nil {
		release, err := n.local()
		if err != nil {
			return n.fs.errno("setattr", err)
		}
		defer release()
	}
	return n.fileNode.Setattr(ctx, fh, in, out)
}

func (n *remoteNode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if !n.installed.Load() {
		return 0, n.fs.errno("getxattr", errNoAttr)
	}
	return n.fileNode.Getxattr(ctx, attr, dest)
}

// local makes the object local, once. Call release once the caller's
// own open holds it: it drops the pin of the install this call made
// (nothing when the object was local already).
func (n *remoteNode) local() (release func(), err error) {
	n.installMu.Lock()
	defer n.installMu.Unlock()
	switch {
	case n.installed.Load():
		return func() {}, nil
	case n.failed != nil:
		return nil, n.failed
	}
	hold, err := n.fs.core.Install(n.parent, n.name, n.id, n.fetch)
	if errors.Is(err, core.ErrExists) {
		// Stored (or installed through another placeholder) meanwhile:
		// the kernel looks the name up again and finds that object.
		err = core.ErrStale
	}
	if errors.Is(err, core.ErrNotFetched) || errors.Is(err, core.ErrStale) {
		// The placeholder is done for: its name leaves the kernel, and
		// the next lookup asks again.
		n.failed = err
		n.fs.queue(notice{parent: n.parent, name: n.name})
	}
	if err != nil {
		return nil, err
	}
	n.installed.Store(true)
	n.fs.queue(notice{inode: n.EmbeddedInode()})
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
		n.fs.log.Info("remote object not fetched", zap.String("name", n.path), zap.Error(err))
		return fmt.Errorf("%w: %s: %v", core.ErrNotFetched, n.path, err)
	}
	return err
}

// fileOf is the file node behind a go-fuse node: a fileNode, or a
// remoteNode's (which is a placeholder until installed).
func fileOf(ops fs.InodeEmbedder) (*fileNode, bool) {
	switch n := ops.(type) {
	case *fileNode:
		return n, true
	case *remoteNode:
		return &n.fileNode, true
	}
	return nil, false
}

// localize installs a remote node's object before an operation that
// needs it local (a link); release the returned func after it.
func localize(ops fs.InodeEmbedder) (func(), error) {
	if r, ok := ops.(*remoteNode); ok {
		return r.local()
	}
	return func() {}, nil
}

// remoteFile is the tier's name for the file name in n, when there is
// a tier, name is not a temp name, and it is not a local directory (a
// directory has no key).
func (n *dirNode) remoteFile(name string) (string, bool) {
	if n.fs.remote == nil {
		return "", false
	}
	path, ok := n.fs.core.PathOf(n.id, name)
	if !ok || n.fs.remote.Excluded(path) {
		return "", false // a temp name was never uploaded
	}
	if e, _, err := n.fs.core.Lookup(n.id, name); err == nil && e.Dir {
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
