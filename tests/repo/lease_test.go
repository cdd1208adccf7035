package repo_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// rwExhausted runs an attempt with MaxExecutionAttempts 1 once, lets the
// lease lapse and has the relay redeliver it. It returns the stale first
// delivery and the current one.
func (b *testBundle) rwExhausted(t *testing.T) (stale, current *repo.Delivery) {
	t.Helper()
	_, lease, del := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Start: &testfactory.StartOpts{MaxExecutionAttempts: new(int32(1))}})
	b.clock.Advance(repo.LeaseDurationDefault)
	return del, b.drv.Dispatch(b.ctx, t, lease.AttemptID, &testfactory.DispatchOpts{QueueJobID: new("job-redelivered")})
}

func TestAcquireLease(t *testing.T) {
	t.Parallel()

	t.Run("LeasesQueuedAttempt", func(t *testing.T) {
		b := setup(t)
		a := b.drv.Start(b.ctx, t, b.scope(t), nil)
		del := b.drv.Dispatch(b.ctx, t, a.ID, &testfactory.DispatchOpts{QueueJobID: new("job-1"), ExternalJobID: new("ext-1")})
		b.clock.Advance(3 * time.Second)
		before := b.rows(t, a.ID)
		got, lease, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-a", LeaseDuration: 45 * time.Second})
		require.NoError(t, err)
		require.NotEqual(t, uuid.Nil, lease.Token)
		now := b.clock.Now()
		require.Equal(t, &repo.Lease{AttemptID: a.ID, WorkerID: "worker-a", Token: lease.Token, ExpiresAt: now.Add(45 * time.Second)}, lease)
		want := testfactory.ExpectLeased(before, lease, now, 45*time.Second)
		require.Equal(t, want, b.rows(t, a.ID))
		require.Equal(t, want.Attempt, *got)
	})

	t.Run("TakesOverExpiredLease", func(t *testing.T) {
		b := setup(t)
		_, old, del := b.drv.Running(b.ctx, t, b.scope(t), nil)
		startedAt := *b.rows(t, old.AttemptID).Attempt.StartedAt
		b.clock.Advance(repo.LeaseDurationDefault) // expires exactly now
		before := b.rows(t, old.AttemptID)
		got, lease, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-b"})
		require.NoError(t, err)
		require.NotEqual(t, old.Token, lease.Token)
		want := testfactory.ExpectLeased(before, lease, b.clock.Now(), repo.LeaseDurationDefault)
		require.EqualValues(t, 2, want.Attempt.ExecutionAttempts)
		require.Equal(t, startedAt, *want.Attempt.StartedAt, "started_at is kept")
		require.Equal(t, want, b.rows(t, old.AttemptID))
		require.Equal(t, want.Attempt, *got)
	})

	t.Run("TakesOverExpiredLeaseAfterRedelivery", func(t *testing.T) {
		b := setup(t)
		_, old, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
		b.clock.Advance(repo.LeaseDurationDefault)
		del := b.drv.Dispatch(b.ctx, t, old.AttemptID, &testfactory.DispatchOpts{QueueJobID: new("job-2"), ExternalJobID: new("ext-2")})
		require.Equal(t, kfstype.RunStateRunning, b.rows(t, old.AttemptID).Attempt.RunState)
		b.clock.Advance(time.Second)
		before := b.rows(t, old.AttemptID)
		_, lease, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-b"})
		require.NoError(t, err)
		require.Equal(t, testfactory.ExpectLeased(before, lease, b.clock.Now(), repo.LeaseDurationDefault), b.rows(t, old.AttemptID))
	})

	t.Run("ResumesRetryWaitAttemptAfterRepublish", func(t *testing.T) {
		b := setup(t)
		_, first, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
		startedAt := *b.rows(t, first.AttemptID).Attempt.StartedAt
		_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: first, RetryDelay: 10 * time.Second, ErrorCode: "RETRY", ErrorMessage: "flaky"})
		require.NoError(t, err)
		b.rows(t, first.AttemptID)
		b.clock.Advance(10 * time.Second)
		del := b.drv.Dispatch(b.ctx, t, first.AttemptID, &testfactory.DispatchOpts{QueueJobID: new("job-2")})
		queued := b.rows(t, first.AttemptID)
		require.Equal(t, kfstype.RunStateQueued, queued.Attempt.RunState)
		require.Nil(t, queued.Attempt.RetryAt)
		b.clock.Advance(time.Second)
		before := b.rows(t, first.AttemptID)
		_, lease, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-b"})
		require.NoError(t, err)
		want := testfactory.ExpectLeased(before, lease, b.clock.Now(), repo.LeaseDurationDefault)
		require.EqualValues(t, 2, want.Attempt.ExecutionAttempts)
		require.Equal(t, startedAt, *want.Attempt.StartedAt)
		require.Equal(t, want, b.rows(t, first.AttemptID))
	})

	// Each refusal leaves both rows as they were.
	for _, tc := range []struct {
		name  string
		build func(t *testing.T, b *testBundle) *repo.Delivery
		check func(t *testing.T, err error)
	}{
		{"RejectsStaleQueueJobID", func(t *testing.T, b *testBundle) *repo.Delivery {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			stale := b.drv.Dispatch(b.ctx, t, a.ID, &testfactory.DispatchOpts{QueueJobID: new("job-1")})
			b.clock.Advance(repo.VisibilityTimeoutDefault)
			b.drv.Dispatch(b.ctx, t, a.ID, &testfactory.DispatchOpts{QueueJobID: new("job-2")}) // republished: job-1 is stale
			return stale
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrDeliveryMismatch) }},
		{"RejectsForgedQueueJobID", func(t *testing.T, b *testBundle) *repo.Delivery {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			b.drv.Dispatch(b.ctx, t, a.ID, &testfactory.DispatchOpts{QueueJobID: new("job-1")})
			return &repo.Delivery{AttemptID: a.ID, QueueJobID: "job-forged"}
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrDeliveryMismatch) }},
		{"RejectsDeliveryOfAnUnpublishedAttempt", func(t *testing.T, b *testBundle) *repo.Delivery {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			return &repo.Delivery{AttemptID: a.ID, QueueJobID: "job-1"}
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrDeliveryMismatch) }},
		{"RejectsExternalJobIDMismatch", func(t *testing.T, b *testBundle) *repo.Delivery {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			del := b.drv.Dispatch(b.ctx, t, a.ID, &testfactory.DispatchOpts{QueueJobID: new("job-1"), ExternalJobID: new("ext-1")})
			del.ExternalJobID = new("ext-2")
			return del
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrDeliveryMismatch) }},
		{"RejectsExternalJobIDWhenNoneWasPublished", func(t *testing.T, b *testBundle) *repo.Delivery {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			del := b.drv.Dispatch(b.ctx, t, a.ID, &testfactory.DispatchOpts{QueueJobID: new("job-1")})
			del.ExternalJobID = new("ext-1")
			return del
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrDeliveryMismatch) }},
		{"RejectsDeliveryOfARetryWaitAttempt", func(t *testing.T, b *testBundle) *repo.Delivery {
			// ScheduleRetry cleared the job ids, so no delivery matches a
			// retry_wait attempt, even past retry_at; the relay's
			// MarkDispatched records the next job and makes it queued.
			_, lease, del := b.drv.Running(b.ctx, t, b.scope(t), nil)
			_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: lease, RetryDelay: time.Second, ErrorCode: "RETRY", ErrorMessage: "flaky"})
			require.NoError(t, err)
			b.clock.Advance(2 * time.Second)
			require.Equal(t, kfstype.RunStateRetryWait, b.rows(t, lease.AttemptID).Attempt.RunState)
			return del
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrDeliveryMismatch) }},
		{"RejectsLiveLeaseOfAnotherWorker", func(t *testing.T, b *testBundle) *repo.Delivery {
			_, _, del := b.drv.Running(b.ctx, t, b.scope(t), nil)
			b.clock.Advance(repo.LeaseDurationDefault - time.Microsecond)
			return del
		}, func(t *testing.T, err error) {
			var te *repo.TransitionError
			require.ErrorAs(t, err, &te)
			require.ErrorIs(t, err, repo.ErrInvalidTransition)
			require.Equal(t, kfstype.RunStateRunning, te.From)
			require.NotNil(t, te.Attempt)
			require.Equal(t, "worker-test", *te.Attempt.WorkerID)
		}},
		{"RejectsCanceledAttempt", func(t *testing.T, b *testBundle) *repo.Delivery {
			s := b.scope(t)
			a := b.drv.Start(b.ctx, t, s, nil)
			del := b.drv.Dispatch(b.ctx, t, a.ID, &testfactory.DispatchOpts{QueueJobID: new("job-1")})
			_, err := b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: s.Ref(a.ID)})
			require.NoError(t, err)
			return del
		}, func(t *testing.T, err error) {
			var te *repo.TransitionError
			require.ErrorAs(t, err, &te)
			require.Equal(t, kfstype.RunStateCanceled, te.From)
		}},
		{"RejectsSucceededAttempt", func(t *testing.T, b *testBundle) *repo.Delivery {
			_, lease, del := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointSmokeEvalPassed)})
			_, err := b.repo.Complete(b.ctx, b.db.Pool, &repo.CompleteParams{Lease: lease})
			require.NoError(t, err)
			return del
		}, func(t *testing.T, err error) {
			var te *repo.TransitionError
			require.ErrorAs(t, err, &te)
			require.Equal(t, kfstype.RunStateSucceeded, te.From)
		}},
		{"RejectsExhaustedAttempt", func(t *testing.T, b *testBundle) *repo.Delivery {
			_, current := b.rwExhausted(t)
			return current
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrAttemptsExhausted) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			del := tc.build(t, b)
			before := b.rows(t, del.AttemptID)
			got, lease, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-b"})
			require.Error(t, err)
			tc.check(t, err)
			require.Nil(t, got)
			require.Nil(t, lease)
			b.requireUnchanged(t, before)
		})
	}

	t.Run("RejectsUnknownAttempt", func(t *testing.T) {
		b := setup(t)
		_, _, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: repo.Delivery{AttemptID: uuid.New(), QueueJobID: "job-1"}, WorkerID: "w"})
		require.ErrorIs(t, err, repo.ErrNotFound)
	})

	t.Run("RejectsInvalidInput", func(t *testing.T) {
		b := setup(t)
		a := b.drv.Start(b.ctx, t, b.scope(t), nil)
		del := b.drv.Dispatch(b.ctx, t, a.ID, &testfactory.DispatchOpts{QueueJobID: new("job-1")})
		before := b.rows(t, a.ID)
		good := repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-a"}
		for _, tc := range []struct {
			field string
			edit  func(*repo.AcquireLeaseParams)
		}{
			{"AttemptID", func(p *repo.AcquireLeaseParams) { p.AttemptID = uuid.Nil }},
			{"QueueJobID", func(p *repo.AcquireLeaseParams) { p.QueueJobID = "" }},
			{"QueueJobID", func(p *repo.AcquireLeaseParams) { p.QueueJobID = strings.Repeat("j", 256) }},
			{"ExternalJobID", func(p *repo.AcquireLeaseParams) { p.ExternalJobID = new("") }},
			{"WorkerID", func(p *repo.AcquireLeaseParams) { p.WorkerID = "" }},
			{"LeaseDuration", func(p *repo.AcquireLeaseParams) { p.LeaseDuration = -time.Second }},
		} {
			p := good
			tc.edit(&p)
			_, _, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &p)
			requireInputError(t, err, tc.field)
			b.requireUnchanged(t, before)
		}
	})
}

