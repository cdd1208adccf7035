package migrations

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// TestMigrateUpLockTimeoutFailsCleanly: behind a transaction that read
// knowledge_spaces, `kfsdb migrate up --lock-timeout 1s` gives up on 0006's
// ACCESS EXCLUSIVE lock after a second, exits 1 saying so, and leaves
// version 4; once the transaction ends the same command applies everything.
func TestMigrateUpLockTimeoutFailsCleanly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewEmptyDB(t)
	_, err := provider(ctx, t, db.URL).UpTo(ctx, versionBeforeAttempts)
	require.NoError(t, err)
	noEnv := func(string) string { return "" }
	migrateUp := func() (code int, stdout, stderr string) {
		var out, errOut bytes.Buffer
		code = cli.Main(ctx, []string{"migrate", "--database-url", db.URL, "up", "--lock-timeout", "1s"}, &out, &errOut, noEnv)
		return code, out.String(), errOut.String()
	}

	longTx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = longTx.Rollback(ctx) }()
	_, err = longTx.Exec(ctx, `SELECT count(*) FROM knowledge_spaces`)
	require.NoError(t, err)

	start := time.Now()
	code, _, stderr := migrateUp()
	elapsed := time.Since(start)
	t.Logf("kfsdb migrate up --lock-timeout 1s behind a transaction: exit %d after %s: %s", code, elapsed.Round(time.Millisecond), stderr)
	require.Equal(t, 1, code, "stderr: %s", stderr)
	require.Contains(t, stderr, "could not migrate up: a lock was not granted within the lock timeout of 1s")
	require.Contains(t, stderr, "the database stays at version 4")
	require.Contains(t, stderr, "SQLSTATE 55P03")
	require.GreaterOrEqual(t, elapsed, time.Second)
	require.Less(t, elapsed, 10*time.Second, "the lock timeout bounds the wait")
	requireVersion4(ctx, t, db)

	require.NoError(t, longTx.Rollback(ctx))
	code, stdout, stderr := migrateUp()
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.Contains(t, stdout, "00006_document_compilation_attempts.sql")
	p := provider(ctx, t, db.URL)
	v, err := p.GetDBVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, migrationVersions(t, p)[len(migrationVersions(t, p))-1], v)
}
