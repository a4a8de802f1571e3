package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// CheckAddr says whether addr is HOST:PORT with a port number (0 picks a
// free one), before anything is started.
func CheckAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("bad metrics address %q: want HOST:PORT, like %s", addr, DefaultAddr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return fmt.Errorf("bad metrics address %q: the port must be a number from 0 to 65535", addr)
	}
	return nil
}

// Server serves /metrics.
type Server struct {
	ln   net.Listener
	http *http.Server
	done chan struct{}
}

// Listen takes the address now, so that a port already in use fails
// before the store is loaded; Serve starts answering.
func Listen(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics address: %w", err)
	}
	return &Server{ln: ln, done: make(chan struct{})}, nil
}

// Addr is the address it listens on (with the port picked for :0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve answers /metrics from m until Close.
func (s *Server) Serve(m *Metrics, log *zap.Logger) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:            zap.NewStdLog(log),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		EnableOpenMetrics:   true, // for a scraper that asks (Prometheus's default Accept lists it first)
	}))
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: zap.NewStdLog(log)}
	go func() {
		defer close(s.done)
		if err := s.http.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", zap.Error(err))
		}
	}()
}

// Close stops listening, and serving if it was.
func (s *Server) Close() {
	if s.http == nil {
		s.ln.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.http.Shutdown(ctx)
	<-s.done
}
