package repo_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestClaimOutbox(t *testing.T) {
	t.Parallel()

	// Each case puts one attempt's outbox row in a state and says whether
	// ClaimOutbox finds it due. Boundaries are exact: due means
	// available_at <= now (locked_until <= now for a claimed row).
	cases := []struct {
		name  string
		build func(t *testing.T, b *testBundle) uuid.UUID
		due   bool
	}{
		{"ClaimsPendingRow", func(t *testing.T, b *testBundle) uuid.UUID {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			return a.ID
		}, true},
		{"ClaimsPendingRowDueInThePast", func(t *testing.T, b *testBundle) uuid.UUID {
			a := b.drv.Start(b.ctx, t, b.scope(t), &testfactory.StartOpts{AvailableAt: new(b.clock.Now().Add(-time.Hour))})
			return a.ID
		}, true},
		{"SkipsPendingRowNotYetDue", func(t *testing.T, b *testBundle) uuid.UUID {
			a := b.drv.Start(b.ctx, t, b.scope(t), &testfactory.StartOpts{AvailableAt: new(b.clock.Now().Add(time.Microsecond))})
			return a.ID
		}, false},
		{"SkipsDeferredRow", func(t *testing.T, b *testBundle) uuid.UUID {
			a := b.drv.Start(b.ctx, t, b.scope(t), &testfactory.StartOpts{Deferred: new(true)})
			b.clock.Advance(24 * time.Hour)
			return a.ID
		}, false},
		{"ClaimsDispatchedRowAtVisibilityDeadline", func(t *testing.T, b *testBundle) uuid.UUID {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			b.drv.Dispatch(b.ctx, t, a.ID, &testfactory.DispatchOpts{QueueJobID: new("job-1")})
			b.clock.Advance(repo.VisibilityTimeoutDefault)
			return a.ID
		}, true},
		{"SkipsDispatchedRowWithinVisibility", func(t *testing.T, b *testBundle) uuid.UUID {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			b.drv.Dispatch(b.ctx, t, a.ID, &testfactory.DispatchOpts{QueueJobID: new("job-1")})
			b.clock.Advance(repo.VisibilityTimeoutDefault - time.Microsecond)
			return a.ID
		}, false},
		{"ClaimsLeasedRowAtLeaseExpiry", func(t *testing.T, b *testBundle) uuid.UUID {
			_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
			b.clock.Advance(repo.LeaseDurationDefault)
			return lease.AttemptID
		}, true},
		{"SkipsLeasedRowWithLiveLease", func(t *testing.T, b *testBundle) uuid.UUID {
			_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
			b.clock.Advance(repo.LeaseDurationDefault - time.Microsecond)
			return lease.AttemptID
		}, false},
		{"RecoversDispatchingRowWithExpiredLock", func(t *testing.T, b *testBundle) uuid.UUID {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-dead")})
			b.clock.Advance(repo.LockDurationDefault)
			return a.ID
		}, true},
		{"SkipsDispatchingRowWithLiveLock", func(t *testing.T, b *testBundle) uuid.UUID {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-other")})
			b.clock.Advance(repo.LockDurationDefault - time.Microsecond)
			return a.ID
		}, false},
		{"ClaimsRetryWaitRowAtRetryAt", func(t *testing.T, b *testBundle) uuid.UUID {
			_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
			_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: lease, RetryDelay: 10 * time.Second, ErrorCode: "X", ErrorMessage: "x"})
			require.NoError(t, err)
			b.rows(t, lease.AttemptID)
			b.clock.Advance(10 * time.Second)
			return lease.AttemptID
		}, true},
		{"SkipsRetryWaitRowBeforeRetryAt", func(t *testing.T, b *testBundle) uuid.UUID {
			_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
			_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: lease, RetryDelay: 10 * time.Second, ErrorCode: "X", ErrorMessage: "x"})
			require.NoError(t, err)
			b.rows(t, lease.AttemptID)
			b.clock.Advance(10*time.Second - time.Microsecond)
			return lease.AttemptID
		}, false},
		{"SkipsCompletedRow", func(t *testing.T, b *testBundle) uuid.UUID {
			_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointSmokeEvalPassed)})
			_, err := b.repo.Complete(b.ctx, b.db.Pool, &repo.CompleteParams{Lease: lease})
			require.NoError(t, err)
			b.clock.Advance(24 * time.Hour)
			return lease.AttemptID
		}, false},
		{"SkipsDeadRow", func(t *testing.T, b *testBundle) uuid.UUID {
			_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
			_, err := b.repo.Fail(b.ctx, b.db.Pool, &repo.FailParams{Lease: lease, ErrorCode: "X", ErrorMessage: "x"})
			require.NoError(t, err)
			b.rows(t, lease.AttemptID)
			b.clock.Advance(24 * time.Hour)
			return lease.AttemptID
		}, false},
		{"SkipsCanceledRow", func(t *testing.T, b *testBundle) uuid.UUID {
			s := b.scope(t)
			a := b.drv.Start(b.ctx, t, s, nil)
			_, err := b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: s.Ref(a.ID)})
			require.NoError(t, err)
			b.clock.Advance(24 * time.Hour)
			return a.ID
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			id := tc.build(t, b)
			before := b.rows(t, id)
			msgs, err := b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimOutboxParams{RelayID: "relay-a", BatchSize: 10, LockDuration: 45 * time.Second})
			require.NoError(t, err)
			after := b.rows(t, id)
			if !tc.due {
				require.Empty(t, msgs)
				require.Equal(t, before, after)
				return
			}
			require.Len(t, msgs, 1)
			m := msgs[0]
			require.NotNil(t, m.LockToken)
			require.NotEqual(t, uuid.Nil, *m.LockToken)
			if before.Outbox.LockToken != nil {
				require.NotEqual(t, *before.Outbox.LockToken, *m.LockToken, "a recovered row needs a fresh token")
			}
			want := testfactory.ExpectClaimed(before, m, "relay-a", b.clock.Now(), 45*time.Second)
			require.Equal(t, want, after, "only the outbox row changes; the attempt is untouched")
			require.Equal(t, want.Outbox, *m)
		})
	}

	t.Run("ClaimsOldestDueFirstUpToBatchSize", func(t *testing.T) {
		b := setup(t)
		t0 := b.clock.Now()
		at := func(d time.Duration) *testfactory.StartOpts {
			return &testfactory.StartOpts{AvailableAt: new(t0.Add(d))}
		}
		first := b.drv.Start(b.ctx, t, b.scope(t), at(-30*time.Second))
		tieC := b.drv.Start(b.ctx, t, b.scope(t), at(-20*time.Second))
		tieD := b.drv.Start(b.ctx, t, b.scope(t), at(-20*time.Second))
		last := b.drv.Start(b.ctx, t, b.scope(t), at(-10*time.Second))
		b.clock.Advance(time.Second)
		later := b.drv.Start(b.ctx, t, b.scope(t), at(-20*time.Second)) // same available_at as C and D, created later
		notDue := b.drv.Start(b.ctx, t, b.scope(t), at(time.Hour))
		// Equal available_at and created_at: the outbox id decides (uuid
		// order is byte order, as the canonical string's).
		if b.rows(t, tieD.ID).Outbox.ID.String() < b.rows(t, tieC.ID).Outbox.ID.String() {
			tieC, tieD = tieD, tieC
		}
		notDueBefore := b.rows(t, notDue.ID)

		claim := func(n int32) []uuid.UUID {
			msgs, err := b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimOutboxParams{RelayID: "relay-a", BatchSize: n})
			require.NoError(t, err)
			require.LessOrEqual(t, len(msgs), int(n))
			ids := make([]uuid.UUID, len(msgs))
			for i, m := range msgs {
				ids[i] = m.AttemptID
				b.rows(t, m.AttemptID)
			}
			return ids
		}
		require.Equal(t, []uuid.UUID{first.ID, tieC.ID}, claim(2))
		require.Equal(t, []uuid.UUID{tieD.ID}, claim(1))
		require.Equal(t, []uuid.UUID{later.ID, last.ID}, claim(100))
		require.Empty(t, claim(100))
		b.requireUnchanged(t, notDueBefore)
	})

	t.Run("GivesEachRowItsOwnTokenAndTheDefaultLock", func(t *testing.T) {
		b := setup(t)
		var befores []*testfactory.Rows
		for range 3 {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			befores = append(befores, b.rows(t, a.ID))
		}
		b.clock.Advance(5 * time.Second)
		msgs, err := b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimOutboxParams{RelayID: "relay-a", BatchSize: 3})
		require.NoError(t, err)
		require.Len(t, msgs, 3)
		tokens := map[uuid.UUID]bool{}
		for _, m := range msgs {
			require.NotNil(t, m.LockToken)
			require.NotEqual(t, uuid.Nil, *m.LockToken)
			tokens[*m.LockToken] = true
		}
		require.Len(t, tokens, 3, "tokens must be distinct per row")
		for i, before := range befores {
			m := msgs[i]
			require.Equal(t, before.Attempt.ID, m.AttemptID, "claim order is available_at, created_at, id")
			want := testfactory.ExpectClaimed(before, m, "relay-a", b.clock.Now(), repo.LockDurationDefault)
			require.Equal(t, want, b.rows(t, before.Attempt.ID))
		}
	})

	t.Run("SkipsRowsLockedByAnotherTransaction", func(t *testing.T) {
		b := setup(t)
		locked := b.drv.Start(b.ctx, t, b.scope(t), nil)
		free := b.drv.Start(b.ctx, t, b.scope(t), nil)
		lockedBefore := b.rows(t, locked.ID)

		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
		_, err = tx.Exec(b.ctx, `SELECT id FROM document_compilation_outbox WHERE attempt_id = $1 FOR UPDATE`, locked.ID)
		require.NoError(t, err)

		// A claim that waited for the lock would run into the deadline.
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		msgs, err := b.repo.ClaimOutbox(ctx, b.db.Pool, &repo.ClaimOutboxParams{RelayID: "relay-a", BatchSize: 10})
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		require.Equal(t, free.ID, msgs[0].AttemptID)
		require.NoError(t, ctx.Err())
		b.requireUnchanged(t, lockedBefore)

		require.NoError(t, tx.Rollback(b.ctx))
		msgs, err = b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimOutboxParams{RelayID: "relay-a", BatchSize: 10})
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		require.Equal(t, locked.ID, msgs[0].AttemptID)
		b.rows(t, locked.ID)
	})

	t.Run("ConcurrentClaimersNeverShareARow", func(t *testing.T) {
		b := setup(t)
		const rows, claimers = 40, 6
		ids := map[uuid.UUID]bool{}
		for range rows {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			ids[a.ID] = true
		}
		var (
			mu      sync.Mutex
			claimed = map[uuid.UUID][]string{}
			wg      sync.WaitGroup
			errs    = make(chan error, claimers)
		)
		for i := range claimers {
			relay := "relay-" + string(rune('a'+i))
			wg.Go(func() {
				for {
					msgs, err := b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimOutboxParams{RelayID: relay, BatchSize: 3})
					if err != nil {
						errs <- err
						return
					}
					if len(msgs) == 0 {
						return
					}
					mu.Lock()
					for _, m := range msgs {
						claimed[m.AttemptID] = append(claimed[m.AttemptID], relay)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, claimed, rows)
		for id, by := range claimed {
			require.True(t, ids[id])
			require.Len(t, by, 1, "attempt %s claimed by %v", id, by)
			r := b.rows(t, id)
			require.Equal(t, by[0], *r.Outbox.LockedBy)
			require.EqualValues(t, 1, r.Outbox.DispatchAttempts)
		}
	})

	t.Run("RejectsInvalidInput", func(t *testing.T) {
		b := setup(t)
		a := b.drv.Start(b.ctx, t, b.scope(t), nil)
		before := b.rows(t, a.ID)
		for _, tc := range []struct {
			field string
			p     repo.ClaimOutboxParams
		}{
			{"BatchSize", repo.ClaimOutboxParams{RelayID: "relay-a", BatchSize: 0}},
			{"BatchSize", repo.ClaimOutboxParams{RelayID: "relay-a", BatchSize: 101}},
			{"BatchSize", repo.ClaimOutboxParams{RelayID: "relay-a", BatchSize: -1}},
			{"RelayID", repo.ClaimOutboxParams{RelayID: "", BatchSize: 1}},
			{"RelayID", repo.ClaimOutboxParams{RelayID: strings.Repeat("r", 256), BatchSize: 1}},
			{"LockDuration", repo.ClaimOutboxParams{RelayID: "relay-a", BatchSize: 1, LockDuration: -time.Second}},
		} {
			msgs, err := b.repo.ClaimOutbox(b.ctx, b.db.Pool, &tc.p)
			requireInputError(t, err, tc.field)
			require.Nil(t, msgs)
			b.requireUnchanged(t, before)
		}
	})
}
