package mount

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/core"
	"github.com/kvfs/kvfs/fusefs"
	"github.com/kvfs/kvfs/internal/mountinfo"
	"github.com/kvfs/kvfs/internal/procstat"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// A daemon SIGKILLed while one of its threads is inside a kernel
// notification (FUSE_NOTIFY_INVAL_ENTRY waits for the directory's lock)
// cannot finish exiting when a client holds that lock while it waits for
// a request the dead daemon will never answer: the thread sleeps
// uninterruptibly, the process stays a zombie holding /dev/fuse open, and
// the mount hangs every caller. Only an abort of the FUSE connection,
// from outside the process, frees both. The guard is that outside: a
// small process started beside the daemon that aborts the daemon's
// connection when it sees the daemon stuck that way.
//
// The guard also bounds what a passthrough writer puts into the store
// once the daemon is gone (the kernel keeps feeding it the backing file):
// every object with a writer open is still marked under writing/, so the
// next start reclaims it and never serves it; the guard holds those files
// open and truncates them to nothing as they grow, for as long as some
// process holds a file of the mount open. Where a project quota caps the
// store (quota.go) that is the hard bound; this one works on every file
// system, but only while the guard runs.

// GuardCommand is the hidden kvfs command that runs RunGuard.
const GuardCommand = "__guard"

const (
	// guardPoll is how often the guard looks for a daemon stuck exiting,
	// and stuckFor how long it must look so: every killed daemon's leader
	// exits before its other threads for a moment.
	guardPoll = 200 * time.Millisecond
	stuckFor  = 5
	// capPoll is how often a dead daemon's writers are truncated: what a
	// writer adds in that time is the most it holds in the store.
	capPoll = 5 * time.Millisecond
	// capQuiet: once no writer has grown for this long, the files are
	// looked at every capQuietPoll only; whether a process still holds a
	// file of the mount open is looked for every capHeldEvery.
	capQuiet     = time.Second
	capQuietPoll = 100 * time.Millisecond
	capHeldEvery = 100 * time.Millisecond
	// guardSettle is how long a start waits for a dead daemon's guard to
	// find no holders and leave: a few of its looks.
	guardSettle = 5 * capHeldEvery
	// closedTrust: an object its opener closed longer than this before
	// the daemon died, whose RELEASE never came, was held by something
	// else (see blob.VetClosed), as a publish that waited that long for
	// the RELEASE takes it (core's releaseWait). The RELEASE follows a
	// close by microseconds, tens of milliseconds on a loaded node (an
	// outside tester found 1 in 20 still unserved 50 ms after the
	// close): past this, such a crash reclaims the object, as before
	// 2026-12-07 any did.
	closedTrust = 100 * time.Millisecond
)

// Guard is the daemon's end of its guard.
type Guard struct {
	w   *os.File
	cmd *exec.Cmd
}

// startGuard starts bin (the kvfs binary) as the guard of the daemon
// that is about to mount o's store at o's mount point. It runs before the
// mount exists, so that no client can open a file of the mount that no
// guard watches; mounted then tells it the connection. A daemon without
// a guard still works; a kill -9 at the wrong moment then needs `kvfs
// unmount` (or the next `kvfs mount` of the store) to free it, and its
// passthrough writers go on writing into the store.
func startGuard(bin string, o Options) (*Guard, error) {
	CloseOnExec()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(bin, GuardCommand, strconv.Itoa(os.Getpid()), o.Mountpoint, o.Store)
	cmd.ExtraFiles = []*os.File{r}
	cmd.Stderr = guardStderr(os.Stderr)
	// Its own process group: a terminal's Ctrl-C is for the daemon.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	return &Guard{w: w, cmd: cmd}, nil
}

// guardStderr is where the guard's warnings go (it aborted a stuck
// daemon's connection, it capped a dead daemon's writers): where the
// daemon's go, a terminal, the journal or a file, but not into a pipe,
// whose reader (a supervisor, a test collecting the daemon's output)
// would wait for the guard to close it too, and the guard of a killed
// daemon runs for as long as a client holds a file of the mount. Before,
// they went nowhere.
func guardStderr(daemon *os.File) *os.File {
	if st, err := daemon.Stat(); err != nil || st.Mode()&os.ModeNamedPipe != 0 {
		return nil // /dev/null
	}
	return daemon
}

