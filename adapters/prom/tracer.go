package prom

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/knowledgefs/kfsdb/observe"
)

// OtherQuery is the query label of SQL without a valid sqlc header.
const OtherQuery = observe.OtherQuery

// TracerOptions tunes NewTracer.
type TracerOptions struct {
	// Buckets are the histogram's upper bounds in seconds. Defaults to
	// 0.25 ms doubling to about 8 s (16 buckets): most kfsdb statements
	// take well under a millisecond.
	Buckets []float64
	// Namespace prefixes every metric name. Defaults to NamespaceDefault.
	Namespace string
}

// Tracer is a pgx.QueryTracer that observes each statement's duration in
// kfsdb_statement_duration_seconds{query}, query being the sqlc name of
// the statement ("-- name: StartAttempt :one" gives StartAttempt) or
// OtherQuery, and counts failed statements in
// kfsdb_statement_errors_total{query}. pgx.ErrNoRows (a refused guard)
// is not a failure. Set it as pgxpool.Config.ConnConfig.Tracer; wrap it
// with pgx's multitracer to combine it with another tracer. Batches and
// COPY are not traced. Safe for concurrent use.
type Tracer struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

var _ pgx.QueryTracer = (*Tracer)(nil)

// NewTracer registers the statement histogram and error counter on reg.
// opts may be nil.
//
// Errors: reg is nil, or registration fails.
func NewTracer(reg prometheus.Registerer, opts *TracerOptions) (*Tracer, error) {
	if reg == nil {
		return nil, fmt.Errorf("prom.NewTracer: reg is nil")
	}
	if opts == nil {
		opts = &TracerOptions{}
	}
	buckets := opts.Buckets
	if buckets == nil {
		buckets = prometheus.ExponentialBuckets(0.00025, 2, 16)
	}
	ns := namespace(&Options{Namespace: opts.Namespace})
	t := &Tracer{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns,
			Name:      "statement_duration_seconds",
			Help:      "Duration of SQL statements by sqlc query name, from send to the end of the result.",
			Buckets:   buckets,
		}, []string{"query"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns,
			Name:      "statement_errors_total",
			Help:      "SQL statements that failed (no rows is not a failure), by sqlc query name.",
		}, []string{"query"}),
	}
	for _, c := range []prometheus.Collector{t.duration, t.errors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("prom.NewTracer: register: %w", err)
		}
	}
	return t, nil
}

type traceKey struct{}

type traceStart struct {
	query string
	start time.Time
}

// TraceQueryStart implements pgx.QueryTracer.
func (t *Tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, traceKey{}, traceStart{query: QueryName(data.SQL), start: time.Now()})
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *Tracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	s, ok := ctx.Value(traceKey{}).(traceStart)
	if !ok {
		return
	}
	t.duration.WithLabelValues(s.query).Observe(time.Since(s.start).Seconds())
	if data.Err != nil && !errors.Is(data.Err, pgx.ErrNoRows) {
		t.errors.WithLabelValues(s.query).Inc()
	}
}

// QueryName is observe.QueryName: X of SQL that starts with the sqlc
// header "-- name: X :kind", or OtherQuery.
func QueryName(sql string) string { return observe.QueryName(sql) }
