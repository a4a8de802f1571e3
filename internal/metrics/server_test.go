package metrics

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/internal/stats"
	"go.uber.org/zap"
)

func TestCheckAddr(t *testing.T) {
	for addr, ok := range map[string]bool{DefaultAddr: true, "127.0.0.1:0": true, ":9580": true, "[::1]:9580": true,
		"localhost": false, "127.0.0.1:http": false, "127.0.0.1:70000": false, "": false, "127.0.0.1:": false} {
		if err := CheckAddr(addr); (err == nil) != ok {
			t.Errorf("CheckAddr(%q) = %v", addr, err)
		}
	}
}

// TestServe: /metrics answers with the mount's figures over HTTP, and
// Close frees the port.
func TestServe(t *testing.T) {
	s, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := New("dev")
	m.Watch(Source{Stats: func() stats.Snapshot { return distinctStats() }})
	s.Serve(m, zap.NewNop())
	resp, err := http.Get("http://" + s.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "\nkvfs_used_bytes 114\n") {
		t.Errorf("no kvfs_used_bytes 114 in:\n%s", body)
	}
	// OpenMetrics when asked, as docs/metrics.md says (it answered
	// the text format to an outside tester who asked).
	req, _ := http.NewRequest("GET", "http://"+s.Addr()+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") ||
		!strings.Contains(string(body), "\nkvfs_used_bytes 114.0\n") || !strings.HasSuffix(string(body), "# EOF\n") {
		t.Errorf("asked for OpenMetrics, got %s:\n%s", ct, body)
	}
	s.Close()
	again, err := Listen(s.Addr())
	if err != nil {
		t.Fatalf("port not freed by Close: %v", err)
	}
	again.Close()
}
