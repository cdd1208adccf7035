package benchcli

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/promtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestOptsValidateMetricsListen: work and relay refuse a --metrics-listen
// that is not host:port, or, without a metrics token, not loopback.
func TestOptsValidateMetricsListen(t *testing.T) {
	t.Parallel()
	const url = "postgres://u@h/db"
	for name, validate := range map[string]func(addr string) error{
		"work": func(addr string) error {
			return (&WorkOpts{DatabaseURL: url, Out: &bytes.Buffer{}, Duration: time.Second, MetricsListen: addr}).Validate()
		},
		"relay": func(addr string) error {
			return (&RelayOpts{DatabaseURL: url, Out: &bytes.Buffer{}, MetricsListen: addr}).Validate()
		},
	} {
		requireValidateErr(t, validate("9090"), "MetricsListen must be host:port")
		// No metrics token in the environment: loopback only.
		requireValidateErr(t, validate("0.0.0.0:9090"), "not a loopback address, so a token is required")
		require.NoError(t, validate("127.0.0.1:9090"), name)
		require.NoError(t, validate(""), name)
	}
}

// metricsWait bounds the wait for a run's series: long, because it only
// matters when something hangs, and a loaded machine may take seconds.
const metricsWait = 2 * time.Minute

// startedDB is a test database with spaces×perSpace attempts started.
func startedDB(t *testing.T, spaces, perSpace int) (*pgtest.DB, int) {
	t.Helper()
	db := pgtest.NewDB(t)
	docs := testfactory.SeedDocuments(t.Context(), t, db.Pool, spaces, perSpace)
	return db, len(testfactory.StartAll(t.Context(), t, repo.New(nil), db.Pool, docs, 0))
}

// TestWorkServesMetrics runs `kfsdb-bench work --metrics-listen` and
// scrapes /metrics while it runs: the completions, the statement histogram
// and the backlog gauges are there.
func TestWorkServesMetrics(t *testing.T) {
	t.Parallel()
	db, attempts := startedDB(t, 2, 5)

	url, written, stop := promtest.Serve(t, func(ctx context.Context, out io.Writer) error {
		_, err := Work(ctx, &WorkOpts{DatabaseURL: db.URL, Out: out, Duration: 20 * time.Second, Workers: 1,
			StepDelay: time.Millisecond, ID: "work-metrics", MetricsListen: "127.0.0.1:0"})
		return err
	})
	// A scrape is no snapshot (the registry gathers its collectors
	// concurrently, and each series is updated at its own moment of a
	// completion), so every series this test needs is waited for in one
	// condition rather than read from the scrape that saw the last one.
	var mfs map[string]*dto.MetricFamily
	require.Eventually(t, func() bool {
		mfs = promtest.Scrape(t, url)
		took := mfs["kfsdb_attempt_start_to_succeeded_seconds"]
		return promtest.CounterValue(mfs, "kfsdb_worker_completed_total") == float64(attempts) &&
			promtest.StatementCount(mfs, "FetchLeases") > 0 &&
			took != nil && took.Metric[0].GetHistogram().GetSampleCount() == uint64(attempts)
	}, metricsWait, 50*time.Millisecond, written())
	for _, name := range []string{"kfsdb_source_fetched_leases_total", "kfsdb_statement_duration_seconds",
		"kfsdb_attempts", "kfsdb_outbox_due", "kfsdb_outbox_oldest_due_age_seconds", "go_goroutines"} {
		require.Contains(t, mfs, name)
	}
	// Work's Metrics (a tee of its summary counts and Prometheus) passes
	// the worker's durations on: the histogram counted every completion.
	require.EqualValues(t, attempts, mfs["kfsdb_attempt_start_to_succeeded_seconds"].Metric[0].GetHistogram().GetSampleCount())
	// The backlog is sampled at most every 15 s: the first scrape's sample
	// may predate the completions, so only its presence is checked.
	require.Len(t, mfs["kfsdb_attempts"].Metric, 8)

	stop()
	require.Contains(t, written(), "worker_completed")
}

// TestRelayServesMetrics runs `kfsdb-bench relay --metrics-listen`: what
// it publishes is counted, its claims are timed by query name, and the
// backlog gauges are served.
func TestRelayServesMetrics(t *testing.T) {
	t.Parallel()
	db, attempts := startedDB(t, 1, 4)

	url, written, _ := promtest.Serve(t, func(ctx context.Context, out io.Writer) error {
		return Relay(ctx, &RelayOpts{DatabaseURL: db.URL, Out: out, MetricsListen: "127.0.0.1:0"})
	})
	// One condition for every series, as in TestWorkServesMetrics: a
	// scrape gathered published_total after MarkDispatched's histogram had
	// been read without it (flake-hunt, 2026-12-06).
	var mfs map[string]*dto.MetricFamily
	require.Eventually(t, func() bool {
		mfs = promtest.Scrape(t, url)
		return promtest.CounterValue(mfs, "kfsdb_relay_published_total") == float64(attempts) &&
			promtest.StatementCount(mfs, "ClaimOutbox") > 0 &&
			promtest.StatementCount(mfs, "MarkDispatched") > 0
	}, metricsWait, 50*time.Millisecond, written())
	require.EqualValues(t, attempts, promtest.CounterValue(mfs, "kfsdb_relay_claimed_total"))
	require.Contains(t, mfs, "kfsdb_outbox_due")
	require.Contains(t, mfs, "process_cpu_seconds_total")
}
