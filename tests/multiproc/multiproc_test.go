package multiproc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

func soak() bool { return os.Getenv("KFS_SOAK") == "1" }

// Shape of the run: CI-sized unless KFS_SOAK=1. A quarter of the attempts
// start up front, the rest at a steady pace over the window, below the
// actors' throughput: a backlog older than the visibility timeout would be
// republished over and over (each copy a stale delivery to acknowledge).
func shape() (attempts int, window time.Duration) {
	if soak() {
		return 2400, 60 * time.Second
	}
	return 400, 6 * time.Second
}

const (
	processes   = 2
	lease       = 2 * time.Second
	visibility  = 3 * time.Second // short: republished messages race across processes
	stepDelay   = 20 * time.Millisecond
	failRate    = 0.1
	maxAttempts = 10
)

// TestProcessesRaceOnTheSameRows runs two `kfsdb-bench work` processes and a
// relay and worker in the test process on the same attempts, while
// goroutines cancel, supersede (and start a replacement) and manually
// retry failed attempts.
func TestProcessesRaceOnTheSameRows(t *testing.T) {
	n, window := shape()
	bin := buildKfsdbBench(t)
	ctx := context.Background()
	db := pgtest.NewDB(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	r := repo.New(nil)

	testfactory.InstallLeaseAudit(ctx, t, db.Pool)
	testfactory.InstallStateAudit(ctx, t, db.Pool)
	docs := testfactory.SeedDocuments(ctx, t, db.Pool, 4, n/4)
	cands := testfactory.Candidates(docs)
	tr := &tracker{scope: map[uuid.UUID]testfactory.Scope{}}
	upfront := n / 4
	for i, a := range testfactory.StartAll(ctx, t, r, db.Pool, docs[:upfront], maxAttempts) {
		tr.add(a.ID, docs[i].Scope)
	}

	start := time.Now()
	procs := make([]*process, processes)
	for i := range procs {
		procs[i] = startWork(t, bin, db.URL, fmt.Sprintf("proc%d", i+1), &workFlags{
			delivery: "relay", lease: lease, stepDelay: stepDelay, failRate: failRate,
			extra: []string{"--visibility", visibility.String()},
		})
	}

	// The third relay and worker, in this process.
	logs := &testfactory.SyncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	q := memqueue.New()
	rl, err := relay.New(pool, q, &relay.Config{ID: "test-relay", Logger: log, PollInterval: 200 * time.Millisecond, VisibilityTimeout: visibility})
	require.NoError(t, err)
	w, err := worker.New(pool, q, worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		if rand.Float64() < failRate {
			return worker.Fatal("TEST_INJECTED_FAILURE", errors.New("failed on purpose"))
		}
		return testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(stepDelay):
				return nil
			}
		})
	}), &worker.Config{ID: "test-worker", Concurrency: 4, LeaseDuration: lease, Logger: log})
	require.NoError(t, err)
	runCtx, stopRuns := context.WithCancel(ctx)
	var runs sync.WaitGroup
	for _, run := range []func(context.Context) error{rl.Run, w.Run} {
		runs.Go(func() { require.ErrorIs(t, run(runCtx), context.Canceled) })
	}
	defer func() { stopRuns(); runs.Wait() }()

	// The racers.
	stats := &opStats{answers: map[string]int{}}
	raceCtx, stopRace := context.WithTimeout(ctx, window)
	defer stopRace()
	var racers sync.WaitGroup
	pace := func(d time.Duration) bool {
		select {
		case <-raceCtx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	var cancels, supersedes, replacements, retries atomic.Int64
	racers.Go(func() { // the producer: the other attempts, at a steady pace
		gap := window / time.Duration(n-upfront+1)
		for _, d := range docs[upfront:] {
			p := d.Scope.StartParams()
			p.MaxExecutionAttempts = maxAttempts
			res, err := r.Start(ctx, pool, p)
			stats.record("start", err)
			if err == nil {
				tr.add(res.Attempt.ID, d.Scope)
			}
			time.Sleep(gap)
		}
	})
	racers.Go(func() { // cancels, half of them with an expected row version
		for pace(40 * time.Millisecond) {
			id, s := tr.random()
			ref := s.Ref(id)
			if rand.IntN(2) == 0 {
				if a, err := r.GetAttempt(ctx, pool, &repo.GetAttemptParams{TenantID: s.TenantID, AttemptID: id}); err == nil {
					ref.ExpectedRowVersion = &a.RowVersion
				}
			}
			_, err := r.Cancel(ctx, pool, &repo.CancelParams{AttemptRef: ref, Reason: new("test cancel")})
			if err == nil {
				cancels.Add(1)
			}
			stats.record("cancel", err, repo.ErrInvalidTransition, repo.ErrStaleRowVersion)
		}
	})
	racers.Go(func() { // supersedes, each followed by a replacement attempt
		for pace(40 * time.Millisecond) {
			id, s := tr.random()
			_, err := r.Supersede(ctx, pool, &repo.SupersedeParams{AttemptRef: s.Ref(id), Reason: new("newer generation")})
			stats.record("supersede", err, repo.ErrInvalidTransition)
			if err != nil {
				continue
			}
			supersedes.Add(1)
			p := s.StartParams()
			p.MaxExecutionAttempts = maxAttempts
			res, err := r.Start(ctx, pool, p)
			stats.record("start replacement", err)
			if err == nil {
				tr.add(res.Attempt.ID, s)
				if res.Created {
					replacements.Add(1)
				}
			}
		}
	})
	racers.Go(func() { // manual retries of failed attempts
		for pace(100 * time.Millisecond) {
			// Each row's scope is read with it: a replacement the supersede
			// racer started can be run to failure before that racer adds
			// it to the tracker (seen on a loaded machine, where the
			// tracker's zero scope made RetryFailed refuse an empty
			// TenantID).
			rows, err := pool.Query(ctx, `SELECT tenant_id, knowledge_space_id, id FROM document_compilation_attempts WHERE run_state = 'failed' ORDER BY random() LIMIT 5`)
			require.NoError(t, err)
			var failed []repo.AttemptRef
			for rows.Next() {
				var ref repo.AttemptRef
				require.NoError(t, rows.Scan(&ref.TenantID, &ref.KnowledgeSpaceID, &ref.AttemptID))
				failed = append(failed, ref)
			}
			require.NoError(t, rows.Err())
			for _, ref := range failed {
				_, err := r.RetryFailed(ctx, pool, &repo.RetryFailedParams{AttemptRef: ref})
				if err == nil {
					retries.Add(1)
				}
				stats.record("retry failed", err, repo.ErrInvalidTransition, repo.ErrLiveAttemptExists)
			}
		}
	})
	racers.Wait()

	// Let the runtime finish every live attempt.
	waitNoneLive(ctx, t, db, 90*time.Second)
	duration := time.Since(start)
	stopRuns()
	runs.Wait()
	pool.Close()
	for _, p := range procs {
		p.stop(t)
	}

	// Every attempt the test knows, and no other, is in the table, each
	// terminal with its outbox row in the matching status.
	tr.mu.Lock()
	ids := append([]uuid.UUID(nil), tr.ids...)
	tr.mu.Unlock()
	pairs := requireEndPairs(ctx, t, db, len(ids))
	for _, id := range ids {
		testfactory.RequireInvariants(ctx, t, db.Pool, id)
	}
	tc := testfactory.RequireTerminalOnce(ctx, t, db.Pool, ids)
	leases := testfactory.RequireNoLeaseOverlap(ctx, t, db.Pool)
	fw := testfactory.RequireFencedWrites(ctx, t, db.Pool)

	// No deadlock: none reported to a caller, logged by a process, or
	// counted by PostgreSQL (every connection but db.Pool's is closed by
	// now).
	stats.mu.Lock()
	require.Empty(t, stats.unexpected, "unexpected answers to the racers")
	require.Zero(t, stats.deadlocks)
	answers := fmt.Sprint(stats.answers)
	stats.mu.Unlock()
	require.NotContains(t, logs.String(), "40P01")
	requireNoDeadlocks(ctx, t, db, procs)

	var perProc []string
	for _, p := range procs {
		c := p.counters()
		require.Positive(t, c["worker_leases_acquired"], "kfsdb-bench work %s took no lease:\n%s", p.id, p.out.String())
		perProc = append(perProc, fmt.Sprintf("%s: published %d, leases %d, completed %d, failed %d, stale %d",
			p.id, c["relay_published"], c["worker_leases_acquired"], c["worker_completed"], c["worker_failed"], c["worker_stale_deliveries"]))
	}
	t.Logf("FIGURES multiproc: %d attempts (%d document versions + %d replacements) in %s; actors: %d kfsdb-bench work processes (2 workers x 2 each) + in-process relay and worker (4) "+
		"+ 3 racer goroutines for %s; cancels applied %d, supersedes %d, manual retries %d; outcomes %v, reactivations %d; end pairs %v; "+
		"leases %d, 0 overlapping; fenced writes %d+%d, 0 after expiry; deadlocks 0 (pg_stat_database), 0 in output; racer answers %v; %s",
		len(ids), n, replacements.Load(), duration.Round(100*time.Millisecond), processes, window, cancels.Load(), supersedes.Load(), retries.Load(),
		tc.Outcomes, tc.Reactivations, pairs, leases, fw.KeptToken, fw.Outcomes, answers, strings.Join(perProc, "; "))
}
