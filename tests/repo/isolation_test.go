package repo_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/repo"
)

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
