package migrations

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/migrate"
)

// Issue 37, item 1: no kfsdb command or export drops a table that holds
// rows. `kfsdb migrate sql --down` needs --from, and below the seed
// --standalone; every DROP TABLE it prints, and every one `kfsdb migrate
// down` runs, locks its table, then refuses if the table holds a row.

// platformTables are the platform's four tables.
var platformTables = []string{"knowledge_spaces", "document_assets", "projection_set_publications", "projection_set_publication_heads"}

// tenantLimits is migration 0008's table, which holds an operator's rows.
const tenantLimits = "document_compilation_tenant_limits"

// exportSQL is `kfsdb migrate sql` with args; it must succeed.
func exportSQL(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := kfsdbCLI(ctx, append([]string{"migrate", "sql"}, args...)...)
	require.Equal(t, 0, code, errOut)
	return out
}

// requireRefusedDrop checks psql's output and error: it stopped at the
// guard of table, which named it.
func requireRefusedDrop(t *testing.T, out string, err error, table string) {
	t.Helper()
	require.Error(t, err, "psql must fail:\n%s", out)
	t.Logf("psql refused: %s", strings.TrimSpace(out))
	require.Contains(t, out, fmt.Sprintf("ERROR:  kfsdb refuses to drop table %s: it holds rows", table))
}

// addTenantLimit gives migration 0008's table an operator's row.
func addTenantLimit(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(ctx, `INSERT INTO `+tenantLimits+` (tenant_id, max_running, updated_at) VALUES ('tenant-a', 4, now())`)
	require.NoError(t, err)
}

// TestSQLDownRefusesBelowSeed: `migrate sql --down` without --from
// refuses (it used to default to 0 and print the stand-ins' DROPs), and so
// does a --from below 6 without --standalone, naming every table it would
// drop; nothing is printed.
func TestSQLDownRefusesBelowSeed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	code, out, errOut := kfsdbCLI(ctx, "migrate", "sql", "--down")
	require.Equal(t, 2, code, errOut)
	require.Empty(t, out)
	require.Contains(t, errOut, "migrate sql --down needs --from N")

	for from, tables := range map[string][]string{
		"4": {"document_compilation_outbox", "document_compilation_attempts"},
		"0": append([]string{"document_compilation_outbox", "document_compilation_attempts"}, "projection_set_publication_heads",
			"projection_set_publications", "document_assets", "knowledge_spaces"),
	} {
		code, out, errOut := kfsdbCLI(ctx, "migrate", "sql", "--down", "--from", from)
		require.Equal(t, 2, code, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, "on a platform database it would drop the platform's tables "+strings.Join(tables, ", "))
		require.Contains(t, errOut, "--standalone")
	}
}

