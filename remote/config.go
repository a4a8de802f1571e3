package remote

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kvfs/kvfs/internal/usageerr"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// Config is what `--remote s3://BUCKET[/PREFIX]` and its companion flags
// and environment variables ask for. Fill it with RegisterFlags and
// Finish, or by hand and then Finish.
type Config struct {
	// URL is the --remote argument, s3://BUCKET[/PREFIX].
	URL string
	// Bucket and Prefix come from URL. Prefix is "" or ends in "/".
	Bucket, Prefix string
	// Endpoint is the server's URL (http://host:port or https://host);
	// empty means AWS S3 for Region.
	Endpoint string
	Region   string
	// AccessKey, SecretKey and SessionToken: when AccessKey is empty the
	// usual chain is asked (environment, ~/.aws/credentials, instance
	// role), and without any of them requests go out anonymous.
	AccessKey, SecretKey, SessionToken string
	// Timeout bounds a HEAD, the wait for a GET's or PUT's response, and
	// any pause in a body's transfer. It does not bound a whole transfer.
	Timeout time.Duration
	// NegativeTTL is how long an absent name is remembered. The caller
	// caps it at the kernel's negative entry timeout.
	NegativeTTL time.Duration
	// PositiveTTL is how long a present name's Info is remembered; a 404
	// on fetch drops it sooner.
	PositiveTTL time.Duration
	// QueueMax bounds the uploads waiting; past it new ones are dropped.
	QueueMax int
	// Uploaders is how many uploads run at once.
	Uploaders int
	// BreakerFailures consecutive failures open the circuit breaker for
	// BreakerCoolDown, during which nothing is sent.
	BreakerFailures int
	BreakerCoolDown time.Duration
	// Exclude lists the name patterns never uploaded nor looked up; see
	// ParseExclude. Nil means DefaultExclude.
	Exclude []string
}

// Defaults for what a user leaves out.
const (
	DefaultRegion          = "us-east-1"
	DefaultTimeout         = 2 * time.Second
	DefaultNegativeTTL     = 5 * time.Second
	DefaultPositiveTTL     = 10 * time.Minute
	DefaultQueueMax        = 10000
	DefaultUploaders       = 2
	DefaultBreakerFailures = 5
	DefaultBreakerCoolDown = 10 * time.Second
)

// ErrUsage marks errors in what the user asked for (exit status 2):
// errors.Is(err, ErrUsage). The message is one line.
var ErrUsage = usageerr.ErrUsage

func usagef(format string, args ...any) error { return usageerr.Errorf(format, args...) }

// RegisterFlags adds --remote and its companions to fs, with defaults.
// Call Finish after fs.Parse.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "remote", "", "shared remote tier, s3://BUCKET[/PREFIX] (default: none)")
	fs.StringVar(&c.Endpoint, "remote-endpoint", "", "S3 endpoint URL (default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS)")
	fs.StringVar(&c.Region, "remote-region", "", "S3 region (default: $AWS_REGION, $AWS_DEFAULT_REGION, else "+DefaultRegion+")")
	fs.StringVar(&c.AccessKey, "remote-access-key", "", "S3 access key (default: $AWS_ACCESS_KEY_ID, then ~/.aws/credentials, then the instance role)")
	fs.StringVar(&c.SecretKey, "remote-secret-key", "", "S3 secret key (default: $AWS_SECRET_ACCESS_KEY; prefer the environment: flags show in ps)")
	fs.DurationVar(&c.Timeout, "remote-timeout", DefaultTimeout, "bound on a HEAD, on waiting for a response, and on a stalled transfer")
	fs.DurationVar(&c.NegativeTTL, "remote-negative-ttl", DefaultNegativeTTL, "how long an absent remote name is remembered")
	fs.DurationVar(&c.PositiveTTL, "remote-positive-ttl", DefaultPositiveTTL, "how long a present remote name is remembered")
	fs.IntVar(&c.QueueMax, "remote-queue", DefaultQueueMax, "uploads that may wait; past it new ones are dropped")
	fs.IntVar(&c.Uploaders, "remote-uploaders", DefaultUploaders, "uploads running at once")
	fs.IntVar(&c.BreakerFailures, "remote-breaker-failures", DefaultBreakerFailures, "consecutive failures that open the circuit breaker (one request that times out opens it)")
	fs.DurationVar(&c.BreakerCoolDown, "remote-breaker-cooldown", DefaultBreakerCoolDown, "how long an open breaker sends nothing")
	// Each use adds its patterns to the earlier ones' (the first replaces
	// the default): fstab's options are split at every comma, so a list
	// there is remote_exclude=A,remote_exclude=B.
	fs.Func("remote-exclude", "comma-separated name patterns never uploaded, added to those of an earlier --remote-exclude (default: "+strings.Join(DefaultExclude, ",")+"; \"none\" for none)",
		func(s string) error {
			pats, err := ParseExclude(s)
			if c.Exclude == nil {
				c.Exclude = []string{}
			}
			c.Exclude = append(c.Exclude, pats...)
			return err
		})
}

