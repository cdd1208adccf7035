package privilege_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
	"github.com/knowledgefs/kfsdb/tests/dbroles"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// extraRole creates a login role with the given options (dropped at the
// end) in owner's cluster, runs grants as the owner, and logs in as it.
func extraRole(ctx context.Context, t *testing.T, owner *pgtest.DB, role, options string, grants ...string) string {
	t.Helper()
	_, err := owner.Pool.Exec(ctx, `CREATE ROLE `+pgx.Identifier{role}.Sanitize()+` LOGIN `+options)
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := owner.Pool.Exec(context.Background(), `DROP OWNED BY `+pgx.Identifier{role}.Sanitize()+`; DROP ROLE `+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	for _, sql := range grants {
		_, err := owner.Pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	_, dbURL := dbroles.LoginAs(ctx, t, owner, role)
	return dbURL
}

// checkStart runs the console's start-up check on a connection to dbURL.
func checkStart(ctx context.Context, t *testing.T, dbURL, tenant string) error {
	t.Helper()
	conn := confinedConn(ctx, t, dbURL)
	return cli.CheckConfinement(ctx, conn, tenant)
}

// TestConfinedConsoleStartRefusals: `kfsdb console --tenant T` serves only
// on a role that row-level security confines to T, and `kfsdb console`
// without --tenant only on one it does not confine; each refusal names
// its cause.
func TestConfinedConsoleStartRefusals(t *testing.T) {
	ctx := context.Background()
	w := newConfinedWorld(ctx, t)
	owner := w.owner
	var ownerIsSuperuser bool
	require.NoError(t, owner.Pool.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&ownerIsSuperuser))
	require.True(t, ownerIsSuperuser, "the test databases' owner is a superuser")
	_, roURL := dbroles.LoginAs(ctx, t, owner, consoleRole)
	_, opURL := dbroles.LoginAs(ctx, t, owner, operatorRole)
	var ownerName string
	require.NoError(t, owner.Pool.QueryRow(ctx, `SELECT current_user`).Scan(&ownerName))
	_, otherURL := dbroles.Confine(ctx, t, owner, "kfsdb_console_conf_b", confB, false)
	// Confined first, then given an unconfined role: a way out by SET ROLE.
	_, escapeURL := dbroles.Confine(ctx, t, owner, "kfsdb_console_escape", confA, false)
	_, err := owner.Pool.Exec(ctx, `GRANT kfsdb_console_ro TO kfsdb_console_escape`)
	require.NoError(t, err)

	for name, tc := range map[string]struct {
		dbURL, tenant string
		cause         cli.ConfinementCause // "": starts
	}{
		"Superuser":                {owner.URL, confA, cli.CauseSuperuser},
		"MemberOfTheOwner":         {extraRole(ctx, t, owner, "kfsdb_test_owner_member", "", `GRANT `+pgx.Identifier{ownerName}.Sanitize()+` TO kfsdb_test_owner_member`), confA, cli.CauseOwner},
		"BypassRLS":                {extraRole(ctx, t, owner, "kfsdb_test_bypassrls", "BYPASSRLS", `GRANT SELECT ON document_compilation_attempts, document_compilation_outbox TO kfsdb_test_bypassrls`), confA, cli.CauseBypassRLS},
		"UnconfinedReadOnly":       {roURL, confA, cli.CauseUnconfinedRole},
		"UnconfinedOperator":       {opURL, confA, cli.CauseUnconfinedRole},
		"GroupMemberWithoutTenant": {extraRole(ctx, t, owner, "kfsdb_test_unmapped", "", `GRANT kfsdb_console_confined TO kfsdb_test_unmapped`), confA, cli.CauseUnmapped},
		"ConfinedToAnotherTenant":  {otherURL, confA, cli.CauseOtherTenant},
		"CanSetRoleToUnconfined":   {escapeURL, confA, cli.CauseEscapeRole},
		"ConfinedWithoutTenant":    {w.roURL, "", cli.CauseConfined},
		"ConfinedOperatorNoTenant": {w.opURL, "", cli.CauseConfined},
		"Confined":                 {w.roURL, confA, ""},
		"ConfinedOperator":         {w.opURL, confA, ""},
		"UnconfinedWithoutTenant":  {roURL, "", ""},
		"OwnerWithoutTenant":       {owner.URL, "", ""},
	} {
		t.Run(name, func(t *testing.T) {
			err := checkStart(ctx, t, tc.dbURL, tc.tenant)
			if tc.cause == "" {
				require.NoError(t, err)
				return
			}
			var refused *cli.ConfinementError
			require.ErrorAs(t, err, &refused)
			require.Equal(t, tc.cause, refused.Cause, err.Error())
			require.Equal(t, tc.tenant, refused.Tenant)
			u, perr := url.Parse(tc.dbURL)
			require.NoError(t, perr)
			require.Equal(t, u.User.Username(), refused.Role)
		})
	}

	t.Run("RowLevelSecurityDisabled", func(t *testing.T) {
		_, err := owner.Pool.Exec(ctx, `ALTER TABLE document_compilation_outbox DISABLE ROW LEVEL SECURITY`)
		require.NoError(t, err)
		t.Cleanup(func() {
			_, err := owner.Pool.Exec(context.Background(), `ALTER TABLE document_compilation_outbox ENABLE ROW LEVEL SECURITY`)
			require.NoError(t, err)
		})
		var refused *cli.ConfinementError
		require.ErrorAs(t, checkStart(ctx, t, w.roURL, confA), &refused)
		require.Equal(t, cli.CauseRLSDisabled, refused.Cause)
	})

	// The command itself refuses before it serves, naming the cause.
	t.Run("Command", func(t *testing.T) {
		for _, tc := range []struct {
			dbURL string
			args  []string
			want  string
		}{
			{owner.URL, []string{"--tenant", confA}, `console --tenant "conf-a" refused (superuser)`},
			{roURL, []string{"--tenant", confA}, "unconfined role"},
			{w.roURL, nil, `console without --tenant refused (confined role without --tenant): role "kfsdb_console_conf_a": confined to "conf-a": start with --tenant conf-a`},
		} {
			out, err := kfsdb(t, tc.dbURL, append([]string{"console", "--listen", "127.0.0.1:0"}, tc.args...)...)
			var refused *cli.ConfinementError
			require.ErrorAs(t, err, &refused, out)
			require.ErrorContains(t, err, tc.want)
			t.Logf("kfsdb console %v: %v", tc.args, err)
		}
	})
}

// TestConfineConsoleProcedure: kfsdb_confine_console creates and maps a
// role once (calling it again changes nothing) and refuses a role that
// row-level security would not confine, or one confined elsewhere.
func TestConfineConsoleProcedure(t *testing.T) {
	ctx := context.Background()
	w := newConfinedWorld(ctx, t)
	owner := w.owner
	call := func(role, tenant string, canAct bool) error {
		_, err := owner.Pool.Exec(ctx, `CALL kfsdb_confine_console($1, $2, $3)`, role, tenant, canAct)
		return err
	}
	state := func(role string) string {
		var s string
		require.NoError(t, owner.Pool.QueryRow(ctx, `SELECT coalesce((SELECT tenant_id FROM kfsdb_console_confinement WHERE role_name = $1), '-') || ' ' ||
			coalesce((SELECT string_agg(g.rolname, ',' ORDER BY g.rolname) FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
			  JOIN pg_roles r ON r.oid = m.member WHERE r.rolname = $1), '-')`, role).Scan(&s))
		return s
	}

	require.Equal(t, "conf-a kfsdb_console_confined", state("kfsdb_console_conf_a"))
	require.Equal(t, "conf-a kfsdb_console_confined_operator", state("kfsdb_operator_conf_a"))
	require.NoError(t, call("kfsdb_console_conf_a", confA, false), "again, same arguments")
	require.NoError(t, call("kfsdb_operator_conf_a", confA, true), "again, same arguments")
	require.Equal(t, "conf-a kfsdb_console_confined", state("kfsdb_console_conf_a"))
	require.Equal(t, "conf-a kfsdb_console_confined_operator", state("kfsdb_operator_conf_a"))

	extraRole(ctx, t, owner, "kfsdb_test_super", "SUPERUSER")
	extraRole(ctx, t, owner, "kfsdb_test_bypass", "BYPASSRLS")
	extraRole(ctx, t, owner, "kfsdb_test_ro_member", "", `GRANT kfsdb_console_ro TO kfsdb_test_ro_member`)
	for _, tc := range []struct {
		role, tenant string
		canAct       bool
		want         string
	}{
		{"kfsdb_console_conf_a", confB, false, "already confined to tenant 'conf-a'"},
		{"kfsdb_console_conf_a", confA, true, "already a member of kfsdb_console_confined"},
		{"kfsdb_test_super", confA, false, "is a superuser"},
		{"kfsdb_test_bypass", confA, false, "has BYPASSRLS"},
		{"kfsdb_test_ro_member", confA, false, "is a member of kfsdb_console_ro"},
		{"kfsdb_console_confined", confA, false, "one of kfsdb's shared roles"},
		{"kfsdb_console_ro", confA, false, "one of kfsdb's shared roles"},
		{"kfsdb_console_new", "", false, "tenant must be 1 to 255 characters"},
	} {
		require.ErrorContains(t, call(tc.role, tc.tenant, tc.canAct), tc.want, "%s %s", tc.role, tc.tenant)
	}
	require.Equal(t, "conf-a kfsdb_console_confined", state("kfsdb_console_conf_a"), "a refused call changes nothing")
	var exists bool
	require.NoError(t, owner.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = 'kfsdb_console_new')`).Scan(&exists))
	require.False(t, exists, "a refused call creates no role")

	// Nobody but the owner may call it or write the mapping.
	for _, sql := range []string{
		`CALL kfsdb_confine_console('kfsdb_console_conf_a', 'conf-b', false)`,
		`UPDATE kfsdb_console_confinement SET tenant_id = 'conf-b'`,
		`INSERT INTO kfsdb_console_confinement VALUES ('kfsdb_console_ro', 'conf-b')`,
		`DELETE FROM kfsdb_console_confinement`,
	} {
		_, err := w.opPool.Exec(ctx, sql)
		requireRefused(t, err, sql)
	}
	var seen string
	require.NoError(t, w.roPool.QueryRow(ctx, `SELECT string_agg(role_name || '=' || tenant_id, ',') FROM kfsdb_console_confinement`).Scan(&seen))
	require.Equal(t, "kfsdb_console_conf_a=conf-a", seen, "a role reads its own mapping only")
}
