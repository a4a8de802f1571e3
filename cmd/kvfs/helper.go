package main

// `mount -t fuse.kvfs STORE MOUNTPOINT -o OPTIONS` and /etc/fstab lines
// of type fuse.kvfs. mount(8) finds no /sbin/mount.fuse.kvfs and runs
// /sbin/mount.fuse (fuse3's mount.fuse3) with the environment cleared,
// which runs `/bin/sh -c "kvfs STORE MOUNTPOINT -o OPTIONS"`: so kvfs
// must be on the shell's default PATH (/usr/local/sbin:/usr/local/bin:
// /usr/sbin:/usr/bin:/sbin:/bin). mount(8) drops x-*, X-*, comment= and
// defaults and puts rw or ro first; mount.fuse3 drops user, nouser,
// users, auto, noauto, _netdev, nofail, setuid= and drop_privileges and
// appends dev and suid unless nodev or nosuid was given. The parent
// (this process) checks the options, starts the daemon detached and
// exits 0 only once it serves, or with the daemon's one-line error.

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	// helperChildEnv marks the detached daemon a helper parent started.
	helperChildEnv = "KVFS_HELPER_CHILD"
	// readyLine is what the detached daemon writes once it serves, just
	// before it lets go of the parent's pipe.
	readyLine = "kvfs: ready"
)

// helperReady, set in a detached daemon, runs once the mount serves.
var helperReady func(mountpoint string) error

// isHelperForm says whether args (after the program name) are the form
// mount.fuse3 uses: STORE MOUNTPOINT -o OPTIONS. It is only asked when
// args[0] is no kvfs command. The options are never empty (mount(8)
// passes rw or ro), so a mistyped command with two arguments is not
// taken for a store.
func isHelperForm(args []string) bool {
	return len(args) == 4 && args[2] == "-o"
}

// helperMount serves `kvfs STORE MOUNTPOINT -o OPTIONS`.
func helperMount(args []string, stdout, stderr io.Writer) int {
	h, err := parseHelper(args)
	if err != nil {
		fmt.Fprintf(stderr, "kvfs: %v\n", err)
		return 2
	}
	if os.Getenv(helperChildEnv) != "" {
		// Started where mount(8) ran, so relative paths are read as
		// its (operations.md); the daemon holds no directory after.
		os.Chdir("/")
		helperReady = h.ready
		return run(h.mountArgs(), stdout, stderr)
	}
	return h.detach(stderr)
}

// helperMountOpts is what the -o options asked for.
type helperMountOpts struct {
	store, mountpoint string
	flags             []string // kvfs mount flags
	msFlags           uintptr  // per-mount flags to apply by a bind remount
	log               string   // the daemon's output; empty: /dev/null
}

// notOptions are the `kvfs mount` flags no -o option sets, and why.
var notOptions = map[string]string{
	"store":             "the helper form's first argument is the store",
	"cpuprofile":        "profiles are for a daemon run by hand",
	"mutexprofile":      "the same",
	"background":        "the helper form always detaches the daemon",
	"remote-access-key": "fstab and the mount's options are readable by all: credentials come from ~/.aws/credentials or the instance role",
	"remote-secret-key": "the same",
}

// mountOptions are the kvfs mount flags an -o option may set, written
// with '-' or '_', each with whether it takes a value (a bool flag does
// not): every flag of `kvfs mount` but notOptions.
var mountOptions = optionsOf(newMountFlags().fs)

func optionsOf(fs *flag.FlagSet) map[string]bool {
	out := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		if _, no := notOptions[f.Name]; !no {
			out[f.Name] = !isBoolFlag(f)
		}
	})
	return out
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// vfsOpts are generic mount options: the per-mount flag each sets
// (applied after mounting), or 0 for those accepted with no effect.
// kvfs always mounts nosuid,nodev; dev and suid (which mount.fuse3
// adds by default) do not change that. kvfs keeps its own access
// order, so atime options only change what stat shows.
var vfsOpts = map[string]uintptr{"rw": 0, "ro": unix.MS_RDONLY, "dev": 0, "nodev": 0, "suid": 0, "nosuid": 0,
	"exec": 0, "noexec": unix.MS_NOEXEC, "async": 0, "defaults": 0, "relatime": 0, "atime": 0,
	"noatime": unix.MS_NOATIME, "nodiratime": unix.MS_NODIRATIME, "strictatime": unix.MS_STRICTATIME,
	"auto": 0, "noauto": 0, "user": 0, "nouser": 0, "users": 0, "_netdev": 0, "nofail": 0,
	"diratime": 0, "norelatime": 0, "nostrictatime": 0}

