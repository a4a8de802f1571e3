package mountinfo

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
36 22 0:32 / /tmp/with\040space rw,nosuid shared:7 - fuse.kvfs /var/a\134store rw,user_id=0,group_id=0,default_permissions
short line
37 36 0:33 / /tmp/with\040space rw - fuse.kvfs /var/other rw,allow_other
38 22 8:1 /srv/s\040x/data /mnt/bound rw - ext4 /dev/vda rw`
	got := Parse(strings.NewReader(in))
	want := []Entry{
		{ID: 22, Parent: 1, Dev: "8:1", Root: "/", Point: "/", FSType: "ext4", Source: "/dev/vda", SuperOptions: "rw"},
		{ID: 36, Parent: 22, Dev: "0:32", Root: "/", Point: "/tmp/with space", FSType: "fuse.kvfs", Source: `/var/a\store`,
			SuperOptions: "rw,user_id=0,group_id=0,default_permissions"},
		{ID: 37, Parent: 36, Dev: "0:33", Root: "/", Point: "/tmp/with space", FSType: "fuse.kvfs", Source: "/var/other", SuperOptions: "rw,allow_other"},
		// A bind mount of a directory: its root is that directory.
		{ID: 38, Parent: 22, Dev: "8:1", Root: "/srv/s x/data", Point: "/mnt/bound", FSType: "ext4", Source: "/dev/vda", SuperOptions: "rw"},
	}
	if len(got) != len(want) {
		t.Fatalf("Parse = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestStackedBeneath: a mount placed beneath another (MOVE_MOUNT_BENEATH,
// as kvfs replaces a dead mount) is listed after the one on top of it;
// the stack is still bottom first, and the top is the dead one.
func TestStackedBeneath(t *testing.T) {
	in := `27 22 0:30 / /tmp rw - tmpfs tmpfs rw
46 47 0:40 / /tmp/mp rw,nosuid,nodev - fuse.kvfs /tmp/store rw,user_id=0,group_id=0
47 27 0:41 / /tmp/mp rw,nosuid,nodev - fuse.kvfs /tmp/store rw,user_id=0,group_id=0`
	var at []Entry
	for _, e := range Parse(strings.NewReader(in)) {
		if e.Point == "/tmp/mp" {
			at = append(at, e)
		}
	}
	got := stacked(at)
	if len(got) != 2 || got[0].ID != 47 || got[1].ID != 46 {
		t.Fatalf("stacked = %+v, want 47 then 46", got)
	}
	// Already bottom first, and a lone mount, stay as they are.
	if got := stacked([]Entry{got[0], got[1]}); got[0].ID != 47 || got[1].ID != 46 {
		t.Fatalf("stacked of an ordered stack = %+v", got)
	}
	if got := stacked(at[:1]); len(got) != 1 || got[0].ID != 46 {
		t.Fatalf("stacked of one = %+v", got)
	}
}

func TestAtReadsThisProcess(t *testing.T) {
	root, ok := At("/")
	if !ok || root.FSType == "" || root.ID == 0 {
		t.Fatalf("At(/) = %+v, %v", root, ok)
	}
	if _, ok := At("/no/such/mount/point"); ok {
		t.Fatal("At found a mount at a path that does not exist")
	}
}
