// Package mountinfo reads /proc/self/mountinfo: which mounts exist, at
// which points, of which type. Reading it never touches a mount point,
// which could hang on a dead FUSE daemon or hold a mount busy. kvfs, its
// tests and the benchmark share it.
package mountinfo

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// Entry is one mount.
type Entry struct {
	ID     int
	Dev    string // major:minor
	Point  string // where it is mounted
	FSType string // "fuse.kvfs" for kvfs
	Source string // kvfs names its store here
	// SuperOptions are the file system's own options (for FUSE:
	// default_permissions, allow_other, user_id...).
	SuperOptions string
}

// Read lists the calling process's mounts in mountinfo's order: parents
// before the mounts on them, so the last entry at a point is the
// topmost. It lists none if the file cannot be read.
func Read() []Entry {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads mountinfo's format from r.
func Parse(r io.Reader) []Entry {
	var out []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source super
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		e := Entry{Dev: fields[2], Point: unescape(fields[4])}
		e.ID, _ = strconv.Atoi(fields[0])
		for i, f := range fields {
			if f == "-" && i+2 < len(fields) {
				e.FSType, e.Source = fields[i+1], unescape(fields[i+2])
				if i+3 < len(fields) {
					e.SuperOptions = fields[i+3]
				}
			}
		}
		out = append(out, e)
	}
	return out
}

// At is the topmost mount at point, if any.
func At(point string) (Entry, bool) {
	var top Entry
	found := false
	for _, e := range Read() {
		if e.Point == point {
			top, found = e, true
		}
	}
	return top, found
}

// unescape undoes mountinfo's octal escapes of space, tab, newline and
// backslash.
func unescape(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}