// mounted tells the guard the FUSE connection of the mount at mp, which
// it is to abort should the daemon get stuck exiting, the mount's ID, by
// which it finds the processes that still hold a file of it (a path
// would miss those of a mount detached by umount -l), and that the
// daemon's death from now on leaves writers to cap. It is told before
// the daemon answers its first request.
func (g *Guard) mounted(mp string) error {
	if g == nil {
		return nil
	}
	e, ok := mountinfo.At(mp)
	if !ok {
		return fmt.Errorf("%s is not mounted", mp)
	}
	conn, ok := connectionOf(e)
	if !ok {
		return fmt.Errorf("no FUSE connection for %s (device %q)", mp, e.Dev)
	}
	_, err := fmt.Fprintf(g.w, "%s %s %d\n", guardMounted, conn, e.ID)
	return err
}

// CloseOnExec marks every descriptor of the process close-on-exec, so a
// program it starts inherits none but those it passes (exec.Cmd's
// ExtraFiles). The guard inherits none but its pipe: the guard starts
// before go-fuse opens /dev/fuse (without O_CLOEXEC; a guard holding it
// would keep a dead daemon's connection alive), but a descriptor the
// daemon itself inherited without the flag would otherwise stay open in
// the guard for as long as it runs.
func CloseOnExec() {
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}

// The daemon's messages to its guard, one a line.
const (
	guardMounted = "mounted" // and the connection's name and the mount's ID
	guardStop    = "stop"
)

// Stop tells the guard the daemon stops cleanly, and waits for it.
func (g *Guard) Stop() {
	if g == nil {
		return
	}
	fmt.Fprintln(g.w, guardStop)
	g.w.Close()
	g.cmd.Wait()
}

// RunGuard is the guard of daemon pid, which mounts its store at store
// on mp; the daemon's messages come on quit. It returns when the daemon
// says it stops cleanly. Once told the mount's FUSE connection, it
// aborts that connection if the daemon stays dying (killed, or in its
// exit, and not through it) for stuckFor looks, which lets the thread
// that cannot exit, and so the daemon, finish. When quit closes without
// a word after the mount the daemon died (the kernel ended the
// connection itself as /dev/fuse closed), and it caps the writers the
// daemon left (capWriters) before it returns; a daemon that dies before
// it mounts left no writers.
func RunGuard(pid int, mp, store string, quit *os.File, log *zap.Logger) {
	said := make(chan string)
	go func() {
		defer close(said)
		lines := bufio.NewScanner(quit)
		for lines.Scan() {
			said <- lines.Text()
		}
	}()
	tick := time.NewTicker(guardPoll)
	defer tick.Stop()
	conn, mnt, aborted, stuck := "", "", false, 0
	for {
		select {
		case msg, ok := <-said:
			switch {
			case !ok:
				if conn != "" {
					capWriters(mnt, store, log)
				}
				return
			case msg == guardStop:
				return
			case strings.HasPrefix(msg, guardMounted+" "):
				conn, mnt, _ = strings.Cut(strings.TrimPrefix(msg, guardMounted+" "), " ")
			}
		case <-tick.C:
			if conn == "" || !dying(pid) {
				stuck = 0
				continue
			}
			if stuck++; !aborted && stuck >= stuckFor {
				log.Warn("the daemon was killed but is stuck exiting; aborting its FUSE connection", zap.Int("pid", pid), zap.String("mountpoint", mp))
				abortGuarded(conn, mp, log)
				aborted = true
			}
		}
	}
}

