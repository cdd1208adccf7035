package privilege_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/dbroles"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// statementCapture keeps the first statement whose text contains name,
// and its arguments.
type statementCapture struct {
	name string
	sql  string
	args []any
}

func (c *statementCapture) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if c.sql == "" && strings.Contains(d.SQL, c.name) {
		c.sql, c.args = d.SQL, d.Args
	}
	return ctx
}

func (c *statementCapture) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestConfinedListPageWalksTheIndex: as a confined role, the attempts list
// page still walks tenant_completed_idx backwards to its LIMIT, as the
// owner's does. The confinement's tenant lookup is a sub-select the
// planner merges with the page's own tenant condition (a one-time
// filter); an inline comparison it could not merge was estimated to pass
// 1 row in 200 and turned the page into a read and sort of the tenant's
// whole range.
func TestConfinedListPageWalksTheIndex(t *testing.T) {
	ctx := context.Background()
	owner := dbroles.Install(ctx, t, "console_roles.sql", dbroles.ConsoleRoles...)
	require.NoError(t, testfactory.InsertHistory(ctx, owner.Pool, 100_000))
	_, err := owner.Pool.Exec(ctx, `ANALYZE document_compilation_attempts`)
	require.NoError(t, err)
	const tenant = "history-7"
	confined, _ := dbroles.Confine(ctx, t, owner, "kfsdb_console_plan", tenant, false)

	capture := &statementCapture{name: "ListAttempts"}
	cfg := confined.Config()
	cfg.ConnConfig.Tracer = capture
	traced, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(traced.Close)
	page, err := repo.New(nil).ListAttempts(ctx, traced, &repo.ListAttemptsParams{TenantID: tenant, States: kfstype.RunStates(), Limit: 50})
	require.NoError(t, err)
	require.Len(t, page.Attempts, 50)

	rows, err := confined.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "+capture.sql, capture.args...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	t.Logf("the list page as a confined role:\n%s", plan)
	require.Contains(t, plan, "Index Scan Backward using document_compilation_attempts_tenant_completed_idx")
	require.NotContains(t, plan, "Bitmap Heap Scan on document_compilation_attempts")
	require.NotContains(t, plan, "Seq Scan on document_compilation_attempts")
}
