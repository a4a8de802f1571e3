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

	"github.com/kvfs/kvfs/internal/usageerr"
	"github.com/kvfs/kvfs/mount"
)

// backgroundChildEnv marks the daemon a --background parent started;
// its descriptor 3 is the pipe it reports on.
const backgroundChildEnv = "KVFS_BACKGROUND_CHILD"

// background starts this command again as the daemon, detached, with
// the same output, and waits for its word on a pipe: "ready", or the
// pipe's end without it (the daemon failed; its error is in its output).
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
	if strings.TrimSpace(string(word)) == "ready" {
		fmt.Fprintf(stdout, "kvfs: the daemon (pid %d) serves; it runs on in the background\n", cmd.Process.Pid)
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

// refusedWord starts what a --background daemon tells its parent when it
// refuses its arguments: the parent prints the one line.
const refusedWord = "refused: "

// backgroundRefused hands a usage error to the --background parent, if
// this is its daemon, instead of printing it.
func backgroundRefused(err error) bool {
	if os.Getenv(backgroundChildEnv) == "" {
		return false
	}
	f := os.NewFile(3, "background parent")
	defer f.Close()
	_, werr := fmt.Fprintf(f, "%s%v\n", refusedWord, err)
	return werr == nil
}

// backgroundReady tells a --background parent that the mount serves.
func backgroundReady() {
	if os.Getenv(backgroundChildEnv) == "" {
		return
	}
	os.Unsetenv(backgroundChildEnv)
	f := os.NewFile(3, "background parent")
	fmt.Fprintln(f, "ready")
	f.Close()
}
