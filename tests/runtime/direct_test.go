package runtime_test

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// directWorker builds a worker on a PostgreSQL source.
func (e *env) directWorker(t testing.TB, h worker.Handler, scfg pgsource.Config, wcfg worker.Config) *worker.Worker {
	t.Helper()
	return newDirectWorker(t, e.pool, h, scfg, wcfg)
}

// newDirectWorker builds a worker on a PostgreSQL source, both on pool.
func newDirectWorker(t testing.TB, pool *pgxpool.Pool, h worker.Handler, scfg pgsource.Config, wcfg worker.Config) *worker.Worker {
	t.Helper()
	if scfg.Logger == nil {
		scfg.Logger = discardLog
	}
	src, err := pgsource.New(pool, &scfg)
	require.NoError(t, err)
	return newWorker(t, pool, src, h, wcfg)
}

// compileHandler compiles every attempt to smoke_eval_passed (the worker
// then completes it) and counts runs per attempt.
func compileHandler(cands map[uuid.UUID]testfactory.Candidate, runs *sync.Map) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		n, _ := runs.LoadOrStore(job.Attempt.ID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		return testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], nil)
	})
}

// waitAllEnded waits until every one of ids has ended. It fails on a
// stall, when none ended for stall (a hang), never on the time the whole
// takes: a loaded machine is slow, not wrong.
func waitAllEnded(ctx context.Context, t *testing.T, pool *pgxpool.Pool, ids []uuid.UUID, stall time.Duration) {
	t.Helper()
	last, moved := -1, time.Now()
	for {
		var live int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts
			WHERE id = ANY($1) AND completed_at IS NULL`, ids).Scan(&live))
		if live == 0 {
			return
		}
		if live != last {
			last, moved = live, time.Now()
		}
		require.Less(t, time.Since(moved), stall, "%d of %d attempts still live, none ended for %s", live, len(ids), stall)
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDirectDelivery(t *testing.T) {
	t.Parallel()

	t.Run("TwoWorkersCompleteEveryAttemptOnce", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, 24)
		ctx, pool := e.ctx, e.pool
		testfactory.InstallLeaseAudit(ctx, t, pool)
		docs, attempts := e.start(t, 6, 50, 0)
		ids := attemptIDs(attempts)
		var runs sync.Map
		h := compileHandler(testfactory.Candidates(docs), &runs)
		var counts observe.Counts
		w1 := e.directWorker(t, h, pgsource.Config{Metrics: &counts}, worker.Config{Concurrency: 4})
		w2 := e.directWorker(t, h, pgsource.Config{Metrics: &counts}, worker.Config{Concurrency: 4, SingleCompletions: true})
		stop := testfactory.RunAll(ctx, t, w1.Run, w2.Run)
		waitAllEnded(ctx, t, pool, ids, 60*time.Second)
		stop()
		for _, id := range ids {
			rows := testfactory.RequireInvariants(ctx, t, pool, id)
			require.Equal(t, kfstype.RunStateSucceeded, rows.Attempt.RunState)
			require.EqualValues(t, 1, rows.Attempt.ExecutionAttempts)
			require.EqualValues(t, 1, rows.Outbox.DispatchAttempts)
			n, _ := runs.Load(id)
			require.EqualValues(t, 1, n.(*atomic.Int32).Load(), "attempt %s ran more than once", id)
		}
		testfactory.RequireNoLeaseOverlap(ctx, t, pool)
		require.EqualValues(t, len(ids), counts.Get(observe.FetchedLeases))
		t.Logf("counts: %v", counts.Snapshot())
		var span, run, wait string
		require.NoError(t, pool.QueryRow(ctx, `SELECT (max(completed_at) - min(created_at))::text, avg(completed_at - started_at)::text, avg(started_at - created_at)::text FROM document_compilation_attempts`).Scan(&span, &run, &wait))
		t.Logf("span %s, avg run %s, avg wait %s", span, run, wait)
	})

	t.Run("ACommitWakesAnIdleSource", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, 8)
		ctx, pool := e.ctx, e.pool
		docs := testfactory.SeedDocuments(ctx, t, pool, 1, 1)
		ran := make(chan time.Time, 1)
		h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
			ran <- time.Now()
			return testfactory.CompileJob(ctx, job, docs[0].Candidate, nil)
		})
		// An hour's poll: only the notification can wake the source
		// within the test (no bound on how quickly: a slow machine is
		// not a lost wake-up).
		w := e.directWorker(t, h, pgsource.Config{PollInterval: noPoll}, worker.Config{Concurrency: 2})
		testfactory.RunAll(ctx, t, w.Run)
		// Idle and registered: the source's registration row is there.
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_outbox_idle_listeners WHERE listener_id = $1`, w.ID()).Scan(&n))
			return n == 1
		}, hangAfter, 5*time.Millisecond)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = e.repo.Start(ctx, tx, docs[0].Scope.StartParams())
		require.NoError(t, err)
		committed := time.Now()
		require.NoError(t, tx.Commit(ctx))
		select {
		case at := <-ran:
			t.Logf("commit -> handler %s", at.Sub(committed))
		case <-time.After(hangAfter):
			t.Fatal("the committed Start did not wake the idle source (its poll is an hour)")
		}
	})

	t.Run("PollOnlyWorks", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, 8)
		ctx, pool := e.ctx, e.pool
		docs := testfactory.SeedDocuments(ctx, t, pool, 2, 10)
		var runs sync.Map
		w := e.directWorker(t, compileHandler(testfactory.Candidates(docs), &runs),
			pgsource.Config{PollOnly: true, PollInterval: 50 * time.Millisecond}, worker.Config{Concurrency: 3})
		testfactory.RunAll(ctx, t, w.Run)
		ids := attemptIDs(testfactory.StartAll(ctx, t, e.repo, pool, docs, 0))
		waitAllEnded(ctx, t, pool, ids, 30*time.Second)
		var listeners int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_outbox_idle_listeners`).Scan(&listeners))
		require.Zero(t, listeners, "a poll-only source never registers idle")
	})

	t.Run("AStoppingWorkerHandsItsLeasesBack", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, 8)
		ctx, pool := e.ctx, e.pool
		_, attempts := e.start(t, 1, 4, 0)
		ids := attemptIDs(attempts)
		started := make(chan struct{}, len(ids))
		h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		})
		w := e.directWorker(t, h, pgsource.Config{}, worker.Config{Concurrency: 2})
		stop := testfactory.RunAll(ctx, t, w.Run)
		for range 2 {
			<-started
		}
		stop()
		var states []kfstype.RunState
		for _, id := range ids {
			rows := testfactory.RequireInvariants(ctx, t, pool, id)
			states = append(states, rows.Attempt.RunState)
			if rows.Attempt.RunState == kfstype.RunStateRetryWait {
				require.Equal(t, new(worker.ErrorCodeWorkerShutdown), rows.Attempt.LastErrorCode)
			}
		}
		require.ElementsMatch(t, []kfstype.RunState{kfstype.RunStateRetryWait, kfstype.RunStateRetryWait,
			kfstype.RunStateDispatchPending, kfstype.RunStateDispatchPending}, states,
			"the two running attempts are handed back, the two others never fetched")
	})
}

// TestSourceRefusesBadUse covers the source's own checks.
func TestSourceRefusesBadUse(t *testing.T) {
	t.Parallel()
	pool := newEnv(t, 4).pool
	_, err := pgsource.New(nil, nil)
	require.Error(t, err)
	for name, cfg := range map[string]pgsource.Config{
		"BatchSize":  {BatchSize: repo.MaxBatchSize + 1},
		"PerTenant":  {PerTenant: -1},
		"MaxTenants": {MaxTenants: repo.MaxFetchTenants + 1},
		"Negative":   {PollInterval: -time.Second},
	} {
		_, err := pgsource.New(pool, &cfg)
		require.Error(t, err, name)
	}
	for _, j := range []float64{-0.1, 1.5, math.NaN(), math.Inf(1)} {
		_, err := pgsource.New(pool, &pgsource.Config{PollJitter: j})
		require.ErrorIs(t, err, repo.ErrInvalidInput, "PollJitter %v", j)
		require.ErrorContains(t, err, "Config.PollJitter", "PollJitter %v", j)
	}
	_, err = pgsource.New(pool, &pgsource.Config{PollJitter: 1})
	require.NoError(t, err)
	src, err := pgsource.New(pool, nil)
	require.NoError(t, err)
	_, err = src.Receive(context.Background())
	require.ErrorIs(t, err, pgsource.ErrNotBound)
	require.ErrorIs(t, src.Run(context.Background()), pgsource.ErrNotBound)
	h := worker.HandlerFunc(func(context.Context, *worker.Job) error { return nil })
	_, err = worker.New(pool, src, h, &worker.Config{ID: "worker-one"})
	require.NoError(t, err)
	_, err = worker.New(pool, src, h, &worker.Config{ID: "worker-two"})
	require.ErrorContains(t, err, "bound to worker \"worker-one\"")
}
