package runtime_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// workerBundle drives a worker one delivery at a time: the relay's RunOnce
// publishes to the queue, the test receives the message and calls Process.
type workerBundle struct {
	*env
	rl    *relay.Relay
	doc   testfactory.Document
	calls atomic.Int32
}

func setupWorker(t *testing.T) *workerBundle {
	t.Helper()
	b := &workerBundle{env: newEnv(t, 8)}
	b.doc = testfactory.SeedDocuments(b.ctx, t, b.pool, 1, 1)[0]
	b.rl = b.relay(t, relay.Config{PollOnly: true})
	return b
}

// worker returns a worker whose handler counts its calls before running h.
func (b *workerBundle) worker(t *testing.T, h worker.HandlerFunc, cfg worker.Config) *worker.Worker {
	t.Helper()
	return newWorker(t, b.pool, b.q, worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		b.calls.Add(1)
		return h(ctx, job)
	}), cfg)
}

func (b *workerBundle) start(t *testing.T, maxAttempts int32) *kfstype.Attempt {
	t.Helper()
	p := b.doc.Scope.StartParams()
	p.MaxExecutionAttempts = maxAttempts
	res, err := b.repo.Start(b.ctx, b.pool, p)
	require.NoError(t, err)
	return res.Attempt
}

// startWithMarkOpen starts an attempt, claims its outbox row and records
// its publication as jobID with MarkDispatched in a transaction left open
// (rolled back at cleanup unless the test commits it): the relay has
// published, its record is not yet committed.
func (b *workerBundle) startWithMarkOpen(t *testing.T, jobID string) (repo.Delivery, pgx.Tx) {
	t.Helper()
	a := b.start(t, 0)
	claimed, err := b.repo.ClaimOutbox(b.ctx, b.pool, &repo.ClaimOutboxParams{RelayID: "relay-test", BatchSize: 1})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) })
	mark, err := b.repo.MarkDispatched(b.ctx, tx, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{
		OutboxID: claimed[0].ID, LockToken: *claimed[0].LockToken, QueueJobID: jobID,
	}}})
	require.NoError(t, err)
	require.Len(t, mark.Marked, 1)
	return repo.Delivery{AttemptID: a.ID, QueueJobID: jobID}, tx
}

// publish runs the relay once and requires it published want rows.
func (b *workerBundle) publish(t *testing.T, want int) {
	t.Helper()
	n, err := b.rl.RunOnce(b.ctx)
	require.NoError(t, err)
	require.Equal(t, want, n)
}

// receive takes the next visible message off the queue.
func (b *workerBundle) receive(t *testing.T) worker.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, hangAfter)
	defer cancel()
	msg, err := b.q.Receive(ctx)
	require.NoError(t, err)
	return msg
}

func (b *workerBundle) rows(t *testing.T, id uuid.UUID) *testfactory.Rows {
	t.Helper()
	return testfactory.RequireInvariants(b.ctx, t, b.pool, id)
}

// processOne starts an attempt (maxAttempts as for start), has the relay
// publish it and w process the delivery.
func (b *workerBundle) processOne(t *testing.T, w *worker.Worker, maxAttempts int32) (*kfstype.Attempt, worker.Result) {
	t.Helper()
	a := b.start(t, maxAttempts)
	b.publish(t, 1)
	return a, w.Process(b.ctx, b.receive(t))
}

// requireFailed requires the attempt failed with code and a message that
// contains msg, and returns its rows for further checks.
func (b *workerBundle) requireFailed(t *testing.T, id uuid.UUID, code, msg string) *testfactory.Rows {
	t.Helper()
	rows := b.rows(t, id)
	require.Equal(t, kfstype.RunStateFailed, rows.Attempt.RunState)
	require.Equal(t, code, *rows.Attempt.LastErrorCode)
	require.Contains(t, *rows.Attempt.LastErrorMessage, msg)
	return rows
}

// TestPendingDeliveryWaitsInSlot: a delivery that arrives before its
// relay's MarkDispatched commits is leased in the slot once the mark
// lands, within Config.PendingDeliveryWait, and is not handed back; with
// the wait disabled it is handed back at once.
func TestPendingDeliveryWaitsInSlot(t *testing.T) {
	t.Parallel()
	compile := func(b *workerBundle) worker.HandlerFunc {
		return func(ctx context.Context, job *worker.Job) error {
			return testfactory.CompileJob(ctx, job, b.doc.Candidate, nil)
		}
	}

	t.Run("LeasedOnceTheMarkCommits", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		d, tx := b.startWithMarkOpen(t, "job-early")
		b.q.Inject(d)
		var metrics observe.Counts
		// A wait long enough for this test's own commit below.
		w := b.worker(t, compile(b), worker.Config{PendingDeliveryWait: time.Minute, Metrics: &metrics})
		done := make(chan worker.Result, 1)
		go func() { done <- w.Process(b.ctx, b.receive(t)) }()
		require.Eventually(t, func() bool { return metrics.Get(observe.PendingWaits) >= 2 },
			hangAfter, time.Millisecond, "the slot keeps trying while the mark is uncommitted")
		require.NoError(t, tx.Commit(b.ctx))
		res := <-done
		require.Equal(t, worker.OutcomeCompleted, res.Outcome, "%v", res.Err)
		require.Zero(t, metrics.Get(observe.DeferredDelivery), "never handed back")
		require.Equal(t, int32(1), b.calls.Load())
		require.Equal(t, kfstype.RunStateSucceeded, b.rows(t, res.AttemptID).Attempt.RunState)
	})

	t.Run("HandedBackWhenTheWaitIsOver", func(t *testing.T) {
		t.Parallel()
		for name, wait := range map[string]time.Duration{"Disabled": -1, "Short": 5 * time.Millisecond} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setupWorker(t)
				d, _ := b.startWithMarkOpen(t, "job-early")
				b.q.Inject(d)
				var metrics observe.Counts
				w := b.worker(t, compile(b), worker.Config{PendingDeliveryWait: wait, Metrics: &metrics})
				res := w.Process(b.ctx, b.receive(t))
				require.Equal(t, worker.OutcomeDeferred, res.Outcome)
				require.ErrorIs(t, res.Err, repo.ErrDeliveryPending)
				require.Equal(t, int64(1), metrics.Get(observe.DeferredDelivery))
				if wait < 0 {
					require.Zero(t, metrics.Get(observe.PendingWaits))
				} else {
					// 1, 2 and the 2 ms left of 5 ms.
					require.Equal(t, int64(3), metrics.Get(observe.PendingWaits))
				}
				require.Zero(t, b.calls.Load())
			})
		}
	})
}
