package main

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHelperOptionsMapToFlags: every kvfs mount flag an -o option may
// set becomes that flag, with '_' or '-', and the refusal of an unknown
// option lists them all.
func TestHelperOptionsMapToFlags(t *testing.T) {
	h, err := parseHelper([]string{"/s", "/m", "-o", "rw,metrics_addr=127.0.0.1:9580,progress-interval=1s," +
		"write_reserve=64M,strict_capacity,capacity=1G"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--metrics-addr", "127.0.0.1:9580", "--progress-interval", "1s", "--write-reserve", "64M",
		"--strict-capacity", "--capacity", "1G"}
	if !slices.Equal(h.flags, want) {
		t.Fatalf("flags %q, want %q", h.flags, want)
	}
	_, err = parseHelper([]string{"/s", "/m", "-o", "rw,bogus"})
	for name, takesValue := range mountOptions {
		if !takesValue {
			continue
		}
		if err == nil || !strings.Contains(err.Error(), strings.ReplaceAll(name, "-", "_")+"=") {
			t.Errorf("refusal %v does not list %s", err, name)
		}
	}
}

// TestHelperLaterVFSOptionWins: a generic option undone by a later one
// is undone, as mount(8) takes them; atime options combine as the
// kernel combines them.
func TestHelperLaterVFSOptionWins(t *testing.T) {
	for opts, want := range map[string]uintptr{
		"ro,rw":                                0,
		"rw,ro":                                unix.MS_RDONLY,
		"noexec,exec,ro":                       unix.MS_RDONLY,
		"exec,noexec":                          unix.MS_NOEXEC,
		"noatime,atime":                        0,
		"noatime,relatime":                     unix.MS_NOATIME,
		"strictatime,noatime":                  unix.MS_STRICTATIME | unix.MS_NOATIME,
		"ro,noatime,rw,noexec":                 unix.MS_NOATIME | unix.MS_NOEXEC,
		"defaults,ro,nofail,rw":                0,
		"nodiratime,diratime":                  0,
		"strictatime,nostrictatime,norelatime": 0,
	} {
		h, err := parseHelper([]string{"/s", "/m", "-o", opts})
		if err != nil || h.msFlags != want {
			t.Errorf("-o %s: flags %#x, %v; want %#x", opts, h.msFlags, err, want)
		}
	}
}

// TestReadmeDocumentsHelperOptions: README.md names every -o option
// that sets a kvfs flag, as fstab spells it.
func TestReadmeDocumentsHelperOptions(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range strings.Split(kvfsOptions(), ", ") {
		if !strings.Contains(string(readme), "`"+o+"`") {
			t.Errorf("README.md does not document the mount option %s", o)
		}
	}
}

// TestEveryMountFlagIsAnOption: the -o options are the flags of `kvfs
// mount` (a value flag takes name=VALUE, a bool flag the bare name), less
// notOptions, each of which is still a flag.
func TestEveryMountFlagIsAnOption(t *testing.T) {
	fs := newMountFlags().fs
	for name, why := range notOptions {
		if fs.Lookup(name) == nil {
			t.Errorf("notOptions names %s (%s), which kvfs mount no longer has", name, why)
		}
		if _, ok := mountOptions[name]; ok {
			t.Errorf("%s is an option though notOptions says %s", name, why)
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		takesValue, ok := mountOptions[f.Name]
		if _, no := notOptions[f.Name]; !ok && !no {
			t.Errorf("kvfs mount --%s is no -o option", f.Name)
		}
		o := f.Name
		if takesValue {
			o += "=1"
		}
		if h, err := parseHelper([]string{"/s", "/m", "-o", "rw," + o}); ok && (err != nil || h.flags[0] != "--"+f.Name) {
			t.Errorf("-o %s: %v, %v", o, h, err)
		}
	})
}

// TestHelperRemoteExcludeList: fstab splits options at every comma, so
// a list of exclude patterns is the option repeated, and the daemon's
// flags add each one's patterns to the list.
func TestHelperRemoteExcludeList(t *testing.T) {
	h, err := parseHelper([]string{"/s", "/m", "-o", "rw,remote=s3://b/p,remote_exclude=*.tmp,remote_exclude=scratch/"})
	if err != nil {
		t.Fatal(err)
	}
	m := newMountFlags()
	if err := m.fs.Parse(h.mountArgs()[1:]); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(m.remote.Exclude, "|"); got != "*.tmp|scratch/" {
		t.Fatalf("exclude %q, want both patterns", got)
	}
}

// TestHelperLogFileOpenedFirst: a log= file that cannot be opened is
// refused while the options are read, naming the option, before
// anything is mounted (it failed the mount after it was made, exit 1,
// naming only the path: an outside tester); one that can is made.
func TestHelperLogFileOpenedFirst(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "nodir", "x.log")
	if _, err := parseHelper([]string{"/s", "/m", "-o", "log=" + bad}); err == nil || !strings.Contains(err.Error(), `mount option "log=`+bad+`"`) {
		t.Errorf("log= in a missing directory: %v; want it refused naming the option", err)
	}
	good := filepath.Join(t.TempDir(), "x.log")
	if h, err := parseHelper([]string{"/s", "/m", "-o", "log=" + good}); err != nil || h.log != good {
		t.Fatalf("log=%s: %v", good, err)
	}
	if _, err := os.Stat(good); err != nil {
		t.Errorf("the log file was not made: %v", err)
	}
}
