package runtime_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// TestStopAndRestartCompletesEverything stops a relay and two workers in
// the middle of a run, with every handler slot busy, and starts new
// instances: the stopping workers hand their attempts back
// (WORKER_SHUTDOWN), the new ones finish everything, and nothing is left
// dispatching or running.
func TestStopAndRestartCompletesEverything(t *testing.T) {
	t.Parallel()
	const n = 60
	e := newEnv(t, 16)
	ctx, pool := e.ctx, e.pool
	docs, attempts := e.start(t, 2, n/2, 0)
	ids := attemptIDs(attempts)
	cands := testfactory.Candidates(docs)

	// First generation: odd attempts block in the handler until the worker
	// stops, so the slots fill with running attempts.
	block := map[uuid.UUID]bool{}
	for i, a := range attempts {
		block[a.ID] = i%2 == 1
	}
	var blocked atomic.Int32
	gen1 := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		c := cands[job.Attempt.KnowledgeSpaceID]
		if !block[job.Attempt.ID] {
			return testfactory.CompileJob(ctx, job, c, nil)
		}
		if err := testfactory.CompileUntil(ctx, job, c, kfstype.CheckpointOutlineBuilt, nil); err != nil {
			return err
		}
		blocked.Add(1)
		<-ctx.Done()
		return ctx.Err()
	})
	relayCfg := relay.Config{PollInterval: 100 * time.Millisecond, LockDuration: 2 * time.Second, PublishTimeout: time.Second, BatchSize: 10}
	workerCfg := worker.Config{Concurrency: 4, LeaseDuration: 10 * time.Second}
	wc1, wc2 := workerCfg, workerCfg
	w1 := e.worker(t, gen1, wc1)
	w2 := e.worker(t, gen1, wc2)
	w1.TestSignals().Processed.Init()
	w2.TestSignals().Processed.Init()
	rl := e.relay(t, relayCfg)
	stop := testfactory.RunAll(context.Background(), t, rl.Run, w1.Run, w2.Run)

	// All eight slots hold a blocked attempt: stop mid-run.
	require.Eventually(t, func() bool { return blocked.Load() == 8 }, hangAfter, 10*time.Millisecond)
	stop()

	// Each blocked handler's attempt was handed back for another run.
	var released []uuid.UUID
	for _, sig := range []*worker.TestSignals{w1.TestSignals(), w2.TestSignals()} {
	drain:
		for {
			select {
			case res := <-sig.Processed.C():
				if res.Outcome == worker.OutcomeReleased {
					released = append(released, res.AttemptID)
				}
			default:
				break drain
			}
		}
	}
	require.Len(t, released, 8, "attempts handed back by the stopping workers")
	for _, id := range released {
		rows := testfactory.RequireInvariants(ctx, t, pool, id)
		require.Equal(t, kfstype.RunStateRetryWait, rows.Attempt.RunState)
		require.Equal(t, worker.ErrorCodeWorkerShutdown, *rows.Attempt.LastErrorCode)
		require.Equal(t, kfstype.CheckpointOutlineBuilt, rows.Attempt.Checkpoint, "work done before the stop is kept")
		require.EqualValues(t, 1, rows.Attempt.ExecutionAttempts)
	}
	require.Positive(t, liveCount(ctx, t, pool, ids), "the first generation finished everything; nothing was interrupted")

	// Second generation, new instances on the same queue (the broker
	// survives): everything completes.
	gen2 := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		return testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], nil)
	})
	w3 := e.worker(t, gen2, workerCfg)
	w4 := e.worker(t, gen2, workerCfg)
	rl2 := e.relay(t, relayCfg)
	stop2 := testfactory.RunAll(context.Background(), t, rl2.Run, w3.Run, w4.Run)
	require.Eventually(t, func() bool { return liveCount(ctx, t, pool, ids) == 0 }, hangAfter, 50*time.Millisecond)
	stop2()

	for _, id := range ids {
		rows := testfactory.RequireInvariants(ctx, t, pool, id)
		require.Equal(t, kfstype.RunStateSucceeded, rows.Attempt.RunState, "attempt %s", id)
	}
	for _, id := range released {
		rows := testfactory.ReadRows(ctx, t, pool, id)
		require.EqualValues(t, 2, rows.Attempt.ExecutionAttempts, "a released attempt runs once more")
	}
	requireQuiescent(ctx, t, pool)
}
