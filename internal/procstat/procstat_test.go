package procstat

import (
	"os"
	"strings"
	"testing"
)

// TestExiting: the guard reads a daemon stuck in its exit from its
// stat line, as one was in a CI run (one thread left, in D, flushing a
// file of its own mount), and no other process so.
func TestExiting(t *testing.T) {
	for line, want := range map[string]bool{
		// The CI run's daemon: D, flags 0x40050c (PF_EXITING).
		"1664 (kvfs) D 1206 32126 7691 0 -1 4195340 1221 0 0 0": true,
		// A running daemon: flags 0x400140.
		"1664 (kvfs) S 1206 32126 7691 0 -1 4194624 1221 0 0 0": false,
		// Through its exit, waiting to be reaped: its pipe is closed.
		"1664 (kvfs) Z 1206 32126 7691 0 -1 4228108 1221 0 0 0": false,
		// comm with spaces and a parenthesis.
		"7 (a) b (c) D 1 7 7 0 -1 4 0": true,
		"garbage":                      false,
	} {
		if got := Exiting(line); got != want {
			t.Errorf("Exiting(%q) = %v, want %v", line, got, want)
		}
	}
	line, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if Exiting(line) {
		t.Error("this test's own process reads as exiting")
	}
}

// TestStateAndCPU: a command with spaces and parentheses ends at the
// last ')'.
func TestStateAndCPU(t *testing.T) {
	line := "7 (a) b (c) S 1 7 7 0 -1 4194560 0 0 0 0 250 30 0 0"
	if s := State(line); s != 'S' {
		t.Errorf("State = %q, want S", s)
	}
	if cpu, ok := CPU(line); !ok || cpu.Milliseconds() != 2800 {
		t.Errorf("CPU = %v, %v; want 2.8s", cpu, ok)
	}
	if s := State("garbage"); s != 0 {
		t.Errorf("State(garbage) = %q, want none", s)
	}
	if _, ok := CPU("1 (x) S 1"); ok {
		t.Error("CPU of a short line ok")
	}
}

// TestThreads: the 20th field, of a line read and of a short one.
func TestThreads(t *testing.T) {
	if n := Threads("7 (a) b (c) S 1 7 7 0 -1 4194560 0 0 0 0 250 30 0 0 20 0 3 0 99"); n != 3 {
		t.Errorf("Threads = %d, want 3", n)
	}
	if n := Threads("1 (x) S 1"); n != 0 {
		t.Errorf("Threads of a short line = %d, want 0", n)
	}
	line, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if n := Threads(line); n < 1 {
		t.Errorf("Threads of this process = %d, want at least 1", n)
	}
}

// TestExitSignal: the exit code's signal, from the 52nd field, as a
// dying task's line shows it once its exit began (9: SIGKILL; 256: an
// exit(1), no signal); 0 for a line too short to have it.
func TestExitSignal(t *testing.T) {
	line := func(code string) string {
		f := make([]string, 49)
		for i := range f {
			f[i] = "0"
		}
		f[0], f[6] = "D", "4194308"
		return "7 (a) b) " + strings.Join(f, " ") + " " + code
	}
	for l, want := range map[string]int{
		line("9"):                9,
		line("15"):               15,
		line("137"):              9, // a core dump's bit set
		line("256"):              0,
		line("0"):                0,
		"7 (a) D 1 7 7 0 -1 4 0": 0,
		"garbage":                0,
	} {
		if got := ExitSignal(l); got != want {
			t.Errorf("ExitSignal(%q) = %d, want %d", l, got, want)
		}
	}
	own, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(Fields(own)) < 50 || ExitSignal(own) != 0 {
		t.Errorf("this live process's line: %d fields, signal %d", len(Fields(own)), ExitSignal(own))
	}
}