// Enabled reports whether a remote tier was asked for.
func (c *Config) Enabled() bool { return c.URL != "" }

// Finish completes c after flags: it parses URL, takes what flags left
// unset from the environment (getenv is os.Getenv outside tests), fills
// defaults and checks everything. Errors are ErrUsage, one line each.
func (c *Config) Finish(getenv func(string) string) error {
	var err error
	if c.Bucket, c.Prefix, err = ParseURL(c.URL); err != nil {
		return err
	}
	c.fromEnv(getenv)
	c.defaults()
	if err := c.checkEndpoint(); err != nil {
		return err
	}
	if c.AccessKey != "" && c.SecretKey == "" {
		return usagef("remote access key given without a secret key (AWS_SECRET_ACCESS_KEY)")
	}
	return c.checkNumbers()
}

func (c *Config) fromEnv(getenv func(string) string) {
	first := func(dst *string, names ...string) {
		for _, n := range names {
			if *dst == "" {
				*dst = getenv(n)
			}
		}
	}
	first(&c.Endpoint, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
	first(&c.Region, "AWS_REGION", "AWS_DEFAULT_REGION")
	if c.AccessKey == "" {
		first(&c.AccessKey, "AWS_ACCESS_KEY_ID")
		first(&c.SecretKey, "AWS_SECRET_ACCESS_KEY")
		first(&c.SessionToken, "AWS_SESSION_TOKEN")
	}
	// An access key given as a flag takes its secret from the
	// environment, as --remote-secret-key's help asks (flags show in ps):
	// it was refused as "given without a secret key" (an outside tester).
	first(&c.SecretKey, "AWS_SECRET_ACCESS_KEY")
}

func (c *Config) defaults() {
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	zero := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	zero(&c.Timeout, DefaultTimeout)
	zero(&c.NegativeTTL, DefaultNegativeTTL)
	zero(&c.PositiveTTL, DefaultPositiveTTL)
	zero(&c.BreakerCoolDown, DefaultBreakerCoolDown)
	if c.QueueMax == 0 {
		c.QueueMax = DefaultQueueMax
	}
	if c.Uploaders == 0 {
		c.Uploaders = DefaultUploaders
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = DefaultBreakerFailures
	}
	if c.Exclude == nil {
		c.Exclude = DefaultExclude
	}
}

// checkEndpoint checks Endpoint and takes credentials out of it: a
// user and password in it (http://KEY:SECRET@host) are the access and
// secret key unless flags or the environment gave keys, and Endpoint keeps only scheme and
// host, so that nothing that prints it (logs, errors, stats) can show a
// secret. Errors show it redacted.
func (c *Config) checkEndpoint() error {
	if c.Endpoint == "" {
		return nil
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("bad remote endpoint %q: want http://HOST[:PORT] or https://HOST[:PORT]", Redact(c.Endpoint))
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" {
		return usagef("bad remote endpoint %q: no path allowed (the bucket goes in --remote)", Redact(c.Endpoint))
	}
	// The host and port the S3 client would refuse (it refused them
	// only once the store was loaded, exit 1, the store's checkpoint
	// rewritten) or take and never reach (port 0 or past 65535, every
	// upload left waiting in the journal): an outside tester.
	if host := u.Hostname(); !s3utils.IsValidIP(host) && (!s3utils.IsValidDomain(host) || looksNumeric(host) || strings.Contains(host, "..")) {
		return usagef("bad remote endpoint %q: %q is no host name or IP address", Redact(c.Endpoint), host)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return usagef("bad remote endpoint %q: port %s is not 1 to 65535", Redact(c.Endpoint), p)
		}
	}
	if u.User != nil {
		if pw, ok := u.User.Password(); ok && c.AccessKey == "" {
			c.AccessKey, c.SecretKey = u.User.Username(), pw
		}
	}
	c.Endpoint = u.Scheme + "://" + u.Host
	return nil
}