// capWriters truncates the stored files of the objects a dead daemon
// left marked as being written, as they grow, until no process holds a
// file of the mount (ID mnt) open any more, detached from the tree or
// not. It opens them once, at once: no
// daemon is left to mark new ones, and a later daemon's own writers must
// not be touched; it keeps them open, so one the next start unlinks
// (reclaiming it) stays capped. An object a writer opened whole and has
// not changed since (an intact marker whose mtime still holds, see
// blob.MarkIntact) is left whole until it changes.
func capWriters(mnt, store string, log *zap.Logger) {
	writing := filepath.Join(store, blob.WritingName)
	plain, trusted := blob.VetClosed(writing, heldObjects(mnt), time.Now().Add(-closedTrust).UnixNano())
	if plain+trusted > 0 {
		log.Info("objects closed as the daemon died: those still held open, or closed long before, are reclaimed at the next start as still being written; the others are kept if unchanged",
			zap.Int("reclaimed", plain), zap.Int("kept", trusted))
	}
	files := openMarked(writing)
	if len(files) == 0 {
		return
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var freed int64
	grew, looked := time.Now(), time.Now()
	for {
		for _, f := range files {
			var st unix.Stat_t
			if unix.Fstat(int(f.Fd()), &st) == nil && st.Size > 0 && !f.unchanged(&st) {
				freed += st.Blocks * 512
				f.Truncate(0)
				grew = time.Now()
			}
		}
		if time.Since(looked) >= capHeldEvery {
			if _, held := heldOnMounts(map[string]string{mnt: ""}); !held {
				break
			}
			looked = time.Now()
		}
		if time.Since(grew) < capQuiet {
			time.Sleep(capPoll)
		} else {
			time.Sleep(capQuietPoll)
		}
	}
	log.Warn("capped the writers a dead daemon left", zap.String("store", store), zap.Int("objects", len(files)), zap.Int64("truncated_bytes", freed))
}

// anyDescriptor finds a process with a descriptor that match says yes
// to, given its entry under /proc/PID/sub ("fd" or "fdinfo").
func anyDescriptor(sub string, match func(path string) bool) (pid int, ok bool) {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", p.Name(), sub)
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			if match(filepath.Join(dir, fd.Name())) {
				return pid, true
			}
		}
	}
	return 0, false
}

// openMarked opens the files marked under writing/.
func openMarked(dir string) []markedFile {
	names, _ := blob.ReadMarkers(dir)
	var files []markedFile
	for _, name := range names {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|unix.O_NOFOLLOW, 0)
		if err == nil {
			m, intact := blob.IntactMark(name)
			files = append(files, markedFile{f, m.Mtime, intact})
		}
	}
	return files
}

// markedFile is a marked file the guard holds open, with the mtime an
// intact marker recorded.
type markedFile struct {
	*os.File
	mtime  int64
	intact bool
}

// unchanged: f's marker is intact and f still has the mtime it recorded.
func (f markedFile) unchanged(st *unix.Stat_t) bool {
	return f.intact && blob.Unchanged(st, f.mtime)
}

// abortGuarded aborts connection conn, through fusectl, or by a forced
// unmount of mp if mp is still that connection's mount.
func abortGuarded(conn, mp string, log *zap.Logger) {
	err := writeAbort(fusectl, conn)
	if errors.Is(err, os.ErrNotExist) {
		if e, ok := mountinfo.At(mp); ok {
			if c, _ := connectionOf(e); c == conn {
				_, err = abortConnection(mp, e)
			}
		} else {
			err = nil // unmounted: nothing to abort
		}
	}
	if err != nil {
		log.Warn("aborting the dead daemon's FUSE connection", zap.String("mountpoint", mp), zap.Error(err))
	}
}

// deadMountHeld says whether a process holds a file of a kvfs mount of
// store that is still in the mount table (the dead one a crash left,
// which the new mount replaces after the load), and which process:
// /proc/PID/fdinfo names each descriptor's mount; or, for a dead mount
// detached from the tree (umount -l), which no table lists, whether the
// dead daemon's guard still runs (it runs while a process holds a file
// of that mount), and its process. A writer that holds one could change
// an object after the start kept it as intact.
func deadMountHeld(store string) (int, bool) {
	if pid, ok := deadGuard(store); ok {
		return pid, true
	}
	ids := map[string]string{}
	for _, e := range mountsOfStore(mountinfo.Read(), store) {
		ids[strconv.Itoa(e.ID)] = ""
	}
	return heldOnMounts(ids)
}

