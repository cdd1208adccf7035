package repo_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

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
			_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
			b.clock.Advance(3 * time.Second)
			before := b.rows(t, lease.AttemptID)
			got, err := b.repo.Fail(b.ctx, b.db.Pool, &repo.FailParams{Lease: lease, ErrorCode: tc.code, ErrorMessage: tc.msg})
			require.NoError(t, err)
			want := testfactory.ExpectEnded(before, kfstype.RunStateFailed, kfstype.OutboxStatusDead, b.clock.Now())
			want.Attempt.LastErrorCode = new(tc.code)
			want.Attempt.LastErrorMessage = new(tc.stored)
			after := b.rows(t, lease.AttemptID)
			require.Equal(t, want, after)
			require.Equal(t, want.Attempt, *got)
			require.True(t, utf8.ValidString(*after.Attempt.LastErrorMessage))
			require.LessOrEqual(t, utf8.RuneCountInString(*after.Attempt.LastErrorMessage), repo.MaxErrorMessageRunes)
		})
	}

	t.Run("RejectsInvalidInput", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
		before := b.rows(t, lease.AttemptID)
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
		s := b.scope(t)
		a := b.drv.Start(b.ctx, t, s, nil)
		del := b.drv.Dispatch(b.ctx, t, a.ID, &testfactory.DispatchOpts{QueueJobID: new("job-1"), ExternalJobID: new("ext-1")})
		_, lease := b.drv.Acquire(b.ctx, t, del, &testfactory.AcquireOpts{WorkerID: new("worker-a")})
		b.drv.AdvanceTo(b.ctx, t, s, lease, kfstype.CheckpointOutlineBuilt)
		b.clock.Advance(4 * time.Second)
		before := b.rows(t, a.ID)
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
		require.Equal(t, &want, b.rows(t, a.ID), "checkpoint, execution attempts and started_at are kept")
		require.Equal(t, want.Attempt, *got)

		// The old delivery is stale now.
		_, _, err = b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-a"})
		require.ErrorIs(t, err, repo.ErrDeliveryMismatch)
		b.requireUnchanged(t, &want)
	})

	t.Run("RejectsWhenNoExecutionsLeft", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Start: &testfactory.StartOpts{MaxExecutionAttempts: new(int32(1))}})
		before := b.rows(t, lease.AttemptID)
		got, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: lease, RetryDelay: time.Second, ErrorCode: "E", ErrorMessage: "e"})
		require.ErrorIs(t, err, repo.ErrAttemptsExhausted)
		require.Nil(t, got)
		b.requireUnchanged(t, before)
	})

	t.Run("RejectsInvalidInput", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
		before := b.rows(t, lease.AttemptID)
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
