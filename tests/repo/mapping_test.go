package repo_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// The tests here race a transition against a concurrent transaction and
// check how PostgreSQL's refusal reaches the caller: as the repo's
// sentinel, with the *pgconn.PgError still reachable through errors.As.

// TestRetryFailedLosingTheSlotKeepsThePgError: a RetryFailed that loses
// the race for the active slot to a concurrent Start (the unique index
// refuses it once the Start commits) is ErrLiveAttemptExists and still
// carries PostgreSQL's unique violation for errors.As.
func TestRetryFailedLosingTheSlotKeepsThePgError(t *testing.T) {
	b := setup(t)
	s := b.scope(t)
	failed := b.drv.InState(b.ctx, t, s, kfstype.RunStateFailed)
	ctx := b.ctx

	// A new attempt of the same version, not yet committed: RetryFailed's
	// snapshot does not see it, and its update waits on the index entry.
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	res, err := b.repo.Start(ctx, tx, s.StartParams())
	require.NoError(t, err)
	require.True(t, res.Created)

	done := make(chan error, 1)
	go func() {
		_, err := b.repo.RetryFailed(ctx, b.db.Pool, &repo.RetryFailedParams{AttemptRef: s.Ref(failed.ID)})
		done <- err
	}()
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		return waiting == 1
	}, 10*time.Second, 5*time.Millisecond, "RetryFailed waits on the uncommitted Start")
	require.NoError(t, tx.Commit(ctx))

	err = <-done
	require.ErrorIs(t, err, repo.ErrLiveAttemptExists)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23505", pgErr.Code)
	require.Equal(t, "document_compilation_attempts_scope_version_active_uq", pgErr.ConstraintName)
	require.Equal(t, kfstype.RunStateFailed, b.rows(t, failed.ID).Attempt.RunState, "the failed attempt is unchanged")
}

// A Start inside a REPEATABLE READ transaction whose snapshot predates a
// concurrent Start of the same version cannot see the live attempt; the
// database aborts it with a serialization failure, reported as
// ErrRetryTransaction (the PgError stays reachable). Retrying the
// transaction returns the live attempt.
func TestStartInRepeatableReadTxRacingAnotherStart(t *testing.T) {
	b := setup(t)
	s := b.scope(t)
	tx, err := b.db.Pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, "SELECT 1") // take the snapshot
	require.NoError(t, err)

	winner := b.drv.Start(b.ctx, t, s, nil)

	_, err = b.repo.Start(b.ctx, tx, s.StartParams())
	require.ErrorIs(t, err, repo.ErrRetryTransaction)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "40001", pgErr.Code)
	require.NoError(t, tx.Rollback(b.ctx))

	err = pgx.BeginTxFunc(b.ctx, b.db.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		res, err := b.repo.Start(b.ctx, tx, s.StartParams())
		require.NoError(t, err)
		require.False(t, res.Created)
		require.Equal(t, winner.ID, res.Attempt.ID)
		return nil
	})
	require.NoError(t, err)
	b.rows(t, winner.ID)
}
