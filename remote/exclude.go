package remote

import (
	"path"
	"strings"
)

// DefaultExclude matches the temporary names connectors write before
// they publish: LMCache fs_native's `.lmcache-write.tmp.<pid>.<n>`, any
// name ending in .tmp (what LMCache's C++ FSConnector and fs adapter use:
// the final `<key>.data` with `.tmp` in place of `.data`; vLLM's fs tier's
// `<dest>_<rand>.tmp`), and any name with `.tmp.` inside (SGLang
// HiCacheFile's `<final>.tmp.<pid>.<tid>.<uuid>`). A temp name is never
// uploaded, nor looked up remotely.
var DefaultExclude = []string{".lmcache-write.tmp.*", "*.tmp", "*.tmp.*"}

// ParseExclude reads a --remote-exclude value: comma-separated patterns
// in path.Match syntax. A pattern without '/' is matched against a
// name's last component; one with '/' against the whole name; one ending
// in '/' (like "tmp/") against every directory component, for connectors
// that write into a temp directory (LMCache's relative_tmp_dir). "none"
// (or "") excludes nothing.
func ParseExclude(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return []string{}, nil
	}
	var pats []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			pats = append(pats, p)
		}
	}
	_, err := newExcluder(pats)
	return pats, err
}

// excluder is a parsed pattern list.
type excluder struct {
	base, full, dirs []string
}

func newExcluder(pats []string) (*excluder, error) {
	e := &excluder{}
	for _, p := range pats {
		if _, err := path.Match(p, ""); err != nil || p == "/" {
			return nil, usagef("bad --remote-exclude pattern %q", p)
		}
		switch {
		case strings.HasSuffix(p, "/"):
			e.dirs = append(e.dirs, strings.TrimSuffix(p, "/"))
		case strings.Contains(p, "/"):
			e.full = append(e.full, p)
		default:
			e.base = append(e.base, p)
		}
	}
	return e, nil
}

// match reports whether name (slash-separated, relative) is excluded.
func (e *excluder) match(name string) bool {
	dir, base := path.Split(name)
	if anyMatch(e.base, base) || anyMatch(e.full, name) {
		return true
	}
	if len(e.dirs) == 0 || dir == "" {
		return false
	}
	for _, part := range strings.Split(strings.TrimSuffix(dir, "/"), "/") {
		if anyMatch(e.dirs, part) {
			return true
		}
	}
	return false
}

func anyMatch(pats []string, s string) bool {
	for _, p := range pats {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}
