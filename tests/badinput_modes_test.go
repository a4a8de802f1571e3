package tests

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBadInputModes: the mode bits kvfs drops and the fallocate modes it
// refuses, as docs/bad-input.md lists them. A stored file keeps no
// set-user-ID or set-group-ID bit, from chmod or from create (chmod
// succeeds without them: the write path negotiates HANDLE_KILLPRIV_V2
// and so never has to clear them); the sticky bit and every bit of a
// directory are kept; the store holds what the mount shows.
// fallocate's ZERO_RANGE, COLLAPSE_RANGE, INSERT_RANGE and UNSHARE_RANGE
// answer EOPNOTSUPP and leave the object as it was.
func TestBadInputModes(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB")
	p := func(name string) string { return filepath.Join(d.mp, name) }
	putFile(t, p("f"), objectBytes("f", 3*4096))
	if err := os.Mkdir(p("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	modeIs := func(what, name string, want uint32) {
		t.Helper()
		for _, path := range []string{p(name), filepath.Join(d.store, "data", name)} {
			var st unix.Stat_t
			if err := unix.Lstat(path, &st); err != nil || st.Mode&07777 != want {
				t.Errorf("%s: %s has mode %#o (%v), want %#o", what, path, st.Mode&07777, err, want)
			}
		}
	}
	for _, c := range []struct {
		what, name string
		mode, want uint32
	}{
		{"chmod 06555 of a file", "f", 06555, 0555},
		{"chmod 07777 of a file", "f", 07777, 01777},
		{"chmod 04644 of a file", "f", 04644, 0644},
		{"chmod 07777 of a directory", "dir", 07777, 07777},
		{"chmod 0 of a file", "f", 0, 0},
	} {
		wantErrno(t, c.what, unix.Chmod(p(c.name), c.mode), 0)
		modeIs(c.what, c.name, c.want)
	}
	fd, err := unix.Open(p("created"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 06600)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Lstat(p("created"), &st); err != nil || st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		t.Errorf("open(O_CREAT, 06600): mode %#o (%v), want no set-ID bits", st.Mode&07777, err)
	}

	wantErrno(t, "chmod 0644", unix.Chmod(p("f"), 0o644), 0)
	f, err := os.OpenFile(p("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, m := range []struct {
		name string
		mode uint32
	}{
		{"ZERO_RANGE", unix.FALLOC_FL_ZERO_RANGE},
		{"ZERO_RANGE|KEEP_SIZE", unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE},
		{"COLLAPSE_RANGE", unix.FALLOC_FL_COLLAPSE_RANGE},
		{"INSERT_RANGE", unix.FALLOC_FL_INSERT_RANGE},
		{"UNSHARE_RANGE", unix.FALLOC_FL_UNSHARE_RANGE},
	} {
		wantErrno(t, "fallocate "+m.name, unix.Fallocate(int(f.Fd()), m.mode, 4096, 4096), unix.EOPNOTSUPP)
	}
	if got, err := os.ReadFile(p("f")); err != nil || checkObject(got, "f", 3*4096) != nil {
		t.Errorf("the object after the refused fallocate modes: %v", err)
	}
	f.Close()
	assertQuietEqual(t, d)
	d.stop()
}

// TestSetIDBitsNeverShown: a file's owner may chmod its stored copy
// directly (docs/bad-input.md), set-ID bits included; the mount still
// shows none, so a write by another user has none to clear, as the
// mount's HANDLE_KILLPRIV_V2 promises (an outside tester: 06777 kept
// through writes and truncates by others, where ext4 clears them).
func TestSetIDBitsNeverShown(t *testing.T) {
	d := mountCache(t, "--capacity", "16MiB", "--cache-timeout", "0s")
	p := filepath.Join(d.mp, "f")
	putFile(t, p, objectBytes("f", 4096))
	waitReleased(t, d.mp) // its writer's attributes are no longer the ones shown
	if err := unix.Chmod(filepath.Join(d.store, "data", "f"), 06777); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil || st.Mode&07777 != 0o777 {
		t.Errorf("a stored copy of mode 06777 shows %#o through the mount (%v), want 0777", st.Mode&07777, err)
	}
	f, err := os.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&07777 != 0o777 {
		t.Errorf("fstat of an open file of stored mode 06777: %#o (%v), want 0777", st.Mode&07777, err)
	}
	// A write or a cut through the mount clears them from the stored
	// copy, as ext4 does on a write by another user: the daemon's
	// CAP_FSETID kept them, and the stored copy then ran another user's
	// program with its owner's rights (an outside tester).
	stored := filepath.Join(d.store, "data", "f")
	for _, c := range []struct {
		how   string
		write func() error
	}{
		{"a write", func() error {
			w, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			if _, err := w.WriteAt([]byte("x"), 0); err != nil {
				w.Close()
				return err
			}
			return w.Close()
		}},
		{"a truncate", func() error { return os.Truncate(p, 100) }},
		{"an O_TRUNC open", func() error { return os.WriteFile(p, []byte("y"), 0o644) }},
	} {
		if err := unix.Chmod(stored, 06777); err != nil {
			t.Fatal(err)
		}
		if err := c.write(); err != nil {
			t.Fatalf("%s through the mount: %v", c.how, err)
		}
		if err := unix.Stat(stored, &st); err != nil || st.Mode&07777 != 0o777 {
			t.Errorf("after %s through the mount the stored copy is %#o (%v), want 0777", c.how, st.Mode&07777, err)
		}
	}
}
