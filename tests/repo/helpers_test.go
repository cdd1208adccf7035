package repo_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

type repoAcquire struct {
	repo.Delivery
	WorkerID string
}

func (a repoAcquire) p() *repo.AcquireLeaseParams {
	return &repo.AcquireLeaseParams{Delivery: a.Delivery, WorkerID: a.WorkerID}
}

// requireInputError requires err to be a *repo.InputError for field.
func requireInputError(t *testing.T, err error, field string) {
	t.Helper()
	var ie *repo.InputError
	require.ErrorAs(t, err, &ie)
	require.ErrorIs(t, err, repo.ErrInvalidInput)
	require.Equal(t, field, ie.Field, "%v", err)
}

// dump renders every attempt and outbox row of the test's database, to
// prove a refused call wrote nothing anywhere.
func (b *testBundle) dump(t *testing.T) string {
	t.Helper()
	var s string
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT json_build_object(
		'attempts', (SELECT coalesce(json_agg(a ORDER BY a.id), '[]') FROM document_compilation_attempts a),
		'outbox', (SELECT coalesce(json_agg(o ORDER BY o.id), '[]') FROM document_compilation_outbox o))::text`).Scan(&s))
	return s
}

// requireUnchanged requires each attempt's rows to equal their before (a
// refused transition changed nothing) and the invariants to hold. It looks
// only at those attempts, so it also serves calls that legitimately change
// other rows (Purge, a batch with other members).
func (b *testBundle) requireUnchanged(t *testing.T, before ...*testfactory.Rows) {
	t.Helper()
	for _, r := range before {
		after := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, r.Attempt.ID)
		require.Equal(t, r, after, "a refused transition changed the rows")
	}
}

// snapshot is the state before a call that must change nothing anywhere.
type snapshot struct {
	rows []*testfactory.Rows
	dump string
}

// snapshot reads the rows of ids and dumps the whole database.
func (b *testBundle) snapshot(t *testing.T, ids ...uuid.UUID) *snapshot {
	t.Helper()
	s := &snapshot{dump: b.dump(t)}
	for _, id := range ids {
		s.rows = append(s.rows, testfactory.ReadRows(b.ctx, t, b.db.Pool, id))
	}
	return s
}

// requireUnchanged checks the invariants of every snapshotted attempt and
// that neither they nor any other row changed.
func (s *snapshot) requireUnchanged(t *testing.T, b *testBundle) {
	t.Helper()
	b.requireUnchanged(t, s.rows...)
	require.Equal(t, s.dump, b.dump(t))
}
