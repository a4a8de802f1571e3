package mount

import (
	"errors"
	"path/filepath"

	"github.com/kvfs/kvfs/blob"
	"github.com/kvfs/kvfs/internal/ext4"
	"go.uber.org/zap"
)

// watchDirs has store warn in the log of a directory filling its ext4's
// directory index, at half of the names it takes, and say when one is
// full (blob.WatchDirs): a connector that writes one flat directory
// otherwise learns of ext4's limit as ENOSPC in a cache with room, at a
// few million names (docs/operations.md, "Flat directories"). A store on
// another file system, or whose superblock cannot be read, is not
// watched.
func watchDirs(store *blob.Store, dir string, log *zap.Logger) {
	d, err := ext4.Probe(filepath.Join(dir, blob.DataName))
	if errors.Is(err, ext4.ErrNotExt4) {
		return
	}
	if err != nil {
		log.Info("the store's ext4 superblock cannot be read: a directory nearing ext4's limit of names goes unwarned", zap.Error(err))
		return
	}
	fix := zap.Skip()
	if !d.LargeDir {
		fix = zap.String("fix", "tune2fs -O large_dir "+d.Device+" (on a mounted file system; it cannot be undone)")
	}
	store.WatchDirs(d.Names, func(c blob.Crowded) {
		at := []zap.Field{zap.String("dir", c.Dir), zap.String("device", d.Device), fix}
		if c.Full {
			log.Error("a directory of the store is full: ext4's directory index takes no more names there, though the disk has space and inodes; "+
				"creates, links and renames into it fail with ENOSPC until names leave it", append(at, zap.Int("estimated_limit", c.Limit))...)
			return
		}
		log.Warn("a directory of the store is filling ext4's directory index, which has two levels without large_dir: "+
			"new names there will fail with ENOSPC, space and inodes free, at about the estimated limit",
			append(at, zap.Int("names", c.Names), zap.Int("estimated_limit", c.Limit))...)
	})
}