// looksNumeric says whether host is digits and dots alone: an IPv4
// address if anything, which the S3 client's domain check takes as a
// name (256.1.1.1 mounted, every request failing: an outside tester).
func looksNumeric(host string) bool {
	return strings.Trim(host, "0123456789.") == ""
}

// Redact is s with any password in it (a URL's userinfo,
// scheme://user:PASSWORD@host) replaced by "xxxxx", also where s does
// not parse as a URL. Everything that prints a user's endpoint or
// remote URL passes it through Redact.
func Redact(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	authority, path, _ := strings.Cut(rest, "/")
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return s
	}
	user, _, hasPass := strings.Cut(authority[:at], ":")
	if !hasPass {
		return s
	}
	out := scheme + "://" + user + ":xxxxx@" + authority[at+1:]
	if len(rest) > len(authority) {
		out += "/" + path
	}
	return out
}

func (c *Config) checkNumbers() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--remote-timeout", c.Timeout}, {"--remote-negative-ttl", c.NegativeTTL},
		{"--remote-positive-ttl", c.PositiveTTL}, {"--remote-breaker-cooldown", c.BreakerCoolDown}} {
		if d.v < 0 {
			return usagef("%s %s is negative", d.name, d.v)
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"--remote-queue", c.QueueMax}, {"--remote-uploaders", c.Uploaders},
		{"--remote-breaker-failures", c.BreakerFailures}} {
		if n.v < 1 {
			return usagef("%s %d: want at least 1 (leave it out for its default)", n.name, n.v)
		}
	}
	_, err := newExcluder(c.Exclude)
	return err
}

// ParseURL splits s3://BUCKET[/PREFIX] into the bucket and a prefix that
// is empty or ends in "/". Errors are ErrUsage, one line.
func ParseURL(s string) (bucket, prefix string, err error) {
	shown := Redact(s)
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return "", "", usagef("bad --remote %q: want s3://BUCKET[/PREFIX]", shown)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	if strings.Contains(bucket, "@") {
		return "", "", usagef("bad --remote %q: no credentials in it (use the environment)", shown)
	}
	if err := checkBucket(bucket); err != nil {
		return "", "", usagef("bad --remote %q: %v", shown, err)
	}
	prefix = strings.TrimSuffix(prefix, "/")
	if err := checkPrefix(prefix); err != nil {
		return "", "", usagef("bad --remote %q: %v", shown, err)
	}
	if prefix != "" {
		prefix += "/"
	}
	return bucket, prefix, nil
}

// checkBucket applies S3's bucket naming rules (3-63 of a-z, 0-9, '.',
// '-', starting and ending with a letter or digit).
func checkBucket(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket name %q must be 3 to 63 characters", b)
	}
	for i, r := range b {
		alnum := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !alnum && (r != '.' && r != '-' || i == 0 || i == len(b)-1) {
			return fmt.Errorf("bucket name %q: only a-z, 0-9, '.' and '-' inside, a letter or digit at each end", b)
		}
	}
	return nil
}

func checkPrefix(p string) error {
	if len(p) > 512 {
		return errors.New("prefix longer than 512 bytes")
	}
	for _, part := range strings.Split(p, "/") {
		if p != "" && (part == "" || part == "." || part == "..") {
			return fmt.Errorf("prefix %q has an empty, '.' or '..' component", p)
		}
	}
	return nil
}
