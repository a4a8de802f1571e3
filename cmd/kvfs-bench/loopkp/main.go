// Command loopkp is go-fuse's example/loopback as the thread rows of
// kvfs-bench measure against: the same loopback root and options, plus
// CAP_HANDLE_KILLPRIV_V2, without which every passthrough write costs a
// GETXATTR round trip (shared/FUSE-NOTES.md). It is FUSE's limit on this
// kernel for a passthrough file system with no accounting.
//
//	loopkp MOUNTPOINT ORIGINAL
package main

import (
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	if len(os.Args) != 3 {
		log.Fatal("usage: loopkp MOUNTPOINT ORIGINAL")
	}
	root, err := fs.NewLoopbackRoot(os.Args[2])
	if err != nil {
		log.Fatal(err)
	}
	sec := time.Second
	opts := &fs.Options{
		AttrTimeout:     &sec,
		EntryTimeout:    &sec,
		NullPermissions: true,
		MountOptions: fuse.MountOptions{
			DirectMount:       true,
			FsName:            os.Args[2],
			Name:              "loopkp",
			ExtraCapabilities: fuse.CAP_HANDLE_KILLPRIV_V2,
		},
	}
	server, err := fs.Mount(os.Args[1], root, opts)
	if err != nil {
		log.Fatal(err)
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() { <-c; server.Unmount() }()
	server.Wait()
}