func TestFailExhausted(t *testing.T) {
	t.Parallel()

	t.Run("FailsAttemptWithNoExecutionsLeft", func(t *testing.T) {
		b := setup(t)
		_, current := b.rwExhausted(t)
		before := b.rows(t, current.AttemptID)
		_, _, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *current, WorkerID: "worker-b"})
		require.ErrorIs(t, err, repo.ErrAttemptsExhausted)
		b.requireUnchanged(t, before)

		b.clock.Advance(time.Second)
		got, err := b.repo.FailExhausted(b.ctx, b.db.Pool, &repo.FailExhaustedParams{Delivery: *current})
		require.NoError(t, err)
		want := testfactory.ExpectEnded(before, kfstype.RunStateFailed, kfstype.OutboxStatusDead, b.clock.Now())
		want.Attempt.LastErrorCode = new(kfstype.ErrorCodeExecutionAttemptsExhausted)
		want.Attempt.LastErrorMessage = new("execution attempts exhausted (1 of 1)")
		require.Equal(t, want, b.rows(t, current.AttemptID))
		require.Equal(t, want.Attempt, *got)
	})

	for _, tc := range []struct {
		name  string
		build func(t *testing.T, b *testBundle) *repo.Delivery
		check func(t *testing.T, err error)
	}{
		{"RejectsAttemptWithExecutionsLeft", func(t *testing.T, b *testBundle) *repo.Delivery {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			return b.drv.Dispatch(b.ctx, t, a.ID, &testfactory.DispatchOpts{QueueJobID: new("job-1")})
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrInvalidTransition) }},
		{"RejectsAttemptWithLiveLease", func(t *testing.T, b *testBundle) *repo.Delivery {
			_, _, del := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Start: &testfactory.StartOpts{MaxExecutionAttempts: new(int32(1))}})
			b.clock.Advance(repo.LeaseDurationDefault - time.Microsecond)
			return del
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrInvalidTransition) }},
		{"RejectsStaleDelivery", func(t *testing.T, b *testBundle) *repo.Delivery {
			stale, _ := b.rwExhausted(t)
			return stale
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrDeliveryMismatch) }},
		{"RejectsExternalJobIDMismatch", func(t *testing.T, b *testBundle) *repo.Delivery {
			_, current := b.rwExhausted(t)
			current.ExternalJobID = new("ext-forged")
			return current
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrDeliveryMismatch) }},
		{"RejectsTerminalAttempt", func(t *testing.T, b *testBundle) *repo.Delivery {
			_, current := b.rwExhausted(t)
			_, err := b.repo.FailExhausted(b.ctx, b.db.Pool, &repo.FailExhaustedParams{Delivery: *current})
			require.NoError(t, err)
			return current
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrInvalidTransition) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			del := tc.build(t, b)
			before := b.rows(t, del.AttemptID)
			got, err := b.repo.FailExhausted(b.ctx, b.db.Pool, &repo.FailExhaustedParams{Delivery: *del})
			tc.check(t, err)
			require.Nil(t, got)
			b.requireUnchanged(t, before)
		})
	}
}
