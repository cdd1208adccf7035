// Package prom_test runs the Prometheus adapter (adapters/prom) on real
// databases from the harness: the workload's series, the collector's caps,
// cache and last sample, query names and bad arguments. It is in the tests
// module so that adapters/prom, which is released, never requires it; the
// test that needs no database (the Grafana dashboard's series) stays in
// adapters/prom.
package prom_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/adapters/prom"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var discardLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// scrape gathers reg, renders it in the text exposition format and
// parses it back, as a Prometheus server would read /metrics.
func scrape(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		require.NoError(t, enc.Encode(mf))
	}
	// LegacyValidation: the names must also suit pre-UTF-8 scrapers.
	p := expfmt.NewTextParser(model.LegacyValidation)
	out, err := p.TextToMetricFamilies(&buf)
	require.NoError(t, err)
	return out
}

// value returns the value of the family's series whose labels are
// label=val pairs, failing when there is none.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	m := series(t, mfs, name, labels...)
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	t.Fatalf("%s%v has no counter or gauge value", name, labels)
	return 0
}

func series(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	t.Helper()
	mf, ok := mfs[name]
	require.True(t, ok, "no family %s", name)
	for _, m := range mf.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		match := len(got) == len(labels)/2
		for i := 0; match && i < len(labels); i += 2 {
			match = got[labels[i]] == labels[i+1]
		}
		if match {
			return m
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return nil
}

func newPool(t *testing.T, db *pgtest.DB, tr *prom.Tracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 12
	if tr != nil {
		cfg.ConnConfig.Tracer = tr
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func sqlCount(ctx context.Context, t *testing.T, pool *pgxpool.Pool, query string, args ...any) float64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(ctx, query, args...).Scan(&n))
	return float64(n)
}

// TestWorkloadSeries runs direct delivery (a worker on pgsource) with the
// Metrics and the Tracer wired, leaves some attempts unprocessed, and
// checks the scraped series against SQL counts.
func TestWorkloadSeries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	reg := prometheus.NewPedanticRegistry()
	m, err := prom.New(reg, nil)
	require.NoError(t, err)
	tr, err := prom.NewTracer(reg, nil)
	require.NoError(t, err)
	pool := newPool(t, db, tr)
	coll, err := prom.NewCollector(pool, &prom.CollectorOptions{SampleInterval: time.Nanosecond})
	require.NoError(t, err)
	require.NoError(t, reg.Register(coll))

	r := repo.New(nil)
	docs := testfactory.SeedDocuments(ctx, t, pool, 3, 10)
	testfactory.StartAll(ctx, t, r, pool, docs, 0)
	cands := testfactory.Candidates(docs)
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		return testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], nil)
	})
	src, err := pgsource.New(pool, &pgsource.Config{Logger: discardLog, Metrics: m})
	require.NoError(t, err)
	w, err := worker.New(pool, src, h, &worker.Config{Concurrency: 4, Logger: discardLog, Metrics: m})
	require.NoError(t, err)
	// A second worker completes one by one, the first through its
	// completer's batches: both paths report StartToSucceeded.
	src2, err := pgsource.New(pool, &pgsource.Config{Logger: discardLog, Metrics: m})
	require.NoError(t, err)
	w2, err := worker.New(pool, src2, h, &worker.Config{Concurrency: 2, Logger: discardLog, Metrics: m, SingleCompletions: true})
	require.NoError(t, err)
	stop := testfactory.RunAll(ctx, t, w.Run, w2.Run)
	require.Eventually(t, func() bool {
		return sqlCount(ctx, t, pool, `SELECT count(*) FROM document_compilation_attempts WHERE completed_at IS NULL`) == 0
	}, 60*time.Second, 10*time.Millisecond)
	stop()

	// A second batch nobody works on: live attempts and due outbox rows.
	more := testfactory.SeedDocuments(ctx, t, pool, 2, 3)
	testfactory.StartAll(ctx, t, r, pool, more, 0)
	time.Sleep(20 * time.Millisecond) // so the oldest due row has an age

	mfs := scrape(t, reg)
	for _, c := range observe.Counters() {
		_, ok := mfs["kfsdb_"+string(c)+"_total"]
		require.True(t, ok, "no counter for %s", c)
	}
	succeeded := sqlCount(ctx, t, pool, `SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'succeeded'`)
	require.EqualValues(t, len(docs), succeeded)
	require.Equal(t, succeeded, value(t, mfs, "kfsdb_worker_completed_total"))
	require.Equal(t, succeeded, value(t, mfs, "kfsdb_source_fetched_leases_total"))
	require.Equal(t, succeeded, value(t, mfs, "kfsdb_worker_leases_acquired_total"))
	require.Zero(t, value(t, mfs, "kfsdb_worker_failed_total"))

	took := series(t, mfs, "kfsdb_attempt_start_to_succeeded_seconds").GetHistogram()
	require.Equal(t, succeeded, float64(took.GetSampleCount()))
	var tookSum float64
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(sum(extract(epoch FROM completed_at - created_at)), 0)::float8
		FROM document_compilation_attempts WHERE run_state = 'succeeded'`).Scan(&tookSum))
	require.Positive(t, tookSum)
	require.InEpsilon(t, tookSum, took.GetSampleSum(), 1e-6)

	start := series(t, mfs, "kfsdb_statement_duration_seconds", "query", "Start").GetHistogram()
	require.EqualValues(t, len(docs)+len(more), start.GetSampleCount())
	require.Positive(t, start.GetSampleSum())
	fetch := series(t, mfs, "kfsdb_statement_duration_seconds", "query", "FetchLeases").GetHistogram()
	// Every fetch sent FetchLeases but those cut off as the run stopped: a
	// source has at most two in flight, and one stopped while it waited for
	// a connection, or for its reading of the tables' size
	// (repo/plan_class.go), sends none.
	require.GreaterOrEqual(t, float64(fetch.GetSampleCount())+2*2, value(t, mfs, "kfsdb_source_fetches_total"))
	require.Positive(t, fetch.GetSampleCount())
	series(t, mfs, "kfsdb_statement_duration_seconds", "query", prom.OtherQuery) // the test's own SQL

	for _, s := range kfstype.RunStates() {
		want := sqlCount(ctx, t, pool, `SELECT count(*) FROM document_compilation_attempts WHERE run_state = $1`, string(s))
		require.Equal(t, want, value(t, mfs, "kfsdb_attempts", "state", string(s)), "state %s", s)
		require.Zero(t, value(t, mfs, "kfsdb_attempts_capped", "state", string(s)))
	}
	// Only the second batch's rows are due: pending, never dispatched.
	require.Equal(t, float64(len(more)), value(t, mfs, "kfsdb_outbox_due", "status", "pending"))
	for _, st := range []string{"dispatching", "dispatched", "leased"} {
		require.Zero(t, value(t, mfs, "kfsdb_outbox_due", "status", st), st)
		require.Zero(t, value(t, mfs, "kfsdb_outbox_due_capped", "status", st), st)
	}
	var oldest float64
	require.NoError(t, pool.QueryRow(ctx, `SELECT extract(epoch FROM now() - min(available_at))::float8
		FROM document_compilation_outbox WHERE status = 'pending'`).Scan(&oldest))
	age := value(t, mfs, "kfsdb_outbox_oldest_due_age_seconds")
	require.Positive(t, age)
	require.InDelta(t, oldest, age, 1)
	require.Zero(t, value(t, mfs, "kfsdb_backlog_sample_errors_total"))
	require.Positive(t, value(t, mfs, "kfsdb_backlog_sampled_timestamp_seconds"))
}

// TestCollectorCapsAndCaches: a count that reaches the cap is reported
// as the cap with its _capped gauge at 1, and a sample serves scrapes
// until SampleInterval passes.
func TestCollectorCapsAndCaches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	pool := newPool(t, db, nil)
	r := repo.New(nil)
	testfactory.StartAll(ctx, t, r, pool, testfactory.SeedDocuments(ctx, t, pool, 1, 4), 0)

	reg := prometheus.NewPedanticRegistry()
	coll, err := prom.NewCollector(pool, &prom.CollectorOptions{Cap: 2, SampleInterval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, reg.Register(coll))
	mfs := scrape(t, reg)
	live := kfstype.RunStateDispatchPending
	require.EqualValues(t, 2, value(t, mfs, "kfsdb_attempts", "state", string(live)))
	require.EqualValues(t, 1, value(t, mfs, "kfsdb_attempts_capped", "state", string(live)))
	require.EqualValues(t, 2, value(t, mfs, "kfsdb_outbox_due", "status", "pending"))
	require.EqualValues(t, 1, value(t, mfs, "kfsdb_outbox_due_capped", "status", "pending"))
	require.EqualValues(t, 0, value(t, mfs, "kfsdb_attempts_capped", "state", string(kfstype.RunStateSucceeded)))
	sampled := value(t, mfs, "kfsdb_backlog_sampled_timestamp_seconds")

	// Within SampleInterval a scrape serves the same sample, even with the
	// database gone.
	pool.Close()
	mfs = scrape(t, reg)
	require.Equal(t, sampled, value(t, mfs, "kfsdb_backlog_sampled_timestamp_seconds"))
	require.Zero(t, value(t, mfs, "kfsdb_backlog_sample_errors_total"))
}

// TestCollectorServesLastSampleOnError: a failed read is counted and the
// previous sample is served; a scrape never fails on it.
func TestCollectorServesLastSampleOnError(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	pool := newPool(t, db, nil)
	reg := prometheus.NewPedanticRegistry()
	// The first sample must succeed, whatever the machine's load: its
	// timeout is not this test's subject (a closed pool fails at once),
	// and a 1 s timeout lapsed under load, leaving no sample to serve.
	coll, err := prom.NewCollector(pool, &prom.CollectorOptions{SampleInterval: time.Nanosecond, SampleTimeout: time.Minute})
	require.NoError(t, err)
	require.NoError(t, reg.Register(coll))
	mfs := scrape(t, reg)
	require.Zero(t, value(t, mfs, "kfsdb_backlog_sample_errors_total"), "the first sample failed")
	require.Zero(t, value(t, mfs, "kfsdb_attempts", "state", string(kfstype.RunStateSucceeded)))
	sampled := value(t, mfs, "kfsdb_backlog_sampled_timestamp_seconds")

	pool.Close()
	mfs = scrape(t, reg)
	require.EqualValues(t, 1, value(t, mfs, "kfsdb_backlog_sample_errors_total"))
	require.Equal(t, sampled, value(t, mfs, "kfsdb_backlog_sampled_timestamp_seconds"))
	require.Zero(t, value(t, mfs, "kfsdb_attempts", "state", string(kfstype.RunStateSucceeded)))
}

func TestQueryName(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]string{
		"-- name: StartAttempt :one\nWITH x AS (SELECT 1) SELECT 1": "StartAttempt",
		"\n  -- name: FetchLeases :many\nSELECT 1":                  "FetchLeases",
		"SELECT 1":                 prom.OtherQuery,
		"-- name:  :one":           prom.OtherQuery,
		"-- name: Drop;Table :one": prom.OtherQuery,
		"-- name: 1Start :one":     prom.OtherQuery,
		"-- name: " + string(make([]byte, 65)) + " :one": prom.OtherQuery,
	} {
		require.Equal(t, want, prom.QueryName(sql), "%q", sql)
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	t.Parallel()
	_, err := prom.New(nil, nil)
	require.Error(t, err)
	_, err = prom.NewTracer(nil, nil)
	require.Error(t, err)
	_, err = prom.NewCollector(nil, nil)
	require.Error(t, err)
	reg := prometheus.NewRegistry()
	_, err = prom.New(reg, nil)
	require.NoError(t, err)
	_, err = prom.New(reg, nil)
	require.ErrorContains(t, err, "register counter")
	m, err := prom.New(prometheus.NewRegistry(), &prom.Options{Namespace: "other"})
	require.NoError(t, err)
	m.Add(observe.Completed, -1) // dropped, not a panic
	m.Add("no_such_counter", 1)
}

// TestCollectorCountsLimitedTenants: kfsdb_tenants_limited counts the
// tenants capped, rate-limited and paused (a tenant with two limits under
// each). On a role that may not read the limits (a console role from
// before migration 0011's grants) the series is left out and the others
// stand: the sample does not fail. Mutation caught: the insufficient
// privilege not told apart (every sample fails, kfsdb_attempts is gone).
func TestCollectorCountsLimitedTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	pool := newPool(t, db, nil)
	r := repo.New(nil)
	require.NoError(t, r.SetTenantLimit(ctx, pool, &repo.SetTenantLimitParams{TenantID: "a", MaxRunning: 2}))
	require.NoError(t, r.SetTenantRate(ctx, pool, &repo.SetTenantRateParams{TenantID: "b", Rate: 1, Burst: 1}))
	for _, tenant := range []string{"b", "c"} {
		_, err := r.PauseTenant(ctx, pool, &repo.PauseTenantParams{TenantID: tenant})
		require.NoError(t, err)
	}
	reg := prometheus.NewPedanticRegistry()
	coll, err := prom.NewCollector(pool, &prom.CollectorOptions{SampleInterval: time.Nanosecond})
	require.NoError(t, err)
	require.NoError(t, reg.Register(coll))
	mfs := scrape(t, reg)
	for limit, want := range map[string]float64{"cap": 1, "rate": 1, "pause": 2} {
		require.Equal(t, want, value(t, mfs, "kfsdb_tenants_limited", "limit", limit), limit)
	}

	role := fmt.Sprintf("kfsdb_prom_%d", time.Now().UnixNano())
	for _, sql := range []string{
		`CREATE ROLE ` + role + ` NOLOGIN`,
		`GRANT SELECT ON document_compilation_attempts, document_compilation_outbox TO ` + role,
	} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = pool.Exec(context.Background(), `DROP ROLE `+role)
	})
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SET ROLE `+role)
		return err
	}
	limited, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(limited.Close)
	reg = prometheus.NewPedanticRegistry()
	coll, err = prom.NewCollector(limited, &prom.CollectorOptions{SampleInterval: time.Nanosecond})
	require.NoError(t, err)
	require.NoError(t, reg.Register(coll))
	mfs = scrape(t, reg)
	require.Zero(t, value(t, mfs, "kfsdb_backlog_sample_errors_total"))
	require.Zero(t, value(t, mfs, "kfsdb_attempts", "state", string(kfstype.RunStateSucceeded)))
	require.NotContains(t, mfs, "kfsdb_tenants_limited")
}
