package repo_test

import (
	"cmp"
	"context"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// wantLeased is before with the attempt leased to workerID at now.
func wantLeased(before *testfactory.Rows, lease *repo.Lease, now time.Time, d time.Duration) *testfactory.Rows {
	want := *before
	a := &want.Attempt
	a.RunState = kfstype.RunStateRunning
	a.ExecutionAttempts++
	a.WorkerID = new(lease.WorkerID)
	a.LeaseToken = new(lease.Token)
	a.LeaseExpiresAt = new(now.Add(d))
	a.HeartbeatAt = new(now)
	if a.StartedAt == nil {
		a.StartedAt = new(now)
	}
	a.RetryAt = nil
	a.RowVersion++
	a.UpdatedAt = now
	want.Outbox.Status = kfstype.OutboxStatusLeased
	want.Outbox.AvailableAt = now.Add(d)
	want.Outbox.LockedBy, want.Outbox.LockToken, want.Outbox.LockedUntil = nil, nil, nil
	want.Outbox.UpdatedAt = now
	return &want
}

// wantEnded is before with the attempt ended in state at now (terminal
// columns set, lease cleared) and its outbox row in status.
func wantEnded(before *testfactory.Rows, state kfstype.RunState, status kfstype.OutboxStatus, now time.Time) *testfactory.Rows {
	want := *before
	a := &want.Attempt
	a.RunState = state
	a.Active = false
	a.CompletedAt = new(now)
	a.WorkerID, a.LeaseToken, a.LeaseExpiresAt, a.HeartbeatAt = nil, nil, nil, nil
	a.RetryAt = nil
	a.RowVersion++
	a.UpdatedAt = now
	want.Outbox.Status = status
	want.Outbox.LockedBy, want.Outbox.LockToken, want.Outbox.LockedUntil = nil, nil, nil
	want.Outbox.UpdatedAt = now
	return &want
}

// rwAdvanceTo advances a running attempt step by step to target, binding
// a fresh candidate publication at projection_built, and checks the
// invariants after every step.
func (b *testBundle) rwAdvanceTo(t *testing.T, s *testfactory.Scope, lease *repo.Lease, target kfstype.Checkpoint) {
	t.Helper()
	cps := kfstype.Checkpoints()
	for i := 1; i <= target.Rank(); i++ {
		p := &repo.AdvanceParams{Lease: lease, Checkpoint: cps[i]}
		if cps[i] == kfstype.CheckpointProjectionBuilt {
			id, fp := s.Publication(b.ctx, t, b.db.Pool, "candidate")
			p.CandidatePublicationID, p.CandidateFingerprint = &id, &fp
		}
		_, err := b.repo.Advance(b.ctx, b.db.Pool, p)
		require.NoError(t, err)
		b.rwRows(t, lease.AttemptID)
	}
}

// rwExhausted runs an attempt with MaxExecutionAttempts 1 once, lets the
// lease lapse and has the relay redeliver it. It returns the stale first
// delivery and the current one.
func (b *testBundle) rwExhausted(t *testing.T) (stale, current *repo.Delivery) {
	t.Helper()
	_, lease, del := b.rwRunning(t, func(p *repo.StartParams) { p.MaxExecutionAttempts = 1 })
	b.clock.Advance(repo.LeaseDurationDefault)
	return del, b.rwDispatch(t, lease.AttemptID, "job-redelivered", nil)
}

func TestAcquireLease(t *testing.T) {
	t.Parallel()

	t.Run("LeasesQueuedAttempt", func(t *testing.T) {
		b := setup(t)
		_, a := b.rwStart(t, nil)
		del := b.rwDispatch(t, a.ID, "job-1", new("ext-1"))
		b.clock.Advance(3 * time.Second)
		before := b.rwRows(t, a.ID)
		got, lease, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-a", LeaseDuration: 45 * time.Second})
		require.NoError(t, err)
		require.NotEqual(t, uuid.Nil, lease.Token)
		now := b.clock.Now()
		require.Equal(t, &repo.Lease{AttemptID: a.ID, WorkerID: "worker-a", Token: lease.Token, ExpiresAt: now.Add(45 * time.Second)}, lease)
		want := wantLeased(before, lease, now, 45*time.Second)
		require.Equal(t, want, b.rwRows(t, a.ID))
		require.Equal(t, want.Attempt, *got)
	})

	t.Run("TakesOverExpiredLease", func(t *testing.T) {
		b := setup(t)
		_, old, del := b.rwRunning(t, nil)
		startedAt := *b.rwRows(t, old.AttemptID).Attempt.StartedAt
		b.clock.Advance(repo.LeaseDurationDefault) // expires exactly now
		before := b.rwRows(t, old.AttemptID)
		got, lease, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-b"})
		require.NoError(t, err)
		require.NotEqual(t, old.Token, lease.Token)
		want := wantLeased(before, lease, b.clock.Now(), repo.LeaseDurationDefault)
		require.EqualValues(t, 2, want.Attempt.ExecutionAttempts)
		require.Equal(t, startedAt, *want.Attempt.StartedAt, "started_at is kept")
		require.Equal(t, want, b.rwRows(t, old.AttemptID))
		require.Equal(t, want.Attempt, *got)
	})

	t.Run("TakesOverExpiredLeaseAfterRedelivery", func(t *testing.T) {
		b := setup(t)
		_, old, _ := b.rwRunning(t, nil)
		b.clock.Advance(repo.LeaseDurationDefault)
		del := b.rwDispatch(t, old.AttemptID, "job-2", new("ext-2"))
		require.Equal(t, kfstype.RunStateRunning, b.rwRows(t, old.AttemptID).Attempt.RunState)
		b.clock.Advance(time.Second)
		before := b.rwRows(t, old.AttemptID)
		_, lease, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-b"})
		require.NoError(t, err)
		require.Equal(t, wantLeased(before, lease, b.clock.Now(), repo.LeaseDurationDefault), b.rwRows(t, old.AttemptID))
	})

	t.Run("ResumesRetryWaitAttemptAfterRepublish", func(t *testing.T) {
		b := setup(t)
		_, first, _ := b.rwRunning(t, nil)
		startedAt := *b.rwRows(t, first.AttemptID).Attempt.StartedAt
		_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: first, RetryDelay: 10 * time.Second, ErrorCode: "RETRY", ErrorMessage: "flaky"})
		require.NoError(t, err)
		b.rwRows(t, first.AttemptID)
		b.clock.Advance(10 * time.Second)
		del := b.rwDispatch(t, first.AttemptID, "job-2", nil)
		queued := b.rwRows(t, first.AttemptID)
		require.Equal(t, kfstype.RunStateQueued, queued.Attempt.RunState)
		require.Nil(t, queued.Attempt.RetryAt)
		b.clock.Advance(time.Second)
		before := b.rwRows(t, first.AttemptID)
		_, lease, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-b"})
		require.NoError(t, err)
		want := wantLeased(before, lease, b.clock.Now(), repo.LeaseDurationDefault)
		require.EqualValues(t, 2, want.Attempt.ExecutionAttempts)
		require.Equal(t, startedAt, *want.Attempt.StartedAt)
		require.Equal(t, want, b.rwRows(t, first.AttemptID))
	})

	// Each refusal leaves both rows as they were.
	for _, tc := range []struct {
		name  string
		build func(t *testing.T, b *testBundle) *repo.Delivery
		check func(t *testing.T, err error)
	}{
		{"RejectsStaleQueueJobID", func(t *testing.T, b *testBundle) *repo.Delivery {
			_, a := b.rwStart(t, nil)
			stale := b.rwDispatch(t, a.ID, "job-1", nil)
			b.clock.Advance(repo.VisibilityTimeoutDefault)
			b.rwDispatch(t, a.ID, "job-2", nil) // republished: job-1 is stale
			return stale
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrDeliveryMismatch) }},
		{"RejectsForgedQueueJobID", func(t *testing.T, b *testBundle) *repo.Delivery {
			_, a := b.rwStart(t, nil)
			b.rwDispatch(t, a.ID, "job-1", nil)
			return &repo.Delivery{AttemptID: a.ID, QueueJobID: "job-forged"}
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrDeliveryMismatch) }},
		{"RejectsDeliveryOfAnUnpublishedAttempt", func(t *testing.T, b *testBundle) *repo.Delivery {
			_, a := b.rwStart(t, nil)
			return &repo.Delivery{AttemptID: a.ID, QueueJobID: "job-1"}
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrDeliveryMismatch) }},
		{"RejectsExternalJobIDMismatch", func(t *testing.T, b *testBundle) *repo.Delivery {
			_, a := b.rwStart(t, nil)
			del := b.rwDispatch(t, a.ID, "job-1", new("ext-1"))
			del.ExternalJobID = new("ext-2")
			return del
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrDeliveryMismatch) }},
		{"RejectsExternalJobIDWhenNoneWasPublished", func(t *testing.T, b *testBundle) *repo.Delivery {
			_, a := b.rwStart(t, nil)
			del := b.rwDispatch(t, a.ID, "job-1", nil)
			del.ExternalJobID = new("ext-1")
			return del
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrDeliveryMismatch) }},
		{"RejectsDeliveryOfARetryWaitAttempt", func(t *testing.T, b *testBundle) *repo.Delivery {
			// ScheduleRetry cleared the job ids, so no delivery matches a
			// retry_wait attempt, even past retry_at; the relay's
			// MarkDispatched records the next job and makes it queued.
			_, lease, del := b.rwRunning(t, nil)
			_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: lease, RetryDelay: time.Second, ErrorCode: "RETRY", ErrorMessage: "flaky"})
			require.NoError(t, err)
			b.clock.Advance(2 * time.Second)
			require.Equal(t, kfstype.RunStateRetryWait, b.rwRows(t, lease.AttemptID).Attempt.RunState)
			return del
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrDeliveryMismatch) }},
		{"RejectsLiveLeaseOfAnotherWorker", func(t *testing.T, b *testBundle) *repo.Delivery {
			_, _, del := b.rwRunning(t, nil)
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
			s, a := b.rwStart(t, nil)
			del := b.rwDispatch(t, a.ID, "job-1", nil)
			_, err := b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: s.Ref(a.ID)})
			require.NoError(t, err)
			return del
		}, func(t *testing.T, err error) {
			var te *repo.TransitionError
			require.ErrorAs(t, err, &te)
			require.Equal(t, kfstype.RunStateCanceled, te.From)
		}},
		{"RejectsSucceededAttempt", func(t *testing.T, b *testBundle) *repo.Delivery {
			s, lease, del := b.rwRunning(t, nil)
			b.rwAdvanceTo(t, s, lease, kfstype.CheckpointSmokeEvalPassed)
			_, err := b.repo.Complete(b.ctx, b.db.Pool, lease)
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
			before := b.rwRows(t, del.AttemptID)
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
		_, a := b.rwStart(t, nil)
		del := b.rwDispatch(t, a.ID, "job-1", nil)
		before := b.rwRows(t, a.ID)
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
		before := b.rwRows(t, current.AttemptID)
		_, _, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *current, WorkerID: "worker-b"})
		require.ErrorIs(t, err, repo.ErrAttemptsExhausted)
		b.requireUnchanged(t, before)

		b.clock.Advance(time.Second)
		got, err := b.repo.FailExhausted(b.ctx, b.db.Pool, current)
		require.NoError(t, err)
		want := wantEnded(before, kfstype.RunStateFailed, kfstype.OutboxStatusDead, b.clock.Now())
		want.Attempt.LastErrorCode = new(kfstype.ErrorCodeExecutionAttemptsExhausted)
		want.Attempt.LastErrorMessage = new("execution attempts exhausted (1 of 1)")
		require.Equal(t, want, b.rwRows(t, current.AttemptID))
		require.Equal(t, want.Attempt, *got)
	})

	for _, tc := range []struct {
		name  string
		build func(t *testing.T, b *testBundle) *repo.Delivery
		check func(t *testing.T, err error)
	}{
		{"RejectsAttemptWithExecutionsLeft", func(t *testing.T, b *testBundle) *repo.Delivery {
			_, a := b.rwStart(t, nil)
			return b.rwDispatch(t, a.ID, "job-1", nil)
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrInvalidTransition) }},
		{"RejectsAttemptWithLiveLease", func(t *testing.T, b *testBundle) *repo.Delivery {
			_, _, del := b.rwRunning(t, func(p *repo.StartParams) { p.MaxExecutionAttempts = 1 })
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
			_, err := b.repo.FailExhausted(b.ctx, b.db.Pool, current)
			require.NoError(t, err)
			return current
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, repo.ErrInvalidTransition) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			del := tc.build(t, b)
			before := b.rwRows(t, del.AttemptID)
			got, err := b.repo.FailExhausted(b.ctx, b.db.Pool, del)
			tc.check(t, err)
			require.Nil(t, got)
			b.requireUnchanged(t, before)
		})
	}
}

