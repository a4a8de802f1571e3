// Package procstat reads what /proc says of a task. Its stat line
// (proc(5)), whose command, in parentheses, may itself hold spaces and
// parentheses (the last ')' ends it), gives the daemon, its guard and
// the bench a task's state, flags, CPU time and threads; its status
// file (status.go), a line a key, gives its process, groups, memory and
// the signals pending.
package procstat

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// pfExiting is the kernel's PF_EXITING flag: the task is in its exit,
// closing its descriptors.
const pfExiting = 0x4

// clockTick is the unit of the line's times (USER_HZ).
const clockTick = 10 * time.Millisecond

// Read is the stat line of process or thread id.
func Read(id int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(id) + "/stat")
	return string(b), err
}

// Fields are the line's fields from the state (its third) on; none
// where it has no command.
func Fields(line string) []string {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(line[i+1:])
}

// State is the line's state letter (R, S, D, Z, ...); 0 where there is
// none.
func State(line string) byte {
	if f := Fields(line); len(f) > 0 {
		return f[0][0]
	}
	return 0
}

// Exiting says whether the line's task is in its exit and not through
// it: PF_EXITING in its flags (the ninth field), a state other than Z.
func Exiting(line string) bool {
	f := Fields(line)
	if len(f) < 7 || f[0] == "Z" {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&pfExiting != 0
}

// ExitSignal is the signal that ended the line's task, where it is in
// its exit (or through it): its exit code (the 52nd field, what
// waitpid(2) will report, set as the exit begins, before its files are
// closed), when that says a signal; 0 where it exits of itself, is not
// exiting, or the field is not shown (Linux before 3.5, a reader that
// may not trace the task).
func ExitSignal(line string) int {
	f := Fields(line)
	if len(f) < 50 {
		return 0
	}
	code, err := strconv.ParseUint(f[49], 10, 32)
	if err != nil {
		return 0
	}
	return int(code & 0x7f)
}

// CPU is the time the line's task has run, user and system (the 14th
// and 15th fields); ok is false where they cannot be read.
func CPU(line string) (cpu time.Duration, ok bool) {
	f := Fields(line)
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * clockTick, true
}

// Threads is the number of threads of the line's process (the 20th
// field); 0 where it cannot be read.
func Threads(line string) int {
	f := Fields(line)
	if len(f) < 18 {
		return 0
	}
	n, _ := strconv.Atoi(f[17])
	return n
}
