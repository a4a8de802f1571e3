package gpudirect

import (
	"os"
	"testing"

	"github.com/kvfs/kvfs/internal/disktmp"
)

// TestMain runs the tests with their temporary directories on a real
// disk (internal/disktmp), so requireDirect skips only where no disk
// takes O_DIRECT.
func TestMain(m *testing.M) { os.Exit(disktmp.Run(m.Run)) }
