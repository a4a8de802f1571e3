package fusefs_test

import (
	"os"
	"testing"

	"github.com/kvfs/kvfs/internal/disktmp"
)

// TestMain runs the tests with their temporary directories on a real
// disk (internal/disktmp): passthrough and O_DIRECT need one.
func TestMain(m *testing.M) { os.Exit(disktmp.Run(m.Run)) }
