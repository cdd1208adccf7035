package privilege_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/console"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/tests/consolepage"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// bulkCancel runs a bulk cancel of tenant's live attempts through c's
// pages: the dry run, then (when it offers a form) the confirmation. It
// returns the dry run's page and the result page ("" without a form).
func (c *consoleClient) bulkCancel(tenant string) (dryRun, result string) {
	c.t.Helper()
	status, page, _ := c.do(http.MethodGet, "/bulk?action=cancel&tenant="+tenant+"&state=dispatch_pending&state=queued&state=running&state=retry_wait", nil)
	require.Equal(c.t, http.StatusOK, status, page)
	form, ok := consolepage.PostForm(page, "/bulk")
	if !ok {
		return page, ""
	}
	status, body, loc := c.do(http.MethodPost, "/bulk", form)
	require.Equal(c.t, http.StatusSeeOther, status, body)
	status, result, _ = c.do(http.MethodGet, loc, nil)
	require.Equal(c.t, http.StatusOK, status)
	return page, result
}

// shown reads the number of the element with id on page.
func shown(t *testing.T, page, id string) int {
	t.Helper()
	n, err := consolepage.Number(page, id)
	require.NoError(t, err, page)
	return n
}

func serveConsoleConfig(t *testing.T, pool *pgxpool.Pool, cfg console.Config) *consoleClient {
	t.Helper()
	cfg.DB, cfg.AuthToken = pool, consoleToken
	srv, err := console.New(cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &consoleClient{t: t, base: ts.URL}
}

// TestBulkActionsUnderConfinedRoles: the database confines a bulk action
// whatever the console was told. On a role confined to conf-a, a console
// started without --tenant (as if its start check were bypassed) finds
// none of conf-b's attempts for a bulk cancel and changes none of its
// rows, while conf-a's bulk cancel applies; on the read-only confined
// role every UPDATE is refused, so the confirmed bulk stops with every
// attempt not reached and nothing changed. Mutation: the restrictive
// policy made permissive (console_roles.sql) fails "none" and conf-b's
// snapshot.
func TestBulkActionsUnderConfinedRoles(t *testing.T) {
	ctx := context.Background()
	w := newConfinedWorld(ctx, t)
	beforeB := w.snapshotB(ctx, t)
	live := func(tenant string) int {
		n := 0
		for _, a := range w.attempts[tenant] {
			if a.RunState.Live() {
				n++
			}
		}
		return n
	}
	require.Positive(t, live(confB))

	unconfined := serveConsoleConfig(t, w.opPool, console.Config{})
	page, result := unconfined.bulkCancel(confB)
	require.Contains(t, page, `id="none"`, "row-level security hides conf-b from conf-a's role")
	require.Empty(t, result)
	require.Equal(t, beforeB, w.snapshotB(ctx, t))

	var audit testfactory.SyncBuffer
	readOnlyRole := serveConsoleConfig(t, w.roPool, console.Config{TenantID: confA, AuditLogger: slog.New(slog.NewTextHandler(&audit, nil))})
	page, result = readOnlyRole.bulkCancel(confA)
	require.Equal(t, live(confA), shown(t, page, "would-change"))
	require.Contains(t, result, `id="stopped"`)
	require.Equal(t, 0, shown(t, result, "applied"))
	require.Equal(t, live(confA), shown(t, result, "not-reached"))
	require.Regexp(t, `action=bulk-cancel .*result=failed reason="a database error`, audit.String())
	for _, a := range w.attempts[confA] {
		var st string
		require.NoError(t, w.owner.Pool.QueryRow(ctx, `SELECT run_state FROM document_compilation_attempts WHERE id = $1`, a.ID).Scan(&st))
		require.Equal(t, a.RunState, kfstype.RunState(st), "the read-only role changed nothing")
	}

	operator := serveConsoleConfig(t, w.opPool, console.Config{TenantID: confA})
	_, result = operator.bulkCancel(confA)
	require.Equal(t, live(confA), shown(t, result, "applied"))
	require.Equal(t, beforeB, w.snapshotB(ctx, t), "conf-b untouched")
}
