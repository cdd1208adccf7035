// Package natsjs_test runs the NATS JetStream adapter (adapters/natsjs) on
// real databases and NATS servers from the harness (pgtest, natstest): the
// lifecycle through NATS, deduplication, redelivery, deferred and stale
// deliveries, trace headers, a stream leader's loss and a broker outage,
// and bad configurations and input. It is in the tests module so that
// adapters/natsjs, which is released, never requires it (nor nats-server);
// the test of its unexported transient-error rule stays in adapters/natsjs.
package natsjs_test

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/adapters/natsjs"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/natstest"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var discardLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// connect opens a client on urls that keeps reconnecting (a test's
// outage must not close it) and closes it at cleanup.
func connect(t testing.TB, urls string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

// startNode starts a single JetStream server with a temporary store,
// stopped at cleanup.
func startNode(t testing.TB) *natstest.Node {
	t.Helper()
	n, err := natstest.StartNode(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(n.Shutdown)
	return n
}

// bundle is one test's database, broker client, stream and attempts.
type bundle struct {
	ctx  context.Context
	pool *pgxpool.Pool
	repo *repo.Repo
	js   jetstream.JetStream
	cfg  *natsjs.Config
	docs []testfactory.Document
}

// setup creates a database with docs documents (in spaces of 10), a
// stream and consumer on urls per cfg, and a pool sized for a relay and
// two workers.
func setup(t *testing.T, urls string, cfg natsjs.Config, docs int) *bundle {
	t.Helper()
	db := pgtest.NewDB(t)
	pcfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	pcfg.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b := &bundle{ctx: context.Background(), pool: pool, repo: repo.New(nil), cfg: &cfg}
	nc, js := connect(t, urls)
	wctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, natstest.WaitJetStream(wctx, nc))
	// A cluster answers before it can place three replicas: try again.
	var err2 error
	for err2 = natsjs.EnsureStream(wctx, js, b.cfg); err2 != nil && wctx.Err() == nil; err2 = natsjs.EnsureStream(wctx, js, b.cfg) {
		time.Sleep(200 * time.Millisecond)
	}
	require.NoError(t, err2)
	b.js = js
	if docs > 0 {
		b.docs = testfactory.SeedDocuments(b.ctx, t, pool, max(docs/10, 1), min(docs, 10))
	}
	return b
}

// startAll starts an attempt per document.
func (b *bundle) startAll(t *testing.T) []uuid.UUID {
	t.Helper()
	return b.start(t, b.docs)
}

// start starts an attempt for each of docs.
func (b *bundle) start(t *testing.T, docs []testfactory.Document) []uuid.UUID {
	t.Helper()
	return attemptIDs(testfactory.StartAll(b.ctx, t, b.repo, b.pool, docs, 0))
}

// relay returns a relay publishing through a natsjs.Publisher.
func (b *bundle) relay(t *testing.T, cfg relay.Config) *relay.Relay {
	t.Helper()
	pub, err := natsjs.NewPublisher(b.js, b.cfg)
	require.NoError(t, err)
	cfg.Logger = discardLog
	cfg.Repo = b.repo
	rl, err := relay.New(b.pool, pub, &cfg)
	require.NoError(t, err)
	return rl
}

// worker returns a worker receiving from a natsjs.Source on its own
// connection to urls.
func (b *bundle) worker(t *testing.T, urls string, h worker.Handler, cfg worker.Config) *worker.Worker {
	t.Helper()
	_, js := connect(t, urls)
	src, err := natsjs.NewSource(b.ctx, js, b.cfg)
	require.NoError(t, err)
	cfg.Logger = discardLog
	cfg.Repo = b.repo
	cfg.LeaseDuration = cmp.Or(cfg.LeaseDuration, b.cfg.LeaseDuration)
	w, err := worker.New(b.pool, src, h, &cfg)
	require.NoError(t, err)
	return w
}

// compiler is a handler that compiles each attempt and counts its runs.
type compiler struct {
	cands map[uuid.UUID]testfactory.Candidate
	mu    sync.Mutex
	runs  map[uuid.UUID]int
	// first, when set, decides the first run's result instead.
	first func(ctx context.Context, job *worker.Job) error
}

func newCompiler(docs []testfactory.Document) *compiler {
	return &compiler{cands: testfactory.Candidates(docs), runs: map[uuid.UUID]int{}}
}

func (c *compiler) Work(ctx context.Context, job *worker.Job) error {
	c.mu.Lock()
	c.runs[job.Attempt.ID]++
	n := c.runs[job.Attempt.ID]
	c.mu.Unlock()
	if n == 1 && c.first != nil {
		return c.first(ctx, job)
	}
	return testfactory.CompileJob(ctx, job, c.cands[job.Attempt.KnowledgeSpaceID], nil)
}

func (c *compiler) runsOf(id uuid.UUID) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[id]
}

