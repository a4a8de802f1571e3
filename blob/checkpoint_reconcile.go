package blob

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// reconcile brings the index built from the checkpoint in line with the
// store, directory by directory, parents first, then returns the
// objects, those of the checkpoint in its order before those stat'ed.
// The directories found unchanged are the ones the checkpoint vouched
// for, which its writer listed: the next checkpoint need not list them
// again while they stay so (see Store.verified); nor those it listed,
// if the index ends up holding what the listing did.
func (c *cpLoad) reconcile() ([]Object, error) {
	verified := make(map[string]heldDir, len(c.dirs))
	for i := range c.dirs {
		if c.s.stopping() {
			return nil, ErrStopped
		}
		cd := &c.dirs[i]
		if c.s.dirs[cd.d.id] != cd.d {
			continue // dropped with a parent that changed
		}
		switch {
		case cd.check.err != nil:
			return nil, cd.check.err
		case cd.check.gone:
			return nil, fmt.Errorf("directory %q is gone", cd.path)
		case cd.check.same:
			verified[cd.path] = heldDir{cd.ino, cd.ctime, cd.names}
			continue
		}
		c.l.rep.DirsListed++
		if err := c.reconcileDir(cd); err != nil {
			return nil, err
		}
		if cd.check.held != nil {
			verified[cd.path] = *cd.check.held
		}
	}
	if err := c.l.run(c.fresh...); err != nil {
		return nil, err
	}
	c.mergeLinks()
	c.dropIncomplete()
	if testHookBeforeStatUnsure != nil {
		testHookBeforeStatUnsure()
	}
	if err := c.statUnsure(); err != nil {
		return nil, err
	}
	c.s.verified = verified
	return c.objects(), nil
}

