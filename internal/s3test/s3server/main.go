// Command s3server makes sure the versitygw binary the remote tier's tests
// start is present (s3test.Binary: $KVFS_S3_SERVER, PATH, or built into
// the cache directory) and prints its path. `make s3server` and .ci/run
// run it, so the module, version and place live in s3test alone.
package main

import (
	"fmt"
	"os"

	"github.com/kvfs/kvfs/internal/s3test"
)

func main() {
	bin, err := s3test.Binary()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
