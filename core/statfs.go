package core

// Statfs is what statfs(2), and so df, shows of the mount: the capacity
// and the room left under it, in blocks of the ledger's charges.
type Statfs struct {
	BlockSize uint32
	// Blocks is the capacity, or what is used where writers past the
	// daemon put more (so df's Used is the ledger's, as du's is); Free
	// is what the ledger's charges leave of the capacity, and all of it
	// is Avail: none is kept back for root.
	Blocks, Free, Avail uint64
	// Files and FreeFiles: kvfs has no limit on inodes, so df -i shows
	// the objects and directories held (its IUsed) plus a constant
	// stock free (freeInodes).
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
	free := uint64(max(st.CapacityBytes-st.UsedBytes, 0) / BlockSize)
	return Statfs{
		BlockSize: BlockSize,
		Blocks:    uint64(max(st.CapacityBytes, st.UsedBytes) / BlockSize),
		Free:      free,
		Avail:     free,
		Files:     uint64(st.Objects) + uint64(dirs) + freeInodes,
		FreeFiles: freeInodes,
		NameMax:   NameMax,
	}
}
