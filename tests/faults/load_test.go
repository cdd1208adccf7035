package faults_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

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

	lr.waitSucceeded(ctx, upfront/5, 60*time.Second) // 60 s without one success is a hang
	inject(ctx, lr)
	producer.Wait()
	lr.waitAllDone(ctx, upfront+during, 60*time.Second)
	stopSide()
	prober.Wait()
	duration := time.Since(started)
	stopAll()

	return lr.verify(ctx, probe, duration)
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

// waitSucceeded waits until n attempts have succeeded. It fails only when
// the count stalls for stall: a loaded machine slows the run down, and
// that is not a failure; no progress at all for that long is.
func (lr *loadRun) waitSucceeded(ctx context.Context, n int, stall time.Duration) {
	lr.waitProgress(ctx, n, stall, "fewer than %d attempts succeeded")
}

// waitAllDone waits until total attempts have succeeded, failing (with the
// states and metrics) when the count stalls for stall.
func (lr *loadRun) waitAllDone(ctx context.Context, total int, stall time.Duration) {
	lr.waitProgress(ctx, total, stall, "attempts did not all succeed: fewer than %d")
}

// waitProgress polls the succeeded count until it reaches n; the deadline
// moves on whenever the count grows.
func (lr *loadRun) waitProgress(ctx context.Context, n int, stall time.Duration, what string) {
	best, deadline := -1, time.Now().Add(stall)
	for {
		done := lr.count(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'succeeded'`)
		if done >= n {
			return
		}
		if done > best {
			best, deadline = done, time.Now().Add(stall)
		}
		if time.Now().After(deadline) {
			rows, _ := lr.pool.Query(ctx, `SELECT run_state || '/' || o.status || ' ' || count(*) FROM document_compilation_attempts a
				JOIN document_compilation_outbox o ON o.attempt_id = a.id GROUP BY 1`)
			var states []string
			for rows != nil && rows.Next() {
				var s string
				_ = rows.Scan(&s)
				states = append(states, s)
			}
			if rows != nil {
				rows.Close()
			}
			require.FailNow(lr.t, fmt.Sprintf(what, n), "no attempt succeeded for %s (stuck at %d); states: %v; metrics: %v",
				stall, best, states, lr.metrics.Snapshot())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
