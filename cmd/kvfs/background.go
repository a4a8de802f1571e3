package main

// `kvfs mount --background`: the command returns once the mount serves,
// the daemon running on in a session of its own. systemd's ExecReload
// runs it (a handover of the live mount to a new daemon): a reload
// command must return, and the daemon it starts becomes the service's
// main process (MAINPID, sent before the old daemon exits).

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kvfs/kvfs/internal/usageerr"
	"github.com/kvfs/kvfs/mount"
)

// backgroundChildEnv marks the daemon a --background parent started;
// its descriptor 3 is the pipe it reports on.
const backgroundChildEnv = "KVFS_BACKGROUND_CHILD"

// background starts this command again as the daemon, detached, with
// the same output until it serves (see detachOutput), and waits for its
// word on a pipe: "ready", or the pipe's end without it (the daemon
// failed; its error is in its output).
func background(stdout io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The daemon runs on for days: a descriptor this command inherited
	// (a shell's `exec 7<file` on the very mount it takes over) would
	// stay open in it, and keep that mount busy at its unmount.
	mount.CloseOnExec()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Env = append(os.Environ(), backgroundChildEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return fmt.Errorf("starting the daemon: %w", err)
	}
	word, _ := io.ReadAll(r)
	r.Close()
	if msg, ok := strings.CutPrefix(string(word), refusedWord); ok {
		cmd.Wait()
		return usageerr.Errorf("%s", strings.TrimSpace(msg)) // one line, as without --background
	}
	if msg, ok := strings.CutPrefix(string(word), failedWord); ok {
		cmd.Wait()
		return errors.New(strings.TrimSpace(msg)) // one line, as without --background
	}
	if w := strings.TrimSpace(string(word)); strings.HasPrefix(w, readyWord) {
		fmt.Fprintf(stdout, "kvfs: the daemon (pid %d) serves; it runs on in the background\n", cmd.Process.Pid)
		if w == readyWord+" "+discardedWord {
			fmt.Fprintln(stdout, "kvfs: its log is discarded: this command's stderr was a pipe or a terminal, which the daemon would have kept open (send it to a file, `2>>FILE`, or run it under systemd)")
		}
		cmd.Process.Release()
		return nil
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		return usageerr.Errorf("the daemon refused its arguments (see its output)")
	}
	return fmt.Errorf("the daemon exited before serving (%v; see its output)", err)
}

// refusedWord and failedWord start what a --background daemon tells its
// parent when it refuses its arguments (exit 2) or fails before it
// serves (exit 1): the parent prints the one line (an outside tester
// read a metrics port taken, then "the daemon exited before serving
// (exit status 1; see its output)").
const (
	refusedWord = "refused: "
	failedWord  = "failed: "
)

// backgroundFailed hands the error a command ends with to the
// --background parent, if this is its daemon and it has not yet
// served, instead of printing it.
func backgroundFailed(err error) bool {
	if os.Getenv(backgroundChildEnv) == "" {
		return false
	}
	word := failedWord
	if errors.Is(err, usageerr.ErrUsage) {
		word = refusedWord
	}
	f := os.NewFile(3, "background parent")
	defer f.Close()
	_, werr := fmt.Fprintf(f, "%s%v\n", word, err)
	return werr == nil
}

// The words a --background daemon tells its parent once it serves:
// ready, and whether its output is now discarded (detachOutput).
const (
	readyWord     = "ready"
	discardedWord = "discarded"
)

// backgroundReady tells a --background parent that the mount serves,
// once the daemon's output no longer holds what the parent's caller
// waits on.
func backgroundReady() {
	if os.Getenv(backgroundChildEnv) == "" {
		return
	}
	os.Unsetenv(backgroundChildEnv)
	word := readyWord
	if detachOutput() {
		word += " " + discardedWord
	}
	f := os.NewFile(3, "background parent")
	fmt.Fprintln(f, word)
	f.Close()
}

// detachOutput points the daemon's stdout and stderr at /dev/null where
// they are a pipe or a terminal: a caller waits on a pipe's end (a shell
// pipeline, `$(...)`, ssh, a CI step), which a daemon that runs for days
// would keep open (an outside tester's pipeline hung until the unmount),
// and a terminal goes with its session. A file or a socket (systemd's
// journal) is kept. It says whether it moved stderr, the log (stdout
// holds no more than the lines the parent prints: an outside tester's
// `2>>FILE` from a terminal was told its log was discarded).
func detachOutput() bool {
	moved := false
	for _, fd := range []int{1, 2} {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFIFO:
		case unix.S_IFCHR:
			if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
				continue // /dev/null, say
			}
		default:
			continue
		}
		null, err := unix.Open(os.DevNull, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if unix.Dup3(null, fd, 0) == nil && fd == 2 {
			moved = true
		}
		unix.Close(null)
	}
	return moved
}
