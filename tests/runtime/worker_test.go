package runtime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

func TestWorker(t *testing.T) {
	t.Parallel()

	t.Run("CancelMidRunLosesLeaseAndStopsHandler", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		started := make(chan struct{})
		var cause atomic.Value
		w := b.worker(t, func(ctx context.Context, job *worker.Job) error {
			close(started)
			<-ctx.Done()
			cause.Store(context.Cause(ctx))
			return ctx.Err()
		}, worker.Config{LeaseDuration: 2 * time.Second, HeartbeatInterval: 100 * time.Millisecond})
		a := b.start(t, 0)
		b.publish(t, 1)
		msg := b.receive(t)
		done := make(chan worker.Result, 1)
		go func() { done <- w.Process(b.ctx, msg) }()
		<-started

		reason := "user canceled"
		_, err := b.repo.Cancel(b.ctx, b.pool, &repo.CancelParams{AttemptRef: b.doc.Scope.Ref(a.ID), Reason: &reason})
		require.NoError(t, err)

		var res worker.Result
		select {
		case res = <-done:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "the handler was not stopped after the cancel")
		}
		require.Equal(t, worker.OutcomeLeaseLost, res.Outcome)
		require.ErrorIs(t, res.Err, repo.ErrLeaseLost)
		require.ErrorIs(t, cause.Load().(error), repo.ErrLeaseLost, "handler context cause")
		rows := b.rows(t, a.ID)
		require.Equal(t, kfstype.RunStateCanceled, rows.Attempt.RunState)
		require.Equal(t, kfstype.ErrorCodeCanceled, *rows.Attempt.LastErrorCode)
		require.Equal(t, reason, *rows.Attempt.LastErrorMessage)
		_, acked, _ := b.q.Stats()
		require.EqualValues(t, 1, acked, "the spent delivery is acknowledged")
	})

	t.Run("TakeoverAfterExpiryStopsTheOldHandler", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		cfg := worker.Config{LeaseDuration: 5 * time.Second, HeartbeatInterval: 100 * time.Millisecond}
		var first atomic.Bool
		first.Store(true)
		started := make(chan struct{})
		var cause atomic.Value
		h := func(ctx context.Context, job *worker.Job) error {
			if first.CompareAndSwap(true, false) {
				close(started)
				<-ctx.Done() // stuck until the lease is lost
				cause.Store(context.Cause(ctx))
				// A stale handler's writes are refused.
				return job.Advance(context.WithoutCancel(ctx), kfstype.CheckpointParsed)
			}
			return testfactory.CompileJob(ctx, job, b.doc.Candidate, nil)
		}
		cfg1, cfg2 := cfg, cfg
		cfg1.ID, cfg2.ID = "worker-old", "worker-new"
		w1, w2 := b.worker(t, h, cfg1), b.worker(t, h, cfg2)
		a := b.start(t, 0)
		b.publish(t, 1)
		msg := b.receive(t)
		done := make(chan worker.Result, 1)
		go func() { done <- w1.Process(b.ctx, msg) }()
		<-started

		// The old worker stalls past its lease (simulated by moving the
		// lease's expiry, and the outbox row's redelivery time with it, to
		// the database's now): the relay redelivers and another worker takes
		// the attempt over.
		_, err := b.pool.Exec(b.ctx, `
			WITH a AS (UPDATE document_compilation_attempts SET lease_expires_at = now() WHERE id = $1 RETURNING id)
			UPDATE document_compilation_outbox SET available_at = now() WHERE attempt_id = (SELECT id FROM a)`, a.ID)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			n, err := b.rl.RunOnce(b.ctx)
			require.NoError(t, err)
			return n == 1
		}, hangAfter, 20*time.Millisecond)
		res2 := w2.Process(b.ctx, b.receive(t))
		require.Equal(t, worker.OutcomeCompleted, res2.Outcome, "%v", res2.Err)

		var res1 worker.Result
		select {
		case res1 = <-done:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "the old handler was not stopped")
		}
		require.Equal(t, worker.OutcomeLeaseLost, res1.Outcome)
		require.ErrorIs(t, cause.Load().(error), repo.ErrLeaseLost)
		rows := b.rows(t, a.ID)
		require.Equal(t, kfstype.RunStateSucceeded, rows.Attempt.RunState)
		require.EqualValues(t, 2, rows.Attempt.ExecutionAttempts)
	})

	t.Run("HeartbeatKeepsLeaseBeyondItsDuration", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		w := b.worker(t, func(ctx context.Context, job *worker.Job) error {
			first := job.Lease().ExpiresAt
			// Work longer than one lease: wait until it was renewed past
			// twice its original span.
			for !job.Lease().ExpiresAt.After(first.Add(time.Second)) {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
			return testfactory.CompileJob(ctx, job, b.doc.Candidate, nil)
		}, worker.Config{LeaseDuration: time.Second, HeartbeatInterval: 200 * time.Millisecond})
		a, res := b.processOne(t, w, 0)
		require.Equal(t, worker.OutcomeCompleted, res.Outcome, "%v", res.Err)
		require.Equal(t, kfstype.RunStateSucceeded, b.rows(t, a.ID).Attempt.RunState)
	})

	t.Run("StaleForgedAndDuplicateDeliveriesAreAckedWithoutRunning", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		w := b.worker(t, func(ctx context.Context, job *worker.Job) error {
			return testfactory.CompileJob(ctx, job, b.doc.Candidate, nil)
		}, worker.Config{})
		a := b.start(t, 0)
		b.publish(t, 1)
		legit := b.receive(t)

		stale := []repo.Delivery{
			{AttemptID: a.ID, QueueJobID: "mem-wrong"},                // wrong job id
			{AttemptID: uuid.Must(uuid.NewV7()), QueueJobID: "mem-1"}, // no such attempt
		}
		for _, d := range stale {
			b.q.Inject(d)
			res := w.Process(b.ctx, b.receive(t))
			require.Equal(t, worker.OutcomeStale, res.Outcome, "%+v: %v", d, res.Err)
		}
		require.Zero(t, b.calls.Load(), "handler ran for a stale delivery")
		require.Equal(t, kfstype.RunStateQueued, b.rows(t, a.ID).Attempt.RunState, "stale deliveries change nothing")

		res := w.Process(b.ctx, legit)
		require.Equal(t, worker.OutcomeCompleted, res.Outcome, "%v", res.Err)
		require.EqualValues(t, 1, b.calls.Load())

		// A duplicate of the completed attempt's delivery.
		b.q.Inject(legit.Delivery())
		res = w.Process(b.ctx, b.receive(t))
		require.Equal(t, worker.OutcomeStale, res.Outcome, "%v", res.Err)
		require.EqualValues(t, 1, b.calls.Load(), "handler ran for a duplicate")
		_, acked, retried := b.q.Stats()
		require.EqualValues(t, 4, acked)
		require.Zero(t, retried)
		require.Equal(t, kfstype.RunStateSucceeded, b.rows(t, a.ID).Attempt.RunState)
	})

	t.Run("PanicFailsWithPanicCode", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		w := b.worker(t, func(ctx context.Context, job *worker.Job) error {
			panic("index out of range in the outline builder")
		}, worker.Config{})
		a, res := b.processOne(t, w, 0)
		require.Equal(t, worker.OutcomeFailed, res.Outcome)
		rows := b.requireFailed(t, a.ID, kfstype.ErrorCodeHandlerPanic, "index out of range in the outline builder")
		require.Equal(t, kfstype.OutboxStatusDead, rows.Outbox.Status)
	})

	t.Run("FatalStoresItsCode", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		w := b.worker(t, func(ctx context.Context, job *worker.Job) error {
			return worker.Fatal("PDF_ENCRYPTED", errors.New("the document is password protected"))
		}, worker.Config{})
		a, res := b.processOne(t, w, 0)
		require.Equal(t, worker.OutcomeFailed, res.Outcome)
		b.requireFailed(t, a.ID, "PDF_ENCRYPTED", "the document is password protected")
	})

	t.Run("PlainErrorFailsWithDefaultCode", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		w := b.worker(t, func(ctx context.Context, job *worker.Job) error {
			return errors.New("unexpected")
		}, worker.Config{})
		a := b.start(t, 0)
		b.publish(t, 1)
		require.Equal(t, worker.OutcomeFailed, w.Process(b.ctx, b.receive(t)).Outcome)
		require.Equal(t, kfstype.ErrorCodeCompilationFailed, *b.rows(t, a.ID).Attempt.LastErrorCode)
	})

	t.Run("RetryableWaitsForBackoffThenSucceeds", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		const base = 400 * time.Millisecond
		w := b.worker(t, func(ctx context.Context, job *worker.Job) error {
			if job.Attempt.ExecutionAttempts == 1 {
				if err := testfactory.CompileUntil(ctx, job, b.doc.Candidate, kfstype.CheckpointParsed, nil); err != nil {
					return err
				}
				return worker.Retryable(errors.New("object store timeout"))
			}
			return testfactory.CompileJob(ctx, job, b.doc.Candidate, nil)
		}, worker.Config{RetryBackoffBase: base, RetryBackoffCap: 10 * base})
		a, res := b.processOne(t, w, 0)
		require.Equal(t, worker.OutcomeRetried, res.Outcome, "%v", res.Err)

		rows := b.rows(t, a.ID)
		require.Equal(t, kfstype.RunStateRetryWait, rows.Attempt.RunState)
		require.Equal(t, kfstype.ErrorCodeCompilationRetryable, *rows.Attempt.LastErrorCode)
		require.Contains(t, *rows.Attempt.LastErrorMessage, "object store timeout")
		// Backoff n = 1 execution attempt: exactly base after the write.
		require.Equal(t, base, rows.Attempt.RetryAt.Sub(rows.Attempt.UpdatedAt))
		require.Equal(t, kfstype.OutboxStatusPending, rows.Outbox.Status)
		require.Zero(t, rows.Outbox.DispatchAttempts, "a retry gets a fresh dispatch budget")

		// Not republished before retry_at, then republished and completed,
		// resuming at the kept checkpoint.
		var now time.Time
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT now()`).Scan(&now))
		if now.Before(*rows.Attempt.RetryAt) {
			n, err := b.rl.RunOnce(b.ctx)
			require.NoError(t, err)
			var after time.Time
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT now()`).Scan(&after))
			if after.Before(*rows.Attempt.RetryAt) {
				require.Zero(t, n, "republished before retry_at")
			}
		}
		require.Eventually(t, func() bool {
			n, err := b.rl.RunOnce(b.ctx)
			require.NoError(t, err)
			return n == 1
		}, hangAfter, 20*time.Millisecond)
		res = w.Process(b.ctx, b.receive(t))
		require.Equal(t, worker.OutcomeCompleted, res.Outcome, "%v", res.Err)
		rows = b.rows(t, a.ID)
		require.Equal(t, kfstype.RunStateSucceeded, rows.Attempt.RunState)
		require.EqualValues(t, 2, rows.Attempt.ExecutionAttempts)
		require.EqualValues(t, 2, b.calls.Load())
	})

	t.Run("NilBeforeSmokeEvalFails", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		w := b.worker(t, func(ctx context.Context, job *worker.Job) error {
			return testfactory.CompileUntil(ctx, job, b.doc.Candidate, kfstype.CheckpointProjectionBuilt, nil)
		}, worker.Config{})
		a, res := b.processOne(t, w, 0)
		require.Equal(t, worker.OutcomeFailed, res.Outcome)
		rows := b.requireFailed(t, a.ID, kfstype.ErrorCodeCompilationFailed, "smoke_eval_passed")
		require.Equal(t, kfstype.CheckpointProjectionBuilt, rows.Attempt.Checkpoint)
	})

	t.Run("DeadWorkerOnLastAttemptFailsExhausted", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		w := b.worker(t, func(ctx context.Context, job *worker.Job) error { return nil }, worker.Config{})
		a := b.start(t, 1)
		b.publish(t, 1)
		// A worker takes the only execution attempt and dies.
		_, _, err := b.repo.AcquireLease(b.ctx, b.pool, &repo.AcquireLeaseParams{
			Delivery: b.receive(t).Delivery(), WorkerID: "worker-dead", LeaseDuration: time.Second,
		})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			n, err := b.rl.RunOnce(b.ctx)
			require.NoError(t, err)
			return n == 1
		}, hangAfter, 20*time.Millisecond, "the relay redelivers after the lease expired")
		res := w.Process(b.ctx, b.receive(t))
		require.Equal(t, worker.OutcomeExhausted, res.Outcome, "%v", res.Err)
		require.Zero(t, b.calls.Load())
		rows := b.rows(t, a.ID)
		require.Equal(t, kfstype.RunStateFailed, rows.Attempt.RunState)
		require.Equal(t, kfstype.ErrorCodeExecutionAttemptsExhausted, *rows.Attempt.LastErrorCode)
	})

	t.Run("DeliveryRacingMarkDispatchedIsPendingNotRefused", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		// The relay's MarkDispatched is in flight in its own transaction
		// and commits between AcquireLease's statement and the read that
		// explains its refusal: the delivery raced the record of its own
		// publication, which is ErrDeliveryPending (retry in 100 ms), not
		// an invalid transition (retry in 1 s).
		d, tx := b.startWithMarkOpen(t, "job-racing")
		racing := &commitAfterFirstStatement{DBTX: b.pool, commit: func() { require.NoError(t, tx.Commit(b.ctx)) }}
		_, _, err := b.repo.AcquireLease(b.ctx, racing, &repo.AcquireLeaseParams{Delivery: d, WorkerID: "worker-test"})
		require.ErrorIs(t, err, repo.ErrDeliveryPending)
		require.True(t, racing.committed)

		// Delivered again, it runs.
		b.q.Inject(d)
		w := b.worker(t, func(ctx context.Context, job *worker.Job) error {
			return testfactory.CompileJob(ctx, job, b.doc.Candidate, nil)
		}, worker.Config{})
		require.Equal(t, worker.OutcomeCompleted, w.Process(b.ctx, b.receive(t)).Outcome)
	})
}

// commitAfterFirstStatement runs commit once the first statement sent
// through it has returned its row, to place a concurrent commit between a
// transition's statement and the read that explains its refusal.
type commitAfterFirstStatement struct {
	repo.DBTX
	commit    func()
	committed bool
}

func (c *commitAfterFirstStatement) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return &afterScan{Row: c.DBTX.QueryRow(ctx, sql, args...), after: func() {
		if !c.committed {
			c.committed = true
			c.commit()
		}
	}}
}

type afterScan struct {
	pgx.Row
	after func()
}

func (r *afterScan) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	r.after()
	return err
}
