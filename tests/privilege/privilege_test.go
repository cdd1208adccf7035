// Package privilege_test proves kfsdb runs as a least-privilege role: the
// role db/roles/app_role.sql creates (kfsdb_app: SELECT, INSERT, UPDATE,
// DELETE on the module's two tables, SELECT on the four it reads, owner of
// nothing) runs every transition, the relay and a worker, and is refused
// every schema change.
package privilege_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/dbroles"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// appRole is the role db/roles/app_role.sql creates.
const appRole = "kfsdb_app"

// setupAppRole runs db/roles/app_role.sql in db as the owner, gives the
// role a random password and returns a pool logged in as the role. A role
// this test created is dropped at the end.
func setupAppRole(ctx context.Context, t *testing.T) (owner *pgtest.DB, app *pgxpool.Pool) {
	t.Helper()
	owner = dbroles.Install(ctx, t, "app_role.sql", appRole)
	app, _ = dbroles.LoginAs(ctx, t, owner, appRole)
	return owner, app
}

func TestLeastPrivilege(t *testing.T) {
	ctx := context.Background()
	owner, app := setupAppRole(ctx, t)

	t.Run("RoleHasOnlyDML", func(t *testing.T) {
		var super, createDB, createRole, bypassRLS bool
		require.NoError(t, owner.Pool.QueryRow(ctx, `SELECT rolsuper, rolcreatedb, rolcreaterole, rolbypassrls FROM pg_roles WHERE rolname = $1`,
			appRole).Scan(&super, &createDB, &createRole, &bypassRLS))
		require.False(t, super || createDB || createRole || bypassRLS)

		var owned int
		require.NoError(t, owner.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner WHERE r.rolname = $1`,
			appRole).Scan(&owned))
		require.Zero(t, owned, "the role owns no relation")

		rows, err := owner.Pool.Query(ctx, `SELECT table_name || ':' || privilege_type FROM information_schema.role_table_grants
			WHERE grantee = $1 ORDER BY table_name, privilege_type`, appRole)
		require.NoError(t, err)
		grants, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{
			"document_assets:SELECT",
			"document_compilation_attempts:DELETE", "document_compilation_attempts:INSERT",
			"document_compilation_attempts:SELECT", "document_compilation_attempts:UPDATE",
			"document_compilation_outbox:DELETE", "document_compilation_outbox:INSERT",
			"document_compilation_outbox:SELECT", "document_compilation_outbox:UPDATE",
			"document_compilation_outbox_idle_listeners:DELETE", "document_compilation_outbox_idle_listeners:INSERT",
			"document_compilation_outbox_idle_listeners:SELECT", "document_compilation_outbox_idle_listeners:UPDATE",
			"document_compilation_tenant_limits:DELETE", "document_compilation_tenant_limits:INSERT",
			"document_compilation_tenant_limits:SELECT", "document_compilation_tenant_limits:UPDATE",
			"document_compilation_trace_contexts:INSERT", "document_compilation_trace_contexts:SELECT",
			"knowledge_spaces:SELECT",
			"projection_set_publication_heads:SELECT",
			"projection_set_publications:SELECT",
		}, grants)

		var schemaCreate, dbCreate bool
		require.NoError(t, owner.Pool.QueryRow(ctx, `SELECT has_schema_privilege($1, 'public', 'CREATE'),
			has_database_privilege($1, current_database(), 'CREATE')`, appRole).Scan(&schemaCreate, &dbCreate))
		require.False(t, schemaCreate, "CREATE on schema public")
		require.False(t, dbCreate, "CREATE on the database")
	})

	t.Run("Transitions", func(t *testing.T) {
		counts := testfactory.RunTransitions(t, &testfactory.TransitionEnv{App: app, Owner: owner.Pool})
		t.Logf("calls as %s: %d (%s)", appRole, counts.Total(), counts)
	})

	t.Run("DDLRefused", func(t *testing.T) {
		refused := []string{
			`CREATE TABLE probe (id int)`,
			`CREATE TABLE public.probe (id int)`,
			`CREATE VIEW probe AS SELECT 1`,
			`CREATE FUNCTION probe() RETURNS int LANGUAGE sql AS 'SELECT 1'`,
			`CREATE SCHEMA probe`,
			`CREATE INDEX probe ON document_compilation_attempts (created_at)`,
			`ALTER TABLE document_compilation_attempts ADD COLUMN probe int`,
			`ALTER TABLE document_compilation_outbox DISABLE TRIGGER ALL`,
			`ALTER TABLE document_compilation_attempts DROP CONSTRAINT document_compilation_attempts_pkey`,
			`CREATE TRIGGER probe BEFORE INSERT ON document_compilation_outbox FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()`,
			`COMMENT ON TABLE document_compilation_attempts IS 'probe'`,
			`DROP TABLE document_compilation_outbox`,
			`TRUNCATE document_compilation_attempts CASCADE`,
			`CREATE ROLE probe`,
			`ALTER ROLE kfsdb_app SUPERUSER`,
			`SELECT count(*) FROM kfsdb_db_version`,
			`INSERT INTO knowledge_spaces (id, tenant_id, slug, name) VALUES (gen_random_uuid(), 't', 's', 'n')`,
			`UPDATE projection_set_publications SET status = 'published'`,
			`DELETE FROM document_assets`,
			`UPDATE projection_set_publication_heads SET head_revision = head_revision + 1`,
		}
		for _, sql := range refused {
			_, err := app.Exec(ctx, sql)
			var pgErr *pgconn.PgError
			require.Truef(t, errors.As(err, &pgErr), "%s: want a PostgreSQL error, got %v", sql, err)
			require.Equalf(t, "42501", pgErr.Code, "%s: want insufficient_privilege, got %s %s", sql, pgErr.Code, pgErr.Message)
		}
		t.Logf("%d statements refused with SQLSTATE 42501 as %s", len(refused), appRole)
	})
}

// TestStartCommitsWithoutIdleTableGrant: migration 0007's commit-time
// wake-up check runs with its owner's rights, so an application role that
// was not granted the idle-relay table (a deployment that applied 0007
// but not db/roles/app_role.sql again) still commits its Starts, and an
// idle relay is still notified; only the role's own relays cannot
// register.
func TestStartCommitsWithoutIdleTableGrant(t *testing.T) {
	ctx := context.Background()
	owner, app := setupAppRole(ctx, t)
	_, err := owner.Pool.Exec(ctx, `REVOKE ALL ON document_compilation_outbox_idle_listeners FROM `+pgx.Identifier{appRole}.Sanitize())
	require.NoError(t, err)
	r := repo.New(nil)
	idle, err := r.OutboxListenerIdle(ctx, owner.Pool, &repo.OutboxListenerIdleParams{ListenerID: "owner-relay", TTL: time.Minute})
	require.NoError(t, err)
	require.True(t, idle.Registered)

	listener, err := pgx.Connect(ctx, owner.URL)
	require.NoError(t, err)
	defer listener.Close(context.Background())
	_, err = listener.Exec(ctx, "LISTEN "+relay.NotifyChannel)
	require.NoError(t, err)

	s := testfactory.NewScope(ctx, t, owner.Pool, nil)
	res, err := r.Start(ctx, app, s.StartParams())
	require.NoError(t, err, "a Start by a role without the idle table's grant must commit")
	require.True(t, res.Created)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = listener.WaitForNotification(wctx)
	require.NoError(t, err, "the idle relay is notified")

	_, err = r.OutboxListenerIdle(ctx, app, &repo.OutboxListenerIdleParams{ListenerID: "app-relay", TTL: time.Minute})
	require.Error(t, err, "the role's own relay cannot register without the grant")
}
