package remote

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/s3test"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestMisconfigurationWarned: a wrong secret or a missing bucket is
// logged as a warning, at once by the start's check and once for each
// kind of refusal while requests keep being refused (before: nothing
// above debug; lookups saw an empty bucket and uploads retried
// forever); a key's absence and a conditional PUT's 412 are not.
func TestMisconfigurationWarned(t *testing.T) {
	srv := s3test.New(t)
	for _, c := range []struct {
		name string
		cfg  func(*Config)
		want string
	}{
		{"wrong secret", func(c *Config) { c.SecretKey = "wrong" }, "the remote server refused a request"},
		{"missing bucket", func(c *Config) { c.URL = "s3://no-such-bucket/p"; c.Bucket = "" }, "bucket does not exist"},
		// versitygw answers an unknown access key 404 XAdminUserNotFound,
		// which read as a missing bucket and every key as absent (an
		// outside tester).
		{"unknown access key", func(c *Config) { c.AccessKey = "nobody-of-ours" }, "the remote server refused a request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tier, logs, logged := watchedTier(t, srv, c.cfg)
			warned := func(s string) bool {
				for _, e := range logs.All() {
					if strings.Contains(e.Message, s) || strings.Contains(fmt.Sprint(e.ContextMap()), s) {
						return true
					}
				}
				return false
			}
			timeout := time.After(10 * time.Second)
			for !warned(c.want) {
				select {
				case <-logged:
				case <-timeout:
					t.Fatalf("no warning saying %q in 10s: %v", c.want, logs.All())
				}
			}
			if !warned(c.want) {
				t.Fatalf("no warning saying %q: %v", c.want, logs.All())
			}
			n := logs.Len()
			for i := range 3 {
				tier.Lookup(context.Background(), fmt.Sprint("absent", i))
			}
			if c.name != "missing bucket" && logs.Len() != n {
				t.Errorf("%d more warnings for three more refusals of one kind, want none", logs.Len()-n)
			}
		})
	}
	// A healthy tier: a key's absence warns of nothing.
	tier, logs, _ := watchedTier(t, srv, func(*Config) {})
	if _, found, err := tier.Lookup(context.Background(), "absent"); found || err != nil {
		t.Fatalf("lookup of an absent key: found %v, %v", found, err)
	}
	if logs.Len() != 0 {
		t.Errorf("a healthy tier warned: %v", logs.All())
	}
}

// watchedTier is a tier of srv's bucket, its config changed by adjust,
// that checks its bucket at New and logs its warnings to logs; logged
// hears of each entry as it is logged.
func watchedTier(t *testing.T, srv *s3test.Server, adjust func(*Config)) (*Tier, *observer.ObservedLogs, <-chan struct{}) {
	t.Helper()
	core, logs := observer.New(zap.WarnLevel)
	logged := make(chan struct{}, 1)
	hook := zap.Hooks(func(zapcore.Entry) error {
		select {
		case logged <- struct{}{}:
		default:
		}
		return nil
	})
	cfg := Config{URL: srv.URL("p"), Endpoint: srv.Endpoint, AccessKey: s3test.AccessKey,
		SecretKey: s3test.SecretKey, Region: s3test.Region}
	adjust(&cfg)
	if err := cfg.Finish(func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	tier, err := New(cfg, Deps{JournalDir: t.TempDir(), Open: func(string) (Source, error) { return nil, ErrNotFound },
		Logger: zap.New(core, hook), CheckBucket: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tier.Close() })
	return tier, logs, logged
}
