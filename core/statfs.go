package core

import "golang.org/x/sys/unix"

// Statfs is what statfs(2), and so df, shows of the mount: the capacity
// and the room left under it, in blocks of the ledger's charges.
type Statfs struct {
	BlockSize uint32
	// Blocks is the capacity, or what is used where writers past the
	// daemon put more (so df's Used is the ledger's, as du's is); Free
	// is what the ledger's charges leave of the capacity, and all of it
	// is Avail: none is kept back for root. Where the store's own file
	// system has less room left than that (a capacity larger than the
	// disk, or the disk shared), Free is that room, and Blocks what is
	// used plus it: df shows what a write can have, and Used stays the
	// ledger's.
	Blocks, Free, Avail uint64
	// Files and FreeFiles: kvfs has no limit on inodes, so df -i shows
	// the objects and directories held (its IUsed) plus a constant
	// stock free (freeInodes), or the store's file system's free inodes
	// less the floor kvfs keeps free there, where that is fewer.
	Files, FreeFiles uint64
	NameMax          uint32
}

// freeInodes is the free inodes statfs reports: a figure, not a limit,
// large enough that tools which check for free inodes before writing
// (installers, some loaders) go ahead.
const freeInodes = 1 << 20

// Statfs reports the capacity and its use as df shows them.
func (c *Core) Statfs() Statfs {
	st := c.ledger.Stats()
	c.mu.RLock()
	dirs := c.store.Dirs()
	c.mu.RUnlock()
	free := max(st.CapacityBytes-st.UsedBytes, 0)
	blocks := max(st.CapacityBytes, st.UsedBytes)
	ffree := uint64(freeInodes)
	var sf unix.Statfs_t
	if unix.Statfs(c.store.Dir(), &sf) == nil {
		if disk := int64(sf.Bavail) * sf.Bsize; disk < free {
			free, blocks = disk, st.UsedBytes+disk
		}
		if sf.Files > 0 {
			// Less the floor it keeps: a create past it evicts an
			// object, so df -i counted as free inodes no store could
			// have (an outside tester: 64 free on a full store's
			// mount, and its IUse% never reached 100).
			ffree = min(ffree, uint64(max(int64(sf.Ffree)-inodeFloor(sf.Files), 0)))
		}
	}
	return Statfs{
		BlockSize: BlockSize,
		Blocks:    uint64(blocks / BlockSize),
		Free:      uint64(free / BlockSize),
		Avail:     uint64(free / BlockSize),
		Files:     uint64(st.Objects) + uint64(dirs) + ffree,
		FreeFiles: ffree,
		NameMax:   NameMax,
	}
}
