package repo_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// Helpers shared by the relay's and the worker's tests carry an rw prefix:
// this file holds them.

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
	a := b.rows(t, lease.AttemptID).Attempt
	require.Nil(t, a.CandidatePublicationID)
	c := b.rwPub(t, s, "candidate")
	_, err := b.repo.Advance(b.ctx, b.db.Pool, &repo.AdvanceParams{Lease: lease, Checkpoint: a.Checkpoint, CandidatePublicationID: c.id, CandidateFingerprint: c.fp})
	require.NoError(t, err)
	b.rows(t, lease.AttemptID)
}
