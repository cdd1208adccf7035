package repo_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestHeartbeat(t *testing.T) {
	t.Parallel()

	t.Run("HeartbeatExtendsOwnLease", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
		b.clock.Advance(20 * time.Second)
		before := b.rows(t, lease.AttemptID)
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
		require.Equal(t, &want, b.rows(t, lease.AttemptID))

		// The old lease value keeps working (same token), past its own
		// expiry, and the default duration applies.
		b.clock.Advance(70 * time.Second)
		before = b.rows(t, lease.AttemptID)
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
		require.Equal(t, &want, b.rows(t, lease.AttemptID))
	})

	// The relay reclaims the leased row at the lease's expiry while the
	// heartbeat's statement clock is still before it: its transaction
	// began earlier, or it waited on a lock. The lease is lost; nothing
	// changes (issue 13).
	t.Run("RefusedWhenTheRelayReclaimsWhileItWaitsForTheAttemptLock", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
		b.clock.Advance(repo.LeaseDurationDefault - time.Second)
		holder := b.rwLockRow(t, `SELECT 1 FROM document_compilation_attempts WHERE id = $1 FOR UPDATE`, lease.AttemptID)
		done := b.rwBlocked(t, "Heartbeat", func() error {
			_, err := b.repo.Heartbeat(b.ctx, b.db.Pool, &repo.HeartbeatParams{Lease: lease})
			return err
		})
		b.drv.Reclaim(b.ctx, t, lease) // the claim locks outbox rows only: it does not wait
		before := b.rows(t, lease.AttemptID)
		require.NoError(t, holder.Commit(b.ctx))
		require.ErrorIs(t, <-done, repo.ErrLeaseLost)
		b.requireUnchanged(t, before)
	})

	t.Run("RefusedInATransactionThatBeganBeforeTheExpiry", func(t *testing.T) {
		b := setup(t)
		r := repo.New(nil) // the database clock: a transaction's now() is when it began
		drv := &testfactory.Driver{Repo: r, DB: b.db.Pool}
		a := drv.Start(b.ctx, t, b.scope(t), nil)
		del := drv.Dispatch(b.ctx, t, a.ID, nil)
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
		msgs, err := r.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimOutboxParams{RelayID: "relay-a", BatchSize: 1})
		require.NoError(t, err)
		require.Len(t, msgs, 1, "the relay reclaims the expired lease")
		before := b.rows(t, a.ID)
		_, err = r.Heartbeat(b.ctx, tx, &repo.HeartbeatParams{Lease: lease})
		require.ErrorIs(t, err, repo.ErrLeaseLost)
		require.NoError(t, tx.Commit(b.ctx))
		b.requireUnchanged(t, before)
	})

	t.Run("HeartbeatBesideAdvanceOfTheSameLease", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointParsed)})
		before := b.rows(t, lease.AttemptID)
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
		after := b.rows(t, lease.AttemptID)
		require.Equal(t, before.Attempt.RowVersion+2*n, after.Attempt.RowVersion, "every write landed")
		require.Equal(t, kfstype.CheckpointParsed, after.Attempt.Checkpoint)
		require.Equal(t, lease.Token, *after.Attempt.LeaseToken)
	})

	t.Run("RejectsInvalidInput", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
		before := b.rows(t, lease.AttemptID)
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