// TestSQLDownKeepsPlatformRows applies the down export with psql to the
// platform fixture with rows, the case: each export stops at the
// first table that holds rows, names it, and loses no row. In one
// transaction (psql -1) nothing changes at all; statement by statement,
// as the new user ran it, only empty tables are dropped.
func TestSQLDownKeepsPlatformRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	t.Run("StandIns", func(t *testing.T) {
		t.Parallel()
		// The platform's tables with rows, the seed and kfsdb's own
		// migrations applied by the export (their tables empty).
		db := newPlatformDB(ctx, t, false, "")
		psqlText(ctx, t, db.URL, exportSQL(ctx, t, "--up", "--from", "4"))
		before, rows := catalog(ctx, t, db.Pool), untouched(ctx, t, db.Pool)
		down := exportSQL(ctx, t, "--down", "--from", "0", "--standalone")

		out, err := psqlRun(ctx, t, db.URL, down, "-1")
		requireRefusedDrop(t, out, err, "projection_set_publication_heads")
		requireSameCatalog(t, "before", before, "after the refused down (psql -1)", catalog(ctx, t, db.Pool))
		require.Equal(t, rows, untouched(ctx, t, db.Pool))

		out, err = psqlRun(ctx, t, db.URL, down)
		requireRefusedDrop(t, out, err, "projection_set_publication_heads")
		require.Equal(t, rows, untouched(ctx, t, db.Pool), "no platform row is lost")
		for _, table := range platformTables {
			var exists bool
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists))
			require.True(t, exists, table)
		}
	})
	t.Run("Seed", func(t *testing.T) {
		t.Parallel()
		// The platform applied the seed, which holds an attempt and its
		// outbox row; kfsdb's own migrations applied by the export.
		db := newPlatformDB(ctx, t, true, "")
		psqlText(ctx, t, db.URL, exportSQL(ctx, t, "--up", "--from", "6"))
		before, rows, seed := catalog(ctx, t, db.Pool), untouched(ctx, t, db.Pool), seedRows(ctx, t, db.Pool)

		out, err := psqlRun(ctx, t, db.URL, exportSQL(ctx, t, "--down", "--from", "4", "--standalone"), "-1")
		requireRefusedDrop(t, out, err, "document_compilation_outbox")
		requireSameCatalog(t, "before", before, "after the refused down", catalog(ctx, t, db.Pool))
		require.Equal(t, rows, untouched(ctx, t, db.Pool))
		require.Equal(t, seed, seedRows(ctx, t, db.Pool))
	})
	t.Run("KfsdbsOwn", func(t *testing.T) {
		t.Parallel()
		// --from 6 prints only kfsdb's own Downs; 0008's table holds an
		// operator's row.
		db := newPlatformDB(ctx, t, true, "")
		psqlText(ctx, t, db.URL, exportSQL(ctx, t, "--up", "--from", "6"))
		addTenantLimit(ctx, t, db.Pool)
		before, limits := catalog(ctx, t, db.Pool), tableRows(ctx, t, db.Pool, tenantLimits)

		out, err := psqlRun(ctx, t, db.URL, exportSQL(ctx, t, "--down", "--from", "6"), "-1")
		requireRefusedDrop(t, out, err, tenantLimits)
		requireSameCatalog(t, "before", before, "after the refused down", catalog(ctx, t, db.Pool))
		require.Equal(t, limits, tableRows(ctx, t, db.Pool, tenantLimits))
	})
}

