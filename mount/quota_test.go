package mount

import (
	"path/filepath"
	"testing"
)

func TestQuotaSlack(t *testing.T) {
	for _, c := range []struct{ capacity, slack int64 }{
		{32 << 20, MinQuotaSlack},
		{1 << 30, MinQuotaSlack},
		{16 << 30, 1 << 30},
		{1<<40 + 4096, 1<<36 + 4096}, // a sixteenth, rounded up to a block
	} {
		if got := QuotaSlack(c.capacity); got != c.slack || QuotaLimit(c.capacity) != c.capacity+c.slack {
			t.Errorf("QuotaSlack(%d) = %d, want %d", c.capacity, got, c.slack)
		}
	}
}

func TestExistingAncestor(t *testing.T) {
	dir := t.TempDir()
	if got := existingAncestor(filepath.Join(dir, "a", "b")); got != dir {
		t.Errorf("existingAncestor of a missing path under %s: %s", dir, got)
	}
	if got := existingAncestor(dir); got != dir {
		t.Errorf("existingAncestor(%s) = %s", dir, got)
	}
}
