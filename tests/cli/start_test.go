package cli_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// startInTenant starts an attempt in a new scope of tenantID, and cancels
// it when cancel is set (a terminal attempt for purge to find).
func startInTenant(t *testing.T, db *pgtest.DB, tenantID string, cancel bool) {
	t.Helper()
	ctx, r := t.Context(), repo.New(nil)
	s := testfactory.NewScope(ctx, t, db.Pool, &testfactory.ScopeOpts{TenantID: &tenantID})
	res, err := r.Start(ctx, db.Pool, s.StartParams())
	require.NoError(t, err)
	if cancel {
		_, err = r.Cancel(ctx, db.Pool, &repo.CancelParams{AttemptRef: s.Ref(res.Attempt.ID)})
		require.NoError(t, err)
	}
}
