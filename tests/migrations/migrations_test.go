package migrations

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// versionBeforeAttempts is the last migration before 0006 (there is no 5).
const versionBeforeAttempts = 4

// versionAttempts is the seed's version; later ones add kfsdb's own objects.
const versionAttempts = 6

func TestUpDownUpIsClean(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewEmptyDB(t)
	p := provider(ctx, t, db.URL)

	up, err := p.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, migrate.ModeStandalone, up.Mode)
	require.Len(t, up.Applied, len(migrationVersions(t, p)))
	afterFirstUp := catalog(ctx, t, db.Pool)

	down, err := p.DownTo(ctx, 0)
	require.NoError(t, err)
	require.Len(t, down.Applied, len(up.Applied))
	v, err := p.GetDBVersion(ctx)
	require.NoError(t, err)
	require.Zero(t, v)
	// Only kfsdb's version and mode tables are left, the mode cleared.
	var tables []string
	rows, err := db.Pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		tables = append(tables, name)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{migrate.ModeTable, migrate.VersionTable}, tables)
	var modes int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+migrate.ModeTable).Scan(&modes))
	require.Zero(t, modes)

	_, err = p.Up(ctx)
	require.NoError(t, err)
	requireSameCatalog(t, "first up", afterFirstUp, "up after down", catalog(ctx, t, db.Pool))
}

func TestUpTwiceIsNoOp(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewEmptyDB(t)
	p := provider(ctx, t, db.URL)

	first, err := p.Up(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, first.Applied)
	before := catalog(ctx, t, db.Pool)

	second, err := p.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, second.Applied)
	require.Equal(t, first.Mode, second.Mode)
	requireSameCatalog(t, "after first up", before, "after second up", catalog(ctx, t, db.Pool))
}

// TestMatchesSeedSQL checks that goose's schema is exactly the seed's: a
// database migrated to 6 by goose against one migrated to 4 by goose and
// then given the seed file, as the platform ships it, through psql.
func TestMatchesSeedSQL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	seed := seedFile(t)
	psql, err := exec.LookPath("psql")
	require.NoError(t, err, "psql must be on PATH (apt-get install postgresql-client)")

	migrated := pgtest.NewEmptyDB(t)
	_, err = provider(ctx, t, migrated.URL).UpTo(ctx, versionAttempts)
	require.NoError(t, err)

	seeded := pgtest.NewEmptyDB(t)
	_, err = provider(ctx, t, seeded.URL).UpTo(ctx, versionBeforeAttempts)
	require.NoError(t, err)
	out, err := exec.CommandContext(ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-d", seeded.URL, "-f", seed).CombinedOutput()
	require.NoError(t, err, "psql -f %s:\n%s", seed, redact.Text(string(out)))

	requireSameCatalog(t, "seed via psql", catalog(ctx, t, seeded.Pool), "goose up", catalog(ctx, t, migrated.Pool))
}

// TestSeedIsTheSharedSeed: the seed the other tests apply (00006 less
// kfsdb's annotations, preflight and Down) is the user's seed, byte for
// byte. It needs the user's copy in shared/ beside the repository and
// skips without it; no other test does.
func TestSeedIsTheSharedSeed(t *testing.T) {
	t.Parallel()
	shared, err := os.ReadFile(sharedSeedPath(t))
	require.NoError(t, err)
	require.Equal(t, string(shared), seedSQL(t), "db/migrations/%s is no longer the shared seed verbatim", seedMigration)
}

func TestConcurrentUpAppliesEachVersionOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewEmptyDB(t)

	applied := 0
	for _, res := range concurrentUps(ctx, t, db.URL, 4) {
		applied += len(res.Applied)
		require.Equal(t, migrate.ModeStandalone, res.Mode)
	}
	versions := migrationVersions(t, provider(ctx, t, db.URL))
	require.Equal(t, len(versions), applied, "each migration is applied by exactly one run")

	want := map[int64]int{0: 1} // goose's initial row
	for _, v := range versions {
		want[v] = 1
	}
	require.Equal(t, want, appliedVersions(ctx, t, db.Pool))
}

func TestAttemptsRefusesLongTenantIDAndChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewEmptyDB(t)
	p := provider(ctx, t, db.URL)

	_, err := p.UpTo(ctx, versionBeforeAttempts)
	require.NoError(t, err)
	spaceID := uuid.New()
	longTenant := strings.Repeat("t", 256)
	_, err = db.Pool.Exec(ctx,
		`INSERT INTO knowledge_spaces (id, tenant_id, slug, name) VALUES ($1, $2, 'docs', 'Docs')`,
		spaceID, longTenant)
	require.NoError(t, err)
	before := catalog(ctx, t, db.Pool)

	_, err = p.Up(ctx)
	require.Error(t, err)
	require.ErrorContains(t, err, "1 knowledge_spaces row(s) have a tenant_id longer than 255 characters")

	v, err := p.GetDBVersion(ctx)
	require.NoError(t, err)
	require.EqualValues(t, versionBeforeAttempts, v)

	var attempts *string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT to_regclass('public.document_compilation_attempts')::text`).Scan(&attempts))
	require.Nil(t, attempts, "document_compilation_attempts must not exist")

	var tenant, dataType string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT tenant_id FROM knowledge_spaces WHERE id = $1`, spaceID).Scan(&tenant))
	require.Equal(t, longTenant, tenant)
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT data_type FROM information_schema.columns
		  WHERE table_schema = 'public' AND table_name = 'knowledge_spaces' AND column_name = 'tenant_id'`).Scan(&dataType))
	require.Equal(t, "text", dataType)

	requireSameCatalog(t, "version 4", before, "after refused 0006", catalog(ctx, t, db.Pool))
}

func TestDownFromAttemptsRestoresVersion4(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewEmptyDB(t)
	p := provider(ctx, t, db.URL)

	_, err := p.UpTo(ctx, versionBeforeAttempts)
	require.NoError(t, err)
	v4 := catalog(ctx, t, db.Pool)

	_, err = p.UpTo(ctx, versionAttempts)
	require.NoError(t, err)
	v, err := p.GetDBVersion(ctx)
	require.NoError(t, err)
	require.EqualValues(t, versionAttempts, v)

	res, err := p.Down(ctx)
	require.NoError(t, err)
	require.Len(t, res.Applied, 1)
	require.EqualValues(t, versionAttempts, res.Applied[0].Source.Version)
	v, err = p.GetDBVersion(ctx)
	require.NoError(t, err)
	require.EqualValues(t, versionBeforeAttempts, v)

	requireSameCatalog(t, "version 4", v4, "down from 6", catalog(ctx, t, db.Pool))
}
