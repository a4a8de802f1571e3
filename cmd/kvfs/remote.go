package main

import (
	"flag"
	"os"
	"strings"

	"github.com/kvfs/kvfs/internal/usageerr"
	"github.com/kvfs/kvfs/remote"
)

// remoteConfig finishes the --remote flags: nil when no remote tier was
// asked for, a usage error for a bad value or for a --remote-* flag
// without --remote.
func remoteConfig(fs *flag.FlagSet, rc *remote.Config) (*remote.Config, error) {
	if !rc.Enabled() {
		var stray string
		fs.Visit(func(f *flag.Flag) {
			if strings.HasPrefix(f.Name, "remote-") && stray == "" {
				stray = f.Name
			}
		})
		if stray != "" {
			return nil, usageerr.Errorf("--%s needs --remote s3://BUCKET[/PREFIX]", stray)
		}
		return nil, nil
	}
	if err := rc.Finish(os.Getenv); err != nil {
		return nil, err
	}
	return rc, nil
}
