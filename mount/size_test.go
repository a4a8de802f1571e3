package mount

import (
	"strings"
	"testing"
)

// TestParseSize: the units kvfs takes, and that nothing else passes as
// bytes (before: "64iB" was 64 bytes, "8192iB" a cache of 8 KiB).
func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"4096": 4096, "4096B": 4096, " 64K ": 64 << 10, "64kb": 64 << 10, "64KiB": 64 << 10,
		"64M": 64 << 20, "64MiB": 64 << 20, "64 MiB": 64 << 20, "10g": 10 << 30, "2TiB": 2 << 40, "1P": 1 << 50,
		"10Gi": 10 << 30, "64mi": 64 << 20,
	}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "B", "MiB", "64iB", "64i", "8192iB", "64KiBB", "64MiBs", "64X", "1.5G", "-1", "64 M iB", "0x10"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
	// Numbers past what a size holds are too large, whatever the unit
	// (the one past the largest byte count said "want bytes").
	for _, in := range []string{"9223372036854775808", "99999999999999999999M", "8192P"} {
		if _, err := ParseSize(in); err == nil || !strings.Contains(err.Error(), "too large") {
			t.Errorf("ParseSize(%q): %v, want too large", in, err)
		}
	}
}
