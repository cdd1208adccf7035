package benchcli

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/knowledgefs/kfsdb/adapters/prom"
	"github.com/knowledgefs/kfsdb/observe"
)

// runtimeMetrics registers the runtime counters on reg and returns a
// Metrics that feeds reg and, when counts is not nil, counts too (for the
// summary Work prints).
func runtimeMetrics(reg *prometheus.Registry, counts *observe.Counts) (observe.Metrics, error) {
	m, err := prom.New(reg, nil)
	if err != nil {
		return nil, err
	}
	if counts == nil {
		return m, nil
	}
	return teeMetrics{counts, m}, nil
}

// teeMetrics adds each count to every Metrics it holds, and each
// duration to those that are observe.Durations.
type teeMetrics []observe.Metrics

func (t teeMetrics) Add(c observe.Counter, n int64) {
	for _, m := range t {
		m.Add(c, n)
	}
}

func (t teeMetrics) Observe(h observe.Histogram, d time.Duration) {
	for _, m := range t {
		if o, ok := m.(observe.Durations); ok {
			o.Observe(h, d)
		}
	}
}