// leaseFaults each lose a running attempt's lease (at smoke_eval_passed,
// so Complete would otherwise succeed) and return the lease to present.
var leaseFaults = []struct {
	name  string
	apply func(t *testing.T, b *testBundle, s *testfactory.Scope, lease *repo.Lease, del *repo.Delivery) *repo.Lease
}{
	{"OtherOwner", func(t *testing.T, b *testBundle, _ *testfactory.Scope, lease *repo.Lease, _ *repo.Delivery) *repo.Lease {
		l := *lease
		l.WorkerID = "worker-intruder"
		return &l
	}},
	{"ForgedToken", func(t *testing.T, b *testBundle, _ *testfactory.Scope, lease *repo.Lease, _ *repo.Delivery) *repo.Lease {
		l := *lease
		l.Token = uuid.New()
		return &l
	}},
	{"StaleTokenAfterTakeover", func(t *testing.T, b *testBundle, _ *testfactory.Scope, lease *repo.Lease, del *repo.Delivery) *repo.Lease {
		b.clock.Advance(repo.LeaseDurationDefault)
		b.rwAcquire(t, del, "worker-b")
		return lease
	}},
	{"StaleTokenOfSameWorker", func(t *testing.T, b *testBundle, _ *testfactory.Scope, lease *repo.Lease, del *repo.Delivery) *repo.Lease {
		b.clock.Advance(repo.LeaseDurationDefault)
		b.rwAcquire(t, del, lease.WorkerID)
		return lease
	}},
	{"ExpiredLease", func(t *testing.T, b *testBundle, _ *testfactory.Scope, lease *repo.Lease, _ *repo.Delivery) *repo.Lease {
		b.clock.Advance(lease.ExpiresAt.Sub(b.clock.Now())) // lease_expires_at = now
		return lease
	}},
	{"ExpiredLeaseRedelivered", func(t *testing.T, b *testBundle, _ *testfactory.Scope, lease *repo.Lease, _ *repo.Delivery) *repo.Lease {
		b.clock.Advance(repo.LeaseDurationDefault + time.Second)
		b.rwDispatch(t, lease.AttemptID, "job-redelivered", nil)
		return lease
	}},
	{"OutboxReclaimedByRelay", func(t *testing.T, b *testBundle, _ *testfactory.Scope, lease *repo.Lease, _ *repo.Delivery) *repo.Lease {
		// The relay's clock reached the lease's expiry and it reclaimed the
		// leased row; the worker's clock (b.clock) is still before it.
		b.rwReclaim(t, lease)
		return lease
	}},
	{"TerminalAttempt", func(t *testing.T, b *testBundle, s *testfactory.Scope, lease *repo.Lease, _ *repo.Delivery) *repo.Lease {
		_, err := b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: s.Ref(lease.AttemptID)})
		require.NoError(t, err)
		return lease
	}},
}