// deadGuard finds the guard of another daemon of store that still runs
// once it had time to see no process holds a file of that daemon's mount
// (guardSettle). Only one daemon serves a store: a guard that is not
// this daemon's is a dead one's, which runs while such a process does.
func deadGuard(store string) (int, bool) {
	want, err := os.Stat(store)
	if err != nil {
		return 0, false
	}
	self := strconv.Itoa(os.Getpid())
	guards := func() (pid int) {
		procs, _ := os.ReadDir("/proc")
		for _, p := range procs {
			pid, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			// kvfs __guard DAEMON-PID MOUNTPOINT STORE (startGuard); a
			// zombie's is empty.
			b, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
			args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
			if len(args) != 5 || args[1] != GuardCommand || args[2] == self {
				continue
			}
			if st, err := os.Stat(args[4]); err == nil && os.SameFile(st, want) {
				return pid
			}
		}
		return 0
	}
	for deadline := time.Now().Add(guardSettle); ; time.Sleep(10 * time.Millisecond) {
		pid := guards()
		if pid == 0 || time.Now().After(deadline) {
			return pid, pid != 0
		}
	}
}

// CloseHeldOn closes this process's descriptors on the mount at mp, if
// any: ones it inherited (a shell's `exec 7<MP/obj` before a foreground
// `kvfs mount` that takes MP over) would stay open in the daemon for its
// whole life and keep its own mount busy at its unmount. It reads the
// descriptors' mounts from /proc/self/fdinfo, asking the mount nothing:
// its daemon may be hung or dead.
func CloseHeldOn(mp string) {
	if abs, err := filepath.Abs(mp); err == nil {
		mp = abs
		// The parent's links resolved, not the mount point's own: a
		// look at it would ask its daemon.
		if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
			mp = filepath.Join(dir, filepath.Base(abs))
		}
	}
	e, ok := mountinfo.At(mp)
	if !ok || !strings.HasPrefix(e.FSType, "fuse") {
		return
	}
	ents, _ := os.ReadDir("/proc/self/fdinfo")
	for _, ent := range ents {
		fd, err := strconv.Atoi(ent.Name())
		if err != nil || fd <= 2 {
			continue
		}
		if id, ok := descriptorMount(filepath.Join("/proc/self/fdinfo", ent.Name())); ok && id == strconv.Itoa(e.ID) {
			unix.Close(fd)
		}
	}
}

// descriptorMount is the ID of the mount of the descriptor whose
// /proc/PID/fdinfo/FD is path.
func descriptorMount(path string) (string, bool) {
	mnt, _, ok := descriptorFile(path)
	return mnt, ok
}

// descriptorFile is the ID of the mount and the inode number ("": not
// said, before Linux 5.14) of the descriptor whose /proc/PID/fdinfo/FD
// is path.
func descriptorFile(path string) (mnt, ino string, ok bool) {
	info, err := os.ReadFile(path)
	if err != nil {
		return "", "", false
	}
	for _, line := range strings.Split(string(info), "\n") {
		if v, found := strings.CutPrefix(line, "mnt_id:"); found {
			mnt, ok = strings.TrimSpace(v), true
		} else if v, found := strings.CutPrefix(line, "ino:"); found {
			ino = strings.TrimSpace(v)
		}
	}
	return mnt, ino, ok
}

// heldObjects says which objects processes hold open on the mount of ID
// mnt, by a descriptor or by a mapping (the C way to map a file closes
// its descriptor): a kvfs mount's inode numbers are its objects' IDs.
// Where the kernel does not say a descriptor's inode, or the inode is a
// load's (a start serving while its index loads numbers its own, which
// files opened then keep), or the mount is no longer in the table, every
// object counts as held.
func heldObjects(mnt string) func(blob.ID) bool {
	held, unsure := map[blob.ID]bool{}, false
	add := func(ino string) {
		n, err := strconv.ParseUint(ino, 10, 64)
		held[blob.ID(n)] = true
		unsure = unsure || err != nil || n >= fusefs.LoadBase
	}
	anyDescriptor("fdinfo", func(path string) bool {
		if id, ino, ok := descriptorFile(path); ok && id == mnt {
			add(ino)
		}
		return false // every descriptor
	})
	if dev, ok := mountDev(mnt); ok {
		mappedOn(dev, add)
	} else {
		unsure = true // detached (umount -l): its mappings cannot be told
	}
	return func(id blob.ID) bool { return unsure || held[id] }
}

