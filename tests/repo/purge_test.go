package repo_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestPurge(t *testing.T) {
	t.Parallel()

	// terminalAttempts makes n terminal attempts in the tenant, one a
	// minute, cycling through the terminal states; returned oldest first.
	terminalAttempts := func(t *testing.T, b *testBundle, tenant string, n int) ([]*kfstype.Attempt, []*testfactory.Scope) {
		t.Helper()
		var out []*kfstype.Attempt
		var scopes []*testfactory.Scope
		for i := range n {
			s := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &tenant})
			b.clock.Advance(time.Minute)
			out = append(out, b.drv.InState(b.ctx, t, s, ctlTerminalStates[i%len(ctlTerminalStates)]))
			scopes = append(scopes, s)
		}
		return out, scopes
	}

	exists := func(t *testing.T, b *testBundle, id uuid.UUID) (attempt, outbox bool) {
		t.Helper()
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT
			EXISTS (SELECT 1 FROM document_compilation_attempts WHERE id = $1),
			EXISTS (SELECT 1 FROM document_compilation_outbox WHERE attempt_id = $1)`, id).Scan(&attempt, &outbox))
		return attempt, outbox
	}
	requireGone := func(t *testing.T, b *testBundle, as ...*kfstype.Attempt) {
		t.Helper()
		for _, a := range as {
			at, ob := exists(t, b, a.ID)
			require.False(t, at, "attempt %s still there", a.ID)
			require.False(t, ob, "outbox row of %s still there", a.ID)
		}
	}

	t.Run("DeletesTerminalAttemptsCompletedBeforeCutoff", func(t *testing.T) {
		b := setup(t)
		tenant := "tenant-" + uuid.NewString()[:8]
		terminal, _ := terminalAttempts(t, b, tenant, 4)
		// Live attempts of the tenant in every live state stay.
		var live []uuid.UUID
		for _, state := range ctlLiveStates {
			s := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &tenant})
			live = append(live, b.drv.InState(b.ctx, t, s, state).ID)
		}
		// Another tenant's terminal attempt stays.
		other := b.drv.InState(b.ctx, t, b.scope(t), kfstype.RunStateCanceled)
		b.clock.Advance(time.Hour)

		// The cut-off is exclusive: the attempt completed at it stays.
		keep := append([]uuid.UUID{terminal[2].ID, terminal[3].ID, other.ID}, live...)
		snap := b.snapshot(t, keep...)
		n, err := b.repo.Purge(b.ctx, b.db.Pool, &repo.PurgeParams{TenantID: tenant, CompletedBefore: *terminal[2].CompletedAt})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		requireGone(t, b, terminal[0], terminal[1])
		b.requireUnchanged(t, snap.rows...)

		snap = b.snapshot(t, append([]uuid.UUID{other.ID}, live...)...)
		n, err = b.repo.Purge(b.ctx, b.db.Pool, &repo.PurgeParams{TenantID: tenant, CompletedBefore: b.clock.Now()})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		requireGone(t, b, terminal[2], terminal[3])
		b.requireUnchanged(t, snap.rows...)
		require.Equal(t, len(live)+1, ctlCount(t, b, "document_compilation_attempts"))
		require.Equal(t, len(live)+1, ctlCount(t, b, "document_compilation_outbox"))

		// Nothing left to purge: a no-op.
		snap = b.snapshot(t, append([]uuid.UUID{other.ID}, live...)...)
		n, err = b.repo.Purge(b.ctx, b.db.Pool, &repo.PurgeParams{TenantID: tenant, CompletedBefore: b.clock.Now()})
		require.NoError(t, err)
		require.Zero(t, n)
		snap.requireUnchanged(t, b)
	})

	t.Run("DeletesOldestFirstInBoundedBatches", func(t *testing.T) {
		b := setup(t)
		tenant := "tenant-" + uuid.NewString()[:8]
		terminal, _ := terminalAttempts(t, b, tenant, 5)
		b.clock.Advance(time.Minute)
		p := &repo.PurgeParams{TenantID: tenant, CompletedBefore: b.clock.Now(), BatchSize: 2}
		for i, want := range []int{2, 2, 1, 0} {
			n, err := b.repo.Purge(b.ctx, b.db.Pool, p)
			require.NoError(t, err)
			require.Equal(t, want, n, "call %d", i)
			done := min(2*(i+1), len(terminal))
			requireGone(t, b, terminal[:done]...)
			for _, a := range terminal[done:] {
				testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
			}
		}
		require.Zero(t, ctlCount(t, b, "document_compilation_attempts"))
		require.Zero(t, ctlCount(t, b, "document_compilation_outbox"))
	})

	t.Run("SkipsRowsLockedByAnotherTransaction", func(t *testing.T) {
		b := setup(t)
		tenant := "tenant-" + uuid.NewString()[:8]
		terminal, _ := terminalAttempts(t, b, tenant, 3)
		b.clock.Advance(time.Minute)

		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
		var locked uuid.UUID
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT id FROM document_compilation_attempts WHERE id = $1 FOR UPDATE`, terminal[0].ID).Scan(&locked))

		snap := b.snapshot(t, terminal[0].ID)
		p := &repo.PurgeParams{TenantID: tenant, CompletedBefore: b.clock.Now(), BatchSize: 10}
		n, err := b.repo.Purge(b.ctx, b.db.Pool, p)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		requireGone(t, b, terminal[1], terminal[2])
		b.requireUnchanged(t, snap.rows...)

		// Released, the row goes on the next call.
		require.NoError(t, tx.Rollback(b.ctx))
		n, err = b.repo.Purge(b.ctx, b.db.Pool, p)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		requireGone(t, b, terminal[0])
	})

	t.Run("ValidatesInput", func(t *testing.T) {
		b := setup(t)
		tenant := "tenant-" + uuid.NewString()[:8]
		terminal, _ := terminalAttempts(t, b, tenant, 1)
		b.clock.Advance(time.Minute)
		snap := b.snapshot(t, terminal[0].ID)
		cut := b.clock.Now()
		for _, tc := range []struct {
			name  string
			p     repo.PurgeParams
			field string
		}{
			{"EmptyTenant", repo.PurgeParams{CompletedBefore: cut}, "TenantID"},
			{"LongTenant", repo.PurgeParams{TenantID: strings.Repeat("t", 256), CompletedBefore: cut}, "TenantID"},
			{"NulInTenant", repo.PurgeParams{TenantID: "t\x00", CompletedBefore: cut}, "TenantID"},
			{"ZeroCutoff", repo.PurgeParams{TenantID: tenant}, "CompletedBefore"},
			{"NegativeBatch", repo.PurgeParams{TenantID: tenant, CompletedBefore: cut, BatchSize: -1}, "BatchSize"},
			{"OversizedBatch", repo.PurgeParams{TenantID: tenant, CompletedBefore: cut, BatchSize: repo.MaxPurgeBatch + 1}, "BatchSize"},
		} {
			n, err := b.repo.Purge(b.ctx, b.db.Pool, &tc.p)
			requireInputError(t, err, tc.field)
			require.Zero(t, n, tc.name)
			snap.requireUnchanged(t, b)
		}
		// Paired positive: the largest batch is accepted.
		n, err := b.repo.Purge(b.ctx, b.db.Pool, &repo.PurgeParams{TenantID: tenant, CompletedBefore: cut, BatchSize: repo.MaxPurgeBatch})
		require.NoError(t, err)
		require.Equal(t, 1, n)
	})
}
