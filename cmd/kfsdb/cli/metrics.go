package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/observe/prom"
)

// metricsScrapeTimeout bounds one /metrics request; the backlog sample
// has its own, shorter, timeout (prom.SampleTimeoutDefault).
const metricsScrapeTimeout = 10 * time.Second

// promMetrics registers the runtime counters and the Go and process
// collectors on reg, sets the statement tracer on cfg, and returns a
// Metrics that feeds both counts (for the summary Work prints) and reg.
func promMetrics(reg *prometheus.Registry, counts *observe.Counts, cfg *pgxpool.Config) (observe.Metrics, error) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := prom.New(reg, nil)
	if err != nil {
		return nil, err
	}
	tr, err := prom.NewTracer(reg, nil)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Tracer = tr
	return teeMetrics{counts, m}, nil
}

// serveMetrics registers the backlog collector on reg and serves reg at
// http://addr/metrics until stop is called.
func serveMetrics(reg *prometheus.Registry, pool *pgxpool.Pool, addr string, out io.Writer, log *slog.Logger) (stop func(), err error) {
	c, err := prom.NewCollector(pool, nil)
	if err != nil {
		return nil, err
	}
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("register the backlog collector: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Timeout: metricsScrapeTimeout}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	fmt.Fprintf(out, "serving metrics on http://%s/metrics\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
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
