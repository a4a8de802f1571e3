package procstat

import (
	"os"
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
