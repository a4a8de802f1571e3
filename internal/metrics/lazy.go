package metrics

import (
	"sync"

	"github.com/kvfs/kvfs/internal/stats"
	"github.com/prometheus/client_golang/prometheus"
)

// lazyObserver is one request type's histogram, made at its first
// request: a type the kernel never sends exports no series.
type lazyObserver struct {
	once sync.Once
	obs  prometheus.Observer
}

func (l *lazyObserver) get(vec *prometheus.HistogramVec, op stats.Op) prometheus.Observer {
	l.once.Do(func() { l.obs = vec.WithLabelValues(op.String()) })
	return l.obs
}
