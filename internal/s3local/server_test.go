package s3local

import (
	"context"
	"testing"
)

// TestLaunch: a launched server serves until Close, then is gone.
func TestLaunch(t *testing.T) {
	s, err := Launch(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Client()
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	if _, err := c.BucketExists(context.Background(), s.Bucket); err != nil {
		s.Close()
		t.Fatalf("launched server: %v", err)
	}
	s.Close()
	if _, err := c.BucketExists(context.Background(), s.Bucket); err == nil {
		t.Fatal("server still answering after Close")
	}
}
