package repo_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestOperatorReadsArePlannedForTheirTenant: on a pgx executor in its
// default mode (named prepared statements), the operator reads and the
// purge are never run as named prepared statements, so PostgreSQL never
// switches them to a generic plan made for an average tenant (issue 40:
// ListAttempts' generic plan read the largest tenant's whole history and
// sorted it). A statement meant to be prepared
// (ListDocumentVersionAttempts) still is, on the same connection: the
// check can see one. Through a pooled connection, a transaction and the
// pool itself.
func TestOperatorReadsArePlannedForTheirTenant(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	require.NoError(t, testfactory.InsertHistory(ctx, b.db.Pool, 1000))
	conn, err := b.db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var hist repo.ListDocumentVersionAttemptsParams
	require.NoError(t, conn.QueryRow(ctx, `SELECT tenant_id, knowledge_space_id, document_asset_id, document_version
		FROM document_compilation_attempts WHERE tenant_id = 'history-7' LIMIT 1`).Scan(
		&hist.TenantID, &hist.KnowledgeSpaceID, &hist.DocumentAssetID, &hist.DocumentVersion))

	reads := func(db repo.DBTX) {
		t.Helper()
		_, err := b.repo.ListAttempts(ctx, db, &repo.ListAttemptsParams{TenantID: "history-7",
			States: []kfstype.RunState{kfstype.RunStateFailed, kfstype.RunStateCanceled}, Limit: 50})
		require.NoError(t, err)
		_, err = b.repo.CountAttempts(ctx, db, &repo.CountAttemptsParams{TenantID: "history-7"})
		require.NoError(t, err)
		_, err = b.repo.CountAttempts(ctx, db, &repo.CountAttemptsParams{AllTenants: true})
		require.NoError(t, err)
		_, err = b.repo.ListStuck(ctx, db, &repo.ListStuckParams{TenantID: "history-7", Limit: 50})
		require.NoError(t, err)
		_, err = b.repo.Throughput(ctx, db, &repo.ThroughputParams{AllTenants: true})
		require.NoError(t, err)
		_, err = b.repo.Purge(ctx, db, &repo.PurgeParams{TenantID: "history-7", CompletedBefore: b.clock.Now().Add(-365 * 24 * time.Hour), BatchSize: 100})
		require.NoError(t, err)
		_, err = b.repo.ListDocumentVersionAttempts(ctx, db, &hist)
		require.NoError(t, err)
	}
	// Past the fifth execution, when PostgreSQL may go generic.
	for range 7 {
		reads(conn)
	}
	require.NoError(t, pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { reads(tx); return nil }))
	for range 7 {
		reads(b.db.Pool)
	}

	prepared := map[string]bool{}
	rows, err := conn.Query(ctx, "SELECT statement FROM pg_prepared_statements")
	require.NoError(t, err)
	for rows.Next() {
		var sql string
		require.NoError(t, rows.Scan(&sql))
		if _, name, ok := strings.Cut(sql, "-- name: "); ok {
			name, _, _ = strings.Cut(name, " ")
			prepared[name] = true
		}
	}
	require.NoError(t, rows.Err())
	require.True(t, prepared["ListDocumentVersionAttempts"], "the check sees a prepared statement: %v", prepared)
	for _, name := range []string{"ListAttempts", "CountAttempts", "CountAttemptsAllTenants", "ListStuck", "Throughput", "Purge"} {
		require.False(t, prepared[name], "%s is a named prepared statement, which PostgreSQL may plan generically", name)
	}
}
