package core

import (
	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/ledger"
)

// The store's and the ledger's vocabulary, as the core's callers use it:
// the FUSE layer speaks to the core alone, never to the store or the
// ledger, so it imports neither.
type (
	// ID names an inode, a file or a directory; it is also the inode
	// number the mount shows.
	ID = blob.ID
	// Name is a name in a parent directory.
	Name = blob.Name
	// Entry is what a name refers to.
	Entry = blob.Entry
	// DirEntry is one entry of a directory listing.
	DirEntry = blob.DirEntry
	// Owner is who a new inode belongs to; negative fields leave the
	// daemon's own.
	Owner = blob.Owner
)

// RootID is the ID of the namespace's root directory.
const RootID = blob.RootID

// BlockSize is the unit of the ledger's charges: a file's charge is its
// size rounded up to it, which st_blocks shows, and st_blksize names it.
const BlockSize = ledger.BlockSize

// NameMax is the longest name kvfs stores, in bytes (the store's file
// system's limit, which statfs reports).
const NameMax = 255