// TestSQLDownGuardOrdering: the guard locks before it checks, so a row
// inserted by a transaction still open when the down starts is seen: the
// guard waits for that transaction's lock, and refuses once it commits
// (a check before the lock would find the table empty and the DROP, queued
// behind the insert, would then drop the row). Under REPEATABLE READ, whose
// snapshot can predate the lock, the guard refuses to run.
func TestSQLDownGuardOrdering(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	t.Run("ConcurrentInsert", func(t *testing.T) {
		t.Parallel()
		db := standaloneDB(ctx, t)
		before := catalog(ctx, t, db.Pool)
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `INSERT INTO `+tenantLimits+` (tenant_id, max_running, updated_at) VALUES ('tenant-a', 4, now())`)
		require.NoError(t, err)

		const app = "kfsdb-guard-waiter"
		type result struct {
			out string
			err error
		}
		done := make(chan result, 1)
		down := exportSQL(ctx, t, "--down", "--from", "6")
		go func() {
			out, err := psqlRun(ctx, t, withApplicationName(t, db.URL, app), down, "-1")
			done <- result{out, err}
		}()
		waitForSession(ctx, t, db.Pool, app, `wait_event_type = 'Lock'`, func() (string, bool) {
			select {
			case r := <-done:
				return fmt.Sprintf("psql ended before it waited for the insert's lock: %v\n%s", r.err, r.out), true
			default:
				return "", false
			}
		})
		require.NoError(t, tx.Commit(ctx))
		r := <-done
		requireRefusedDrop(t, r.out, r.err, tenantLimits)
		require.True(t, strings.HasPrefix(tableRows(ctx, t, db.Pool, tenantLimits)[tenantLimits], "1:"), "the row committed while the guard waited is kept")
		requireSameCatalog(t, "before", before, "after the refused down", catalog(ctx, t, db.Pool))
	})
	t.Run("RepeatableRead", func(t *testing.T) {
		t.Parallel()
		db := standaloneDB(ctx, t)
		conn, err := db.Pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT 1`) // the transaction's snapshot, before the row
		require.NoError(t, err)
		addTenantLimit(ctx, t, db.Pool)
		_, err = tx.Exec(ctx, exportSQL(ctx, t, "--down", "--from", "7")) // 0008 to 0011's Downs: 0011's column guards come first
		require.ErrorContains(t, err, "kfsdb refuses to drop column paused_at of table "+tenantLimits+" outside READ COMMITTED isolation (this transaction is repeatable read)")
		require.NoError(t, tx.Rollback(ctx))
		require.True(t, strings.HasPrefix(tableRows(ctx, t, db.Pool, tenantLimits)[tenantLimits], "1:"))
	})
}

// standaloneDBWithRows is a standalone database (kfsdb's stand-ins
// created the platform's tables) whose stand-ins hold rows, with an
// attempt, its outbox row and a tenant limit.
func standaloneDBWithRows(ctx context.Context, t *testing.T) *platformDB {
	t.Helper()
	db := &platformDB{DB: standaloneDB(ctx, t), space: uuid.New(), asset: uuid.New(), publication: uuid.New(), tenant: "tenant-a"}
	db.addPlatformRows(ctx, t)
	db.addAttempt(ctx, t)
	addTenantLimit(ctx, t, db.Pool)
	return db
}

// seedAndPlatformTables are the seed's and the platform's tables.
var seedAndPlatformTables = append([]string{"document_compilation_attempts", "document_compilation_outbox"}, platformTables...)

// requireDataLoss checks a Down's *DataLossError.
func requireDataLoss(t *testing.T, err error, mode migrate.Mode, migration int64, table string) {
	t.Helper()
	var loss *migrate.DataLossError
	require.ErrorAs(t, err, &loss)
	t.Logf("refused: %v", err)
	require.Equal(t, migrate.DataLossError{Mode: mode, Migration: migration, Table: table, Version: migration, Err: loss.Err}, *loss)
}

// TestDownStandaloneKeepsRows: in standalone mode `kfsdb migrate down` and
// the Provider roll back migrations whose tables are empty, refuse one
// whose Down would drop a table that holds rows (naming it, nothing
// changed), and drop it only when told --allow-data-loss.
func TestDownStandaloneKeepsRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := standaloneDBWithRows(ctx, t)
	p := provider(ctx, t, db.URL)
	down := func(args ...string) (int, string, string) {
		return kfsdbCLI(ctx, append([]string{"migrate", "--database-url", db.URL, "down"}, args...)...)
	}

	code, out, errOut := down()
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "00013_held_wakeups.sql") // a function and triggers: rolled back
	code, out, errOut = down()
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "00012_attempt_outcome_notify.sql") // a trigger and its function: rolled back
	code, out, errOut = down()
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "00011_tenant_rates.sql") // no rate, no pause: rolled back
	code, out, errOut = down()
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "00010_targeted_wakeups.sql") // a function: rolled back
	code, out, errOut = down()
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "00009_attempt_trace_contexts.sql") // empty: rolled back
	require.Contains(t, out, "version: 8\n")

	before := catalog(ctx, t, db.Pool)
	rows := tableRows(ctx, t, db.Pool, append([]string{tenantLimits}, seedAndPlatformTables...)...)
	code, out, errOut = down()
	require.Equal(t, 1, code, out)
	require.Contains(t, errOut, "kfsdb refuses to roll back migration 8: its Down would drop table "+tenantLimits+", which holds rows; "+
		"that migration changed nothing and the database stays at version 8 (to drop the table with its rows: --allow-data-loss")
	res, err := p.Down(ctx)
	requireDataLoss(t, err, migrate.ModeStandalone, 8, tenantLimits)
	require.Empty(t, res.Applied)
	require.EqualValues(t, 8, res.Version)
	requireSameCatalog(t, "before", before, "after the refused downs", catalog(ctx, t, db.Pool))
	require.Equal(t, rows, tableRows(ctx, t, db.Pool, append([]string{tenantLimits}, seedAndPlatformTables...)...))

	code, out, errOut = down("--allow-data-loss")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "version: 7\n")
	var exists bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, tenantLimits).Scan(&exists))
	require.False(t, exists, "dropped when told --allow-data-loss")

	// DownTo rolls back 0007 (its table is empty) and stops at the seed,
	// whose outbox holds a row.
	delete(rows, tenantLimits)
	res, err = p.DownTo(ctx, 0)
	requireDataLoss(t, err, migrate.ModeStandalone, 6, "document_compilation_outbox")
	require.Len(t, res.Applied, 1)
	require.EqualValues(t, 7, res.Applied[0].Source.Version)
	require.Equal(t, rows, tableRows(ctx, t, db.Pool, seedAndPlatformTables...))

	p.AllowDataLoss = true
	res, err = p.DownTo(ctx, 0)
	require.NoError(t, err)
	require.Len(t, res.Applied, 5) // 6, 4, 3, 2, 1
	require.Zero(t, res.Version)
}

// TestDownPlatformKeepsFloorAndRows: in platform-seeded mode the down
// guards kfsdb's own tables too (0008's holds an operator's row), and
// --allow-data-loss does not lower the floor: the seed and the platform's
// tables and rows stay.
func TestDownPlatformKeepsFloorAndRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newPlatformDB(ctx, t, true, "")
	p := provider(ctx, t, db.URL)
	_, err := p.Up(ctx)
	require.NoError(t, err)
	addTenantLimit(ctx, t, db.Pool)
	rows, seed := untouched(ctx, t, db.Pool), seedRows(ctx, t, db.Pool)
	down := func(args ...string) (int, string, string) {
		return kfsdbCLI(ctx, append([]string{"migrate", "--database-url", db.URL, "down"}, args...)...)
	}

	code, _, errOut := down()
	require.Equal(t, 0, code, errOut) // 0013: a function and triggers
	code, _, errOut = down()
	require.Equal(t, 0, code, errOut) // 0012: a trigger and its function
	code, _, errOut = down()
	require.Equal(t, 0, code, errOut) // 0011: no rate, no pause
	code, _, errOut = down()
	require.Equal(t, 0, code, errOut) // 0010: a function
	code, _, errOut = down()
	require.Equal(t, 0, code, errOut) // 0009: empty
	code, out, errOut := down()
	require.Equal(t, 1, code, out)
	require.Contains(t, errOut, "kfsdb refuses to roll back migration 8: its Down would drop table "+tenantLimits+", which holds rows")
	_, err = p.Down(ctx)
	requireDataLoss(t, err, migrate.ModePlatformSeeded, 8, tenantLimits)

	for range 2 { // 0008, then 0007
		code, _, errOut = down("--allow-data-loss")
		require.Equal(t, 0, code, errOut)
	}
	code, out, errOut = down("--allow-data-loss")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "no migrations to roll back: kfsdb does not roll back below version 6")
	p.AllowDataLoss = true
	_, err = p.DownTo(ctx, 0)
	var floor *migrate.FloorError
	require.ErrorAs(t, err, &floor)
	require.Equal(t, []int64{0, migrate.SeedVersion}, kfsdbVersions(ctx, t, db.Pool))
	require.Equal(t, rows, untouched(ctx, t, db.Pool))
	require.Equal(t, seed, seedRows(ctx, t, db.Pool))
}

// TestDownTenantRatesKeepsRatesAndPauses: migration 0011's Down drops
// its columns through guards, as a table is dropped: while a tenant is
// paused or rate-limited `kfsdb migrate down` refuses (naming the column,
// nothing changed); once they are lifted it rolls back, keeping the caps,
// and max_running is NOT NULL again. With --allow-data-loss the rate of a
// capped tenant goes; a row that only paused its tenant stops the Down
// (no cap to keep it by), and nothing changes.
func TestDownTenantRatesKeepsRatesAndPauses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := standaloneDB(ctx, t)
	exec := func(sql string) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	down := func(args ...string) (int, string, string) {
		return kfsdbCLI(ctx, append([]string{"migrate", "--database-url", db.URL, "down"}, args...)...)
	}
	addTenantLimit(ctx, t, db.Pool)
	exec(`UPDATE ` + tenantLimits + ` SET leases_per_second = 2.5, burst = 3, tokens = 3, tokens_at = now()`)
	exec(`INSERT INTO ` + tenantLimits + ` (tenant_id, paused_at, pause_reason, updated_at) VALUES ('tenant-b', now(), 'billing', now())`)
	for _, later := range []string{"00013_held_wakeups.sql", "00012_attempt_outcome_notify.sql"} { // nothing to lose
		c, laterOut, laterErr := down()
		require.Equal(t, 0, c, laterErr)
		require.Contains(t, laterOut, later)
	}
	before, rows := catalog(ctx, t, db.Pool), tableRows(ctx, t, db.Pool, tenantLimits)
	p := provider(ctx, t, db.URL)

	requireColumnLoss := func(column string) {
		t.Helper()
		code, out, errOut := down()
		require.Equal(t, 1, code, out)
		require.Contains(t, errOut, "kfsdb refuses to roll back migration 11: its Down would drop column "+column+" of table "+tenantLimits+", which holds values; "+
			"that migration changed nothing and the database stays at version 11 (to drop the column with its values: --allow-data-loss")
		_, err := p.Down(ctx)
		var loss *migrate.DataLossError
		require.ErrorAs(t, err, &loss)
		require.Equal(t, migrate.DataLossError{Mode: migrate.ModeStandalone, Migration: 11, Table: tenantLimits, Column: column, Version: 11, Err: loss.Err}, *loss)
		requireSameCatalog(t, "before", before, "after the refused down", catalog(ctx, t, db.Pool))
	}
	requireColumnLoss("paused_at")
	require.Equal(t, rows, tableRows(ctx, t, db.Pool, tenantLimits))

	// Without --allow-data-loss nothing moves; with it, the pause-only
	// row stops the Down at max_running's NOT NULL, in its transaction.
	code, _, errOut := down("--allow-data-loss")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `column "max_running" of relation "`+tenantLimits+`" contains null values`)
	requireSameCatalog(t, "before", before, "after the failed down", catalog(ctx, t, db.Pool))
	require.Equal(t, rows, tableRows(ctx, t, db.Pool, tenantLimits))

	exec(`DELETE FROM ` + tenantLimits + ` WHERE tenant_id = 'tenant-b'`)
	requireColumnLoss("leases_per_second")
	exec(`UPDATE ` + tenantLimits + ` SET leases_per_second = NULL, burst = NULL, tokens = NULL, tokens_at = NULL`)
	code, out, errOut := down()
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "00011_tenant_rates.sql")
	var maxRunning int
	var nullable string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT l.max_running, c.is_nullable FROM `+tenantLimits+` l,
		information_schema.columns c WHERE c.table_name = $1 AND c.column_name = 'max_running'`, tenantLimits).Scan(&maxRunning, &nullable))
	require.Equal(t, 4, maxRunning, "the cap is kept")
	require.Equal(t, "NO", nullable)

	// Up again, a rate on the capped tenant, and down with
	// --allow-data-loss: the rate goes, the cap stays.
	_, err := p.Up(ctx)
	require.NoError(t, err)
	exec(`UPDATE ` + tenantLimits + ` SET leases_per_second = 1, burst = 1, tokens = 1, tokens_at = now()`)
	code, _, errOut = down("--allow-data-loss")
	require.Equal(t, 0, code, errOut)
	require.True(t, strings.HasPrefix(tableRows(ctx, t, db.Pool, tenantLimits)[tenantLimits], "1:"))
}