// vfsClears are the generic options that undo another's flag, as
// mount(8) takes them: the later of `ro,rw` wins (the first did: an
// outside tester). Atime options combine as the kernel combines them
// for mount(8) (strictatime over noatime, noatime over relatime).
var vfsClears = map[string]uintptr{"rw": unix.MS_RDONLY, "exec": unix.MS_NOEXEC, "atime": unix.MS_NOATIME,
	"diratime": unix.MS_NODIRATIME, "nostrictatime": unix.MS_STRICTATIME}

func parseHelper(args []string) (*helperMountOpts, error) {
	store, err := filepath.Abs(strings.TrimPrefix(args[0], "kvfs#"))
	if err != nil || args[0] == "" {
		return nil, fmt.Errorf("bad store %q", args[0])
	}
	mp, err := filepath.Abs(args[1])
	if err != nil || args[1] == "" {
		return nil, fmt.Errorf("bad mount point %q", args[1])
	}
	h := &helperMountOpts{store: store, mountpoint: mp}
	for _, o := range strings.Split(args[3], ",") {
		if err := h.option(o); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// option maps one -o option to a kvfs flag, a per-mount flag or the
// log file; anything else is refused.
func (h *helperMountOpts) option(o string) error {
	key, val, hasVal := strings.Cut(o, "=")
	name := strings.ReplaceAll(key, "_", "-")
	takesValue, isFlag := mountOptions[name]
	switch {
	case o == "" || strings.HasPrefix(o, "x-") || strings.HasPrefix(o, "X-") || key == "comment":
		return nil
	case isFlag && takesValue && hasVal && val != "":
		h.flags = append(h.flags, "--"+name, val)
	case isFlag && !takesValue && !hasVal:
		h.flags = append(h.flags, "--"+name)
	case key == "log" && hasVal && filepath.IsAbs(val):
		// Opened here, before anything is mounted: a log file that
		// cannot be had failed the mount after it was made, exit 1,
		// without naming log= (an outside tester).
		f, err := os.OpenFile(val, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return fmt.Errorf("mount option %q: %w", o, err)
		}
		f.Close()
		h.log = val
	case !hasVal && isVFSOpt(key):
		h.msFlags = h.msFlags&^vfsClears[key] | vfsOpts[key]
	case isFlag, key == "log":
		return fmt.Errorf("mount option %q: want %s", o, optionForm(name))
	default:
		return fmt.Errorf("unknown mount option %q (kvfs takes %s, log=, ro, noexec, noatime, nodiratime, strictatime)", o, kvfsOptions())
	}
	return nil
}

func isVFSOpt(key string) bool { _, ok := vfsOpts[key]; return ok }

// kvfsOptions lists the options that set kvfs flags, as fstab spells them.
func kvfsOptions() string {
	var names []string
	for k, takesValue := range mountOptions {
		o := strings.ReplaceAll(k, "-", "_")
		if takesValue {
			o += "="
		}
		names = append(names, o)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func optionForm(name string) string {
	switch {
	case name == "log":
		return "log=/absolute/path"
	case !mountOptions[name]:
		return strings.ReplaceAll(name, "-", "_") + " without a value"
	}
	return strings.ReplaceAll(name, "-", "_") + "=VALUE"
}

// mountArgs is the `kvfs mount` command line the daemon runs.
func (h *helperMountOpts) mountArgs() []string {
	args := append([]string{"mount", "--store", h.store}, h.flags...)
	return append(args, h.mountpoint)
}

// detach starts the daemon in a session of its own, its output on a
// pipe, and waits until it serves (the pipe ends after readyLine) or
// exits (its last line is the reason).
func (h *helperMountOpts) detach(stderr io.Writer) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "kvfs: %v\n", err)
		return 1
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(stderr, "kvfs: %v\n", err)
		return 1
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Env = append(os.Environ(), helperChildEnv+"=1")
	cmd.Dir, _ = os.Getwd() // the child reads relative paths from here, then leaves
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		fmt.Fprintf(stderr, "kvfs: starting the daemon: %v\n", err)
		return 1
	}
	out := h.collect(r)
	if last := lastLine(out); last == readyLine {
		cmd.Process.Release()
		// The daemon's warnings for its user (a flag given twice, a
		// capacity past the disk): mount(8) shows the helper's stderr,
		// and without log= the daemon's output goes nowhere else.
		for line := range strings.Lines(string(out)) {
			if strings.HasPrefix(line, "kvfs: warning:") {
				fmt.Fprint(stderr, line)
			}
		}
		return 0
	}
	return h.failed(cmd, out, stderr)
}

// collect reads the daemon's output until it lets go of the pipe,
// copying it to the log file if there is one.
func (h *helperMountOpts) collect(r *os.File) []byte {
	defer r.Close()
	var out bytes.Buffer
	dst := io.Writer(&out)
	if h.log != "" {
		if f, err := os.OpenFile(h.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640); err == nil {
			defer f.Close()
			dst = io.MultiWriter(&out, f)
		}
	}
	io.Copy(dst, r)
	return out.Bytes()
}

// failed reports a daemon that exited before serving: its last line (its
// one-line error), and its exit status.
func (h *helperMountOpts) failed(cmd *exec.Cmd, out []byte, stderr io.Writer) int {
	err := cmd.Wait()
	code := 1
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		code = ee.ExitCode()
	}
	last := lastLine(out)
	if last == "" || !strings.HasPrefix(last, "kvfs") {
		last = fmt.Sprintf("kvfs: the daemon exited (%v) before serving %s", err, h.mountpoint)
	}
	fmt.Fprintln(stderr, last)
	return max(code, 1)
}

