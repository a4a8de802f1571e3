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
	Parent int    // the ID of the mount it is mounted on
	Dev    string // major:minor
	Root   string // the directory of its file system it shows ("/", or a bind mount's)
	Point  string // where it is mounted
	FSType string // "fuse.kvfs" for kvfs
	Source string // kvfs names its store here
	// SuperOptions are the file system's own options (for FUSE:
	// default_permissions, allow_other, user_id...).
	SuperOptions string
}

// Read lists the calling process's mounts in mountinfo's order, which is
// usually parents before the mounts on them, but not for a mount placed
// beneath another (MOVE_MOUNT_BENEATH): use Stack for the mounts at a
// point. It lists none if the file cannot be read.
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
		e := Entry{Dev: fields[2], Root: unescape(fields[3]), Point: unescape(fields[4])}
		e.ID, _ = strconv.Atoi(fields[0])
		e.Parent, _ = strconv.Atoi(fields[1])
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
	stack := Stack(point)
	if len(stack) == 0 {
		return Entry{}, false
	}
	return stack[len(stack)-1], true
}

// Stack lists the mounts at point, bottom first: each mounted on the one
// before it. Mounts at point that are not on that chain (a namespace's
// odd leftovers) come after, in mountinfo's order.
func Stack(point string) []Entry {
	var at []Entry
	for _, e := range Read() {
		if e.Point == point {
			at = append(at, e)
		}
	}
	return stacked(at)
}

// stacked orders mounts at one point bottom first.
func stacked(at []Entry) []Entry {
	if len(at) < 2 {
		return at
	}
	ids := map[int]bool{}
	for _, e := range at {
		ids[e.ID] = true
	}
	on := map[int]int{} // parent ID -> index of the mount on it
	bottom := -1
	for i, e := range at {
		on[e.Parent] = i
		if !ids[e.Parent] {
			bottom = i
		}
	}
	if bottom < 0 {
		return at
	}
	out := make([]Entry, 0, len(at))
	used := map[int]bool{}
	for i, ok := bottom, true; ok && !used[i]; i, ok = on[at[i].ID] {
		out, used[i] = append(out, at[i]), true
	}
	for i, e := range at {
		if !used[i] {
			out = append(out, e)
		}
	}
	return out
}

// unescape undoes mountinfo's octal escapes of space, tab, newline and
// backslash.
func unescape(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}
