// Package ext4 reads what kvfs needs to know of an ext4 store's file
// system from its superblock: how many names one directory takes before
// ext4's directory index is full. Without the large_dir feature the index
// has two levels, and a directory that outgrows them refuses every new
// name with ENOSPC, space and inodes free (SGLang's file backend met it at
// 7.5 million names, sglang#28653). The kernel shows the feature flags
// nowhere else (not under /sys/fs/ext4 nor /proc/fs/ext4), so the
// superblock is read from the device, which takes root.
package ext4

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/kvfs/kvfs/internal/mountinfo"
	"golang.org/x/sys/unix"
)

// ErrNotExt4: the path is not on an ext4 file system.
var ErrNotExt4 = errors.New("not on ext4")

// Superblock fields (fs/ext4/ext4.h: struct ext4_super_block).
const (
	sbOffset      = 1024 // the superblock's offset in the device
	sbSize        = 1024
	offLogBlock   = 0x18 // s_log_block_size: block size = 1024 << it
	offMagic      = 0x38 // s_magic
	offCompat     = 0x5c // s_feature_compat
	offIncompat   = 0x60 // s_feature_incompat
	offROCompat   = 0x64 // s_feature_ro_compat
	magic         = 0xef53
	compatDirIdx  = 0x20   // COMPAT_DIR_INDEX: hashed directories
	incompLargeDr = 0x4000 // INCOMPAT_LARGEDIR: a third index level
	roCompatCsum  = 0x400  // RO_COMPAT_METADATA_CSUM: a tail in each block
)

// Dirs is what an ext4 file system's directories can hold.
type Dirs struct {
	Device    string // the device the superblock was read from
	BlockSize int
	Hashed    bool // dir_index: directories of more than a block are indexed
	LargeDir  bool // large_dir: three index levels, no limit that matters
	Csum      bool // metadata_csum: each index and leaf block keeps a tail
}

// Probe reads the superblock of the ext4 file system holding path.
// ErrNotExt4 if it is not ext4; another error if its device cannot be
// found or read (not root, a device node the mount namespace lacks).
func Probe(path string) (Dirs, error) {
	var d Dirs
	var sf unix.Statfs_t
	if err := unix.Statfs(path, &sf); err != nil {
		return d, err
	}
	if sf.Type != unix.EXT4_SUPER_MAGIC {
		return d, ErrNotExt4
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return d, err
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	for _, e := range mountinfo.Read() {
		if e.Dev == dev && e.FSType == "ext4" {
			d.Device = e.Source
			break
		}
	}
	if d.Device == "" {
		return d, fmt.Errorf("no ext4 mount of device %s in /proc/self/mountinfo", dev)
	}
	f, err := os.Open(d.Device)
	if err != nil {
		return d, err
	}
	defer f.Close()
	sb := make([]byte, sbSize)
	if _, err := f.ReadAt(sb, sbOffset); err != nil {
		return d, fmt.Errorf("reading the superblock of %s: %w", d.Device, err)
	}
	return parse(d.Device, sb)
}

// parse reads the fields Dirs needs from a superblock.
func parse(device string, sb []byte) (Dirs, error) {
	le := binary.LittleEndian
	if len(sb) < sbSize || le.Uint16(sb[offMagic:]) != magic {
		return Dirs{}, fmt.Errorf("%s: no ext4 superblock", device)
	}
	log := le.Uint32(sb[offLogBlock:])
	if log > 6 {
		return Dirs{}, fmt.Errorf("%s: block size 1024<<%d", device, log)
	}
	return Dirs{
		Device:    device,
		BlockSize: 1024 << log,
		Hashed:    le.Uint32(sb[offCompat:])&compatDirIdx != 0,
		LargeDir:  le.Uint32(sb[offIncompat:])&incompLargeDr != 0,
		Csum:      le.Uint32(sb[offROCompat:])&roCompatCsum != 0,
	}, nil
}

// fill is the share of its leaves' room a two-level index has used when
// it first refuses a name: a leaf splits in two half-full ones, and the
// index fails at the first split that its full parent cannot take, while
// other parents still have room. Measured here: 134,185 names of 40 bytes
// in a directory of 1 KiB blocks, whose leaves had room for 325,458.
const fill = 0.4

// Names estimates how many names of nameLen bytes one directory takes
// before its index is full: 0 if the file system sets no such limit
// (large_dir, or no hashed directories, whose linear search is slow long
// before it is full).
func (d Dirs) Names(nameLen int) int {
	if d.LargeDir || !d.Hashed || d.BlockSize == 0 {
		return 0
	}
	indexTail, leafTail := 0, 0
	if d.Csum {
		indexTail, leafTail = 8, 12 // struct dx_tail; a 12-byte dirent
	}
	// The root block holds "." and ".." (32 bytes with the index's
	// header), a node one empty dirent (8 bytes); entries are 8 bytes.
	root := (d.BlockSize - 32 - indexTail) / 8
	node := (d.BlockSize - 8 - indexTail) / 8
	rec := (8 + nameLen + 3) &^ 3 // struct ext4_dir_entry_2, 4-aligned
	perLeaf := (d.BlockSize - leafTail) / rec
	return int(float64(root*node*perLeaf) * fill)
}
