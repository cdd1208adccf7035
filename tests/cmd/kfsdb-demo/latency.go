package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// latencies records durations per name. Safe for concurrent use.
type latencies struct {
	mu sync.Mutex
	m  map[string][]time.Duration
}

func newLatencies() *latencies { return &latencies{m: make(map[string][]time.Duration)} }

func (l *latencies) record(name string, d time.Duration) {
	l.mu.Lock()
	l.m[name] = append(l.m[name], d)
	l.mu.Unlock()
}

// time runs f and records how long it took under name.
func (l *latencies) time(name string, f func() error) error {
	start := time.Now()
	err := f()
	l.record(name, time.Since(start))
	return err
}

// latencyRow is one line of the latency table.
type latencyRow struct {
	Name               string
	Count              int
	P50, P95, P99, Max time.Duration
}

// rows returns one row per name with a prefix, sorted by name.
func (l *latencies) rows(prefix string) []latencyRow {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []latencyRow
	for name, ds := range l.m {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		s := append([]time.Duration(nil), ds...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		out = append(out, latencyRow{
			Name: strings.TrimPrefix(name, prefix), Count: len(s),
			P50: percentile(s, 50), P95: percentile(s, 95), P99: percentile(s, 99), Max: s[len(s)-1],
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// percentile is the nearest-rank percentile of sorted, which is not empty.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 · n)
	return sorted[max(rank, 1)-1]
}

func printLatencies(out io.Writer, title string, rows []latencyRow) {
	fmt.Fprintf(out, "\n%s\n", title)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "NAME\tCOUNT\tP50\tP95\tP99\tMAX\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\n", r.Name, r.Count, ms(r.P50), ms(r.P95), ms(r.P99), ms(r.Max))
	}
	_ = tw.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

// Prefixes of latency names: statements seen by the pool's tracer, and repo
// calls the demo makes itself.
const (
	latStatement = "sql:"
	latCall      = "call:"
)

// statementTracer is a pgx.QueryTracer that records each statement's
// duration under its sqlc name ("-- name: X :one" in the SQL text), or
// under its first keyword for other SQL.
type statementTracer struct{ lat *latencies }

type traceKey struct{}

type traceStart struct {
	name  string
	start time.Time
}

// TraceQueryStart implements pgx.QueryTracer.
func (t statementTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, traceKey{}, traceStart{name: statementName(data.SQL), start: time.Now()})
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t statementTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	s, ok := ctx.Value(traceKey{}).(traceStart)
	if !ok {
		return
	}
	name := s.name
	switch {
	case data.Err == nil, errors.Is(data.Err, pgx.ErrNoRows):
		// A refused guard is "no rows": same statement, same cost.
	case errors.Is(data.Err, context.Canceled):
		name += " (canceled)" // e.g. a heartbeat stopped as its handler returned
	default:
		name += " (error)"
	}
	t.lat.record(latStatement+name, time.Since(s.start))
}

// statementName extracts "X" from SQL starting with "-- name: X :kind";
// other SQL is named "(KEYWORD)" after its first word.
func statementName(sql string) string {
	s := strings.TrimSpace(sql)
	if rest, ok := strings.CutPrefix(s, "-- name: "); ok {
		if f := strings.Fields(rest); len(f) > 0 {
			return f[0]
		}
	}
	if f := strings.Fields(s); len(f) > 0 {
		return "(" + strings.ToUpper(strings.TrimRight(f[0], ";")) + ")"
	}
	return "(empty)"
}
