package procstat

import (
	"errors"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestKillPending: SIGKILL pending for the thread or for the process,
// as the guard found a killed stat(1) waiting on its mount (state D,
// both masks 0x100), and the state beside it.
func TestKillPending(t *testing.T) {
	for _, c := range []struct {
		status  string
		pending bool
		state   byte
	}{
		{"Name:\tstat\nState:\tD (disk sleep)\nSigPnd:\t0000000000000100\nShdPnd:\t0000000000000100\n", true, 'D'},
		{"Name:\tkvfs\nState:\tD (disk sleep)\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000100\n", true, 'D'},
		{"Name:\tkvfs\nState:\tS (sleeping)\nSigPnd:\t0000000000000100\nShdPnd:\t0000000000000000\n", true, 'S'},
		// SIGTERM (0x4000) pending is not a kill.
		{"Name:\tkvfs\nState:\tS (sleeping)\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000004000\n", false, 'S'},
		{"Name:\tkvfs\nState:\tZ (zombie)\nSigPnd:\t0000000000000100\nShdPnd:\t0000000000000100\n", true, 'Z'},
		// A first line is a line too.
		{"State:\tX (dead)\nShdPnd:\t0000000000000100", true, 'X'},
		{"garbage", false, 0},
	} {
		if got := KillPending([]byte(c.status)); got != c.pending {
			t.Errorf("KillPending(%q) = %v, want %v", c.status, got, c.pending)
		}
		if got := StatusState([]byte(c.status)); got != c.state {
			t.Errorf("StatusState(%q) = %q, want %q", c.status, got, c.state)
		}
	}
}

// TestStatus: this thread's own status names its process and has
// nothing fatal pending; a thread that does not exist is not found
// (the core's waits take that as gone).
func TestStatus(t *testing.T) {
	b, err := Status(unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := StatusLine(b, "Tgid"), os.Getpid(); got != strconv.Itoa(want) {
		t.Errorf("Tgid %q, want %d", got, want)
	}
	if StatusLine(b, "SigPnd") == "" || StatusLine(b, "Name") == "" {
		t.Errorf("no SigPnd or Name line in %q", b)
	}
	if KillPending(b) {
		t.Errorf("this thread reads as killed: %q", b)
	}
	if s := StatusState(b); s != 'R' && s != 'S' {
		t.Errorf("this thread's state %q", s)
	}
	if _, err := Status(1 << 30); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("status of no thread: %v, want not found", err)
	}
}