// treeLimit bounds the processes heldInTree looks at.
const treeLimit = 1024

// heldInTree says whether process pid, or a process it forked (its
// descendants, from /proc/PID/task/TID/children), holds object id of the
// mount of ID mnt by a descriptor or a mapping, as heldObjects finds
// them; where the kernel does not say a descriptor's inode, one of the
// mount counts. It looks at the opener's tree alone: a writer's RELEASE
// that is late is asked about while the store goes on, and a scan of
// every process on a node of many is the guard's, once.
func heldInTree(mnt string, pid int, id blob.ID) bool {
	want := strconv.FormatUint(uint64(id), 10)
	held := false
	inTree(mnt, pid, true, func(_ int, ino string) bool {
		held = ino == want || ino == ""
		return held
	})
	return held
}

// inTree calls found with each process that pid forked, and pid itself
// where self is set, and the inode number of each file of the mount of
// ID mnt it holds, by a descriptor or a mapping ("" for a descriptor
// whose inode the kernel does not say), until found returns true.
// whole: it looked at every process of the tree (at most treeLimit),
// and none stopped it.
func inTree(mnt string, pid int, self bool, found func(pid int, ino string) bool) (whole bool) {
	dev, devOK := mountDev(mnt)
	queue := []int{pid}
	for n := 0; n < len(queue) && n < treeLimit; n++ {
		p := strconv.Itoa(queue[n])
		if n > 0 || self {
			dir := filepath.Join("/proc", p, "fdinfo")
			fds, _ := os.ReadDir(dir)
			for _, fd := range fds {
				if m, ino, ok := descriptorFile(filepath.Join(dir, fd.Name())); ok && m == mnt && found(queue[n], ino) {
					return false
				}
			}
			if devOK {
				stop := false
				mappedBy(p, dev, func(ino string) { stop = stop || found(queue[n], ino) })
				if stop {
					return false
				}
			}
		}
		tasks, _ := os.ReadDir(filepath.Join("/proc", p, "task"))
		for _, t := range tasks {
			b, _ := os.ReadFile(filepath.Join("/proc", p, "task", t.Name(), "children"))
			for _, c := range strings.Fields(string(b)) {
				if child, err := strconv.Atoi(c); err == nil {
					queue = append(queue, child)
				}
			}
		}
	}
	return len(queue) <= treeLimit
}

// idleWriters is which of ids, objects of the mount of ID mnt that
// process pid writes, no one can write while the admissions in waits
// wait: pid cannot (blocked: its one thread waits, or writes behind a
// waiting write), and no process it forked holds them (nor, where the
// kernel does not say a descriptor's inode, any file of the mount) but
// processes that cannot either: an outside tester's child, forked after
// the opens, writing into the very file its parent waited on, and the
// parent both waited out the wait limit, 2 of 2. See
// core.Config.IdleWriters.
func idleWriters(mnt string, pid int, ids []blob.ID, waits core.Waits) []blob.ID {
	if !blocked(mnt, pid, waits) {
		return nil
	}
	held := map[string]bool{}
	isBlocked := map[int]bool{}
	whole := inTree(mnt, pid, false, func(p int, ino string) bool {
		b, ok := isBlocked[p]
		if !ok {
			b = blocked(mnt, p, waits)
			isBlocked[p] = b
		}
		if b {
			return false
		}
		held[ino] = true
		return ino == ""
	})
	if !whole {
		return nil
	}
	var idle []blob.ID
	for _, id := range ids {
		if !held[strconv.FormatUint(uint64(id), 10)] {
			idle = append(idle, id)
		}
	}
	return idle
}

// blocked says whether process pid cannot write while admissions wait
// for room (waits): it has one thread, and that thread's admission
// waits, or it is in a write into an object of the mount of ID mnt
// whose admission waits: the kernel lets one write into a file at a
// time (the inode's lock), so it waits behind that one (measured: a
// forked child's pwrite64 into the file its parent's write waited on
// slept in fuse_file_write_iter, no request sent).
func blocked(mnt string, pid int, waits core.Waits) bool {
	line, err := procstat.Read(pid)
	if err != nil || procstat.Threads(line) != 1 {
		return false
	}
	if _, ok := waits[pid]; ok {
		return true
	}
	fd, ok := writingTo(pid)
	if !ok {
		return false
	}
	m, ino, ok := descriptorFile(filepath.Join("/proc", strconv.Itoa(pid), "fdinfo", strconv.Itoa(fd)))
	if !ok || m != mnt {
		return false
	}
	for _, id := range waits {
		if strconv.FormatUint(uint64(id), 10) == ino {
			return true
		}
	}
	return false
}

