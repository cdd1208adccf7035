package repo_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// startN starts n attempts in one space of tenant.
func (b *testBundle) startN(t *testing.T, tenant string, n int) {
	t.Helper()
	s := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: new(tenant)})
	b.drv.Start(b.ctx, t, s, nil)
	for v := int32(2); v <= int32(n); v++ {
		more := *s
		more.DocumentAssetID, more.DocumentVersion = uuid.New(), v
		insertAsset(b, t, &more)
		b.drv.Start(b.ctx, t, &more, nil)
	}
}

func TestTenantLimits(t *testing.T) {
	t.Parallel()

	t.Run("FetchesNoMoreThanTheCap", func(t *testing.T) {
		b := setup(t)
		b.startN(t, "capped", 10)
		b.startN(t, "free", 3)
		require.NoError(t, b.repo.SetTenantLimit(b.ctx, b.db.Pool, &repo.SetTenantLimitParams{TenantID: "capped", MaxRunning: 2}))
		res := b.fetch(t, "w1", 100)
		require.ElementsMatch(t, []string{"capped", "capped", "free", "free", "free"}, tenantsOf(res.Leased))
		// Another worker: the cap is full.
		require.Empty(t, b.fetch(t, "w2", 100).Leased)
		// One lease ends: one place is free again.
		_, err := b.repo.Fail(b.ctx, b.db.Pool, &repo.FailParams{Lease: leaseOf(res, "capped"), ErrorCode: "X", ErrorMessage: "done"})
		require.NoError(t, err)
		require.Equal(t, []string{"capped"}, tenantsOf(b.fetch(t, "w2", 100).Leased))
		// A lease that lapsed frees its place (and is fetched again).
		b.clock.Advance(repo.LeaseDurationDefault)
		require.Equal(t, []string{"capped", "capped"}, tenantsOf(b.fetch(t, "w3", 100).Leased)[:2])
		// Raising the cap lets more through; lifting it, all.
		require.NoError(t, b.repo.SetTenantLimit(b.ctx, b.db.Pool, &repo.SetTenantLimitParams{TenantID: "capped", MaxRunning: 3}))
		require.Equal(t, []string{"capped"}, tenantsOf(b.fetch(t, "w3", 100).Leased))
		require.NoError(t, b.repo.RemoveTenantLimit(b.ctx, b.db.Pool, &repo.RemoveTenantLimitParams{TenantID: "capped"}))
		require.Len(t, b.fetch(t, "w3", 100).Leased, 10-1-3)
		require.ErrorIs(t, b.repo.RemoveTenantLimit(b.ctx, b.db.Pool, &repo.RemoveTenantLimitParams{TenantID: "capped"}), repo.ErrNotFound)
	})

	t.Run("SkipsATenantAnotherFetchIsLeasing", func(t *testing.T) {
		b := setup(t)
		b.startN(t, "capped", 4)
		require.NoError(t, b.repo.SetTenantLimit(b.ctx, b.db.Pool, &repo.SetTenantLimitParams{TenantID: "capped", MaxRunning: 3}))
		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(b.ctx) }()
		first, err := b.repo.FetchLeases(b.ctx, tx, &repo.FetchLeasesParams{WorkerID: "w1", BatchSize: 1})
		require.NoError(t, err)
		require.Len(t, first.Leased, 1)
		// While that fetch's transaction is open, another fetch skips the
		// tenant instead of counting the same free places.
		require.Empty(t, b.fetch(t, "w2", 100).Leased)
		require.NoError(t, tx.Commit(b.ctx))
		require.Len(t, b.fetch(t, "w2", 100).Leased, 2, "3 places, 1 taken")
	})

	t.Run("SkipsATenantWhoseLastLeasesItCannotSee", func(t *testing.T) {
		b := setup(t)
		b.startN(t, "capped", 2)
		require.NoError(t, b.repo.SetTenantLimit(b.ctx, b.db.Pool, &repo.SetTenantLimitParams{TenantID: "capped", MaxRunning: 5}))
		// A stamp no snapshot taken now can see stands for a fetch that
		// committed after this statement's snapshot was taken.
		_, err := b.db.Pool.Exec(b.ctx, `UPDATE document_compilation_tenant_limits
			SET leased_by_xid = (pg_current_xact_id()::text::bigint + 1000)::text::xid8 WHERE tenant_id = 'capped'`)
		require.NoError(t, err)
		require.Empty(t, b.fetch(t, "w1", 100).Leased)
		_, err = b.db.Pool.Exec(b.ctx, `UPDATE document_compilation_tenant_limits SET leased_by_xid = NULL WHERE tenant_id = 'capped'`)
		require.NoError(t, err)
		require.Len(t, b.fetch(t, "w1", 100).Leased, 2)
	})

	t.Run("ListsAndRefuses", func(t *testing.T) {
		b := setup(t)
		require.NoError(t, b.repo.SetTenantLimit(b.ctx, b.db.Pool, &repo.SetTenantLimitParams{TenantID: "b", MaxRunning: 2}))
		require.NoError(t, b.repo.SetTenantLimit(b.ctx, b.db.Pool, &repo.SetTenantLimitParams{TenantID: "a", MaxRunning: 1}))
		got, err := b.repo.ListTenantLimits(b.ctx, b.db.Pool, &repo.ListTenantLimitsParams{})
		require.NoError(t, err)
		require.Equal(t, []repo.TenantLimit{{TenantID: "a", MaxRunning: 1}, {TenantID: "b", MaxRunning: 2}}, got)
		requireInputError(t, b.repo.SetTenantLimit(b.ctx, b.db.Pool, &repo.SetTenantLimitParams{TenantID: "a"}), "MaxRunning")
		requireInputError(t, b.repo.SetTenantLimit(b.ctx, b.db.Pool, &repo.SetTenantLimitParams{MaxRunning: 1}), "TenantID")
		requireInputError(t, b.repo.RemoveTenantLimit(b.ctx, b.db.Pool, &repo.RemoveTenantLimitParams{TenantID: ""}), "TenantID")
	})
}

// leaseOf is the first lease of res for an attempt of tenant.
func leaseOf(res *repo.FetchLeasesResult, tenant string) *repo.Lease {
	for _, la := range res.Leased {
		if la.Attempt.TenantID == tenant {
			return la.Lease
		}
	}
	return nil
}
