package migrations

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pmezard/go-difflib/difflib"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/db/migrations"
	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/tests/capability"
)

// seedRelPath is the user's copy of the seed, relative to the directory
// that holds both the repository and shared/; seedMigration is the
// repository's migration that applies it.
const (
	seedRelPath   = "shared/seed/0006_document_compilation_attempts.postgres.sql"
	seedMigration = "00006_document_compilation_attempts.sql"
)

// catalogQuery lists, one line each, every relation, column (position, type,
// collation, nullability, default), constraint (with pg_get_constraintdef and
// the foreign key actions and match type spelled out), index
// (pg_get_indexdef) and trigger of schema public.
const catalogQuery = `
SELECT format('relation %s kind=%s', c.relname, c.relkind)
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'public'
UNION ALL
SELECT format('column %s.%s #%s %s collate=%s notnull=%s default=%s',
              c.relname, a.attname, a.attnum, format_type(a.atttypid, a.atttypmod),
              coalesce(coll.collname, '-'), a.attnotnull,
              coalesce(pg_get_expr(d.adbin, d.adrelid), '-'))
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  LEFT JOIN pg_collation coll ON coll.oid = a.attcollation AND a.attcollation <> 0
 WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
   AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT format('constraint %s.%s type=%s deferrable=%s deferred=%s validated=%s on_update=%s on_delete=%s match=%s def=%s',
              c.relname, con.conname, con.contype, con.condeferrable, con.condeferred,
              con.convalidated, con.confupdtype, con.confdeltype, con.confmatchtype,
              pg_get_constraintdef(con.oid, true))
  FROM pg_constraint con
  JOIN pg_class c ON c.oid = con.conrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'public'
UNION ALL
SELECT format('index %s.%s %s', i.tablename, i.indexname, pg_get_indexdef(format('%I.%I', i.schemaname, i.indexname)::regclass))
  FROM pg_indexes i
 WHERE i.schemaname = 'public'
UNION ALL
SELECT format('trigger %s.%s %s', c.relname, t.tgname, pg_get_triggerdef(t.oid))
  FROM pg_trigger t
  JOIN pg_class c ON c.oid = t.tgrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'public' AND NOT t.tgisinternal
`

// catalog returns the sorted catalog lines of the database behind pool.
func catalog(ctx context.Context, t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(ctx, catalogQuery)
	require.NoError(t, err)
	var lines []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		lines = append(lines, line)
	}
	require.NoError(t, rows.Err())
	slices.Sort(lines)
	require.NotEmpty(t, lines)
	return lines
}

// requireSameCatalog fails with a unified diff when the catalogs differ.
func requireSameCatalog(t *testing.T, wantName string, want []string, gotName string, got []string) {
	t.Helper()
	if slices.Equal(want, got) {
		t.Logf("catalogs equal: %s = %s (%d lines)", wantName, gotName, len(got))
		return
	}
	diff, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A:        difflib.SplitLines(strings.Join(want, "\n") + "\n"),
		B:        difflib.SplitLines(strings.Join(got, "\n") + "\n"),
		FromFile: wantName,
		ToFile:   gotName,
		Context:  1,
	})
	require.NoError(t, err)
	t.Fatalf("catalogs differ (-%s +%s):\n%s", wantName, gotName, diff)
}

// provider returns a migration provider on its own connections to url,
// closed when the test ends.
func provider(ctx context.Context, t *testing.T, url string) *migrate.Provider {
	t.Helper()
	db, err := migrate.OpenSQL(ctx, url)
	require.NoError(t, err)
	p, err := migrate.NewProvider(db)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// concurrentUps runs up from runs providers at once, each on its own
// connections, and returns their results; none may fail.
func concurrentUps(ctx context.Context, t *testing.T, url string, runs int) []*migrate.Result {
	t.Helper()
	providers := make([]*migrate.Provider, runs)
	for i := range providers {
		providers[i] = provider(ctx, t, url)
	}
	results := make([]*migrate.Result, runs)
	errs := make([]error, runs)
	var wg sync.WaitGroup
	for i, p := range providers {
		wg.Go(func() { results[i], errs[i] = p.Up(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "run %d", i)
	}
	return results
}

// appliedVersions returns kfsdb's applied versions (including the initial 0
// row), with how many rows each has.
func appliedVersions(ctx context.Context, t *testing.T, pool *pgxpool.Pool) map[int64]int {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT version_id, count(*) FROM `+migrate.VersionTable+` WHERE is_applied GROUP BY version_id`)
	require.NoError(t, err)
	got := map[int64]int{}
	for rows.Next() {
		var v int64
		var n int
		require.NoError(t, rows.Scan(&v, &n))
		got[v] = n
	}
	require.NoError(t, rows.Err())
	return got
}

// migrationVersions lists the versions of the embedded migrations.
func migrationVersions(t *testing.T, p *migrate.Provider) []int64 {
	t.Helper()
	var vs []int64
	for _, s := range p.Sources() {
		vs = append(vs, s.Version)
	}
	require.NotEmpty(t, vs)
	return vs
}

// seedSQL is the seed, the platform's migration 0006, as the platform
// ships and applies it (psql, its own runner): the repository's
// db/migrations/00006 is that file verbatim inside kfsdb's goose
// annotations, its preflight check and its Down section, so the seed is
// 00006's Up section after the preflight's StatementEnd.
// TestSeedIsTheSharedSeed checks it against the user's copy when one is
// beside the repository.
func seedSQL(t *testing.T) string {
	t.Helper()
	b, err := fs.ReadFile(migrations.FS, seedMigration)
	require.NoError(t, err)
	_, up, ok := strings.Cut(string(b), "-- +goose Up\n")
	require.True(t, ok, "%s has no Up section", seedMigration)
	up, _, ok = strings.Cut(up, "\n-- +goose Down\n")
	require.True(t, ok, "%s has no Down section", seedMigration)
	_, seed, ok := strings.Cut(up, "-- +goose StatementEnd\n")
	require.True(t, ok, "%s has no preflight check before the seed", seedMigration)
	seed = strings.TrimSpace(seed)
	require.NotContains(t, seed, "-- +goose", "the seed has no goose annotations: kfsdb's are around it")
	return seed
}

// seedFile writes seedSQL to a file of the seed's name, for psql -f.
func seedFile(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), path.Base(seedRelPath))
	require.NoError(t, os.WriteFile(file, []byte(seedSQL(t)), 0o600))
	return file
}

// sharedSeedPath locates the user's copy of the seed: in shared/ beside
// the repository (the git top-level directory's parent), else in any
// parent directory of the working directory. It skips the test when there
// is none.
func sharedSeedPath(t *testing.T) string {
	t.Helper()
	var candidates []string
	if out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output(); err == nil {
		top := strings.TrimSpace(string(out))
		candidates = append(candidates, filepath.Join(filepath.Dir(top), seedRelPath))
	}
	wd, err := os.Getwd()
	require.NoError(t, err)
	for dir := wd; ; dir = filepath.Dir(dir) {
		candidates = append(candidates, filepath.Join(dir, seedRelPath))
		if filepath.Dir(dir) == dir {
			break
		}
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			return c
		}
	}
	capability.Missing(t, capability.Seed, "the user's seed %s is not beside the repository (looked at %s); only TestSeedIsTheSharedSeed needs it", seedRelPath, strings.Join(candidates[:min(len(candidates), 3)], ", "))
	return ""
}
