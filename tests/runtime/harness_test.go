package runtime_test

import (
	"context"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// env is what a runtime test runs on: a database of its own, a pool sized
// for the test's relays and workers, a repo on the real clock and the
// in-process queue between relay and worker. Tests build their relays and
// workers on it, so the setup is written once.
type env struct {
	ctx  context.Context
	pool *pgxpool.Pool
	repo *repo.Repo
	q    *memqueue.Queue
}

// newEnv opens a test database with a pool of maxConns connections.
func newEnv(t testing.TB, maxConns int32) *env {
	t.Helper()
	db := pgtest.NewDB(t)
	return &env{ctx: context.Background(), pool: newPool(t, db, maxConns), repo: repo.New(nil), q: memqueue.New()}
}

// start seeds perSpace documents in each of spaces knowledge spaces and
// starts an attempt for each (maxAttempts 0: the default).
func (e *env) start(t testing.TB, spaces, perSpace int, maxAttempts int32) ([]testfactory.Document, []*kfstype.Attempt) {
	t.Helper()
	docs := testfactory.SeedDocuments(e.ctx, t, e.pool, spaces, perSpace)
	return docs, testfactory.StartAll(e.ctx, t, e.repo, e.pool, docs, maxAttempts)
}

// relay builds a relay publishing to the env's queue.
func (e *env) relay(t testing.TB, cfg relay.Config) *relay.Relay {
	t.Helper()
	return newRelay(t, e.pool, e.q, cfg)
}

// worker builds a worker receiving from the env's queue.
func (e *env) worker(t testing.TB, h worker.Handler, cfg worker.Config) *worker.Worker {
	t.Helper()
	return newWorker(t, e.pool, e.q, h, cfg)
}

func mustUUID(s string) uuid.UUID { return uuid.MustParse(s) }

// tracedPool opens a pool of its own (a copy of the env's configuration)
// whose statements tracer sees, so a test can trace one worker's SQL.
func (e *env) tracedPool(t testing.TB, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	pc := e.pool.Config()
	pc.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(e.ctx, pc)
	require.NoError(t, err)
	t.Cleanup(func() {
		// pool.Close waits for every acquired connection: a connection
		// never given back fails the test instead of hanging it.
		closed := make(chan struct{})
		go func() { pool.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(30 * time.Second):
			t.Errorf("pool.Close did not return within 30 s: %d connections were never given back", pool.Stat().AcquiredConns())
		}
	})
	return pool
}

// hangAfter is how long a test waits for what comes within a few round
// trips before it calls it a hang: a bound no loaded machine reaches, never
// a measure of speed (issue 37: a test asserts behaviour; figures are
// benchmarks'). noPoll is a poll interval no test outlasts, for tests whose
// subject is a wake-up: a lost one waits the hour, and hangAfter fails it.
const (
	hangAfter = 2 * time.Minute
	noPoll    = time.Hour
)

// discardLog keeps the runtime's logs out of test output.
var discardLog = slog.New(slog.DiscardHandler)

// newPool opens a second pool on the test database with room for every
// relay listener, worker goroutine and heartbeat of a test (pgxpool's
// default is max(4, NumCPU), which a LISTEN connection per relay and eight
// workers would starve).
func newPool(t testing.TB, db *pgtest.DB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// newRelay builds a relay; cfg fields left zero take the test defaults
// (discarded logs), then the relay's own defaults.
func newRelay(t testing.TB, pool *pgxpool.Pool, pub relay.Publisher, cfg relay.Config) *relay.Relay {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = discardLog
	}
	rl, err := relay.New(pool, pub, &cfg)
	require.NoError(t, err)
	return rl
}

// newWorker builds a worker like newRelay.
func newWorker(t testing.TB, pool *pgxpool.Pool, src worker.Source, h worker.Handler, cfg worker.Config) *worker.Worker {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = discardLog
	}
	w, err := worker.New(pool, src, h, &cfg)
	require.NoError(t, err)
	return w
}

// liveCount returns how many of ids are still live (not terminal).
func liveCount(ctx context.Context, t testing.TB, db repo.DBTX, ids []uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(ctx,
		`SELECT count(*) FROM document_compilation_attempts WHERE id = ANY($1) AND active_slot IS NOT NULL`, ids).Scan(&n))
	return n
}

// requireQuiescent requires that nothing is left to dispatch or run: no
// live attempt and no outbox row pending, dispatching, dispatched or leased.
func requireQuiescent(ctx context.Context, t testing.TB, db repo.DBTX) {
	t.Helper()
	var live, busy int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE active_slot IS NOT NULL OR run_state IN ('dispatch_pending','queued','running','retry_wait')`).Scan(&live))
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM document_compilation_outbox WHERE status IN ('pending','dispatching','dispatched','leased')`).Scan(&busy))
	require.Zero(t, live, "live attempts left")
	require.Zero(t, busy, "outbox rows still dispatching or leased")
}

func attemptIDs(as []*kfstype.Attempt) []uuid.UUID {
	ids := make([]uuid.UUID, len(as))
	for i, a := range as {
		ids[i] = a.ID
	}
	return ids
}

// median returns the median of ds (which it sorts).
func median(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	n := len(ds)
	if n%2 == 1 {
		return ds[n/2]
	}
	return (ds[n/2-1] + ds[n/2]) / 2
}
