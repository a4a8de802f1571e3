package s3local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"golang.org/x/sys/unix"
)

// Credentials and region every Server uses.
const (
	AccessKey = "kvfs-test-access"
	SecretKey = "kvfs-test-secret-key"
	Region    = "us-east-1"
	Bucket    = "kvfs-test"
)

// readyWithin bounds how long a started server may take to answer; it
// is ready in well under a second when the machine is not starved.
const readyWithin = 30 * time.Second

// Server is one versitygw process serving a directory. Stop and Start
// keep its port and data, for outage tests; Close stops it for good.
type Server struct {
	// Endpoint is the URL clients use: http://127.0.0.1:PORT.
	Endpoint string
	// Addr is Endpoint's host:port.
	Addr string
	// Bucket exists when Launch returns.
	Bucket string
	// Dir is the served directory; Dir/Bucket holds the objects.
	Dir string

	bin     string
	args    []string
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// Launch starts a server with an empty bucket, serving dir/root and
// logging to dir/versitygw.log; dir must exist. Close stops it. On an
// error nothing is left running.
func Launch(dir string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, fmt.Errorf("no S3 server: %w", err)
	}
	s := &Server{bin: bin, Bucket: Bucket}
	if err := s.prepare(dir); err != nil {
		return nil, err
	}
	err = s.launch()
	if err == nil {
		err = s.makeBucket()
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) prepare(tmp string) error {
	s.Dir = filepath.Join(tmp, "root")
	if err := os.Mkdir(s.Dir, 0o755); err != nil {
		return err
	}
	s.logPath = filepath.Join(tmp, "versitygw.log")
	port, err := freePort()
	if err != nil {
		return err
	}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.Endpoint = "http://" + s.Addr
	s.args = []string{"--port", s.Addr, "--access", AccessKey, "--secret", SecretKey,
		"--region", Region, "posix"}
	if !xattrsWork(s.Dir) {
		// The posix backend keeps metadata in user xattrs; where the
		// file system has none (old tmpfs), it keeps them beside.
		side := filepath.Join(tmp, "sidecar")
		if err := os.Mkdir(side, 0o755); err != nil {
			return err
		}
		s.args = append(s.args, "--sidecar", side)
	}
	s.args = append(s.args, s.Dir)
	return nil
}

func xattrsWork(dir string) bool {
	err := unix.Setxattr(dir, "user.kvfs.probe", []byte("1"), 0)
	unix.Removexattr(dir, "user.kvfs.probe")
	return err == nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// launch starts the process and waits until it answers HTTP.
func (s *Server) launch() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Dies with the test binary, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.paused = cmd, exited, false
	s.mu.Unlock()
	return s.waitReady(exited)
}

func (s *Server) waitReady(exited chan struct{}) error {
	// versitygw announces nothing a test can wait on before it serves:
	// its port is polled, every 20 ms, until it answers.
	guard := time.After(readyWithin)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: time.Second}
	for {
		if resp, err := client.Get(s.Endpoint + "/"); err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited at start: %s", s.bin, s.logTail())
		case <-guard:
			return fmt.Errorf("%s not answering on %s after %s: %s", s.bin, s.Addr, readyWithin, s.logTail())
		case <-tick.C:
		}
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	return lastLines(string(b), 5)
}

func (s *Server) makeBucket() error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyWithin)
	defer cancel()
	if err := c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: Region}); err != nil {
		return fmt.Errorf("make bucket %s: %w", s.Bucket, err)
	}
	return nil
}

// Client is a plain minio client of the server, for callers that put or
// damage objects behind the back of the code they test or measure.
func (s *Server) Client() (*minio.Client, error) {
	c, err := minio.New(s.Addr, &minio.Options{
		Creds:      credentials.NewStaticV4(AccessKey, SecretKey, ""),
		Region:     Region,
		MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("s3local: client: %w", err)
	}
	return c, nil
}

// URL is the --remote argument for prefix in the server's bucket.
func (s *Server) URL(prefix string) string {
	return "s3://" + s.Bucket + "/" + prefix
}

// Env is the environment a kvfs process needs to reach the server.
func (s *Server) Env() []string {
	return []string{
		"AWS_ENDPOINT_URL=" + s.Endpoint,
		"AWS_ACCESS_KEY_ID=" + AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + SecretKey,
		"AWS_REGION=" + Region,
	}
}

// Requests counts the requests the server has logged with method for
// key in its bucket (every key if key is ""), over all its runs:
// server-side evidence for black-box checks ("at most one HEAD"). The
// server logs a request before it answers it, so a request whose answer
// a client has seen is counted.
func (s *Server) Requests(method, key string) (int, error) {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return 0, fmt.Errorf("s3local: %w", err)
	}
	path := "/" + s.Bucket + "/" + key
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, " | ")
		if len(f) < 7 || strings.TrimSpace(f[1]) != "vgw" || strings.TrimSpace(f[5]) != method {
			continue
		}
		if p := strings.TrimSpace(f[6]); p == path || key == "" && strings.HasPrefix(p, path) {
			n++
		}
	}
	return n, nil
}

// Stop kills the server (SIGKILL: an outage, not a shutdown) and waits
// for it to exit. The port and the data stay for Start.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return errors.New("s3local: Stop of a server that is not running")
	}
	cmd.Process.Kill()
	<-exited
	return nil
}

// Start starts a stopped server again on the same port with the same
// data.
func (s *Server) Start() error {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		return errors.New("s3local: Start of a server that is running")
	}
	if err := s.launch(); err != nil {
		return fmt.Errorf("s3local: restart: %w", err)
	}
	return nil
}

// Pause stops the process (SIGSTOP) without closing its socket: the
// kernel still accepts connections, nothing answers them. That is the
// hung server a request timeout is for.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP, true) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, paused bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("s3local: %v to a server that is not running", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("s3local: %v: %w", sig, err)
	}
	if paused {
		// A signal is delivered a moment after kill(2) returns: a
		// request sent meanwhile would still be answered.
		waitStopped(s.cmd.Process.Pid)
	}
	s.paused = paused
	return nil
}

// waitStopped waits until pid, a child told SIGSTOP, has stopped: the
// kernel reports a stop to waitid only once every thread of the process
// has stopped. WNOWAIT leaves the report for no one else to miss (the
// goroutine in cmd.Wait waits for the exit only); an exit instead (the
// server died) ends the wait too.
func waitStopped(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}

// Close stops the server for good: a paused process is continued so
// that it can die, then killed and reaped. Closing a stopped server does
// nothing.
func (s *Server) Close() {
	s.mu.Lock()
	cmd, exited, paused := s.cmd, s.exited, s.paused
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	if paused {
		cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		fmt.Fprintf(os.Stderr, "s3local: %s (pid %d) did not exit after SIGKILL\n", s.bin, cmd.Process.Pid)
	}
}
