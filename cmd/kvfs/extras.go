package main

// The optional parts of a mount the command wires in: the Prometheus
// endpoint (--metrics-addr) and the progress of a start-up that walks
// the store (--progress-interval).

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/kvfs/kvfs/internal/metrics"
	"github.com/kvfs/kvfs/internal/progress"
	"github.com/kvfs/kvfs/internal/usageerr"
	"github.com/kvfs/kvfs/mount"
	"go.uber.org/zap"
)

// extraFlags are the flags of those parts.
type extraFlags struct {
	metricsAddr   *string
	progressEvery *time.Duration
}

func mountExtraFlags(fs *flag.FlagSet) extraFlags {
	return extraFlags{
		metricsAddr: fs.String("metrics-addr", "", "serve Prometheus metrics at http://HOST:PORT/metrics, like "+
			metrics.DefaultAddr+" (default: off; port 0 picks a free one)"),
		progressEvery: progressFlag(fs),
	}
}

func progressFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("progress-interval", progress.DefaultEvery,
		"time between progress lines of a long walk of the store when stderr is not a terminal (a terminal gets a bar; 0: a line per step)")
}

func checkProgressEvery(d time.Duration) error {
	if d < 0 {
		return usageerr.Errorf("--progress-interval %v: durations must not be negative", d)
	}
	return nil
}

// extras are those parts, once started.
type extras struct {
	metrics *metrics.Metrics // nil: no endpoint
	mu      sync.Mutex
	server  *metrics.Server // GUARDED_BY(mu) once serve has run
	closed  bool            // GUARDED_BY(mu)
	// late: the address to listen on once a handover is done (the old
	// daemon holds it till then).
	late     string
	progress *progress.Reporter
}

// lateRetry is how often an address still in use after a handover is
// tried again.
const lateRetry = 5 * time.Second

// start checks the flags, takes the metrics address (so a port in use
// fails before the store is loaded) and hooks both parts into o.
func (x extraFlags) start(o *mount.Options, log *zap.Logger) (*extras, error) {
	if err := checkProgressEvery(*x.progressEvery); err != nil {
		return nil, err
	}
	e := &extras{progress: progress.New(progress.Config{What: "loading store", Out: os.Stderr,
		Log: log.Named("load"), Every: *x.progressEvery})}
	o.Progress = e.progress
	if *x.metricsAddr == "" {
		return e, nil
	}
	if err := metrics.CheckAddr(*x.metricsAddr); err != nil {
		return nil, usageerr.Errorf("--metrics-addr: %v", err)
	}
	e.metrics = metrics.New(build)
	o.Observer = e.metrics
	srv, err := metrics.Listen(*x.metricsAddr)
	if err != nil && mount.HandoverPossible(*o) {
		// The daemon this one takes the mount over from holds the
		// address until it exits: taken then (serve).
		e.late = *x.metricsAddr
		return e, nil
	}
	if err != nil {
		return nil, err
	}
	e.server = srv
	return e, nil
}

// serve starts answering /metrics from the live mount, and says where.
func (e *extras) serve(m *mount.Mount, stdout io.Writer, log *zap.Logger) {
	e.progress.Done()
	if e.metrics == nil {
		return
	}
	if e.late != "" {
		// Free once the old daemon is gone, which it is by now; a
		// moment for its sockets to close.
		var err error
		for i := 0; i < 50; i++ {
			if e.server, err = metrics.Listen(e.late); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			// Another process took it meanwhile: tried again until it
			// is free, so the mount is not left unwatched for good (an
			// outside tester: a reload whose address was taken exited 0
			// and the mount had no /metrics from then on).
			log.Error("no metrics endpoint after the handover: tried again every 5 s", zap.String("addr", e.late), zap.Error(err))
			fmt.Fprintf(stdout, "kvfs: warning: no metrics endpoint: %s is in use; tried again every %v\n", e.late, lateRetry)
			e.metrics.Watch(metrics.Source{Stats: m.Stats, Loaded: m.Loaded, StoreQuotaBytes: m.QuotaBytes()})
			go e.retry(log)
			return
		}
	}
	e.metrics.Watch(metrics.Source{Stats: m.Stats, Loaded: m.Loaded, StoreQuotaBytes: m.QuotaBytes()})
	e.server.Serve(e.metrics, log.Named("metrics"))
	fmt.Fprintf(stdout, "kvfs: metrics at http://%s/metrics\n", e.server.Addr())
	log.Info("serving metrics", zap.String("addr", e.server.Addr()))
}

// retry listens on the late address once it is free, until close.
func (e *extras) retry(log *zap.Logger) {
	for {
		time.Sleep(lateRetry)
		srv, err := metrics.Listen(e.late)
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			if err == nil {
				srv.Close()
			}
			return
		}
		if err == nil {
			e.server = srv
			srv.Serve(e.metrics, log.Named("metrics"))
			e.mu.Unlock()
			log.Info("serving metrics", zap.String("addr", srv.Addr()))
			return
		}
		e.mu.Unlock()
	}
}

// close stops the endpoint; the mount has stopped, or never started.
func (e *extras) close() {
	e.progress.Done()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	if e.server != nil {
		e.server.Close()
	}
}

// fsckProgress reports fsck's walk on stderr.
func fsckProgress(every time.Duration) *progress.Reporter {
	return progress.New(progress.Config{What: "kvfs fsck: checking store", Out: os.Stderr, Every: every})
}