// reconcileDir compares a changed directory's listing with the index:
// entries with the same name and inode number (and directories of the
// same name, checked on their own) stay as the checkpoint has them;
// names that vanished go; the rest are stat'ed.
func (c *cpLoad) reconcileDir(cd *cpLoadDir) error {
	d, ch := cd.d, &cd.check
	kept := 0
	var changed []dent
	for _, e := range ch.ents {
		if id, ok := d.kids.lookup(ch.name(e)); ok && c.same(id, e) {
			kept++
			continue
		}
		changed = append(changed, e)
	}
	for _, e := range changed {
		if id, ok := d.kids.lookup(ch.name(e)); ok {
			c.s.forgetName(d, ch.name(e), id)
		}
	}
	if d.kids.len() > kept {
		c.dropVanished(d, ch)
	}
	if len(changed) == 0 {
		return nil
	}
	f, err := c.s.openListing(cd.path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, e := range changed {
		if err := c.addChanged(int(f.Fd()), cd, strings.Clone(ch.name(e)), e.typ); err != nil {
			return err
		}
	}
	return nil
}

// same says whether a listed entry is what the index holds under its
// name: the same directory name, or the same regular file by inode
// number with a known size.
func (c *cpLoad) same(id ID, e dent) bool {
	switch e.typ {
	case unix.DT_DIR:
		_, isDir := c.s.dirs[id]
		return isDir
	case unix.DT_REG:
		f, ok := c.s.files[id]
		return ok && f.ino != 0 && f.ino == e.ino
	}
	return false
}

// dropVanished drops the names the listing no longer holds.
func (c *cpLoad) dropVanished(d *dir, ch *dirCheck) {
	listed := make(map[string]struct{}, len(ch.ents))
	for _, e := range ch.ents {
		listed[ch.name(e)] = struct{}{}
	}
	for name, id := range d.kids.all() {
		if _, ok := listed[name]; !ok {
			c.s.forgetName(d, name, id)
		}
	}
}

// addChanged indexes a new or changed entry of a listed directory: a
// directory is walked (after the listed ones), a regular file is
// stat'ed; what was being written at the crash, and what kvfs never
// makes, is deleted.
func (c *cpLoad) addChanged(dirfd int, cd *cpLoadDir, name string, typ uint8) error {
	l := c.l
	if l.tooDeep(dirfd, cd.path, name) {
		return nil
	}
	if typ == unix.DT_DIR {
		c.fresh = append(c.fresh, walkRoot{l.addDir(cd.d, name), path.Join(cd.path, name)})
		return nil
	}
	e := entry{name: name}
	if typ != unix.DT_REG && typ != unix.DT_UNKNOWN {
		unix.Unlinkat(dirfd, name, 0)
		l.rep.Foreign++
		return nil
	}
	err := statAt(dirfd, name, &e.st)
	switch {
	case err == unix.ENOENT:
		return nil
	case err != nil:
		return &os.PathError{Op: "stat", Path: path.Join(cd.path, name), Err: err}
	case e.st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return c.addChanged(dirfd, cd, name, unix.DT_DIR)
	case e.st.Mode&unix.S_IFMT != unix.S_IFREG:
		return c.addChanged(dirfd, cd, name, unix.DT_FIFO) // foreign, whatever it is
	case l.incomplete[e.st.Ino]:
		unix.Unlinkat(dirfd, name, 0)
		l.countIncomplete(e.st.Ino, e.st.Size)
		return nil
	}
	l.addFile(cd.d, &e)
	return nil
}

// madeSince is the last use a start ranks a stat'ed file by: the later
// of its atime and mtime, but for a start from a checkpoint, a name
// made since the checkpoint began (a create, link or rename sets its
// inode's change time) no older than the checkpoint's objects, which
// rank just before its time (objects): its bytes' times may be older. A
// store's temp name that a checkpoint step captured and that its link
// replaced after lost its place with the temp name, and the object came
// back ranked by its mtime, older than every object the checkpoint
// listed: the first evicted after a crash (an outside tester, 6 of 7
// runs, objects published up to 90 ms before a checkpoint was saved;
// then, linked into a directory made since, 3 of 3). The change time is
// the file system's coarse clock, up to a tick behind: a second's slack.
func (l *loader) madeSince(st *unix.Stat_t) int64 {
	const slack = int64(time.Second)
	used := max(ts(st.Atim), ts(st.Mtim))
	if l.since != 0 && ts(st.Ctim) >= l.since-slack {
		used = max(used, l.since)
	}
	return used
}

// forgetName removes a name from the index only (the store no longer
// holds it, or holds something else under it), with everything under it
// if it is a directory.
func (s *Store) forgetName(d *dir, name string, id ID) {
	if sub, ok := s.dirs[id]; ok {
		s.dropDir(sub)
		d.kids.del(name)
		return
	}
	s.dropName(id, d, name)
}

// mergeLinks makes one object of a checkpoint object and a name of its
// inode that was stat'ed (a hard link made after the checkpoint), so its
// bytes are counted once.
func (c *cpLoad) mergeLinks() {
	seen := c.l.seen // inode -> stat'ed object, for inodes with several names
	if len(seen) == 0 {
		return
	}
	statd := make(map[ID]int64, len(seen))
	for _, o := range c.l.objects {
		statd[o.ID] = o.Size
	}
	merged := map[ID]bool{}
	for i := range c.objs {
		o := &c.objs[i]
		other, ok := seen[o.ino]
		f := c.s.files[o.id]
		if !ok || f == nil || o.ino == 0 || merged[other] {
			continue
		}
		for _, n := range c.s.files[other].links() {
			c.s.dirs[n.Parent].kids.set(n.Name, o.id)
			f.addLink(n)
		}
		delete(c.s.files, other)
		merged[other] = true
		o.size = statd[other] // later than the checkpoint's
		delete(c.unsure, o.id)
	}
	kept := c.l.objects[:0]
	for _, o := range c.l.objects {
		if !merged[o.ID] {
			kept = append(kept, o)
		}
	}
	c.l.objects = kept
}

// dropIncomplete deletes the checkpoint's objects that were being
// written at the crash, by the names the store proved they still have.
func (c *cpLoad) dropIncomplete() {
	if len(c.marks.inos) == 0 {
		return
	}
	for _, o := range c.objs {
		if _, ok := c.s.files[o.id]; !ok || !c.marks.inos[o.ino] {
			continue
		}
		c.s.Drop(o.id)
		c.reclaimed++
		c.l.countIncomplete(o.ino, c.marks.sizes[o.ino])
	}
}

// testHookBeforeStatUnsure runs after the directories are reconciled,
// before the sizes the checkpoint did not know are read.
var testHookBeforeStatUnsure func()

// statUnsure reads the sizes the checkpoint did not know.
func (c *cpLoad) statUnsure() error {
	for i := range c.objs {
		o := &c.objs[i]
		if !c.unsure[o.id] {
			continue
		}
		st, err := c.statNamed(o.id)
		switch {
		case errors.Is(err, ErrNotFound):
			continue
		case err != nil:
			return err
		}
		c.l.rep.Stated++
		o.size, c.s.files[o.id].ino = st.Size, st.Ino
	}
	return nil
}

// statNamed stats file id by a name it still has, dropping from the
// index the names the store no longer holds (a store taken while the
// index loads may remove one after its directory was listed);
// ErrNotFound once none is left.
func (c *cpLoad) statNamed(id ID) (unix.Stat_t, error) {
	for {
		f, ok := c.s.files[id]
		if !ok {
			return unix.Stat_t{}, ErrNotFound
		}
		st, err := c.s.Stat(id)
		if !errors.Is(err, unix.ENOENT) {
			return st, err
		}
		n := f.links()[0]
		c.s.dropName(id, c.s.dirs[n.Parent], n.Name)
	}
}

// objects lists the indexed objects: the checkpoint's in its order,
// timed just before it was taken (or, read since, when the journal of
// uses says), then those stat'ed, timed by the store.
func (c *cpLoad) objects() []Object {
	out := make([]Object, 0, len(c.objs)+len(c.l.objects))
	uses := c.s.readUses()
	c.l.rep.Gone = -c.reclaimed // each reclaimed one is missing below
	for i, o := range c.objs {
		f, ok := c.s.files[o.id]
		if !ok {
			c.l.rep.Gone++
		}
		if ok {
			at := c.when - int64(len(c.objs)-i)
			if u := uses[f.ino]; u > c.when {
				at = u // read after the checkpoint began (UsesName)
			}
			out = append(out, Object{ID: o.id, Size: o.size, Atime: at, Links: len(f.links())})
		}
	}
	for _, o := range c.l.objects {
		o.Links = len(c.s.files[o.ID].links())
		out = append(out, o)
	}
	c.l.rep.Objects = int64(len(out))
	c.l.rep.Dirs = int64(len(c.s.dirs) - 1)
	return out
}
