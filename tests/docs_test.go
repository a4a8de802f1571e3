package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var helpFlag = regexp.MustCompile(`(?m)^  --([a-z0-9-]+)`)

// TestReadmeDocumentsEveryFlag: every flag `kvfs COMMAND -h` lists (as
// --flag) is named in README.md, so the reference cannot fall behind the
// code.
func TestReadmeDocumentsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"mount", "unmount", "stats", "fsck", "cat"} {
		res := runKvfs(t, cmd, "-h")
		flags := helpFlag.FindAllStringSubmatch(res.stdout, -1)
		if res.code != 0 || len(flags) == 0 {
			t.Fatalf("kvfs %s -h: exit %d, %q", cmd, res.code, res.stdout)
		}
		for _, f := range flags {
			if !strings.Contains(string(readme), "`--"+f[1]) {
				t.Errorf("README.md does not document kvfs %s --%s", cmd, f[1])
			}
		}
	}
}

var docTest = regexp.MustCompile("`(?:[a-z]+ )?`?(Test[A-Za-z0-9]+)")

// TestBadInputDocNamesTests: every test docs/bad-input.md names as the
// check of a row exists, so a row cannot point at nothing.
func TestBadInputDocNamesTests(t *testing.T) {
	doc, err := os.ReadFile("../docs/bad-input.md")
	if err != nil {
		t.Fatal(err)
	}
	var sources strings.Builder
	files, _ := filepath.Glob("../*/*_test.go")
	deeper, _ := filepath.Glob("../*/*/*_test.go") // cmd/kvfs, internal/...
	files = append(files, deeper...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sources.Write(b)
	}
	names := docTest.FindAllStringSubmatch(string(doc), -1)
	if len(names) < 20 {
		t.Fatalf("found only %d test names in docs/bad-input.md", len(names))
	}
	for _, m := range names {
		if !strings.Contains(sources.String(), "func "+m[1]+"(") {
			t.Errorf("docs/bad-input.md names %s, which no package's tests define", m[1])
		}
	}
}
