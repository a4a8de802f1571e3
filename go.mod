module github.com/kvfs/kvfs

go 1.26.8

require (
	github.com/dgraph-io/ristretto/v2 v2.4.2
	github.com/hanwen/go-fuse/v2 v2.12.1
	go.uber.org/zap v1.28.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/ebitengine/purego v0.11.3 // indirect
	go.uber.org/multierr v1.10.0 // indirect
)
