package repo_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestPurgeTenants: the all-tenants purge's walk lists, in tenant_id
// order and page by page, exactly the tenants with a terminal attempt
// completed before the cut-off: not a tenant whose attempts are all live,
// nor one whose only terminal attempt completed at or after it.
func TestPurgeTenants(t *testing.T) {
	b := setup(t)
	inState := func(tenant string, state kfstype.RunState) {
		t.Helper()
		s := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &tenant})
		b.drv.InState(b.ctx, t, s, state)
	}
	inState("t-a", kfstype.RunStateCanceled)
	inState("t-b", kfstype.RunStateQueued)
	inState("t-c", kfstype.RunStateFailed)
	inState("t-c", kfstype.RunStateRunning)
	inState("t-d", kfstype.RunStateSucceeded)
	inState("t-e", kfstype.RunStateSuperseded)
	cutoff := b.clock.Advance(time.Minute)
	inState("t-f", kfstype.RunStateCanceled) // completed at the cut-off: stays
	b.clock.Advance(time.Minute)

	list := func(after string, limit int32) []string {
		t.Helper()
		got, err := b.repo.PurgeTenants(b.ctx, b.db.Pool, &repo.PurgeTenantsParams{CompletedBefore: cutoff, AfterTenant: after, Limit: limit})
		require.NoError(t, err)
		return got
	}
	require.Equal(t, []string{"t-a", "t-c", "t-d", "t-e"}, list("", 0))
	require.Equal(t, []string{"t-a", "t-c"}, list("", 2))
	require.Equal(t, []string{"t-d", "t-e"}, list("t-c", 2))
	require.Empty(t, list("t-e", 2))

	// A purged tenant is no longer listed.
	n, err := b.repo.Purge(b.ctx, b.db.Pool, &repo.PurgeParams{TenantID: "t-c", CompletedBefore: cutoff})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"t-a", "t-d", "t-e"}, list("", 0))
}
