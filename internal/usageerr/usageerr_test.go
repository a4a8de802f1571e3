package usageerr

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorfIsUsage(t *testing.T) {
	err := Errorf("--capacity %q: not a size", "12Q")
	if !errors.Is(err, ErrUsage) || err.Error() != `--capacity "12Q": not a size` {
		t.Fatalf("Errorf: %v (is usage: %v)", err, errors.Is(err, ErrUsage))
	}
	if wrapped := fmt.Errorf("remote tier: %w", err); !errors.Is(wrapped, ErrUsage) {
		t.Fatal("a wrapped usage error is not ErrUsage")
	}
	if errors.Is(errors.New("usage"), ErrUsage) {
		t.Fatal("an error that only reads \"usage\" matched")
	}
}

// TestEntries: one entry, and more.
func TestEntries(t *testing.T) {
	for n, want := range map[int]string{0: "0 entries", 1: "1 entry", 8: "8 entries"} {
		if got := Entries(n); got != want {
			t.Errorf("Entries(%d) = %q, want %q", n, got, want)
		}
	}
}
