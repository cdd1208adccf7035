package migrations

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// TestStatusOnExportedDatabase: on a database that `kfsdb migrate sql
// --up` migrated through psql (kfsdb's tables, no kfsdb_db_version),
// standalone and on a platform whose runner applied the seed, `kfsdb
// migrate status` and Provider.Status say so with a
// *migrate.UnrecordedError naming each migration whose objects were found,
// not a seed mismatch; up is refused the same way and changes nothing.
func TestStatusOnExportedDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, seeded := range []bool{false, true} {
		t.Run(fmt.Sprintf("platform=%t", seeded), func(t *testing.T) {
			t.Parallel()
			db, from := pgtest.NewEmptyDB(t), "0"
			if seeded {
				db, from = newPlatformDB(ctx, t, true, "").DB, fmt.Sprint(migrate.SeedVersion)
			}
			dbURL := db.URL
			code, export, errOut := kfsdbCLI(ctx, "migrate", "sql", "--up", "--from", from)
			require.Equal(t, 0, code, errOut)
			psqlText(ctx, t, dbURL, export)

			p := provider(ctx, t, dbURL)
			var want []int64
			for _, v := range migrationVersions(t, p) {
				// 0010 replaces a function only, 0011 adds columns and a
				// function: no table, index or trigger tells whether they
				// ran, and running them again changes nothing.
				if v >= migrate.SeedVersion && !slices.Contains(objectlessVersions, v) {
					want = append(want, v)
				}
			}
			latest := want[len(want)-1]

			_, err := p.Status(ctx)
			var unrecorded *migrate.UnrecordedError
			require.ErrorAs(t, err, &unrecorded)
			require.False(t, unrecorded.VersionTable)
			var found []int64
			for _, f := range unrecorded.Found {
				found = append(found, f.Version)
				require.NotEmpty(t, f.Objects, "migration %d", f.Version)
			}
			require.Equal(t, want, found, "every migration from the seed on, by its objects")
			require.Equal(t, []string{"table document_compilation_attempts", "table document_compilation_outbox"}, unrecorded.Found[0].Objects)
			require.Contains(t, unrecorded.Found[1].Objects, "table document_compilation_outbox_idle_listeners")
			// 0013 replaced 0007's wake-up triggers by its own.
			require.Contains(t, unrecorded.Found[len(unrecorded.Found)-1].Objects, "trigger document_compilation_outbox_wake_named_on_insert on document_compilation_outbox")

			// The URL from the environment: in argv its password would
			// add a warning line to stderr.
			var outBuf, errBuf bytes.Buffer
			code = cli.Main(ctx, []string{"migrate", "status"}, &outBuf, &errBuf, func(k string) string {
				if k == cli.EnvDatabaseURL {
					return dbURL
				}
				return ""
			})
			out, errOut := outBuf.String(), errBuf.String()
			t.Logf("kfsdb migrate status:\n%s%s", out, errOut)
			require.Equal(t, 1, code)
			require.Contains(t, out, "mode: none recorded (kfsdb_db_version does not exist): kfsdb's migrations were applied by another tool")
			for _, f := range unrecorded.Found {
				require.Regexp(t, fmt.Sprintf(`(?m)^%d\s+%s\s+(table|trigger) `, f.Version, regexp.QuoteMeta(f.Name)), out)
			}
			require.Contains(t, errOut, fmt.Sprintf("found up to version %d, listed above", latest))
			require.Contains(t, errOut, fmt.Sprintf("`kfsdb migrate sql --up --from %d`", latest))
			require.NotContains(t, errOut, "is not the seed's")
			require.Equal(t, 1, strings.Count(errOut, "\n"), "one line on stderr")

			before := catalog(ctx, t, db.Pool)
			res, err := p.Up(ctx)
			require.ErrorAs(t, err, &unrecorded)
			require.Empty(t, res.Applied)
			code, _, errOut = kfsdbCLI(ctx, "migrate", "--database-url", dbURL, "up")
			require.Equal(t, 1, code)
			require.Contains(t, errOut, "kfsdb's migrations were applied here by another tool, not by kfsdb migrate: kfsdb_db_version does not exist")
			requireSameCatalog(t, "before", before, "after refused ups", catalog(ctx, t, db.Pool))
		})
	}
}

// objectlessVersions are the migrations that create no table, index or
// trigger, so none shows them applied: 0010 (targeted wake-ups) replaces a
// function, 0011 (tenant rates) adds columns and a function.
var objectlessVersions = []int64{10, 11}
