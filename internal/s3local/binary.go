// Package s3local runs a real S3 server on this machine: versitygw
// (Apache-2.0) serving a directory through its posix backend, on a free
// loopback port, with one bucket made. Every failure is an error; tests
// use it through internal/s3test, which fails the test instead, and
// kvfs-bench uses it directly.
package s3local

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Module is what `go install` builds when no binary is found.
const Module = "github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// EnvServer names an explicit versitygw binary, looked at first.
const EnvServer = "KVFS_S3_SERVER"

const binName = "versitygw"

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Binary finds versitygw: $KVFS_S3_SERVER, then $PATH, then the cache
// directory (CacheDir), building it there with `go install` if it is in
// none of them. The answer is computed once per process.
func Binary() (string, error) {
	binOnce.Do(func() { binPath, binErr = findOrBuild() })
	return binPath, binErr
}

// CacheDir is where a built versitygw is kept between runs:
// $HOME/.cache/kvfs/versitygw (or the user cache directory's equivalent).
func CacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("s3local: no cache directory for versitygw: %w", err)
	}
	return filepath.Join(base, "kvfs", binName), nil
}

func findOrBuild() (string, error) {
	if p := os.Getenv(EnvServer); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("s3local: $%s=%s: %w", EnvServer, p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath(binName); err == nil {
		return p, nil
	}
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	return buildInto(dir)
}

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// buildInto runs `go install` with GOBIN=dir unless dir already holds the
// binary. A lock file serialises test processes that build at once.
func buildInto(dir string) (string, error) {
	p := filepath.Join(dir, binName)
	if executable(p) == nil {
		return p, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("s3local: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	if executable(p) == nil { // built by another process meanwhile
		return p, nil
	}
	return p, goInstall(dir)
}

func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("s3local: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("s3local: lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

func goInstall(dir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("s3local: versitygw not found ($%s, PATH, %s) and no go to build it: %w", EnvServer, dir, err)
	}
	cmd := exec.Command(goBin, "install", Module)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-buildvcs=false")
	cmd.Dir = os.TempDir() // outside any module: `go install pkg@version` needs no go.mod
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("s3local: versitygw not found ($%s, PATH, %s) and `go install %s` failed after %s: %v: %s",
			EnvServer, dir, Module, time.Since(start).Round(time.Second), err, lastLines(string(out), 5))
	}
	fmt.Fprintf(os.Stderr, "s3local: built %s into %s in %s\n", Module, dir, time.Since(start).Round(time.Second))
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
