package faults_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// soak reports whether the long form runs (KFS_SOAK=1).
func soak() bool { return os.Getenv("KFS_SOAK") == "1" }

// Load shape: CI-sized unless KFS_SOAK=1.
const (
	leaseDuration = 2 * time.Second
	workers       = 8
	stepDelay     = 25 * time.Millisecond
	maxAttempts   = 50 // faults cost execution attempts; none may run out
)

func loadSize() (upfront, during int) {
	if soak() {
		return 1500, 500
	}
	return 200, 100
}

var discardLog = slog.New(slog.DiscardHandler)

// requireContainer skips tests that restart or pause the server when the
// package runs against KFS_TEST_DATABASE_URL.
func requireContainer(t *testing.T) *pgtest.Server {
	t.Helper()
	srv := pgtest.CurrentServer(t)
	if !srv.IsContainer() {
		t.Skipf("faults: %s is set, so there is no container to restart or pause; run without it (pgtest starts %s) for this test",
			pgtest.EnvDatabaseURL, pgtest.DefaultImage)
	}
	return srv
}

func newPool(t testing.TB, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// retry calls f until it returns nil or an error repo.IsRetryable rejects,
// for at most a minute. Every transient error must match none of the state
// sentinels: a connection error never reads as a state.
func retry[T any](ctx context.Context, t testing.TB, errs *errorLog, f func(context.Context) (T, error)) (T, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		v, err := f(cctx)
		cancel()
		if err == nil || !repo.IsRetryable(err) || time.Now().After(deadline) {
			return v, err
		}
		errs.transient(t, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// stateSentinels are the errors that report a row's state.
var stateSentinels = []error{
	repo.ErrNotFound, repo.ErrStaleRowVersion, repo.ErrLeaseLost, repo.ErrDeliveryMismatch, repo.ErrDeliveryPending,
	repo.ErrInvalidTransition, repo.ErrHeadConflict, repo.ErrLiveAttemptExists, repo.ErrAttemptsExhausted,
	repo.ErrCandidateRejected, repo.ErrInvalidInput, repo.ErrConstraint, repo.ErrOutboxLockLost,
}

// errorLog counts transient errors seen by callers and records any that
// matched a state sentinel.
type errorLog struct {
	n        atomic.Int64
	mu       sync.Mutex
	wrong    []string
	examples map[string]bool
}

func (l *errorLog) transient(t testing.TB, err error) {
	l.n.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range stateSentinels {
		if errors.Is(err, s) {
			l.wrong = append(l.wrong, fmt.Sprintf("%v (matches %v)", err, s))
		}
	}
	if l.examples == nil {
		l.examples = map[string]bool{}
	}
	if len(l.examples) < 5 {
		l.examples[err.Error()] = true
	}
}

func (l *errorLog) requireClean(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.wrong, "transient errors that read as a state")
}

// loadRun is one load run: seeded documents, a relay and workers over a
// memqueue, a producer starting more attempts while faults happen, and a
// probe making control-plane and worker calls whose right answers are
// known.
type loadRun struct {
	t       *testing.T
	srv     *pgtest.Server
	db      *pgtest.DB
	pool    *pgxpool.Pool
	repo    *repo.Repo
	metrics *observe.Counts
	errs    errorLog // transient errors seen by the producer and the probe

	mu         sync.Mutex
	ids        []uuid.UUID
	probeCalls atomic.Int64
	probeWrong []string
	stopped    atomic.Int64 // handlers stopped with cause ErrLeaseLost
}

// loadReport is what a run did, for the test log and the report.
type loadReport struct {
	Attempts        int
	Duration        time.Duration
	Leases          int
	FencedKept      int
	FencedOutcomes  int
	LeasesLost      int64
	HandlersStopped int64
	Retried         int64
	Stale           int64
	Transient       int64
	ProbeCalls      int64
}

func (r loadReport) String() string {
	return fmt.Sprintf("attempts=%d, all succeeded, 0 lost, 0 duplicated; duration=%s; leases=%d, 0 overlapping; "+
		"fenced writes=%d heartbeats/advances + %d outcomes, 0 after expiry; leases lost=%d; handlers stopped by lease loss=%d; "+
		"retries scheduled=%d; stale deliveries=%d; transient errors seen by callers=%d, 0 read as a state; probe calls=%d, 0 wrong",
		r.Attempts, r.Duration.Round(100*time.Millisecond), r.Leases, r.FencedKept, r.FencedOutcomes, r.LeasesLost, r.HandlersStopped,
		r.Retried, r.Stale, r.Transient, r.ProbeCalls)
}

// runLoad seeds the documents, starts most attempts, runs a relay and
// workers, and calls inject once a fifth of them have succeeded, while a
// producer starts the rest and a probe checks answers; inject returns when
// its faults are over. runLoad then waits for every attempt to succeed and
// checks the rows, the leases and the fencing.
func runLoad(t *testing.T, inject func(ctx context.Context, lr *loadRun)) loadReport {
	t.Helper()
	return runLoadWith(t, &repo.Config{}, inject)
}

// runLoadWith is runLoad with the relay, workers, producer and probe on a
// Repo made from cfg.
func runLoadWith(t *testing.T, cfg *repo.Config, inject func(ctx context.Context, lr *loadRun)) loadReport {
	t.Helper()
	ctx := context.Background()
	lr := &loadRun{t: t, srv: pgtest.CurrentServer(t), db: pgtest.NewDB(t), repo: repo.New(cfg), metrics: &observe.Counts{}}
	// Every worker goroutine and its heartbeat, the relay's listener and
	// claims, the producer, the probe and the test's polling.
	lr.pool = newPool(t, lr.db.URL, 2*workers+10)
	testfactory.InstallLeaseAudit(ctx, t, lr.pool)

	upfront, during := loadSize()
	// Round up to whole spaces, then keep exactly the load's size (the
	// soak's 2,000 is not a multiple of 6).
	docs := testfactory.SeedDocuments(ctx, t, lr.pool, 6, (upfront+during+5)/6)
	require.GreaterOrEqual(t, len(docs), upfront+during)
	docs = docs[:upfront+during]
	cands := testfactory.Candidates(docs)
	for _, a := range testfactory.StartAll(ctx, t, lr.repo, lr.pool, docs[:upfront], maxAttempts) {
		lr.ids = append(lr.ids, a.ID)
	}
	probe := lr.probeAttempt(ctx)

	q := memqueue.New()
	rl, err := relay.New(lr.pool, q, &relay.Config{
		Logger: discardLog, Metrics: lr.metrics, Repo: lr.repo, PollInterval: 100 * time.Millisecond, BatchSize: 20,
		LockDuration: 2 * time.Second, PublishTimeout: time.Second, WriteTimeout: 2 * time.Second,
		VisibilityTimeout: 10 * time.Second, BackoffBase: 100 * time.Millisecond, BackoffCap: time.Second,
	})
	require.NoError(t, err)
	handler := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		err := testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(stepDelay):
				return nil
			}
		})
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), repo.ErrLeaseLost) {
			lr.stopped.Add(1)
		}
		return err
	})
	runs := []func(context.Context) error{rl.Run}
	for i := range workers {
		w, err := worker.New(lr.pool, q, handler, &worker.Config{
			ID: fmt.Sprintf("faults-worker-%d", i), Concurrency: 1, Logger: discardLog, Metrics: lr.metrics, Repo: lr.repo,
			LeaseDuration: leaseDuration, WriteTimeout: 2 * time.Second,
			RetryBackoffBase: 100 * time.Millisecond, RetryBackoffCap: time.Second,
		})
		require.NoError(t, err)
		runs = append(runs, w.Run)
	}

	started := time.Now()
	stopAll := testfactory.RunAll(ctx, t, runs...)

	sideCtx, stopSide := context.WithCancel(ctx)
	defer stopSide()
	var producer, prober sync.WaitGroup
	producer.Go(func() { lr.produce(sideCtx, docs[upfront:]) })
	prober.Go(func() { lr.runProbe(sideCtx, probe) })

	lr.waitSucceeded(ctx, upfront/5, 60*time.Second)
	inject(ctx, lr)
	producer.Wait()
	lr.waitAllDone(ctx, upfront+during, 120*time.Second)
	stopSide()
	prober.Wait()
	duration := time.Since(started)
	stopAll()

	return lr.verify(ctx, probe, duration)
}

