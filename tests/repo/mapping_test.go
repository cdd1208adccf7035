package repo_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

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
		_, err := b.repo.RetryFailed(ctx, b.db.Pool, new(s.Ref(failed.ID)))
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
