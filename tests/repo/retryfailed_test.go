package repo_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestRetryFailed(t *testing.T) {
	t.Parallel()

	// failedAt builds a failed attempt that got to projection_built with a
	// candidate bound, was dispatched (job ids set) and ran once.
	failedAt := func(t *testing.T, b *testBundle, s *testfactory.Scope) *kfstype.Attempt {
		t.Helper()
		a, lease, _ := b.drv.Running(b.ctx, t, s, nil)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		b.clock.Advance(time.Second)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, b.drv.AdvanceTo(b.ctx, t, s, lease, kfstype.CheckpointProjectionBuilt).ID)
		b.clock.Advance(time.Second)
		a, err := b.repo.Fail(b.ctx, b.db.Pool, &repo.FailParams{
			Lease: lease, ErrorCode: kfstype.ErrorCodeCompilationFailed, ErrorMessage: "parser crashed",
		})
		require.NoError(t, err)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		return a
	}

	// retried is the rows expected after RetryFailed of before at now.
	retried := func(before *testfactory.Rows, now time.Time) testfactory.Rows {
		want := *before
		a, o := &want.Attempt, &want.Outbox
		a.RunState = kfstype.RunStateDispatchPending
		a.Active = true
		a.ExecutionAttempts = 0
		a.CompletedAt, a.StartedAt = nil, nil
		a.LastErrorCode, a.LastErrorMessage = nil, nil
		a.WorkerID, a.LeaseToken, a.LeaseExpiresAt, a.HeartbeatAt = nil, nil, nil, nil
		a.QueueJobID, a.ExternalJobID, a.RetryAt = nil, nil, nil
		a.RowVersion++
		a.UpdatedAt = now
		o.Status = kfstype.OutboxStatusPending
		o.DispatchAttempts = 0
		o.AvailableAt = now
		o.QueueJobID, o.ExternalJobID, o.DeliveredAt, o.LastError = nil, nil, nil, nil
		o.LockedBy, o.LockToken, o.LockedUntil = nil, nil, nil
		o.UpdatedAt = now
		return want
	}

	t.Run("ReactivatesFailedAttemptKeepingCheckpointAndCandidate", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := failedAt(t, b, s)
		before := testfactory.ReadRows(b.ctx, t, b.db.Pool, a.ID)
		require.Equal(t, kfstype.CheckpointProjectionBuilt, before.Attempt.Checkpoint)
		require.NotNil(t, before.Attempt.CandidatePublicationID)
		require.NotNil(t, before.Outbox.QueueJobID)
		require.NotNil(t, before.Outbox.DeliveredAt)
		require.NotNil(t, before.Attempt.StartedAt)

		now := b.clock.Advance(time.Minute)
		got, err := b.repo.RetryFailed(b.ctx, b.db.Pool, &repo.RetryFailedParams{AttemptRef: s.Ref(a.ID)})
		require.NoError(t, err)
		after := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		require.Equal(t, retried(before, now), *after)
		require.Equal(t, after.Attempt, *got)

		// The relay publishes it again and a worker resumes the work.
		del := b.drv.Dispatch(b.ctx, t, a.ID, nil)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		got, _, err = b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "w2"})
		require.NoError(t, err)
		after = testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		require.EqualValues(t, 1, after.Attempt.ExecutionAttempts)
		require.Equal(t, kfstype.CheckpointProjectionBuilt, got.Checkpoint)
	})

	t.Run("RetriesAtExpectedRowVersion", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := failedAt(t, b, s)
		before := testfactory.ReadRows(b.ctx, t, b.db.Pool, a.ID)
		now := b.clock.Advance(time.Minute)
		ref := s.Ref(a.ID)
		ref.ExpectedRowVersion = new(a.RowVersion)
		got, err := b.repo.RetryFailed(b.ctx, b.db.Pool, &repo.RetryFailedParams{AttemptRef: ref})
		require.NoError(t, err)
		after := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		require.Equal(t, retried(before, now), *after)
		require.Equal(t, after.Attempt, *got)
	})

	for _, state := range []kfstype.RunState{
		kfstype.RunStateDispatchPending, kfstype.RunStateQueued, kfstype.RunStateRunning, kfstype.RunStateRetryWait,
		kfstype.RunStateSucceeded, kfstype.RunStateCanceled, kfstype.RunStateSuperseded,
	} {
		t.Run("Refuses"+ctlStateName(state)+"Attempt", func(t *testing.T) {
			b := setup(t)
			s := b.scope(t)
			a := b.drv.InState(b.ctx, t, s, state)
			snap := b.snapshot(t, a.ID)
			b.clock.Advance(time.Minute)
			_, err := b.repo.RetryFailed(b.ctx, b.db.Pool, &repo.RetryFailedParams{AttemptRef: s.Ref(a.ID)})
			te := ctlRequireTransitionError(t, err, state)
			require.Equal(t, kfstype.RunStateDispatchPending, te.To)
			snap.requireUnchanged(t, b)
		})
	}

	t.Run("RefusesWhileAnotherAttemptIsLive", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		failed := failedAt(t, b, s)
		live := b.drv.InState(b.ctx, t, s, kfstype.RunStateDispatchPending)
		snap := b.snapshot(t, failed.ID, live.ID)
		b.clock.Advance(time.Minute)
		_, err := b.repo.RetryFailed(b.ctx, b.db.Pool, &repo.RetryFailedParams{AttemptRef: s.Ref(failed.ID)})
		require.ErrorIs(t, err, repo.ErrLiveAttemptExists)
		require.NotErrorIs(t, err, repo.ErrInvalidTransition)
		snap.requireUnchanged(t, b)

		// Paired positive: once the other attempt ended the retry goes through.
		_, err = b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: s.Ref(live.ID)})
		require.NoError(t, err)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, live.ID)
		before := testfactory.ReadRows(b.ctx, t, b.db.Pool, failed.ID)
		now := b.clock.Advance(time.Minute)
		_, err = b.repo.RetryFailed(b.ctx, b.db.Pool, &repo.RetryFailedParams{AttemptRef: s.Ref(failed.ID)})
		require.NoError(t, err)
		after := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, failed.ID)
		require.Equal(t, retried(before, now), *after)
	})

	ctlRefRefusals(t, ctlRefOp{
		ready: failedAt,
		call: func(b *testBundle, ref repo.AttemptRef) error {
			_, err := b.repo.RetryFailed(b.ctx, b.db.Pool, &repo.RetryFailedParams{AttemptRef: ref})
			return err
		},
	})
}
