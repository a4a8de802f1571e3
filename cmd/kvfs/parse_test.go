package main

import (
	"flag"
	"slices"
	"testing"
)

// TestParseFlagsAnywhere: a command's flags may follow its positional
// arguments, as users write `kvfs mount --store S MNT --background`
// (before, that answered "want one MOUNTPOINT, got 2 arguments"); "--"
// ends the flags; extra positional arguments are still refused.
func TestParseFlagsAnywhere(t *testing.T) {
	for _, c := range []struct {
		args  []string
		n     int
		store string
		bg    bool
		rest  []string
		fails bool
	}{
		{args: []string{"--store", "s", "mnt"}, n: 1, store: "s", rest: []string{"mnt"}},
		{args: []string{"--store", "s", "mnt", "--background"}, n: 1, store: "s", bg: true, rest: []string{"mnt"}},
		{args: []string{"mnt", "--store=s", "--background"}, n: 1, store: "s", bg: true, rest: []string{"mnt"}},
		{args: []string{"--store", "s", "--", "--background"}, n: 1, store: "s", rest: []string{"--background"}},
		{args: []string{"a", "--store", "s", "b"}, n: -1, store: "s", rest: []string{"a", "b"}},
		{args: []string{"mnt", "mnt2", "--background"}, n: 1, fails: true},
		{args: []string{"mnt", "--no-such-flag"}, n: 1, fails: true},
		{args: []string{"--store", "1", "G", "mnt"}, n: 1, fails: true},
	} {
		fs := flag.NewFlagSet("mount", flag.ContinueOnError)
		store := fs.String("store", "", "")
		bg := fs.Bool("background", false, "")
		rest, err := parse(fs, c.args, c.n, "one MOUNTPOINT")
		if c.fails {
			if err == nil {
				t.Errorf("%q: parsed as %q, want an error", c.args, rest)
			}
			continue
		}
		if err != nil || *store != c.store || *bg != c.bg || !slices.Equal(rest, c.rest) {
			t.Errorf("%q: store %q, background %v, rest %q, %v; want %q, %v, %q", c.args, *store, *bg, rest, err, c.store, c.bg, c.rest)
		}
	}
}