func lastLine(b []byte) string {
	var last string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	return last
}

// ready runs in the detached daemon once the mount serves: it applies
// the per-mount flags asked for, tells the parent, and moves its own
// output to the log file so the parent can exit.
func (h *helperMountOpts) ready(mountpoint string) error {
	want := h.msFlags
	if want&(unix.MS_NOATIME|unix.MS_STRICTATIME) == 0 {
		want |= unix.MS_RELATIME // the default, which a remount must name
	}
	// A handover keeps the mount, and with it the per-mount flags an
	// earlier helper set (ro, noexec...): they are set to what this one
	// asks, cleared too. A fresh mount has the default ones already
	// (and a user's mount could not change them).
	if perMountFlags(mountpoint) != want {
		flags := unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV | want
		if err := unix.Mount("", mountpoint, "", flags, ""); err != nil {
			return fmt.Errorf("applying mount options to %s: %w", mountpoint, err)
		}
	}
	fmt.Fprintln(os.Stderr, readyLine)
	return redirectOutput(h.log)
}

// perMountFlags is the per-mount flags vfsOpts sets that the mount at
// mountpoint has, as MS_ flags (-1: unknown).
func perMountFlags(mountpoint string) uintptr {
	var st unix.Statfs_t
	if unix.Statfs(mountpoint, &st) != nil {
		return ^uintptr(0)
	}
	var flags uintptr
	for st_, ms := range map[int64]uintptr{unix.ST_RDONLY: unix.MS_RDONLY, unix.ST_NOEXEC: unix.MS_NOEXEC,
		unix.ST_NOATIME: unix.MS_NOATIME, unix.ST_NODIRATIME: unix.MS_NODIRATIME, unix.ST_RELATIME: unix.MS_RELATIME} {
		if st.Flags&st_ != 0 {
			flags |= ms
		}
	}
	if flags&(unix.MS_NOATIME|unix.MS_RELATIME) == 0 {
		flags |= unix.MS_STRICTATIME
	}
	return flags
}

// redirectOutput points the process's stdout and stderr at path
// (appending), or at /dev/null.
func redirectOutput(path string) error {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if path != "" {
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	for _, fd := range []int{1, 2} {
		if err := unix.Dup3(int(f.Fd()), fd, 0); err != nil {
			return err
		}
	}
	return nil
}
