package migrate

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSource(t *testing.T) {
	t.Parallel()
	s, err := parseSource("00007_x.sql", "-- about\n\n-- +goose Up\n-- +goose StatementBegin\nDO $$ BEGIN END $$;\n-- +goose StatementEnd\nCREATE TABLE t (id int);\n\n-- +goose Down\nDROP TABLE t;\n")
	require.NoError(t, err)
	require.EqualValues(t, 7, s.version)
	require.Equal(t, "-- about", s.preamble)
	require.Equal(t, "-- +goose StatementBegin\nDO $$ BEGIN END $$;\n-- +goose StatementEnd\nCREATE TABLE t (id int);", s.up)
	require.Equal(t, "DROP TABLE t;", s.down)

	for name, tc := range map[string]struct{ file, text, wantErr string }{
		"NoVersion":     {"x.sql", "-- +goose Up\nSELECT 1;\n-- +goose Down\nSELECT 1;\n", "must start with a positive version"},
		"ZeroVersion":   {"00000_x.sql", "-- +goose Up\nSELECT 1;\n-- +goose Down\nSELECT 1;\n", "must start with a positive version"},
		"NoDown":        {"00001_x.sql", "-- +goose Up\nSELECT 1;\n", "needs both"},
		"DownFirst":     {"00001_x.sql", "-- +goose Down\nSELECT 1;\n-- +goose Up\nSELECT 1;\n", "'-- +goose Down' must come once, after"},
		"TwoUps":        {"00001_x.sql", "-- +goose Up\n-- +goose Up\nSELECT 1;\n-- +goose Down\nSELECT 1;\n", "'-- +goose Up' must come once"},
		"EmptyUp":       {"00001_x.sql", "-- +goose Up\n-- +goose Down\nSELECT 1;\n", "must not be empty"},
		"NoTransaction": {"00001_x.sql", "-- +goose NO TRANSACTION\n-- +goose Up\nSELECT 1;\n-- +goose Down\nSELECT 1;\n", `annotation "-- +goose NO TRANSACTION" is not supported`},
		"Envsub":        {"00001_x.sql", "-- +goose Up\n-- +goose ENVSUB ON\nSELECT 1;\n-- +goose Down\nSELECT 1;\n", `annotation "-- +goose ENVSUB ON" is not supported`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := parseSource(tc.file, tc.text)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// TestSQL: the export covers the versions after from, up oldest first and
// down newest first, and refuses a from that names no migration.
func TestSQL(t *testing.T) {
	t.Parallel()
	srcs, err := sources()
	require.NoError(t, err)
	latest := srcs[len(srcs)-1].version

	up, err := SQL(DirectionUp, 0, SQLOptions{})
	require.NoError(t, err)
	last := -1
	for _, s := range srcs {
		i := strings.Index(up, fmt.Sprintf("-- kfsdb migration %d up: %s\n", s.version, s.name))
		require.Greater(t, i, last, "%s in order", s.name)
		last = i
		require.Contains(t, up, s.up)
	}

	down, err := SQL(DirectionDown, SeedVersion, SQLOptions{})
	require.NoError(t, err)
	require.NotContains(t, down, "00006_")
	require.Less(t, strings.Index(down, "migration 9 down"), strings.Index(down, "migration 7 down"))

	none, err := SQL(DirectionUp, latest, SQLOptions{})
	require.NoError(t, err)
	require.Contains(t, none, "(no migration after version")

	_, err = SQL(DirectionUp, 5, SQLOptions{})
	require.ErrorContains(t, err, "--from 5 is not 0 or a migration version (1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13)")
	_, err = SQL("sideways", 0, SQLOptions{})
	require.ErrorContains(t, err, `direction must be "up" or "down"`)
}

// TestSQLDownBelowSeedNeedsStandalone: a down export that would drop the
// seed's tables, or the platform's, is refused without Standalone, naming
// each table it would drop; with it, it is printed.
func TestSQLDownBelowSeedNeedsStandalone(t *testing.T) {
	t.Parallel()
	seedTables := []string{"document_compilation_outbox", "document_compilation_attempts"}
	for from, want := range map[int64][]string{
		4: seedTables,
		2: append(slices.Clone(seedTables), "projection_set_publication_heads", "projection_set_publications"),
		0: append(slices.Clone(seedTables), "projection_set_publication_heads", "projection_set_publications", "document_assets", "knowledge_spaces"),
	} {
		_, err := SQL(DirectionDown, from, SQLOptions{})
		var belowSeed *DownBelowSeedError
		require.ErrorAs(t, err, &belowSeed, "from %d", from)
		require.Equal(t, from, belowSeed.From)
		require.Equal(t, want, belowSeed.Tables)
		require.ErrorContains(t, err, "would drop the platform's tables "+strings.Join(want, ", "))

		text, err := SQL(DirectionDown, from, SQLOptions{Standalone: true})
		require.NoError(t, err)
		require.Contains(t, text, "-- kfsdb migration 6 down: 00006_document_compilation_attempts.sql\n")
		requireEveryDropGuarded(t, text)
	}
	up, err := SQL(DirectionUp, 0, SQLOptions{Standalone: true})
	require.NoError(t, err)
	plain, err := SQL(DirectionUp, 0, SQLOptions{})
	require.NoError(t, err)
	require.Equal(t, plain, up, "Standalone changes nothing for up")
}

// TestSQLDownGuardsEveryDrop: in every down export each DROP TABLE comes
// after a lock of its table and a check for rows, in the one DO statement,
// and each table every Down drops is guarded so (the seed's and kfsdb's
// own, 0007-0009, alike).
func TestSQLDownGuardsEveryDrop(t *testing.T) {
	t.Parallel()
	text, err := SQL(DirectionDown, 0, SQLOptions{Standalone: true})
	require.NoError(t, err)
	srcs, err := sources()
	require.NoError(t, err)
	var want []string
	for _, s := range slices.Backward(srcs) {
		want = append(want, s.drops...)
	}
	require.Equal(t, want, requireEveryDropGuarded(t, text))
	require.Contains(t, want, "document_compilation_tenant_limits")
	require.Contains(t, want, "knowledge_spaces")
}

// requireEveryDropGuarded checks that each DROP TABLE in text is inside a
// guard that locks that table in ACCESS EXCLUSIVE mode, then raises
// SQLSTATE KF001 naming it if it holds a row, and returns the guarded
// tables in order.
func requireEveryDropGuarded(t *testing.T, text string) []string {
	t.Helper()
	drops := regexp.MustCompile(`(?im)^\s*DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?("?)(\w+)`)
	var tables []string
	for _, m := range drops.FindAllStringSubmatchIndex(text, -1) {
		table := text[m[4]:m[5]]
		if m[2] == m[3] { // not quoted
			table = strings.ToLower(table)
		}
		start := strings.LastIndex(text[:m[0]], "DO $kfsdb_guard$\n")
		require.GreaterOrEqual(t, start, 0, "DROP TABLE %s outside a guard", table)
		guard := text[start:m[0]]
		require.NotContains(t, guard, "$kfsdb_guard$;", "DROP TABLE %s after its guard ended", table)
		lock := strings.Index(guard, fmt.Sprintf("LOCK TABLE %q IN ACCESS EXCLUSIVE MODE;", table))
		check := strings.Index(guard, fmt.Sprintf("IF EXISTS (SELECT 1 FROM %q) THEN\n    RAISE EXCEPTION USING ERRCODE = 'KF001', TABLE = '%s',", table, table))
		require.GreaterOrEqual(t, lock, 0, "DROP TABLE %s without its lock", table)
		require.Greater(t, check, lock, "DROP TABLE %s: the check for rows must come after the lock", table)
		tables = append(tables, table)
	}
	require.NotEmpty(t, tables)
	return tables
}

// TestGuardDown: a Down's plain DROP TABLEs are guarded, anything else
// kept as written; a statement that could lose rows and cannot be guarded
// is refused with a *UnguardedDropError.
func TestGuardDown(t *testing.T) {
	t.Parallel()
	guarded, tables, err := guardDown("00010_x.sql", "-- first the index\nDROP INDEX \"a_idx\";\n\nDROP TABLE \"a\";\nDROP\n  TABLE IF EXISTS B;\n")
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, tables)
	require.True(t, strings.HasPrefix(guarded, "-- first the index\nDROP INDEX \"a_idx\";\n\n-- +goose StatementBegin\n"), guarded)
	require.Contains(t, guarded, "DETAIL = 'The Down of kfsdb migration 00010_x.sql drops it. Nothing was dropped.'")
	require.Contains(t, guarded, "  IF to_regclass('\"b\"') IS NULL THEN\n    RETURN;\n  END IF;\n")
	require.Contains(t, guarded, "  DROP\n  TABLE IF EXISTS B;\nEND\n$kfsdb_guard$;\n-- +goose StatementEnd")
	require.Equal(t, tables, requireEveryDropGuarded(t, guarded))

	for name, down := range map[string]string{
		"TwoTables":         "DROP TABLE \"a\", \"b\";",
		"Cascade":           "DROP TABLE \"a\" CASCADE;",
		"Schema":            "DROP TABLE \"s\".\"a\";",
		"MixedCase":         "DROP TABLE \"A\";",
		"Truncate":          "TRUNCATE \"a\";",
		"Delete":            "DELETE FROM \"a\";",
		"DropColumnCascade": "ALTER TABLE \"a\" DROP COLUMN \"b\" CASCADE;",
		"DropTwoColumns":    "ALTER TABLE \"a\" DROP COLUMN \"b\", DROP COLUMN \"c\";",
		"DropColumnNoWord":  "ALTER TABLE \"a\" DROP \"b\";",
		"InBlock":           "-- +goose StatementBegin\nDO $$ BEGIN DROP TABLE \"a\"; END $$;\n-- +goose StatementEnd",
		"Trailing":          "DROP TABLE \"a\"; -- gone",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, _, err := guardDown("00010_x.sql", down)
			var unguarded *UnguardedDropError
			require.ErrorAs(t, err, &unguarded)
			require.Equal(t, "00010_x.sql", unguarded.Migration)
			require.ErrorContains(t, err, "kfsdb cannot guard")
		})
	}
	// A column's drop is guarded as a table's is: lock, then refuse if any
	// row holds a value in it.
	guarded, tables, err = guardDown("00011_x.sql", "ALTER TABLE \"a\" DROP COLUMN IF EXISTS \"b\";\nALTER TABLE A DROP COLUMN C;\n")
	require.NoError(t, err)
	require.Empty(t, tables, "no table is dropped")
	for _, col := range [][2]string{{"a", "b"}, {"a", "c"}} {
		lock := strings.Index(guarded, fmt.Sprintf("LOCK TABLE %q IN ACCESS EXCLUSIVE MODE;", col[0]))
		check := strings.Index(guarded, fmt.Sprintf("IF EXISTS (SELECT 1 FROM %q WHERE %q IS NOT NULL) THEN\n    RAISE EXCEPTION USING ERRCODE = 'KF001', TABLE = '%s', COLUMN = '%s',",
			col[0], col[1], col[0], col[1]))
		require.GreaterOrEqual(t, lock, 0, guarded)
		require.Greater(t, check, lock, "the check for values must come after the lock:\n%s", guarded)
	}
	require.Contains(t, guarded, "WHERE a.attrelid = to_regclass('\"a\"') AND a.attname = 'b' AND NOT a.attisdropped) THEN\n    RETURN;")
	require.Contains(t, guarded, "  ALTER TABLE A DROP COLUMN C;\nEND\n$kfsdb_guard$;\n-- +goose StatementEnd")

	// ALTER TABLE's other DROPs lose no value: kept as written.
	kept := "ALTER TABLE \"a\" DROP CONSTRAINT IF EXISTS \"a_ck\";\nALTER TABLE \"a\" ALTER COLUMN \"b\" DROP NOT NULL, ALTER COLUMN \"c\" DROP DEFAULT;"
	guarded, _, err = guardDown("00011_x.sql", kept)
	require.NoError(t, err)
	require.Equal(t, kept, guarded)

	_, err = parseSource("00010_x.sql", "-- +goose Up\nCREATE TABLE a (id int);\n-- +goose Down\nTRUNCATE a;\n")
	var unguarded *UnguardedDropError
	require.ErrorAs(t, err, &unguarded, "a migration whose Down cannot be guarded is not loaded")
}
