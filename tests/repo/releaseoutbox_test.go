package repo_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestReleaseOutbox(t *testing.T) {
	t.Parallel()

	t.Run("BacksOff", func(t *testing.T) {
		b := setup(t)
		a := b.drv.Start(b.ctx, t, b.scope(t), nil)
		m := b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-a")})[a.ID]
		b.clock.Advance(2 * time.Second)
		before := b.rows(t, a.ID)
		got, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{
			OutboxID: m.ID, LockToken: *m.LockToken, Backoff: 7 * time.Second, LastError: "broker down",
		})
		require.NoError(t, err)
		want := testfactory.ExpectBackedOff(before, "broker down", b.clock.Now(), 7*time.Second)
		require.Equal(t, want, b.rows(t, a.ID), "the attempt is untouched")
		require.Equal(t, want.Outbox, *got)

		// Due again only after the backoff, with the attempt counted.
		b.clock.Advance(7*time.Second - time.Microsecond)
		require.Empty(t, b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-a")}))
		b.clock.Advance(time.Microsecond)
		again := b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-a")})[a.ID]
		require.NotNil(t, again)
		require.EqualValues(t, 2, again.DispatchAttempts)
	})

	t.Run("DeadLettersOnceDispatchAttemptsReachTheMaximum", func(t *testing.T) {
		b := setup(t)
		a := b.drv.Start(b.ctx, t, b.scope(t), nil)
		const maxAttempts = 3
		b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-a")})            // 1: the relay dies
		b.clock.Advance(repo.LockDurationDefault)                                            // its lock expires
		m := b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-b")})[a.ID] // 2
		require.EqualValues(t, 2, m.DispatchAttempts)
		got, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{
			OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Second, MaxDispatchAttempts: maxAttempts, LastError: "try 2",
		})
		require.NoError(t, err)
		require.Equal(t, kfstype.OutboxStatusPending, got.Status)
		b.rows(t, a.ID)
		b.clock.Advance(time.Second)
		m = b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-b")})[a.ID] // 3
		require.EqualValues(t, maxAttempts, m.DispatchAttempts)
		b.clock.Advance(time.Second)
		before := b.rows(t, a.ID)
		got, err = b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{
			OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Second, MaxDispatchAttempts: maxAttempts, LastError: "try 3",
		})
		require.NoError(t, err)
		want := testfactory.ExpectDeadLettered(before, "try 3", b.clock.Now())
		require.Equal(t, want, b.rows(t, a.ID))
		require.Equal(t, want.Outbox, *got)
	})

	// Dead-lettering from every state a claimed row's attempt can be in.
	for _, tc := range []struct {
		name  string
		build func(t *testing.T, b *testBundle) uuid.UUID
	}{
		{"DeadLettersDispatchPendingAttempt", func(t *testing.T, b *testBundle) uuid.UUID {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			return a.ID
		}},
		{"DeadLettersRetryWaitAttempt", func(t *testing.T, b *testBundle) uuid.UUID {
			_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
			_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: lease, RetryDelay: time.Second, ErrorCode: "E", ErrorMessage: "e"})
			require.NoError(t, err)
			b.rows(t, lease.AttemptID)
			b.clock.Advance(time.Second)
			return lease.AttemptID
		}},
		{"DeadLettersQueuedAttempt", func(t *testing.T, b *testBundle) uuid.UUID {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			b.drv.Dispatch(b.ctx, t, a.ID, &testfactory.DispatchOpts{QueueJobID: new("job-1")})
			b.clock.Advance(repo.VisibilityTimeoutDefault)
			return a.ID
		}},
		{"DeadLettersRunningAttemptWithExpiredLease", func(t *testing.T, b *testBundle) uuid.UUID {
			_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
			b.clock.Advance(repo.LeaseDurationDefault)
			return lease.AttemptID
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			id := tc.build(t, b)
			m := b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-a")})[id]
			require.NotNil(t, m)
			before := b.rows(t, id)
			got, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{
				OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Second, MaxDispatchAttempts: m.DispatchAttempts, LastError: "queue rejected the message",
			})
			require.NoError(t, err)
			want := testfactory.ExpectDeadLettered(before, "queue rejected the message", b.clock.Now())
			require.Equal(t, want, b.rows(t, id))
			require.Equal(t, want.Outbox, *got)
		})
	}

	// A row the relay reclaimed at the lease's expiry by its clock while the
	// release's clock still sees the lease live (issue 13): the attempt is
	// not dead-lettered or backed off under its worker. The row goes back
	// to the lease (leased, due at the expiry, the error recorded) and the
	// attempt is untouched, so the worker keeps its lease.
	for _, tc := range []struct {
		name        string
		maxAttempts func(m *kfstype.OutboxMessage) int32
	}{
		{"DoesNotDeadLetterALiveLease", func(m *kfstype.OutboxMessage) int32 { return m.DispatchAttempts }},
		{"DoesNotBackOffALiveLease", func(m *kfstype.OutboxMessage) int32 { return m.DispatchAttempts + 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
			b.clock.Advance(repo.LeaseDurationDefault - time.Second)
			m := b.drv.Reclaim(b.ctx, t, lease)
			before := b.rows(t, lease.AttemptID)
			got, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{
				OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Second, MaxDispatchAttempts: tc.maxAttempts(m), LastError: "queue rejected the message",
			})
			require.NoError(t, err)
			want := testfactory.ExpectBackedOff(before, "queue rejected the message", b.clock.Now(), 0)
			want.Outbox.Status = kfstype.OutboxStatusLeased
			want.Outbox.AvailableAt = *before.Attempt.LeaseExpiresAt
			require.Equal(t, want, b.rows(t, lease.AttemptID))
			require.Equal(t, want.Outbox, *got)

			// The worker's lease holds: it heartbeats and completes.
			_, err = b.repo.Heartbeat(b.ctx, b.db.Pool, &repo.HeartbeatParams{Lease: lease})
			require.NoError(t, err)
			b.rows(t, lease.AttemptID)
		})
	}

	t.Run("RefusesWithoutTheLock", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			// build returns the outbox row as claimed and the token to present.
			build func(t *testing.T, b *testBundle) (uuid.UUID, *kfstype.OutboxMessage, uuid.UUID)
		}{
			{"WrongToken", func(t *testing.T, b *testBundle) (uuid.UUID, *kfstype.OutboxMessage, uuid.UUID) {
				a := b.drv.Start(b.ctx, t, b.scope(t), nil)
				m := b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-a")})[a.ID]
				return a.ID, m, uuid.New()
			}},
			{"TokenOfAnExpiredClaim", func(t *testing.T, b *testBundle) (uuid.UUID, *kfstype.OutboxMessage, uuid.UUID) {
				a := b.drv.Start(b.ctx, t, b.scope(t), nil)
				m := b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-a")})[a.ID]
				b.clock.Advance(repo.LockDurationDefault)
				require.NotNil(t, b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-b")})[a.ID])
				return a.ID, m, *m.LockToken
			}},
			{"RowAlreadyReleased", func(t *testing.T, b *testBundle) (uuid.UUID, *kfstype.OutboxMessage, uuid.UUID) {
				a := b.drv.Start(b.ctx, t, b.scope(t), nil)
				m := b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-a")})[a.ID]
				_, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Second, LastError: "x"})
				require.NoError(t, err)
				return a.ID, m, *m.LockToken
			}},
			{"RowAlreadyMarked", func(t *testing.T, b *testBundle) (uuid.UUID, *kfstype.OutboxMessage, uuid.UUID) {
				a := b.drv.Start(b.ctx, t, b.scope(t), nil)
				m := b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-a")})[a.ID]
				_, err := b.repo.MarkDispatched(b.ctx, b.db.Pool, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: "job-1"}}})
				require.NoError(t, err)
				return a.ID, m, *m.LockToken
			}},
			{"AttemptCanceledMeanwhile", func(t *testing.T, b *testBundle) (uuid.UUID, *kfstype.OutboxMessage, uuid.UUID) {
				s := b.scope(t)
				a := b.drv.Start(b.ctx, t, s, nil)
				m := b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-a")})[a.ID]
				_, err := b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: s.Ref(a.ID)})
				require.NoError(t, err)
				return a.ID, m, *m.LockToken
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				b := setup(t)
				id, m, token := tc.build(t, b)
				before := b.rows(t, id)
				for _, max := range []int32{0, 1} { // backing off and dead-lettering alike
					got, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{
						OutboxID: m.ID, LockToken: token, Backoff: time.Second, MaxDispatchAttempts: max, LastError: "late",
					})
					require.ErrorIs(t, err, repo.ErrOutboxLockLost)
					require.Nil(t, got)
					b.requireUnchanged(t, before)
				}
			})
		}
	})

	t.Run("RefusesUnknownRow", func(t *testing.T) {
		b := setup(t)
		_, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{OutboxID: uuid.New(), LockToken: uuid.New(), Backoff: time.Second, LastError: "x"})
		require.ErrorIs(t, err, repo.ErrOutboxLockLost)
	})

	t.Run("RejectsInvalidInput", func(t *testing.T) {
		b := setup(t)
		a := b.drv.Start(b.ctx, t, b.scope(t), nil)
		m := b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-a")})[a.ID]
		before := b.rows(t, a.ID)
		good := repo.ReleaseOutboxParams{OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Second, LastError: "x"}
		for _, tc := range []struct {
			field string
			edit  func(*repo.ReleaseOutboxParams)
		}{
			{"OutboxID", func(p *repo.ReleaseOutboxParams) { p.OutboxID = uuid.Nil }},
			{"LockToken", func(p *repo.ReleaseOutboxParams) { p.LockToken = uuid.Nil }},
			{"Backoff", func(p *repo.ReleaseOutboxParams) { p.Backoff = 0 }},
			{"Backoff", func(p *repo.ReleaseOutboxParams) { p.Backoff = -time.Second }},
			{"MaxDispatchAttempts", func(p *repo.ReleaseOutboxParams) { p.MaxDispatchAttempts = -1 }},
			{"LastError", func(p *repo.ReleaseOutboxParams) { p.LastError = "" }},
		} {
			p := good
			tc.edit(&p)
			got, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &p)
			requireInputError(t, err, tc.field)
			require.Nil(t, got)
			b.requireUnchanged(t, before)
		}
	})
}
