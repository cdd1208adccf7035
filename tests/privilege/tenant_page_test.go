package privilege_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/console"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/consolepage"
	"github.com/knowledgefs/kfsdb/tests/dbroles"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// pauseThroughPage pauses tenant through c's tenant page and returns the
// POST's status.
func (c *consoleClient) pauseThroughPage(tenant string) int {
	c.t.Helper()
	status, page, _ := c.do(http.MethodGet, "/tenant?tenant="+url.QueryEscape(tenant), nil)
	require.Equal(c.t, http.StatusOK, status, page)
	i := strings.Index(page, `id="pause-form"`)
	require.GreaterOrEqual(c.t, i, 0, "no pause form in:\n%s", page)
	form, ok := consolepage.PostForm(page[strings.LastIndex(page[:i], "<form"):], "/tenant")
	require.True(c.t, ok)
	status, _, _ = c.do(http.MethodPost, "/tenant", form)
	return status
}

// TestTenantPageUnderConsoleRoles: the console's tenant page on the roles
// of db/roles/console_roles.sql: kfsdb_console_ro reads a tenant's limits
// and a console on it (started without --read-only) fails to change them
// (permission denied, audited as failed, nothing changed);
// kfsdb_operator changes them. Mutation: the read-only role granted
// UPDATE on the limits' table fails the refusal.
func TestTenantPageUnderConsoleRoles(t *testing.T) {
	ctx := context.Background()
	owner := dbroles.Install(ctx, t, "console_roles.sql", dbroles.ConsoleRoles...)
	ro, _ := dbroles.LoginAs(ctx, t, owner, consoleRole)
	op, _ := dbroles.LoginAs(ctx, t, owner, operatorRole)
	r := repo.New(nil)
	require.NoError(t, r.SetTenantRate(ctx, owner.Pool, &repo.SetTenantRateParams{TenantID: "limited", Rate: 3, Burst: 3}))

	var audit testfactory.SyncBuffer
	roConsole := serveConsoleConfig(t, ro, console.Config{AuditLogger: slog.New(slog.NewTextHandler(&audit, nil))})
	status, page, _ := roConsole.do(http.MethodGet, "/tenant", nil)
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, page, `id="unreadable"`)
	require.Contains(t, page, `href="/tenant?tenant=limited"`)
	require.Equal(t, http.StatusInternalServerError, roConsole.pauseThroughPage("limited"))
	require.Regexp(t, `tenant=limited attempt="" action=tenant-pause from="3 leases/s \(burst 3\)" to="3 leases/s \(burst 3\)" result=failed reason=".*permission denied`, audit.String())
	l, err := ops.TenantLimits(ctx, r, owner.Pool, "limited")
	require.NoError(t, err)
	require.False(t, l.Paused())

	require.Equal(t, http.StatusSeeOther, serveConsoleConfig(t, op, console.Config{}).pauseThroughPage("limited"))
	l, err = ops.TenantLimits(ctx, r, owner.Pool, "limited")
	require.NoError(t, err)
	require.True(t, l.Paused())
}
