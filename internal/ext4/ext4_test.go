package ext4

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/internal/loopfs"
)

// TestNames: the estimate for the measured case (1 KiB blocks,
// metadata_csum, 40-byte names: 133,600 names fitted here, 134,185 in an
// earlier run) stays under it; large_dir and unhashed directories set no
// limit; bigger blocks and shorter names take more.
func TestNames(t *testing.T) {
	small := Dirs{BlockSize: 1024, Hashed: true, Csum: true}
	if got := small.Names(40); got != 130183 {
		t.Errorf("1 KiB blocks, 40-byte names: %d, want 130183 (0.4 of 123*126*21)", got)
	}
	// Measured here on 1 KiB blocks: 255-byte names stopped at 20,079,
	// 200-byte ones at 29,193.
	for nameLen, fitted := range map[int]int{40: 133600, 200: 29193, 255: 20079} {
		if got := small.Names(nameLen); got >= fitted || got < fitted/2 {
			t.Errorf("%d-byte names: estimate %d, not under the %d that fitted and above half of it", nameLen, got, fitted)
		}
	}
	big := Dirs{BlockSize: 4096, Hashed: true, Csum: true}
	if got := big.Names(40); got < 8_000_000 || got > 10_000_000 {
		t.Errorf("4 KiB blocks, 40-byte names: %d, want about 8.8 million", got)
	}
	if big.Names(100) >= big.Names(40) {
		t.Error("longer names should fit fewer")
	}
	for _, d := range []Dirs{{BlockSize: 4096, Hashed: true, LargeDir: true}, {BlockSize: 4096}, {}} {
		if got := d.Names(40); got != 0 {
			t.Errorf("%+v: %d, want 0 (no limit)", d, got)
		}
	}
}

// TestParse reads the fields from a superblock as ext4 lays it out, and
// refuses what is not one.
func TestParse(t *testing.T) {
	sb := make([]byte, sbSize)
	le := binary.LittleEndian
	le.PutUint16(sb[offMagic:], magic)
	le.PutUint32(sb[offLogBlock:], 2)
	le.PutUint32(sb[offCompat:], compatDirIdx)
	le.PutUint32(sb[offIncompat:], incompLargeDr)
	le.PutUint32(sb[offROCompat:], roCompatCsum)
	got, err := parse("/dev/x", sb)
	want := Dirs{Device: "/dev/x", BlockSize: 4096, Hashed: true, LargeDir: true, Csum: true}
	if err != nil || got != want {
		t.Fatalf("parse: %+v, %v; want %+v", got, err, want)
	}
	le.PutUint32(sb[offIncompat:], 0)
	if got, _ := parse("/dev/x", sb); got.LargeDir {
		t.Error("large_dir read from a superblock without it")
	}
	le.PutUint16(sb[offMagic:], 0x1234)
	if _, err := parse("/dev/x", sb); err == nil {
		t.Error("a superblock without ext4's magic was read")
	}
	if _, err := parse("/dev/x", sb[:100]); err == nil {
		t.Error("a short superblock was read")
	}
}

// TestProbe reads real superblocks: ext4s made with 1 KiB blocks with
// and without large_dir on loop devices, and /proc, which is not ext4.
func TestProbe(t *testing.T) {
	if _, err := Probe("/proc"); !errors.Is(err, ErrNotExt4) {
		t.Errorf("Probe(/proc): %v, want ErrNotExt4", err)
	}
	for _, large := range []bool{false, true} {
		feature := "^large_dir"
		if large {
			feature = "large_dir"
		}
		mnt := loopfs.Mount(t, loopfs.Spec{Mkfs: []string{"mkfs.ext4", "-q", "-F", "-b", "1024", "-O", feature},
			Size: 32 << 20, NoMkfs: "this mkfs.ext4 cannot make large_dir (e2fsprogs before 1.44)"})
		sub := filepath.Join(mnt, "data")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		d, err := Probe(sub)
		if err != nil {
			t.Fatalf("Probe of an ext4 made with %s: %v", feature, err)
		}
		if d.BlockSize != 1024 || !d.Hashed || d.LargeDir != large || !strings.HasPrefix(d.Device, "/dev/loop") {
			t.Errorf("made with -b 1024 -O %s: probed %+v", feature, d)
		}
		out, err := exec.Command("dumpe2fs", "-h", d.Device).CombinedOutput()
		if err == nil && strings.Contains(string(out), "metadata_csum") != d.Csum {
			t.Errorf("metadata_csum: dumpe2fs says %v, probed %v", !d.Csum, d.Csum)
		}
	}
}