// probeAttempt makes a canceled attempt the probe asks about.
func (lr *loadRun) probeAttempt(ctx context.Context) *probeTarget {
	t := lr.t
	s := testfactory.NewScope(ctx, t, lr.pool, nil)
	res, err := lr.repo.Start(ctx, lr.pool, s.StartParams())
	require.NoError(t, err)
	_, err = lr.repo.Cancel(ctx, lr.pool, &repo.CancelParams{AttemptRef: s.Ref(res.Attempt.ID)})
	require.NoError(t, err)
	return &probeTarget{scope: s, id: res.Attempt.ID}
}

type probeTarget struct {
	scope *testfactory.Scope
	id    uuid.UUID
}

// firstID returns the first attempt started; the producer appends to ids
// concurrently.
func (lr *loadRun) firstID() uuid.UUID {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.ids[0]
}

// produce starts an attempt for each document, retrying transient errors.
// A retried Start whose first try had committed finds its attempt live and
// returns it (Created false): still one attempt per document.
func (lr *loadRun) produce(ctx context.Context, docs []testfactory.Document) {
	for _, d := range docs {
		p := d.Scope.StartParams()
		p.MaxExecutionAttempts = maxAttempts
		res, err := retry(ctx, lr.t, &lr.errs, func(ctx context.Context) (*repo.StartResult, error) {
			return lr.repo.Start(ctx, lr.pool, p)
		})
		if err != nil {
			lr.mu.Lock()
			lr.probeWrong = append(lr.probeWrong, fmt.Sprintf("start: %v", err))
			lr.mu.Unlock()
			continue
		}
		lr.mu.Lock()
		lr.ids = append(lr.ids, res.Attempt.ID)
		lr.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// runProbe asks three questions with known answers about the canceled
// probe attempt until ctx ends: read it (canceled), cancel it again
// (ErrInvalidTransition), heartbeat a made-up lease on it (ErrLeaseLost).
// Transient errors are retried; a final answer must be the right one.
func (lr *loadRun) runProbe(ctx context.Context, p *probeTarget) {
	wrong := func(format string, args ...any) {
		lr.mu.Lock()
		lr.probeWrong = append(lr.probeWrong, fmt.Sprintf(format, args...))
		lr.mu.Unlock()
	}
	lease := &repo.Lease{AttemptID: p.id, Token: uuid.New(), WorkerID: "probe", ExpiresAt: time.Now().Add(time.Hour)}
	for ctx.Err() == nil {
		lr.probeCalls.Add(3)
		a, err := retry(ctx, lr.t, &lr.errs, func(ctx context.Context) (*kfstype.Attempt, error) {
			return lr.repo.GetAttempt(ctx, lr.pool, p.scope.TenantID, p.id)
		})
		if ctx.Err() != nil {
			return
		}
		if err != nil || a.RunState != kfstype.RunStateCanceled {
			wrong("GetAttempt: %v, %v", a, err)
		}
		_, err = retry(ctx, lr.t, &lr.errs, func(ctx context.Context) (*kfstype.Attempt, error) {
			return lr.repo.Cancel(ctx, lr.pool, &repo.CancelParams{AttemptRef: p.scope.Ref(p.id)})
		})
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, repo.ErrInvalidTransition) {
			wrong("Cancel: want ErrInvalidTransition, got %v", err)
		}
		_, err = retry(ctx, lr.t, &lr.errs, func(ctx context.Context) (*repo.Lease, error) {
			return lr.repo.Heartbeat(ctx, lr.pool, &repo.HeartbeatParams{Lease: lease, LeaseDuration: leaseDuration})
		})
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, repo.ErrLeaseLost) {
			wrong("Heartbeat: want ErrLeaseLost, got %v", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// count runs a count(*) query, tolerating a server that is down (-1).
func (lr *loadRun) count(ctx context.Context, sql string, args ...any) int {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var n int
	if err := lr.pool.QueryRow(cctx, sql, args...).Scan(&n); err != nil {
		return -1
	}
	return n
}

func (lr *loadRun) waitSucceeded(ctx context.Context, n int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for lr.count(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'succeeded'`) < n {
		require.True(lr.t, time.Now().Before(deadline), "fewer than %d attempts succeeded within %s", n, timeout)
		time.Sleep(50 * time.Millisecond)
	}
}

func (lr *loadRun) waitAllDone(ctx context.Context, total int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		done := lr.count(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'succeeded'`)
		if done >= total {
			return
		}
		if time.Now().After(deadline) {
			rows, _ := lr.pool.Query(ctx, `SELECT run_state || '/' || o.status || ' ' || count(*) FROM document_compilation_attempts a
				JOIN document_compilation_outbox o ON o.attempt_id = a.id GROUP BY 1`)
			var states []string
			for rows.Next() {
				var s string
				_ = rows.Scan(&s)
				states = append(states, s)
			}
			rows.Close()
			require.FailNow(lr.t, "attempts did not all succeed", "%d of %d succeeded within %s; states: %v; metrics: %v",
				done, total, timeout, states, lr.metrics.Snapshot())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// verify checks the end state: every attempt succeeded exactly once and
// nothing is lost, the invariants hold, leases never overlapped, no write
// under an expired lease, no transient error read as a state.
func (lr *loadRun) verify(ctx context.Context, probe *probeTarget, d time.Duration) loadReport {
	t := lr.t
	upfront, during := loadSize()
	total := upfront + during
	lr.mu.Lock()
	ids := append([]uuid.UUID(nil), lr.ids...)
	require.Empty(t, lr.probeWrong, "calls answered wrongly")
	lr.mu.Unlock()
	lr.errs.requireClean(t)

	require.Len(t, ids, total)
	seen := map[uuid.UUID]bool{}
	for _, id := range ids {
		require.False(t, seen[id], "attempt %s started twice", id)
		seen[id] = true
	}
	type pair struct {
		State  kfstype.RunState
		Status kfstype.OutboxStatus
	}
	rows, err := lr.pool.Query(ctx, `SELECT a.run_state, o.status, count(*) FROM document_compilation_attempts a
		LEFT JOIN document_compilation_outbox o ON o.attempt_id = a.id WHERE a.id <> $1 GROUP BY 1, 2`, probe.id)
	require.NoError(t, err)
	got := map[pair]int{}
	for rows.Next() {
		var p pair
		var status *kfstype.OutboxStatus
		var n int
		require.NoError(t, rows.Scan(&p.State, &status, &n))
		if status != nil {
			p.Status = *status
		}
		got[p] = n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[pair]int{{kfstype.RunStateSucceeded, kfstype.OutboxStatusCompleted}: total}, got,
		"every attempt succeeded with its one outbox row completed")
	var outboxRows, dupVersions int
	require.NoError(t, lr.pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_outbox WHERE attempt_id <> $1`, probe.id).Scan(&outboxRows))
	require.Equal(t, total, outboxRows)
	require.NoError(t, lr.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts
		GROUP BY tenant_id, knowledge_space_id, document_asset_id, document_version HAVING count(*) > 1) d`).Scan(&dupVersions))
	require.Zero(t, dupVersions, "document versions with more than one attempt")
	for _, id := range ids {
		testfactory.RequireInvariants(ctx, t, lr.pool, id)
	}

	leases := testfactory.RequireNoLeaseOverlap(ctx, t, lr.pool)
	fw := testfactory.RequireFencedWrites(ctx, t, lr.pool)
	return loadReport{
		Attempts: total, Duration: d, Leases: leases, FencedKept: fw.KeptToken, FencedOutcomes: fw.Outcomes,
		LeasesLost: lr.metrics.Get(observe.LeasesLost), HandlersStopped: lr.stopped.Load(),
		Retried: lr.metrics.Get(observe.Retried), Stale: lr.metrics.Get(observe.StaleDeliveries),
		Transient: lr.errs.n.Load(), ProbeCalls: lr.probeCalls.Load(),
	}
}
