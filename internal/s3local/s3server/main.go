// Command s3server makes sure the versitygw binary the remote tier's tests
// start is present (s3local.Binary: $KVFS_S3_SERVER, PATH, or built into
// the cache directory) and prints its path. `make s3server` and .ci/run
// run it, so the module, version and place live in s3local alone.
package main

import (
	"fmt"
	"os"

	"github.com/kvfs/kvfs/internal/s3local"
)

func main() {
	bin, err := s3local.Binary()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