// leaseOps are the lease-fenced transitions, each called with a lease that
// would let it succeed.
var leaseOps = []struct {
	name string
	call func(b *testBundle, lease *repo.Lease) error
}{
	{"Heartbeat", func(b *testBundle, lease *repo.Lease) error {
		_, err := b.repo.Heartbeat(b.ctx, b.db.Pool, &repo.HeartbeatParams{Lease: lease})
		return err
	}},
	{"Advance", func(b *testBundle, lease *repo.Lease) error {
		_, err := b.repo.Advance(b.ctx, b.db.Pool, &repo.AdvanceParams{Lease: lease, Checkpoint: kfstype.CheckpointSmokeEvalPassed})
		return err
	}},
	{"AdvanceTo", func(b *testBundle, lease *repo.Lease) error {
		_, err := b.repo.AdvanceTo(b.ctx, b.db.Pool, &repo.AdvanceParams{Lease: lease, Checkpoint: kfstype.CheckpointSmokeEvalPassed})
		return err
	}},
	{"Complete", func(b *testBundle, lease *repo.Lease) error {
		_, err := b.repo.Complete(b.ctx, b.db.Pool, lease)
		return err
	}},
	{"CompleteThrough", func(b *testBundle, lease *repo.Lease) error {
		_, err := b.repo.CompleteThrough(b.ctx, b.db.Pool, &repo.CompleteThroughParams{Lease: lease})
		return err
	}},
	{"Fail", func(b *testBundle, lease *repo.Lease) error {
		_, err := b.repo.Fail(b.ctx, b.db.Pool, &repo.FailParams{Lease: lease, ErrorCode: "E", ErrorMessage: "e"})
		return err
	}},
	{"ScheduleRetry", func(b *testBundle, lease *repo.Lease) error {
		_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: lease, RetryDelay: time.Second, ErrorCode: "E", ErrorMessage: "e"})
		return err
	}},
	{"CompleteMany", func(b *testBundle, lease *repo.Lease) error {
		res, err := b.repo.CompleteMany(b.ctx, b.db.Pool, []repo.CompleteManyEntry{{Lease: lease}})
		if err != nil {
			return err
		}
		return res[0].Err
	}},
}

// rwReclaim has a relay whose clock is at the lease's expiry claim the
// attempt's leased outbox row (as ClaimOutbox does for a lost worker),
// while b.clock stays where it is, and returns the claimed row.
func (b *testBundle) rwReclaim(t *testing.T, lease *repo.Lease) *kfstype.OutboxMessage {
	t.Helper()
	relay := repo.New(&repo.Config{Clock: testfactory.ClockAt(lease.ExpiresAt)})
	msgs, err := relay.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimParams{RelayID: "relay-ahead", BatchSize: repo.MaxBatchSize})
	require.NoError(t, err)
	for _, m := range msgs {
		if m.AttemptID == lease.AttemptID {
			require.Equal(t, kfstype.OutboxStatusDispatching, m.Status)
			b.rwRows(t, lease.AttemptID)
			return m
		}
	}
	require.FailNow(t, "the relay did not reclaim the leased row", "attempt %s", lease.AttemptID)
	return nil
}

// TestLeaseFence proves that every lease-fenced transition refuses a lease
// that is lost (another owner, a stale or forged token, an expired lease, a
// terminal attempt) with ErrLeaseLost and changes nothing, and that the
// same call succeeds with the lease intact.
func TestLeaseFence(t *testing.T) {
	t.Parallel()
	for _, op := range leaseOps {
		t.Run(op.name+"AcceptsOwnLease", func(t *testing.T) {
			b := setup(t)
			s, lease, _ := b.rwRunning(t, nil)
			b.rwAdvanceTo(t, s, lease, kfstype.CheckpointSmokeEvalPassed)
			b.clock.Advance(repo.LeaseDurationDefault - time.Microsecond)
			require.NoError(t, op.call(b, lease))
			b.rwRows(t, lease.AttemptID)
		})
		for _, fault := range leaseFaults {
			t.Run(op.name+"Rejects"+fault.name, func(t *testing.T) {
				b := setup(t)
				s, lease, del := b.rwRunning(t, nil)
				b.rwAdvanceTo(t, s, lease, kfstype.CheckpointSmokeEvalPassed)
				presented := fault.apply(t, b, s, lease, del)
				before := b.rwRows(t, lease.AttemptID)
				err := op.call(b, presented)
				require.ErrorIs(t, err, repo.ErrLeaseLost)
				b.requireUnchanged(t, before)
			})
		}
	}
}

// leaseOpStatements names the query a leaseOps entry runs where that is
// not its name: AdvanceTo is Advance's statement.
var leaseOpStatements = map[string]string{"AdvanceTo": "Advance"}

// TestLeaseFenceLockOrder proves that every lease-fenced transition locks
// the attempt before its outbox row: while it waits for the outbox row
// (held by another transaction), it already holds the attempt.
func TestLeaseFenceLockOrder(t *testing.T) {
	t.Parallel()
	for _, op := range leaseOps {
		t.Run(op.name, func(t *testing.T) {
			b := setup(t)
			s, lease, _ := b.rwRunning(t, nil)
			b.rwAdvanceTo(t, s, lease, kfstype.CheckpointSmokeEvalPassed)
			holder := b.rwLockRow(t, `SELECT 1 FROM document_compilation_outbox WHERE attempt_id = $1 FOR UPDATE`, lease.AttemptID)
			done := b.rwBlocked(t, cmp.Or(leaseOpStatements[op.name], op.name), func() error { return op.call(b, lease) })
			_, err := b.db.Pool.Exec(b.ctx, `SELECT 1 FROM document_compilation_attempts WHERE id = $1 FOR UPDATE NOWAIT`, lease.AttemptID)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, "the attempt is locked while %s waits for the outbox row", op.name)
			require.Equal(t, "55P03", pgErr.Code) // lock_not_available
			require.NoError(t, holder.Rollback(b.ctx))
			require.NoError(t, <-done)
			b.rwRows(t, lease.AttemptID)
		})
	}
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()

	t.Run("HeartbeatExtendsOwnLease", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.rwRunning(t, nil)
		b.clock.Advance(20 * time.Second)
		before := b.rwRows(t, lease.AttemptID)
		renewed, err := b.repo.Heartbeat(b.ctx, b.db.Pool, &repo.HeartbeatParams{Lease: lease, LeaseDuration: 90 * time.Second})
		require.NoError(t, err)
		now := b.clock.Now()
		require.Equal(t, &repo.Lease{AttemptID: lease.AttemptID, WorkerID: lease.WorkerID, Token: lease.Token, ExpiresAt: now.Add(90 * time.Second)}, renewed)
		want := *before
		want.Attempt.LeaseExpiresAt = new(now.Add(90 * time.Second))
		want.Attempt.HeartbeatAt = new(now)
		want.Attempt.RowVersion++
		want.Attempt.UpdatedAt = now
		want.Outbox.AvailableAt = now.Add(90 * time.Second)
		want.Outbox.UpdatedAt = now
		require.Equal(t, &want, b.rwRows(t, lease.AttemptID))

		// The old lease value keeps working (same token), past its own
		// expiry, and the default duration applies.
		b.clock.Advance(70 * time.Second)
		before = b.rwRows(t, lease.AttemptID)
		renewed, err = b.repo.Heartbeat(b.ctx, b.db.Pool, &repo.HeartbeatParams{Lease: lease})
		require.NoError(t, err)
		now = b.clock.Now()
		require.Equal(t, now.Add(repo.LeaseDurationDefault), renewed.ExpiresAt)
		want = *before
		want.Attempt.LeaseExpiresAt = new(now.Add(repo.LeaseDurationDefault))
		want.Attempt.HeartbeatAt = new(now)
		want.Attempt.RowVersion++
		want.Attempt.UpdatedAt = now
		want.Outbox.AvailableAt = now.Add(repo.LeaseDurationDefault)
		want.Outbox.UpdatedAt = now
		require.Equal(t, &want, b.rwRows(t, lease.AttemptID))
	})

	// The relay reclaims the leased row at the lease's expiry while the
	// heartbeat's statement clock is still before it: its transaction
	// began earlier, or it waited on a lock. The lease is lost; nothing
	// changes (issue 13).
	t.Run("RefusedWhenTheRelayReclaimsWhileItWaitsForTheAttemptLock", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.rwRunning(t, nil)
		b.clock.Advance(repo.LeaseDurationDefault - time.Second)
		holder := b.rwLockRow(t, `SELECT 1 FROM document_compilation_attempts WHERE id = $1 FOR UPDATE`, lease.AttemptID)
		done := b.rwBlocked(t, "Heartbeat", func() error {
			_, err := b.repo.Heartbeat(b.ctx, b.db.Pool, &repo.HeartbeatParams{Lease: lease})
			return err
		})
		b.rwReclaim(t, lease) // the claim locks outbox rows only: it does not wait
		before := b.rwRows(t, lease.AttemptID)
		require.NoError(t, holder.Commit(b.ctx))
		require.ErrorIs(t, <-done, repo.ErrLeaseLost)
		b.requireUnchanged(t, before)
	})

	t.Run("RefusedInATransactionThatBeganBeforeTheExpiry", func(t *testing.T) {
		b := setup(t)
		r := repo.New(nil) // the database clock: a transaction's now() is when it began
		drv := &testfactory.Driver{Repo: r, DB: b.db.Pool}
		a := drv.Start(b.ctx, t, b.scope(t))
		del := drv.Dispatch(b.ctx, t, a.ID)
		_, lease, err := r.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-test", LeaseDuration: 300 * time.Millisecond})
		require.NoError(t, err)
		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
		var began time.Time
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT now()`).Scan(&began))
		require.True(t, began.Before(lease.ExpiresAt), "the transaction began before the expiry")
		require.Eventually(t, func() bool {
			var expired bool
			require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT now() >= $1`, lease.ExpiresAt).Scan(&expired))
			return expired
		}, 10*time.Second, 20*time.Millisecond)
		msgs, err := r.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimParams{RelayID: "relay-a", BatchSize: 1})
		require.NoError(t, err)
		require.Len(t, msgs, 1, "the relay reclaims the expired lease")
		before := b.rwRows(t, a.ID)
		_, err = r.Heartbeat(b.ctx, tx, &repo.HeartbeatParams{Lease: lease})
		require.ErrorIs(t, err, repo.ErrLeaseLost)
		require.NoError(t, tx.Commit(b.ctx))
		b.requireUnchanged(t, before)
	})

	t.Run("HeartbeatBesideAdvanceOfTheSameLease", func(t *testing.T) {
		b := setup(t)
		s, lease, _ := b.rwRunning(t, nil)
		b.rwAdvanceTo(t, s, lease, kfstype.CheckpointParsed)
		before := b.rwRows(t, lease.AttemptID)
		const n = 150
		var wg sync.WaitGroup
		errs := make(chan error, 2*n)
		wg.Go(func() {
			for range n {
				if _, err := b.repo.Heartbeat(b.ctx, b.db.Pool, &repo.HeartbeatParams{Lease: lease}); err != nil {
					errs <- err
				}
			}
		})
		wg.Go(func() {
			for range n {
				if _, err := b.repo.Advance(b.ctx, b.db.Pool, &repo.AdvanceParams{Lease: lease, Checkpoint: kfstype.CheckpointParsed}); err != nil {
					errs <- err
				}
			}
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		after := b.rwRows(t, lease.AttemptID)
		require.Equal(t, before.Attempt.RowVersion+2*n, after.Attempt.RowVersion, "every write landed")
		require.Equal(t, kfstype.CheckpointParsed, after.Attempt.Checkpoint)
		require.Equal(t, lease.Token, *after.Attempt.LeaseToken)
	})

	t.Run("RejectsInvalidInput", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.rwRunning(t, nil)
		before := b.rwRows(t, lease.AttemptID)
		for _, tc := range []struct {
			field string
			p     repo.HeartbeatParams
		}{
			{"Lease", repo.HeartbeatParams{}},
			{"Lease.Token", repo.HeartbeatParams{Lease: &repo.Lease{AttemptID: lease.AttemptID, WorkerID: lease.WorkerID}}},
			{"Lease.WorkerID", repo.HeartbeatParams{Lease: &repo.Lease{AttemptID: lease.AttemptID, Token: lease.Token}}},
			{"LeaseDuration", repo.HeartbeatParams{Lease: lease, LeaseDuration: -time.Second}},
		} {
			_, err := b.repo.Heartbeat(b.ctx, b.db.Pool, &tc.p)
			requireInputError(t, err, tc.field)
			b.requireUnchanged(t, before)
		}
	})
}

