// Package tests is kvfs's integration tier: it mounts the built kvfs
// binary for real (root and /dev/fuse needed), drives it the way LMCache's
// fs_native and local_disk connectors do, kills and restarts it, and
// checks its command line. The binary is $KVFS_BIN (the Makefile exports
// it) or, when that is unset, one built from ./cmd/kvfs for the run.
package tests
