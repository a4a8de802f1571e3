package tests

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

var helpFlag = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

// TestReadmeDocumentsEveryFlag: every flag `kvfs COMMAND -h` lists is
// named in README.md, so the reference cannot fall behind the code.
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
