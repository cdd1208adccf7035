package loadgen

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// tracer counts statements and records their latencies by the sqlc query
// name in their first line ("-- name: X :one").
type tracer struct {
	count atomic.Int64
	mu    sync.Mutex
	lat   map[string][]time.Duration
}

type traceKey struct{}

type traceStart struct {
	name string
	t0   time.Time
}

func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.count.Add(1)
	return context.WithValue(ctx, traceKey{}, traceStart{name: queryName(d.SQL), t0: time.Now()})
}

func (t *tracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	s, ok := ctx.Value(traceKey{}).(traceStart)
	if !ok {
		return
	}
	d := time.Since(s.t0)
	t.mu.Lock()
	t.lat[s.name] = append(t.lat[s.name], d)
	t.mu.Unlock()
}

func (t *tracer) snapshot() map[string][]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string][]time.Duration, len(t.lat))
	for k, v := range t.lat {
		out[k] = append([]time.Duration(nil), v...)
	}
	return out
}

func queryName(sql string) string {
	if rest, ok := strings.CutPrefix(sql, "-- name: "); ok {
		if i := strings.IndexByte(rest, ' '); i > 0 {
			return rest[:i]
		}
	}
	first, _, _ := strings.Cut(strings.TrimSpace(sql), "\n")
	if len(first) > 40 {
		first = first[:40]
	}
	return first
}