// waitEnded waits until no attempt of ids is live; see waitEndedAtLeast.
func (b *bundle) waitEnded(t *testing.T, ids []uuid.UUID, stall time.Duration) {
	t.Helper()
	b.waitEndedAtLeast(t, ids, len(ids), stall)
}

// waitEndedAtLeast waits until n of ids have ended. It fails on a stall,
// when no attempt of ids ended for stall, not after a fixed total: a loaded
// machine slows a run down without anything being wrong (fixed totals
// failed at load average 30).
func (b *bundle) waitEndedAtLeast(t *testing.T, ids []uuid.UUID, n int, stall time.Duration) {
	t.Helper()
	last, lastMoved := -1, time.Now()
	for {
		ended := b.endedCount(t, ids)
		if ended >= n {
			return
		}
		if ended != last {
			last, lastMoved = ended, time.Now()
		} else if time.Since(lastMoved) > stall {
			require.FailNowf(t, "stalled", "fewer than %d attempts ended: %d, none more for %s", n, ended, stall)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// endedCount is how many of ids have ended.
func (b *bundle) endedCount(t *testing.T, ids []uuid.UUID) int {
	t.Helper()
	var ended int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM document_compilation_attempts WHERE id = ANY($1) AND active_slot IS NULL`, ids).Scan(&ended))
	return ended
}

// outcomes counts the attempts' run states and their outbox rows'
// statuses, read with SQL.
func (b *bundle) outcomes(t *testing.T, ids []uuid.UUID) (states map[kfstype.RunState]int, statuses map[kfstype.OutboxStatus]int) {
	t.Helper()
	states, statuses = map[kfstype.RunState]int{}, map[kfstype.OutboxStatus]int{}
	rows, err := b.pool.Query(b.ctx, `
		SELECT a.run_state, o.status FROM document_compilation_attempts a
		  JOIN document_compilation_outbox o ON o.attempt_id = a.id
		 WHERE a.id = ANY($1)`, ids)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var s kfstype.RunState
		var o kfstype.OutboxStatus
		require.NoError(t, rows.Scan(&s, &o))
		states[s]++
		statuses[o]++
	}
	require.NoError(t, rows.Err())
	return states, statuses
}

// requireAllSucceededOnce requires every attempt succeeded, its outbox row
// completed, and (from the state audit) reached a terminal state once.
func (b *bundle) requireAllSucceededOnce(t *testing.T, ids []uuid.UUID) {
	t.Helper()
	states, statuses := b.outcomes(t, ids)
	require.Equal(t, map[kfstype.RunState]int{kfstype.RunStateSucceeded: len(ids)}, states)
	require.Equal(t, map[kfstype.OutboxStatus]int{kfstype.OutboxStatusCompleted: len(ids)}, statuses, "no row dead-lettered")
	tc := testfactory.RequireTerminalOnce(b.ctx, t, b.pool, ids)
	require.Equal(t, map[kfstype.RunState]int{kfstype.RunStateSucceeded: len(ids)}, tc.Outcomes, "a success recorded twice")
}