// rwLockRow runs lockSQL (a SELECT ... FOR UPDATE of one row by $1) in a
// transaction of its own and returns it, holding the lock; the test ends
// it, or its cleanup rolls it back.
func (b *testBundle) rwLockRow(t *testing.T, lockSQL string, id uuid.UUID) pgx.Tx {
	t.Helper()
	tx, err := b.db.Pool.Begin(b.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) })
	_, err = tx.Exec(b.ctx, lockSQL, id)
	require.NoError(t, err)
	return tx
}

// rwBlocked runs call in a goroutine and returns once its statement, the
// named query, waits for a lock in b's database; call's error arrives on
// the channel.
func (b *testBundle) rwBlocked(t *testing.T, query string, call func() error) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`,
			"-- name: "+query+" %").Scan(&n))
		return n > 0
	}, 10*time.Second, 5*time.Millisecond, "%s never waited for a lock", query)
	return done
}

// rwCandidate is a candidate publication to present: both set or, to test
// validation, one of them nil.
type rwCandidate struct {
	id *uuid.UUID
	fp *string
}

// rwPub returns a publication of the given status in scope s.
func (b *testBundle) rwPub(t *testing.T, s *testfactory.Scope, status string) rwCandidate {
	t.Helper()
	id, fp := s.Publication(b.ctx, t, b.db.Pool, status)
	return rwCandidate{&id, &fp}
}

// rwBindEarly binds a fresh candidate publication of scope s at the
// attempt's current checkpoint (below projection_built), without moving it.
func (b *testBundle) rwBindEarly(t *testing.T, s *testfactory.Scope, lease *repo.Lease) {
	t.Helper()
	a := b.rwRows(t, lease.AttemptID).Attempt
	require.Nil(t, a.CandidatePublicationID)
	c := b.rwPub(t, s, "candidate")
	_, err := b.repo.Advance(b.ctx, b.db.Pool, &repo.AdvanceParams{Lease: lease, Checkpoint: a.Checkpoint, CandidatePublicationID: c.id, CandidateFingerprint: c.fp})
	require.NoError(t, err)
	b.rwRows(t, lease.AttemptID)
}

// advanceImpls are the two checkpoint writes: Advance (one step) and
// AdvanceTo (any number of steps forward).
var advanceImpls = []struct {
	name string
	call func(b *testBundle, p *repo.AdvanceParams) (*kfstype.Attempt, error)
}{
	{"Advance", func(b *testBundle, p *repo.AdvanceParams) (*kfstype.Attempt, error) {
		return b.repo.Advance(b.ctx, b.db.Pool, p)
	}},
	{"AdvanceTo", func(b *testBundle, p *repo.AdvanceParams) (*kfstype.Attempt, error) {
		return b.repo.AdvanceTo(b.ctx, b.db.Pool, p)
	}},
}

// TestAdvance runs every case against Advance and AdvanceTo: their
// candidate rules are the same, and they differ only in how far forward
// the checkpoint may move (advanceTo says what AdvanceTo does instead).
func TestAdvance(t *testing.T) {
	t.Parallel()

	type candidate = rwCandidate
	pub := func(t *testing.T, b *testBundle, s *testfactory.Scope, status string) candidate {
		return b.rwPub(t, s, status)
	}
	// isTransitionError requires a *TransitionError that reports the
	// attempt still running at checkpoint from.
	isTransitionError := func(from kfstype.Checkpoint) func(t *testing.T, err error) {
		return func(t *testing.T, err error) {
			var te *repo.TransitionError
			require.ErrorAs(t, err, &te)
			require.ErrorIs(t, err, repo.ErrInvalidTransition)
			require.Equal(t, kfstype.RunStateRunning, te.From)
			require.Equal(t, from, te.Checkpoint)
			require.NotNil(t, te.Attempt)
		}
	}
	isRejected := func(t *testing.T, err error) {
		require.ErrorIs(t, err, repo.ErrCandidateRejected)
		require.NotErrorIs(t, err, repo.ErrInvalidTransition)
	}
	isInput := func(field string) func(*testing.T, error) {
		return func(t *testing.T, err error) { requireInputError(t, err, field) }
	}
	upperFP := "projection-set-sha256:" + strings.Repeat("A", 64)
	fresh := func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
		return pub(t, b, s, "candidate")
	}
	bound := func(t *testing.T, b *testBundle, s *testfactory.Scope, bound candidate) candidate { return bound }

	// outcome is what a call does: check (nil: it succeeds) and, on
	// success, whether it binds the candidate given.
	type outcome struct {
		check func(t *testing.T, err error)
		binds bool
	}
	for _, impl := range advanceImpls {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				name string
				from kfstype.Checkpoint
				// bindEarly binds a candidate at from before the call
				// (from is below projection_built).
				bindEarly bool
				to        kfstype.Checkpoint
				cand      func(t *testing.T, b *testBundle, s *testfactory.Scope, bound candidate) candidate
				check     func(t *testing.T, err error) // nil: succeeds
				binds     bool                          // success binds cand
				// advanceTo, when set, is AdvanceTo's outcome, which
				// differs from Advance's (check and binds).
				advanceTo *outcome
			}{
				{name: "StaysAtSameCheckpoint", from: kfstype.CheckpointParsed, to: kfstype.CheckpointParsed},
				{name: "StaysAtQueued", from: kfstype.CheckpointQueued, to: kfstype.CheckpointQueued},
				{name: "StaysAtSmokeEvalPassed", from: kfstype.CheckpointSmokeEvalPassed, to: kfstype.CheckpointSmokeEvalPassed},
				{name: "MovesOneStep", from: kfstype.CheckpointParsed, to: kfstype.CheckpointOutlineBuilt},
				{name: "MovesFromQueued", from: kfstype.CheckpointQueued, to: kfstype.CheckpointParsed},
				{name: "MovesOneStepToSmokeEvalPassed", from: kfstype.CheckpointProjectionBuilt, to: kfstype.CheckpointSmokeEvalPassed},
				{name: "SkipsQueuedToOutlineBuilt", from: kfstype.CheckpointQueued, to: kfstype.CheckpointOutlineBuilt,
					check: isTransitionError(kfstype.CheckpointQueued), advanceTo: &outcome{}},
				{name: "SkipsQueuedToNodesGenerated", from: kfstype.CheckpointQueued, to: kfstype.CheckpointNodesGenerated,
					check: isTransitionError(kfstype.CheckpointQueued), advanceTo: &outcome{}},
				{name: "SkipsQueuedToSmokeEvalPassedBindingCandidate", from: kfstype.CheckpointQueued, to: kfstype.CheckpointSmokeEvalPassed, cand: fresh,
					check: isTransitionError(kfstype.CheckpointQueued), advanceTo: &outcome{binds: true}},
				{name: "SkipsParsedToProjectionBuiltBindingCandidate", from: kfstype.CheckpointParsed, to: kfstype.CheckpointProjectionBuilt, cand: fresh,
					check: isTransitionError(kfstype.CheckpointParsed), advanceTo: &outcome{binds: true}},
				{name: "SkipsPastProjectionBuiltWithCandidateBoundEarlier", from: kfstype.CheckpointOutlineBuilt, bindEarly: true, to: kfstype.CheckpointSmokeEvalPassed,
					check: isTransitionError(kfstype.CheckpointOutlineBuilt), advanceTo: &outcome{}},
				{name: "SkipsWithSameCandidateAgain", from: kfstype.CheckpointParsed, bindEarly: true, to: kfstype.CheckpointSmokeEvalPassed, cand: bound,
					check: isTransitionError(kfstype.CheckpointParsed), advanceTo: &outcome{}},
				{name: "SkipsToProjectionBuiltWithoutCandidate", from: kfstype.CheckpointParsed, to: kfstype.CheckpointProjectionBuilt,
					check: isTransitionError(kfstype.CheckpointParsed), advanceTo: &outcome{check: isRejected}},
				{name: "SkipsQueuedToSmokeEvalPassedWithoutCandidate", from: kfstype.CheckpointQueued, to: kfstype.CheckpointSmokeEvalPassed,
					check: isTransitionError(kfstype.CheckpointQueued), advanceTo: &outcome{check: isRejected}},
				{name: "SkipsWithDifferentCandidate", from: kfstype.CheckpointParsed, bindEarly: true, to: kfstype.CheckpointSmokeEvalPassed, cand: fresh,
					check: isTransitionError(kfstype.CheckpointParsed), advanceTo: &outcome{check: isRejected}},
				{name: "SkipsWithCandidateOfAnotherTenant", from: kfstype.CheckpointQueued, to: kfstype.CheckpointProjectionBuilt,
					cand: func(t *testing.T, b *testBundle, _ *testfactory.Scope, _ candidate) candidate {
						return pub(t, b, b.scope(t), "candidate")
					},
					check: isTransitionError(kfstype.CheckpointQueued), advanceTo: &outcome{check: isRejected}},
				{name: "SkipsWithValidatingPublication", from: kfstype.CheckpointQueued, to: kfstype.CheckpointSmokeEvalPassed,
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return pub(t, b, s, "validating")
					},
					check: isTransitionError(kfstype.CheckpointQueued), advanceTo: &outcome{check: isRejected}},
				{name: "RejectsBackwards", from: kfstype.CheckpointOutlineBuilt, to: kfstype.CheckpointParsed, check: isTransitionError(kfstype.CheckpointOutlineBuilt)},
				{name: "RejectsBackwardsToQueued", from: kfstype.CheckpointParsed, to: kfstype.CheckpointQueued, check: isTransitionError(kfstype.CheckpointParsed)},
				{name: "RejectsBackwardsSeveralSteps", from: kfstype.CheckpointSmokeEvalPassed, to: kfstype.CheckpointParsed, check: isTransitionError(kfstype.CheckpointSmokeEvalPassed)},
				{name: "RejectsBackwardsWithBoundCandidate", from: kfstype.CheckpointSmokeEvalPassed, to: kfstype.CheckpointProjectionBuilt, cand: bound,
					check: isTransitionError(kfstype.CheckpointSmokeEvalPassed)},
				{name: "RejectsBackwardsWithDifferentCandidate", from: kfstype.CheckpointSmokeEvalPassed, to: kfstype.CheckpointNodesGenerated, cand: fresh,
					check: isTransitionError(kfstype.CheckpointSmokeEvalPassed)},
				{name: "RejectsPublished", from: kfstype.CheckpointSmokeEvalPassed, to: kfstype.CheckpointPublished, check: isInput("Checkpoint")},
				{name: "RejectsPublishedFromQueued", from: kfstype.CheckpointQueued, to: kfstype.CheckpointPublished, cand: fresh, check: isInput("Checkpoint")},
				{name: "RejectsUnknownCheckpoint", from: kfstype.CheckpointParsed, to: "compiled", check: isInput("Checkpoint")},
				{name: "RejectsEmptyCheckpoint", from: kfstype.CheckpointParsed, to: "", check: isInput("Checkpoint")},
				{name: "BindsCandidateAtProjectionBuilt", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, binds: true, cand: fresh},
				{name: "BindsCandidateBeforeProjectionBuilt", from: kfstype.CheckpointParsed, to: kfstype.CheckpointOutlineBuilt, binds: true, cand: fresh},
				{name: "BindsCandidateAtSameCheckpoint", from: kfstype.CheckpointQueued, to: kfstype.CheckpointQueued, binds: true, cand: fresh},
				{name: "AcceptsSameCandidateAgain", from: kfstype.CheckpointProjectionBuilt, to: kfstype.CheckpointSmokeEvalPassed, cand: bound},
				{name: "AcceptsSameCandidateAtSameCheckpoint", from: kfstype.CheckpointProjectionBuilt, to: kfstype.CheckpointProjectionBuilt, cand: bound},
				{name: "AcceptsProjectionBuiltWithCandidateBoundEarlier", from: kfstype.CheckpointNodesGenerated, bindEarly: true, to: kfstype.CheckpointProjectionBuilt},
				{name: "RejectsDifferentCandidate", from: kfstype.CheckpointProjectionBuilt, to: kfstype.CheckpointSmokeEvalPassed, check: isRejected, cand: fresh},
				{name: "RejectsDifferentCandidateBeforeProjectionBuilt", from: kfstype.CheckpointParsed, bindEarly: true, to: kfstype.CheckpointOutlineBuilt, check: isRejected, cand: fresh},
				{name: "RejectsCandidateOfAnotherTenant", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isRejected,
					cand: func(t *testing.T, b *testBundle, _ *testfactory.Scope, _ candidate) candidate {
						return pub(t, b, b.scope(t), "candidate")
					}},
				{name: "RejectsCandidateOfAnotherSpace", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isRejected,
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						other := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &s.TenantID})
						return pub(t, b, other, "candidate")
					}},
				{name: "RejectsValidatingPublication", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isRejected,
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return pub(t, b, s, "validating")
					}},
				{name: "RejectsPublishedPublication", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isRejected,
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return pub(t, b, s, "published")
					}},
				{name: "RejectsFingerprintOfAnotherPublication", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isRejected,
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						c, other := pub(t, b, s, "candidate"), pub(t, b, s, "candidate")
						return candidate{c.id, other.fp}
					}},
				{name: "RejectsUnknownPublication", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isRejected,
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return candidate{new(uuid.New()), new(testfactory.Fingerprint("nowhere"))}
					}},
				{name: "RejectsProjectionBuiltWithoutCandidate", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isRejected},
				{name: "RejectsUppercaseFingerprint", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isInput("CandidateFingerprint"),
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return candidate{pub(t, b, s, "candidate").id, &upperFP}
					}},
				{name: "RejectsShortFingerprint", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isInput("CandidateFingerprint"),
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						c := pub(t, b, s, "candidate")
						return candidate{c.id, new((*c.fp)[:85])}
					}},
				{name: "RejectsLongFingerprint", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isInput("CandidateFingerprint"),
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						c := pub(t, b, s, "candidate")
						return candidate{c.id, new(*c.fp + "0")}
					}},
				{name: "RejectsWrongPrefix", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isInput("CandidateFingerprint"),
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						c := pub(t, b, s, "candidate")
						return candidate{c.id, new(strings.Replace(*c.fp, "sha256", "sha512", 1))}
					}},
				{name: "RejectsIDWithoutFingerprint", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isInput("CandidatePublicationID"),
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return candidate{pub(t, b, s, "candidate").id, nil}
					}},
				{name: "RejectsFingerprintWithoutID", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isInput("CandidatePublicationID"),
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return candidate{nil, pub(t, b, s, "candidate").fp}
					}},
				{name: "RejectsNilUUID", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isInput("CandidatePublicationID"),
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return candidate{new(uuid.Nil), pub(t, b, s, "candidate").fp}
					}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					check, binds := tc.check, tc.binds
					if impl.name == "AdvanceTo" && tc.advanceTo != nil {
						check, binds = tc.advanceTo.check, tc.advanceTo.binds
					}
					b := setup(t)
					s, lease, _ := b.rwRunning(t, nil)
					if tc.from != kfstype.CheckpointQueued {
						b.rwAdvanceTo(t, s, lease, tc.from)
					}
					if tc.bindEarly {
						b.rwBindEarly(t, s, lease)
					}
					b.clock.Advance(time.Second)
					before := b.rwRows(t, lease.AttemptID)
					require.Equal(t, tc.from, before.Attempt.Checkpoint)
					var c candidate
					if tc.cand != nil {
						c = tc.cand(t, b, s, candidate{before.Attempt.CandidatePublicationID, before.Attempt.CandidateFingerprint})
					}
					got, err := impl.call(b, &repo.AdvanceParams{
						Lease: lease, Checkpoint: tc.to, CandidatePublicationID: c.id, CandidateFingerprint: c.fp,
					})
					if check != nil {
						check(t, err)
						require.Nil(t, got)
						b.requireUnchanged(t, before)
						return
					}
					require.NoError(t, err)
					now := b.clock.Now()
					want := *before
					want.Attempt.Checkpoint = tc.to
					if binds {
						require.Nil(t, before.Attempt.CandidatePublicationID)
						want.Attempt.CandidatePublicationID, want.Attempt.CandidateFingerprint = c.id, c.fp
					}
					want.Attempt.RowVersion++
					want.Attempt.UpdatedAt = now
					require.Equal(t, &want, b.rwRows(t, lease.AttemptID), "only the checkpoint (and candidate) change; the outbox row is untouched")
					require.Equal(t, want.Attempt, *got)
				})
			}
		})
	}
}

// TestAdvanceToWalksAllTheWay moves an attempt from queued to
// smoke_eval_passed in one AdvanceTo, binding the candidate, then
// completes it: the same rows as the one-step walk.
func TestAdvanceToWalksAllTheWay(t *testing.T) {
	b := setup(t)
	s, lease, _ := b.rwRunning(t, nil)
	c := b.rwPub(t, s, "candidate")
	b.clock.Advance(time.Second)
	before := b.rwRows(t, lease.AttemptID)
	got, err := b.repo.AdvanceTo(b.ctx, b.db.Pool, &repo.AdvanceParams{
		Lease: lease, Checkpoint: kfstype.CheckpointSmokeEvalPassed, CandidatePublicationID: c.id, CandidateFingerprint: c.fp,
	})
	require.NoError(t, err)
	want := *before
	want.Attempt.Checkpoint = kfstype.CheckpointSmokeEvalPassed
	want.Attempt.CandidatePublicationID, want.Attempt.CandidateFingerprint = c.id, c.fp
	want.Attempt.RowVersion++
	want.Attempt.UpdatedAt = b.clock.Now()
	require.Equal(t, &want, b.rwRows(t, lease.AttemptID))
	require.Equal(t, want.Attempt, *got)

	b.clock.Advance(time.Second)
	done, err := b.repo.Complete(b.ctx, b.db.Pool, lease)
	require.NoError(t, err)
	wantDone := wantEnded(&want, kfstype.RunStateSucceeded, kfstype.OutboxStatusCompleted, b.clock.Now())
	wantDone.Attempt.Checkpoint = kfstype.CheckpointPublished
	require.Equal(t, wantDone, b.rwRows(t, lease.AttemptID))
	require.Equal(t, wantDone.Attempt, *done)
}

func TestComplete(t *testing.T) {
	t.Parallel()

	t.Run("CompletesAtSmokeEvalPassed", func(t *testing.T) {
		b := setup(t)
		s, lease, _ := b.rwRunning(t, nil)
		b.rwAdvanceTo(t, s, lease, kfstype.CheckpointSmokeEvalPassed)
		b.clock.Advance(5 * time.Second)
		before := b.rwRows(t, lease.AttemptID)
		got, err := b.repo.Complete(b.ctx, b.db.Pool, lease)
		require.NoError(t, err)
		want := wantEnded(before, kfstype.RunStateSucceeded, kfstype.OutboxStatusCompleted, b.clock.Now())
		want.Attempt.Checkpoint = kfstype.CheckpointPublished
		require.Equal(t, want, b.rwRows(t, lease.AttemptID))
		require.Equal(t, want.Attempt, *got)
	})

	for _, cp := range []kfstype.Checkpoint{kfstype.CheckpointQueued, kfstype.CheckpointNodesGenerated, kfstype.CheckpointProjectionBuilt} {
		t.Run("RejectsCheckpoint_"+string(cp), func(t *testing.T) {
			b := setup(t)
			s, lease, _ := b.rwRunning(t, nil)
			if cp != kfstype.CheckpointQueued {
				b.rwAdvanceTo(t, s, lease, cp)
			}
			before := b.rwRows(t, lease.AttemptID)
			got, err := b.repo.Complete(b.ctx, b.db.Pool, lease)
			var te *repo.TransitionError
			require.ErrorAs(t, err, &te)
			require.Equal(t, cp, te.Checkpoint)
			require.Equal(t, kfstype.RunStateSucceeded, te.To)
			require.Nil(t, got)
			b.requireUnchanged(t, before)
		})
	}

	t.Run("RejectsInvalidLease", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.rwRunning(t, nil)
		before := b.rwRows(t, lease.AttemptID)
		_, err := b.repo.Complete(b.ctx, b.db.Pool, nil)
		requireInputError(t, err, "Lease")
		_, err = b.repo.Complete(b.ctx, b.db.Pool, &repo.Lease{AttemptID: lease.AttemptID, WorkerID: lease.WorkerID})
		requireInputError(t, err, "Lease.Token")
		b.requireUnchanged(t, before)
	})
}

// TestCompleteThrough: a running attempt at any checkpoint ends succeeded
// at published in one write, binding the candidate given if none is bound;
// every refusal leaves both rows as they were.
func TestCompleteThrough(t *testing.T) {
	t.Parallel()

	type candidate = rwCandidate
	fresh := func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
		return b.rwPub(t, s, "candidate")
	}
	bound := func(t *testing.T, b *testBundle, s *testfactory.Scope, bound candidate) candidate { return bound }
	isRejected := func(t *testing.T, err error) {
		require.ErrorIs(t, err, repo.ErrCandidateRejected)
		require.NotErrorIs(t, err, repo.ErrInvalidTransition)
		require.NotErrorIs(t, err, repo.ErrLeaseLost)
	}
	isInput := func(field string) func(*testing.T, error) {
		return func(t *testing.T, err error) { requireInputError(t, err, field) }
	}

	for _, tc := range []struct {
		name string
		from kfstype.Checkpoint
		// bindEarly binds a candidate at from (below projection_built)
		// before the call.
		bindEarly bool
		cand      func(t *testing.T, b *testBundle, s *testfactory.Scope, bound candidate) candidate // nil: none given
		check     func(t *testing.T, err error)                                                      // nil: succeeds
		binds     bool                                                                               // success binds cand
	}{
		{name: "CompletesFromQueuedBindingCandidate", from: kfstype.CheckpointQueued, cand: fresh, binds: true},
		{name: "CompletesFromParsedBindingCandidate", from: kfstype.CheckpointParsed, cand: fresh, binds: true},
		{name: "CompletesFromOutlineBuiltBindingCandidate", from: kfstype.CheckpointOutlineBuilt, cand: fresh, binds: true},
		{name: "CompletesFromNodesGeneratedBindingCandidate", from: kfstype.CheckpointNodesGenerated, cand: fresh, binds: true},
		{name: "CompletesFromProjectionBuiltWithBoundCandidate", from: kfstype.CheckpointProjectionBuilt},
		{name: "CompletesFromSmokeEvalPassedWithBoundCandidate", from: kfstype.CheckpointSmokeEvalPassed},
		{name: "CompletesFromParsedWithCandidateBoundEarlier", from: kfstype.CheckpointParsed, bindEarly: true},
		{name: "AcceptsSameCandidateAgain", from: kfstype.CheckpointSmokeEvalPassed, cand: bound},
		{name: "AcceptsSameCandidateAgainBoundEarlier", from: kfstype.CheckpointQueued, bindEarly: true, cand: bound},
		{name: "RejectsDifferentCandidate", from: kfstype.CheckpointSmokeEvalPassed, cand: fresh, check: isRejected},
		{name: "RejectsDifferentCandidateBoundEarlier", from: kfstype.CheckpointParsed, bindEarly: true, cand: fresh, check: isRejected},
		{name: "RejectsNoCandidateFromQueued", from: kfstype.CheckpointQueued, check: isRejected},
		{name: "RejectsNoCandidateFromNodesGenerated", from: kfstype.CheckpointNodesGenerated, check: isRejected},
		{name: "RejectsCandidateOfAnotherTenant", from: kfstype.CheckpointNodesGenerated, check: isRejected,
			cand: func(t *testing.T, b *testBundle, _ *testfactory.Scope, _ candidate) candidate {
				return b.rwPub(t, b.scope(t), "candidate")
			}},
		{name: "RejectsCandidateOfAnotherSpace", from: kfstype.CheckpointQueued, check: isRejected,
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				other := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &s.TenantID})
				return b.rwPub(t, other, "candidate")
			}},
		{name: "RejectsValidatingPublication", from: kfstype.CheckpointParsed, check: isRejected,
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				return b.rwPub(t, s, "validating")
			}},
		{name: "RejectsPublishedPublication", from: kfstype.CheckpointParsed, check: isRejected,
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				return b.rwPub(t, s, "published")
			}},
		{name: "RejectsFingerprintOfAnotherPublication", from: kfstype.CheckpointQueued, check: isRejected,
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				c, other := b.rwPub(t, s, "candidate"), b.rwPub(t, s, "candidate")
				return candidate{c.id, other.fp}
			}},
		{name: "RejectsBoundIDWithAnotherFingerprint", from: kfstype.CheckpointSmokeEvalPassed, check: isRejected,
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, bound candidate) candidate {
				return candidate{bound.id, b.rwPub(t, s, "candidate").fp}
			}},
		{name: "RejectsUnknownPublication", from: kfstype.CheckpointQueued, check: isRejected,
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				return candidate{new(uuid.New()), new(testfactory.Fingerprint("nowhere"))}
			}},
		{name: "RejectsIDWithoutFingerprint", from: kfstype.CheckpointQueued, check: isInput("CandidatePublicationID"),
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				return candidate{b.rwPub(t, s, "candidate").id, nil}
			}},
		{name: "RejectsFingerprintWithoutID", from: kfstype.CheckpointSmokeEvalPassed, check: isInput("CandidatePublicationID"),
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, bound candidate) candidate {
				return candidate{nil, bound.fp}
			}},
		{name: "RejectsNilUUID", from: kfstype.CheckpointQueued, check: isInput("CandidatePublicationID"),
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				return candidate{new(uuid.Nil), b.rwPub(t, s, "candidate").fp}
			}},
		{name: "RejectsUppercaseFingerprint", from: kfstype.CheckpointQueued, check: isInput("CandidateFingerprint"),
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				return candidate{b.rwPub(t, s, "candidate").id, new("projection-set-sha256:" + strings.Repeat("A", 64))}
			}},
		{name: "RejectsShortFingerprint", from: kfstype.CheckpointQueued, check: isInput("CandidateFingerprint"),
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				c := b.rwPub(t, s, "candidate")
				return candidate{c.id, new((*c.fp)[:85])}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			s, lease, _ := b.rwRunning(t, nil)
			if tc.from != kfstype.CheckpointQueued {
				b.rwAdvanceTo(t, s, lease, tc.from)
			}
			if tc.bindEarly {
				b.rwBindEarly(t, s, lease)
			}
			b.clock.Advance(5 * time.Second)
			before := b.rwRows(t, lease.AttemptID)
			require.Equal(t, tc.from, before.Attempt.Checkpoint)
			var c candidate
			if tc.cand != nil {
				c = tc.cand(t, b, s, candidate{before.Attempt.CandidatePublicationID, before.Attempt.CandidateFingerprint})
			}
			got, err := b.repo.CompleteThrough(b.ctx, b.db.Pool, &repo.CompleteThroughParams{
				Lease: lease, CandidatePublicationID: c.id, CandidateFingerprint: c.fp,
			})
			if tc.check != nil {
				tc.check(t, err)
				require.Nil(t, got)
				b.requireUnchanged(t, before)
				return
			}
			require.NoError(t, err)
			want := wantEnded(before, kfstype.RunStateSucceeded, kfstype.OutboxStatusCompleted, b.clock.Now())
			want.Attempt.Checkpoint = kfstype.CheckpointPublished
			if tc.binds {
				require.Nil(t, before.Attempt.CandidatePublicationID)
				want.Attempt.CandidatePublicationID, want.Attempt.CandidateFingerprint = c.id, c.fp
			} else {
				require.NotNil(t, before.Attempt.CandidatePublicationID, "the bound candidate is kept")
			}
			require.Equal(t, want, b.rwRows(t, lease.AttemptID))
			require.Equal(t, want.Attempt, *got)
		})
	}

	t.Run("SameAsAdvanceToThenComplete", func(t *testing.T) {
		// The same attempt walked both ways ends in the same rows, but
		// for the ids, job ids, lease and row_version (one write, not two).
		b := setup(t)
		walk := func(through bool) *testfactory.Rows {
			s, lease, _ := b.rwRunning(t, nil)
			b.rwAdvanceTo(t, s, lease, kfstype.CheckpointParsed)
			c := b.rwPub(t, s, "candidate")
			if through {
				_, err := b.repo.CompleteThrough(b.ctx, b.db.Pool, &repo.CompleteThroughParams{Lease: lease, CandidatePublicationID: c.id, CandidateFingerprint: c.fp})
				require.NoError(t, err)
			} else {
				_, err := b.repo.AdvanceTo(b.ctx, b.db.Pool, &repo.AdvanceParams{Lease: lease, Checkpoint: kfstype.CheckpointSmokeEvalPassed, CandidatePublicationID: c.id, CandidateFingerprint: c.fp})
				require.NoError(t, err)
				_, err = b.repo.Complete(b.ctx, b.db.Pool, lease)
				require.NoError(t, err)
			}
			r := b.rwRows(t, lease.AttemptID)
			require.Equal(t, *c.id, *r.Attempt.CandidatePublicationID)
			return r
		}
		two, one := walk(false), walk(true)
		require.Equal(t, two.Attempt.RowVersion-1, one.Attempt.RowVersion)
		// Normalize what differs by construction.
		norm := func(r *testfactory.Rows) {
			a, o := &r.Attempt, &r.Outbox
			a.ID, a.TenantID, a.KnowledgeSpaceID, a.DocumentAssetID, a.PublicationGenerationID = uuid.Nil, "", uuid.Nil, uuid.Nil, uuid.Nil
			a.CandidatePublicationID, a.CandidateFingerprint, a.QueueJobID, a.RowVersion = nil, nil, nil, 0
			o.ID, o.AttemptID, o.Payload, o.IdempotencyKey, o.QueueJobID = uuid.Nil, uuid.Nil, nil, "", nil
		}
		norm(two)
		norm(one)
		require.Equal(t, two, one)
	})

	t.Run("RejectsInvalidLease", func(t *testing.T) {
		b := setup(t)
		s, lease, _ := b.rwRunning(t, nil)
		c := b.rwPub(t, s, "candidate")
		before := b.rwRows(t, lease.AttemptID)
		for _, tc := range []struct {
			field string
			p     repo.CompleteThroughParams
		}{
			{"Lease", repo.CompleteThroughParams{CandidatePublicationID: c.id, CandidateFingerprint: c.fp}},
			{"Lease.Token", repo.CompleteThroughParams{Lease: &repo.Lease{AttemptID: lease.AttemptID, WorkerID: lease.WorkerID}, CandidatePublicationID: c.id, CandidateFingerprint: c.fp}},
			{"Lease.WorkerID", repo.CompleteThroughParams{Lease: &repo.Lease{AttemptID: lease.AttemptID, Token: lease.Token}, CandidatePublicationID: c.id, CandidateFingerprint: c.fp}},
			{"Lease.AttemptID", repo.CompleteThroughParams{Lease: &repo.Lease{WorkerID: lease.WorkerID, Token: lease.Token}, CandidatePublicationID: c.id, CandidateFingerprint: c.fp}},
		} {
			got, err := b.repo.CompleteThrough(b.ctx, b.db.Pool, &tc.p)
			requireInputError(t, err, tc.field)
			require.Nil(t, got)
			b.requireUnchanged(t, before)
		}
	})

	t.Run("RejectsUnknownAttempt", func(t *testing.T) {
		b := setup(t)
		s, lease, _ := b.rwRunning(t, nil)
		c := b.rwPub(t, s, "candidate")
		before := b.rwRows(t, lease.AttemptID)
		l := *lease
		l.AttemptID = uuid.New()
		_, err := b.repo.CompleteThrough(b.ctx, b.db.Pool, &repo.CompleteThroughParams{Lease: &l, CandidatePublicationID: c.id, CandidateFingerprint: c.fp})
		require.ErrorIs(t, err, repo.ErrNotFound)
		b.requireUnchanged(t, before)
	})
}

func TestFail(t *testing.T) {
	t.Parallel()

	long := strings.Repeat("é界🙂x", 1250) // 5,000 runes of 1 to 4 bytes
	require.Equal(t, 5000, utf8.RuneCountInString(long))
	for _, tc := range []struct {
		name   string
		code   string
		msg    string
		stored string
	}{
		{"FailsWithCodeAndMessage", kfstype.ErrorCodeCompilationFailed, "parser crashed", "parser crashed"},
		{"AcceptsCodeOf64Characters", strings.Repeat("C", 64), "m", "m"},
		{"CutsLongMessageAtRuneBoundary", "E", long, string([]rune(long)[:repo.MaxErrorMessageRunes])},
		{"StoresInvalidUTF8AsValidText", "E", "bad \xff\xfe bytes and a \x00", "bad \uFFFD bytes and a \uFFFD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			_, lease, _ := b.rwRunning(t, nil)
			b.clock.Advance(3 * time.Second)
			before := b.rwRows(t, lease.AttemptID)
			got, err := b.repo.Fail(b.ctx, b.db.Pool, &repo.FailParams{Lease: lease, ErrorCode: tc.code, ErrorMessage: tc.msg})
			require.NoError(t, err)
			want := wantEnded(before, kfstype.RunStateFailed, kfstype.OutboxStatusDead, b.clock.Now())
			want.Attempt.LastErrorCode = new(tc.code)
			want.Attempt.LastErrorMessage = new(tc.stored)
			after := b.rwRows(t, lease.AttemptID)
			require.Equal(t, want, after)
			require.Equal(t, want.Attempt, *got)
			require.True(t, utf8.ValidString(*after.Attempt.LastErrorMessage))
			require.LessOrEqual(t, utf8.RuneCountInString(*after.Attempt.LastErrorMessage), repo.MaxErrorMessageRunes)
		})
	}

	t.Run("RejectsInvalidInput", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.rwRunning(t, nil)
		before := b.rwRows(t, lease.AttemptID)
		for _, tc := range []struct {
			field string
			p     repo.FailParams
		}{
			{"ErrorCode", repo.FailParams{Lease: lease, ErrorCode: strings.Repeat("C", 65), ErrorMessage: "m"}},
			{"ErrorCode", repo.FailParams{Lease: lease, ErrorCode: "", ErrorMessage: "m"}},
			{"ErrorMessage", repo.FailParams{Lease: lease, ErrorCode: "E", ErrorMessage: ""}},
			{"Lease", repo.FailParams{ErrorCode: "E", ErrorMessage: "m"}},
		} {
			_, err := b.repo.Fail(b.ctx, b.db.Pool, &tc.p)
			requireInputError(t, err, tc.field)
			b.requireUnchanged(t, before)
		}
	})
}

func TestScheduleRetry(t *testing.T) {
	t.Parallel()

	t.Run("ParksAttemptUntilRetryAt", func(t *testing.T) {
		b := setup(t)
		s, a := b.rwStart(t, nil)
		del := b.rwDispatch(t, a.ID, "job-1", new("ext-1"))
		lease := b.rwAcquire(t, del, "worker-a")
		b.rwAdvanceTo(t, s, lease, kfstype.CheckpointOutlineBuilt)
		b.clock.Advance(4 * time.Second)
		before := b.rwRows(t, a.ID)
		got, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{
			Lease: lease, RetryDelay: 15 * time.Second, ErrorCode: kfstype.ErrorCodeCompilationRetryable, ErrorMessage: "model timeout",
		})
		require.NoError(t, err)
		now := b.clock.Now()
		retryAt := now.Add(15 * time.Second)
		want := *before
		wa := &want.Attempt
		wa.RunState = kfstype.RunStateRetryWait
		wa.RetryAt = new(retryAt)
		wa.LastErrorCode = new(kfstype.ErrorCodeCompilationRetryable)
		wa.LastErrorMessage = new("model timeout")
		wa.WorkerID, wa.LeaseToken, wa.LeaseExpiresAt, wa.HeartbeatAt = nil, nil, nil, nil
		wa.QueueJobID, wa.ExternalJobID = nil, nil
		wa.RowVersion++
		wa.UpdatedAt = now
		wo := &want.Outbox
		wo.Status = kfstype.OutboxStatusPending
		wo.AvailableAt = retryAt
		wo.DispatchAttempts = 0
		wo.DeliveredAt, wo.QueueJobID, wo.ExternalJobID = nil, nil, nil
		wo.UpdatedAt = now
		require.Equal(t, &want, b.rwRows(t, a.ID), "checkpoint, execution attempts and started_at are kept")
		require.Equal(t, want.Attempt, *got)

		// The old delivery is stale now.
		_, _, err = b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-a"})
		require.ErrorIs(t, err, repo.ErrDeliveryMismatch)
		b.requireUnchanged(t, &want)
	})

	t.Run("RejectsWhenNoExecutionsLeft", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.rwRunning(t, func(p *repo.StartParams) { p.MaxExecutionAttempts = 1 })
		before := b.rwRows(t, lease.AttemptID)
		got, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: lease, RetryDelay: time.Second, ErrorCode: "E", ErrorMessage: "e"})
		require.ErrorIs(t, err, repo.ErrAttemptsExhausted)
		require.Nil(t, got)
		b.requireUnchanged(t, before)
	})

	t.Run("RejectsInvalidInput", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.rwRunning(t, nil)
		before := b.rwRows(t, lease.AttemptID)
		for _, tc := range []struct {
			field string
			p     repo.ScheduleRetryParams
		}{
			{"RetryDelay", repo.ScheduleRetryParams{Lease: lease, RetryDelay: 0, ErrorCode: "E", ErrorMessage: "e"}},
			{"RetryDelay", repo.ScheduleRetryParams{Lease: lease, RetryDelay: -time.Second, ErrorCode: "E", ErrorMessage: "e"}},
			{"ErrorCode", repo.ScheduleRetryParams{Lease: lease, RetryDelay: time.Second, ErrorCode: strings.Repeat("C", 65), ErrorMessage: "e"}},
			{"ErrorCode", repo.ScheduleRetryParams{Lease: lease, RetryDelay: time.Second, ErrorMessage: "e"}},
			{"ErrorMessage", repo.ScheduleRetryParams{Lease: lease, RetryDelay: time.Second, ErrorCode: "E"}},
		} {
			_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &tc.p)
			requireInputError(t, err, tc.field)
			b.requireUnchanged(t, before)
		}
	})
}
