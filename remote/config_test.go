package remote

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	good := []struct{ in, bucket, prefix string }{
		{"s3://kv-cache", "kv-cache", ""},
		{"s3://kv-cache/", "kv-cache", ""},
		{"s3://kv.cache/fleet", "kv.cache", "fleet/"},
		{"s3://kv-cache/fleet/a/", "kv-cache", "fleet/a/"},
	}
	for _, g := range good {
		b, p, err := ParseURL(g.in)
		if err != nil || b != g.bucket || p != g.prefix {
			t.Errorf("ParseURL(%q) = %q, %q, %v; want %q, %q", g.in, b, p, err, g.bucket, g.prefix)
		}
	}
	for _, bad := range []string{"", "kv-cache", "http://kv-cache/x", "s3://", "s3://ab", "s3://Kv-Cache",
		"s3://-kv/x", "s3://kv_cache", "s3://kv-cache//x", "s3://kv-cache/a/../b", "s3://kv-cache/./b"} {
		_, _, err := ParseURL(bad)
		if !errors.Is(err, ErrUsage) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseURL(%q) = %v; want a one-line ErrUsage", bad, err)
		}
	}
}

// TestConfigFinish: flags win over the environment, the environment
// over defaults; bad values are one-line usage errors.
func TestConfigFinish(t *testing.T) {
	env := map[string]string{
		"AWS_ENDPOINT_URL": "http://127.0.0.1:7070", "AWS_DEFAULT_REGION": "eu-west-3",
		"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK", "AWS_SESSION_TOKEN": "TOK",
	}
	fs := flag.NewFlagSet("mount", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c Config
	c.RegisterFlags(fs)
	err := fs.Parse([]string{"--remote", "s3://bucket/pre", "--remote-region", "us-west-2",
		"--remote-negative-ttl", "3s", "--remote-exclude", "*.partial, tmp/", "--remote-exclude", "none",
		"--remote-exclude", "scratch/*"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Finish(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c.Bucket != "bucket" || c.Prefix != "pre/" || c.Endpoint != env["AWS_ENDPOINT_URL"] ||
		c.Region != "us-west-2" || c.AccessKey != "AK" || c.SecretKey != "SK" || c.SessionToken != "TOK" ||
		c.NegativeTTL != 3*time.Second || c.Timeout != DefaultTimeout || c.QueueMax != DefaultQueueMax ||
		strings.Join(c.Exclude, "|") != "*.partial|tmp/|scratch/*" {
		t.Fatalf("config %+v", c)
	}
	if !c.Enabled() || (&Config{}).Enabled() {
		t.Fatal("Enabled")
	}
	// An access key as a flag, its secret from the environment (flags
	// show in ps), as --remote-secret-key's help says to do.
	withKey := Config{URL: "s3://bucket", AccessKey: "FLAGKEY"}
	if err := withKey.Finish(func(k string) string { return env[k] }); err != nil || withKey.AccessKey != "FLAGKEY" || withKey.SecretKey != "SK" || withKey.SessionToken != "" {
		t.Fatalf("--remote-access-key with AWS_SECRET_ACCESS_KEY set: %v, %+v", err, withKey)
	}
	bad := [][]string{
		{"--remote", "s3://b"},
		{"--remote", "s3://bucket", "--remote-endpoint", "ftp://x"},
		{"--remote", "s3://bucket", "--remote-endpoint", "http://x/bucket"},
		{"--remote", "s3://bucket", "--remote-endpoint", "http://:17391"},
		{"--remote", "s3://bucket", "--remote-endpoint", "http://u:pw@:99999"},
		{"--remote", "s3://bucket", "--remote-endpoint", "http://-bad-.host:80"},
		{"--remote", "s3://bucket", "--remote-endpoint", "http://127.0.0.1:99999"},
		{"--remote", "s3://bucket", "--remote-endpoint", "http://127.0.0.1:0"},
		{"--remote", "s3://bucket", "--remote-endpoint", "http://127.0.0.1:65536"},
		{"--remote", "s3://bucket", "--remote-endpoint", "http://256.1.1.1:80"},
		{"--remote", "s3://bucket", "--remote-endpoint", "http://a..b:80"},
		{"--remote", "s3://bucket", "--remote-queue", "-1"},
		{"--remote", "s3://bucket", "--remote-timeout", "-1s"},
		{"--remote", "s3://bucket", "--remote-access-key", "AK"},
	}
	for _, args := range bad {
		fs := flag.NewFlagSet("mount", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var c Config
		c.RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		err := c.Finish(func(string) string { return "" })
		if !errors.Is(err, ErrUsage) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v; want a one-line ErrUsage", args, err)
		}
	}
	fs = flag.NewFlagSet("mount", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--remote-exclude", "[x"}); err == nil {
		t.Error("a bad exclude pattern parsed")
	}
}

func TestExclude(t *testing.T) {
	e, err := newExcluder(append(DefaultExclude, "tmp/", "scratch/*.data"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		".lmcache-write.tmp.123.4":         true,
		"a/b/.lmcache-write.tmp.1.1":       true,
		"key.tmp":                          true,
		"ab_m_0_2.bin.tmp.7.1403.c0ffee":   true,
		"m@0x0@ab.data":                    false,
		".lmcache-objects-v1/ab/cd/x.data": false,
		"tmp/m@0x0@ab.data":                true,
		"a/tmp/b/m@0x0@ab.data":            true,
		"tmp":                              false, // a file named tmp
		"scratch/x.data":                   true,
		"other/scratch/x.data":             false,
		"k.tmpx":                           false,
	} {
		if got := e.match(name); got != want {
			t.Errorf("match(%q) = %v, want %v", name, got, want)
		}
	}
	if pats, err := ParseExclude("none"); err != nil || len(pats) != 0 {
		t.Errorf("none: %v, %v", pats, err)
	}
}

func TestBreaker(t *testing.T) {
	clk := newFakeClock()
	opened, closed := 0, 0
	b := newBreaker(clk, 2, time.Second, func(int, bool) { opened++ }, func() { closed++ })
	b.allow()
	b.failure()
	if b.State() != BreakerClosed || !b.allow() {
		t.Fatal("one failure of two opened the breaker")
	}
	b.failure()
	if b.State() != BreakerOpen || b.allow() {
		t.Fatal("two failures did not open it")
	}
	clk.Advance(time.Second)
	if b.State() != BreakerHalfOpen || !b.allow() || b.allow() {
		t.Fatal("after the cool-down, exactly one probe goes")
	}
	b.failure()
	if b.State() != BreakerOpen {
		t.Fatal("a failed probe did not reopen it")
	}
	clk.Advance(time.Second)
	b.allow()
	b.neutral() // the probe's caller gave up: another may probe
	if !b.allow() {
		t.Fatal("a neutral probe kept the breaker shut")
	}
	b.success()
	if b.State() != BreakerClosed || closed != 1 || opened != 1 {
		t.Fatalf("state %s, onOpen called %d times, onClose %d (want once each: a failed probe reopens, it does not open anew)", b.State(), opened, closed)
	}
}

func TestNameCacheBound(t *testing.T) {
	c := newNameCache(8)
	now := time.Unix(0, 0)
	for i := range 100 {
		c.put(string(rune('a'+i)), cacheEntry{until: now.Add(time.Hour)}, now)
		if c.len() > 8 {
			t.Fatalf("cache grew to %d past its bound 8", c.len())
		}
	}
	c.put("x", cacheEntry{found: true, until: now.Add(time.Second)}, now)
	if _, ok := c.get("x", now.Add(time.Second)); ok {
		t.Fatal("an entry outlived its deadline")
	}
}

// TestConfigRedacts: credentials in --remote-endpoint are used as keys
// and never kept in the endpoint; errors show them redacted.
func TestConfigRedacts(t *testing.T) {
	c := Config{URL: "s3://bucket/p", Endpoint: "http://AKUSER:S3CR3T-PASS@127.0.0.1:7070"}
	if err := c.Finish(func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if c.Endpoint != "http://127.0.0.1:7070" || c.AccessKey != "AKUSER" || c.SecretKey != "S3CR3T-PASS" {
		t.Fatalf("endpoint %q, keys %q/%q", c.Endpoint, c.AccessKey, c.SecretKey)
	}
	for _, bad := range []Config{
		{URL: "s3://bucket/p", Endpoint: "ftp://u:S3CR3T-PASS@host"},
		{URL: "s3://bucket/p", Endpoint: "http://u:S3CR3T-PASS@host/path"},
		{URL: "s3://u:S3CR3T-PASS@bucket/p"},
		{URL: "http://u:S3CR3T-PASS@bucket/p"},
	} {
		err := bad.Finish(func(string) string { return "" })
		if !errors.Is(err, ErrUsage) || strings.Contains(err.Error(), "S3CR3T") {
			t.Errorf("%+v: %v; want a usage error without the password", bad, err)
		}
	}
	for in, want := range map[string]string{
		"http://u:pw@h:1/x": "http://u:xxxxx@h:1/x", "http://h:1": "http://h:1",
		"http://u@h": "http://u@h", "%zz://u:pw@h": "%zz://u:xxxxx@h", "no url": "no url",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
