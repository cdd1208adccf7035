// Package dbroles runs the role files of db/roles in a test database and
// logs in as their roles: tests/privilege proves each role's rights with
// it, and the deploy binary's tests start confined consoles on it.
package dbroles

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// ConsoleRoles are the roles db/roles/console_roles.sql creates: the two
// unconfined login roles and the two confined groups.
var ConsoleRoles = []string{"kfsdb_console_ro", "kfsdb_operator", "kfsdb_console_confined", "kfsdb_console_confined_operator"}

// Install runs db/roles/<script> in a new database as the owner, twice
// (the files say running them again is harmless); each of
// roles that did not exist before is dropped at the end (after the
// database, which holds their grants).
func Install(ctx context.Context, t *testing.T, script string, roles ...string) *pgtest.DB {
	t.Helper()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	for _, role := range roles {
		var existed bool
		require.NoError(t, admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)`, role).Scan(&existed))
		if !existed {
			// Registered before the database, so it runs after the drop
			// that removes the role's grants.
			t.Cleanup(func() {
				if _, err := admin.Exec(context.Background(), `DROP ROLE IF EXISTS `+pgx.Identifier{role}.Sanitize()); err != nil {
					t.Errorf("drop role %s: %v", role, err)
				}
			})
		}
	}

	owner := pgtest.NewDB(t)
	sql, err := os.ReadFile(filepath.Join(rolesDir(t), script))
	require.NoError(t, err)
	conn, err := owner.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	// Twice: running a file again must be harmless.
	for range 2 {
		_, err = conn.Conn().PgConn().Exec(ctx, string(sql)).ReadAll() // simple protocol: the whole file
		require.NoError(t, err, "db/roles/%s", script)
	}
	return owner
}

// rolesDir is the repository's db/roles, found from this file.
func rolesDir(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	return filepath.Join(filepath.Dir(file), "..", "..", "db", "roles")
}

// LoginAs gives role a random password and returns a pool logged in as
// the role in owner's database, and its URL.
func LoginAs(ctx context.Context, t *testing.T, owner *pgtest.DB, role string) (*pgxpool.Pool, string) {
	t.Helper()
	var b [16]byte
	_, _ = rand.Read(b[:])
	password := hex.EncodeToString(b[:])
	var alter string
	require.NoError(t, owner.Pool.QueryRow(ctx, `SELECT format('ALTER ROLE %I PASSWORD %L', $1::text, $2::text)`, role, password).Scan(&alter))
	_, err := owner.Pool.Exec(ctx, alter)
	require.NoError(t, err)

	u, err := url.Parse(owner.URL)
	require.NoError(t, err)
	u.User = url.UserPassword(role, password)
	pool, err := pgxpool.New(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var user string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_user`).Scan(&user))
	require.Equal(t, role, user)
	return pool, u.String()
}

// Confine makes role a console role confined to tenant in owner's
// database, as the documented CALL does (canAct: the operator group), and
// logs in as it. owner's database must have console_roles.sql installed.
// The role is dropped at the end.
func Confine(ctx context.Context, t *testing.T, owner *pgtest.DB, role, tenant string, canAct bool) (*pgxpool.Pool, string) {
	t.Helper()
	_, err := owner.Pool.Exec(ctx, `CALL kfsdb_confine_console($1, $2, $3)`, role, tenant, canAct)
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := owner.Pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	return LoginAs(ctx, t, owner, role)
}
