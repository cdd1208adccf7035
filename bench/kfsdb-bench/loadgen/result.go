package loadgen

import (
	"context"
	"fmt"
	"github.com/google/uuid"
	"io"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
)

// result summarizes a run and checks it against the database: every
// acknowledged attempt must have succeeded.
func (l *load) result(ctx context.Context, m *measured, walBefore, walAfter string) (*Result, error) {
	c := l.c
	res := &Result{Producers: c.Producers, Workers: c.Workers, Spaces: c.Spaces, Delivery: c.Delivery, Rate: c.Rate, ServerCPU: -1, StepCheckpoints: c.StepCheckpoints,
		AsyncProgressCommits: c.AsyncProgressCommits, SingleCompletions: c.SingleCompletions, Duration: c.Duration, SourcePollInterval: c.SourcePollInterval, Drained: m.drained, Spans: m.spans,
		Started: l.started.Load(), Statements: map[string]StatementStats{}, Tables: map[string]TableStats{}}
	l.mu.Lock()
	var lat, wait []time.Duration
	var drained int64
	var lastAck time.Time
	measured := make([]uuid.UUID, 0, len(l.acks))
	for id, t1 := range l.acks {
		measured = append(measured, id)
		if !t1.After(m.end) {
			res.CompletedInWindow++
		} else {
			drained++
			if t1.After(lastAck) {
				lastAck = t1
			}
		}
		if t0, ok := l.starts[id]; ok {
			lat = append(lat, t1.Sub(t0))
			if tc, ok := l.called[id]; ok {
				wait = append(wait, max(tc.Sub(t0), 0))
			}
		}
	}
	l.mu.Unlock()
	res.Completed = int64(len(lat))
	res.Throughput = float64(res.CompletedInWindow) / c.Duration.Seconds()
	if drained > 0 && lastAck.After(m.end) {
		res.DrainRate = float64(drained) / lastAck.Sub(m.end).Seconds()
	}
	res.StartToSucceededP50, res.StartToSucceededP99 = percentile(lat, 0.50), percentile(lat, 0.99)
	res.StartToHandlerP50, res.StartToHandlerP99 = percentile(wait, 0.50), percentile(wait, 0.99)
	if res.Completed > 0 {
		res.RoundTrips = float64(m.statements) / float64(res.Completed)
	}
	res.Statements = statementStats(l.tr)

	// Succeeded in the database, not only acknowledged.
	var succeeded int64
	if err := l.pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE tenant_id = $1 AND run_state = 'succeeded'`,
		l.sc.tenant).Scan(&succeeded); err != nil {
		return nil, fmt.Errorf("loadgen: count: %w", err)
	}
	if succeeded -= l.warmed; succeeded != res.Completed {
		return nil, fmt.Errorf("loadgen: %d attempts acknowledged but %d succeeded", res.Completed, succeeded)
	}
	// Start → the completion's commit, on the server's clock.
	if err := l.pool.QueryRow(ctx, `SELECT
		coalesce(percentile_disc(0.5) WITHIN GROUP (ORDER BY pg_xact_commit_timestamp(xmin) - created_at), '0'),
		coalesce(percentile_disc(0.99) WITHIN GROUP (ORDER BY pg_xact_commit_timestamp(xmin) - created_at), '0')
		FROM document_compilation_attempts
		WHERE current_setting('track_commit_timestamp')::boolean AND id = ANY ($1) AND run_state = 'succeeded'`,
		measured).Scan(&res.StartToCommittedP50, &res.StartToCommittedP99); err != nil {
		return nil, fmt.Errorf("loadgen: commit times: %w", err)
	}
	// Start → the completing statement's now(), the floor's own measure.
	if err := l.pool.QueryRow(ctx, `SELECT
		coalesce(percentile_disc(0.5) WITHIN GROUP (ORDER BY completed_at - created_at), '0'),
		coalesce(percentile_disc(0.99) WITHIN GROUP (ORDER BY completed_at - created_at), '0')
		FROM document_compilation_attempts WHERE id = ANY ($1) AND run_state = 'succeeded'`,
		measured).Scan(&res.StartToCompletedAtP50, &res.StartToCompletedAtP99); err != nil {
		return nil, fmt.Errorf("loadgen: commit times: %w", err)
	}
	var wal float64
	if err := l.pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)::float8", walAfter, walBefore).Scan(&wal); err != nil {
		return nil, fmt.Errorf("loadgen: wal diff: %w", err)
	}
	if res.Completed > 0 {
		res.WALBytes = wal / float64(res.Completed)
		if m.cpu >= 0 {
			res.ServerCPU = m.cpu / time.Duration(res.Completed)
		}
	}
	// Backends flush their table statistics when they exit: close the
	// pool first, then read them on a fresh connection.
	l.pool.Close()
	if err := tableStats(ctx, c.DatabaseURL, res.Tables); err != nil {
		return nil, err
	}
	return res, nil
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func tableStats(ctx context.Context, url string, out map[string]TableStats) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("loadgen: table stats: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	time.Sleep(500 * time.Millisecond) // exiting backends flush asynchronously
	rows, err := conn.Query(ctx, `SELECT relname, n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd
		FROM pg_stat_user_tables WHERE relname IN ('document_compilation_attempts', 'document_compilation_outbox')`)
	if err != nil {
		return fmt.Errorf("loadgen: table stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var s TableStats
		if err := rows.Scan(&name, &s.LiveTuples, &s.DeadTuples, &s.Updates, &s.HOTUpdates); err != nil {
			return err
		}
		out[name] = s
	}
	return rows.Err()
}

// WriteTable writes the result as Markdown.
func (r *Result) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "| metric | value |\n|---|---:|\n")
	fmt.Fprintf(w, "| producers / worker slots / knowledge spaces / duration | %d / %d / %d / %s |\n", r.Producers, r.Workers, r.Spaces, r.Duration)
	rate := "unpaced"
	if r.Rate > 0 {
		rate = fmt.Sprintf("%.0f attempts/s", r.Rate)
	}
	fmt.Fprintf(w, "| offered rate | %s |\n", rate)
	fmt.Fprintf(w, "| delivery | %s |\n", deliveryText(r.Delivery))
	handler := "complete through the checkpoints in one write (CompleteThrough)"
	if r.StepCheckpoints {
		handler = "five Advance writes, then Complete"
	}
	commits := "synchronous"
	if r.AsyncProgressCommits {
		commits = "asynchronous for claim, mark and lease (AsyncProgressCommits); Start and Complete synchronous"
	}
	completions := "batched by the worker's completer (CompleteMany); slots do not wait"
	if r.SingleCompletions {
		completions = "one statement per attempt, in its slot"
	}
	fmt.Fprintf(w, "| handler | %s |\n| progress commits | %s |\n| completions | %s |\n", handler, commits, completions)
	if r.SourcePollInterval > 0 {
		fmt.Fprintf(w, "| source wake-up | polls every %s, no LISTEN/NOTIFY |\n", r.SourcePollInterval)
	}
	fmt.Fprintf(w, "| attempts started / succeeded (drained: %v) | %d / %d |\n", r.Drained, r.Started, r.Completed)
	fmt.Fprintf(w, "| lifecycle throughput (succeeded within the window) | %.0f attempts/s |\n", r.Throughput)
	if r.DrainRate > 0 {
		fmt.Fprintf(w, "| drain after the window (no producers) | %.0f attempts/s |\n", r.DrainRate)
	}
	if r.Spans != nil {
		fmt.Fprintf(w, "| observed: spans request / Start / publish / process | %d / %d / %d / %d |\n",
			r.Spans["request"], r.Spans["Start"], r.Spans["publish document.compile"], r.Spans["process document.compile"])
	}
	fmt.Fprintf(w, "| start → succeeded p50 / p99 | %s / %s |\n", r.StartToSucceededP50.Round(time.Millisecond), r.StartToSucceededP99.Round(time.Millisecond))
	if r.StartToCommittedP99 > 0 {
		fmt.Fprintf(w, "| start → succeeded committed p50 / p99 | %s / %s |\n", r.StartToCommittedP50.Round(time.Millisecond), r.StartToCommittedP99.Round(time.Millisecond))
	}
	if r.StartToCompletedAtP99 > 0 {
		fmt.Fprintf(w, "| start → completed_at p50 / p99 (the floor's measure: the completing statement's now(), before its commit) | %s / %s |\n", r.StartToCompletedAtP50.Round(time.Millisecond), r.StartToCompletedAtP99.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "| start → handler called p50 / p99 | %s / %s |\n", r.StartToHandlerP50.Round(time.Millisecond), r.StartToHandlerP99.Round(time.Millisecond))
	fmt.Fprintf(w, "| round trips per attempt | %.2f |\n", r.RoundTrips)
	fmt.Fprintf(w, "| WAL bytes per attempt | %.0f |\n", r.WALBytes)
	if r.ServerCPU >= 0 {
		fmt.Fprintf(w, "| PostgreSQL CPU per attempt | %d µs |\n", r.ServerCPU.Microseconds())
	}
	for _, t := range []string{"document_compilation_attempts", "document_compilation_outbox"} {
		s := r.Tables[t]
		hot := 0.0
		if s.Updates > 0 {
			hot = 100 * float64(s.HOTUpdates) / float64(s.Updates)
		}
		fmt.Fprintf(w, "| %s: live / dead tuples after, HOT updates | %d / %d, %.1f%% of %d |\n", t, s.LiveTuples, s.DeadTuples, hot, s.Updates)
	}
	writeStatements(w, r.Statements)
}

// statementStats summarizes a tracer's latencies.
func statementStats(tr *tracer) map[string]StatementStats {
	out := map[string]StatementStats{}
	for name, d := range tr.snapshot() {
		out[name] = StatementStats{Count: len(d), P50: percentile(d, 0.50), P99: percentile(d, 0.99)}
	}
	return out
}

// writeStatements writes per-statement latencies as a Markdown table.
func writeStatements(w io.Writer, stats map[string]StatementStats) {
	fmt.Fprintf(w, "\n| statement | count | p50 | p99 |\n|---|---:|---:|---:|\n")
	names := make([]string, 0, len(stats))
	for n := range stats {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := stats[n]
		fmt.Fprintf(w, "| %s | %d | %s | %s |\n", n, s.Count, s.P50.Round(10*time.Microsecond), s.P99.Round(10*time.Microsecond))
	}
}

// deliveryText says what a delivery mode does, for reports.
func deliveryText(m delivery.Mode) string {
	switch m {
	case delivery.Relay:
		return "relay: claim, publish to the in-process queue, mark; the worker leases what it receives"
	case delivery.NATS:
		return "nats: claim, publish to NATS JetStream (stream acknowledgement), mark; the worker leases what it pulls, acknowledges after the write"
	}
	return "postgres: the worker leases straight from the outbox (FetchLeases), no relay"
}