// writeArg is, for each system call that writes into a file through a
// descriptor, the argument that is that descriptor.
var writeArg = map[int]int{
	unix.SYS_WRITE:           0,
	unix.SYS_PWRITE64:        0,
	unix.SYS_WRITEV:          0,
	unix.SYS_PWRITEV:         0,
	unix.SYS_PWRITEV2:        0,
	unix.SYS_FALLOCATE:       0,
	unix.SYS_FTRUNCATE:       0,
	unix.SYS_SENDFILE:        0,
	unix.SYS_COPY_FILE_RANGE: 2,
	unix.SYS_SPLICE:          2,
}

// writingTo is the descriptor process pid's thread is writing through
// now (/proc/PID/syscall: the call's number and its arguments in hex),
// if it is in such a call.
func writingTo(pid int) (fd int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "syscall"))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 7 {
		return 0, false // "running", or "-1 ..." outside a call
	}
	nr, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, false
	}
	arg, ok := writeArg[nr]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimPrefix(f[1+arg], "0x"), 16, 32)
	return int(n), err == nil
}

// mountDev is the device (major:minor) of the mount of ID mnt.
func mountDev(mnt string) (string, bool) {
	for _, e := range mountinfo.Read() {
		if strconv.Itoa(e.ID) == mnt {
			return e.Dev, true
		}
	}
	return "", false
}

// mappedOn calls found with the inode number of each file of device dev
// (major:minor) that a process maps, from /proc/PID/maps (whose devices
// are in hex).
func mappedOn(dev string, found func(ino string)) {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err == nil {
			mappedBy(p.Name(), dev, found)
		}
	}
}

// mappedBy calls found with the inode number of each file of device dev
// (major:minor) that process pid maps.
func mappedBy(pid, dev string, found func(ino string)) {
	major, minor, _ := strings.Cut(dev, ":")
	ma, err1 := strconv.ParseUint(major, 10, 32)
	mi, err2 := strconv.ParseUint(minor, 10, 32)
	if err1 != nil || err2 != nil {
		return
	}
	want := fmt.Sprintf("%02x:%02x", ma, mi)
	maps, err := os.ReadFile(filepath.Join("/proc", pid, "maps"))
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(maps), "\n") {
		// start-end perms offset dev inode path
		if f := strings.Fields(line); len(f) >= 5 && f[3] == want && f[4] != "0" {
			found(f[4])
		}
	}
}

// heldOnMounts says whether a process holds a file of one of the
// mounts, by ID, each with its device (major:minor; "": not known), and
// which: /proc/PID/fdinfo names each descriptor's mount, which stays its
// own when the mount is detached from the tree (umount -l), where the
// descriptor's path no longer begins with the mount point. A mount's ID
// is given again once the mount is gone: a descriptor of a new mount
// with a gone one's ID (another test's, in a parallel run) counted as a
// file of it, and its handles whose RELEASE the kernel dropped stayed
// unreleased (a fresh-clone CI run: the object was reclaimed as
// incomplete at the next start). So where the device is known, a
// descriptor with the ID counts only if its file is on it, or cannot be
// asked (its mount's connection ended).
func heldOnMounts(devs map[string]string) (int, bool) {
	if len(devs) == 0 {
		return 0, false
	}
	return anyDescriptor("fdinfo", func(path string) bool {
		id, ok := descriptorMount(path)
		dev, ours := devs[id]
		if !ok || !ours {
			return false
		}
		var st unix.Stat_t
		fd := filepath.Join(filepath.Dir(filepath.Dir(path)), "fd", filepath.Base(path))
		if dev == "" || unix.Stat(fd, &st) != nil {
			return true
		}
		return fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)) == dev
	})
}
