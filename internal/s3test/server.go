// Package s3test gives tests a real S3 server (internal/s3local's
// versitygw) that fails the test where s3local returns an error, and is
// stopped by the test's cleanup. Tests that need it and cannot get it
// fail with the reason; they never skip (CI installs the binary, see
// .ci/run).
//
// It takes a TB rather than importing testing, so that no package but a
// test's imports testing; *testing.T and *testing.B satisfy it.
package s3test

import (
	"github.com/kvfs/kvfs/internal/s3local"
	"github.com/minio/minio-go/v7"
)

// Credentials and region every Server uses.
const (
	AccessKey = s3local.AccessKey
	SecretKey = s3local.SecretKey
	Region    = s3local.Region
)

// TB is what s3test needs of a test: testing.TB's methods of those names.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// Server is an s3local.Server whose failures fail the test.
type Server struct {
	*s3local.Server
	t TB
}

// New starts a server with an empty bucket in a temporary directory, or
// fails the test saying why it could not. The test's cleanup stops it.
func New(t TB) *Server {
	t.Helper()
	s, err := s3local.Launch(t.TempDir())
	if err != nil {
		t.Fatalf("s3test: %v (CI installs versitygw: see .ci/run)", err)
	}
	t.Cleanup(s.Close)
	return &Server{Server: s, t: t}
}

func (s *Server) check(err error) {
	if err != nil {
		s.t.Helper()
		s.t.Fatalf("%v", err)
	}
}

// Client is a plain minio client of the server, for tests that put or
// damage objects behind the code under test's back.
func (s *Server) Client() *minio.Client {
	s.t.Helper()
	c, err := s.Server.Client()
	s.check(err)
	return c
}

// Requests is s3local's count of logged requests (method for key).
func (s *Server) Requests(method, key string) int {
	s.t.Helper()
	n, err := s.Server.Requests(method, key)
	s.check(err)
	return n
}

// Stop kills the server (an outage); Start brings it back on the same
// port with the same data.
func (s *Server) Stop() { s.t.Helper(); s.check(s.Server.Stop()) }

// Start starts a stopped server again.
func (s *Server) Start() { s.t.Helper(); s.check(s.Server.Start()) }

// Pause stops the process (SIGSTOP) with its socket open: a hung server.
func (s *Server) Pause() { s.t.Helper(); s.check(s.Server.Pause()) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.t.Helper(); s.check(s.Server.Resume()) }
