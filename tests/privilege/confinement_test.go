package privilege_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/dbroles"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// The tenants of the confinement tests: the confined roles are confined
// to confA; confB is the other tenant whose rows they must not reach.
const (
	confA = "conf-a"
	confB = "conf-b"
)

// confinedWorld is a database with console_roles.sql installed, two
// tenants' attempts, and a read-only and an operator role confined to
// confA by the documented CALL.
type confinedWorld struct {
	owner              *pgtest.DB
	drv                *testfactory.Driver
	attempts           map[string][]*kfstype.Attempt
	roURL, opURL       string
	roPool, opPool     *pgxpool.Pool
	bIDs               string // confB's attempt ids, as an SQL uuid[] literal
	aOutbox, bOutboxes int
}

func newConfinedWorld(ctx context.Context, t *testing.T) *confinedWorld {
	t.Helper()
	w := &confinedWorld{owner: dbroles.Install(ctx, t, "console_roles.sql", dbroles.ConsoleRoles...)}
	w.drv = &testfactory.Driver{Repo: repo.New(nil), DB: w.owner.Pool}
	w.attempts = testfactory.Workload(ctx, t, w.drv, []string{confA, confB}, 14, nil)
	w.roPool, w.roURL = dbroles.Confine(ctx, t, w.owner, "kfsdb_console_conf_a", confA, false)
	w.opPool, w.opURL = dbroles.Confine(ctx, t, w.owner, "kfsdb_operator_conf_a", confA, true)
	ids := make([]string, len(w.attempts[confB]))
	for i, a := range w.attempts[confB] {
		ids[i] = a.ID.String()
	}
	w.bIDs = "'{" + strings.Join(ids, ",") + "}'::uuid[]"
	w.aOutbox, w.bOutboxes = w.outboxRows(ctx, t, w.owner.Pool, confA), w.outboxRows(ctx, t, w.owner.Pool, confB)
	require.Positive(t, w.aOutbox)
	require.Positive(t, w.bOutboxes)
	return w
}

// outboxRows counts tenant's outbox rows as db sees them.
func (w *confinedWorld) outboxRows(ctx context.Context, t *testing.T, db repo.DBTX, tenant string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM document_compilation_outbox o
		JOIN document_compilation_attempts a ON a.id = o.attempt_id WHERE a.tenant_id = $1`, tenant).Scan(&n))
	return n
}

// snapshotB is every confB attempt's and outbox row's full text, as the
// owner reads them: what no confined trick may change.
func (w *confinedWorld) snapshotB(ctx context.Context, t *testing.T) string {
	t.Helper()
	var s string
	require.NoError(t, w.owner.Pool.QueryRow(ctx, `SELECT
		(SELECT string_agg(a::text, E'\n' ORDER BY a.id) FROM document_compilation_attempts a WHERE a.tenant_id = $1) || E'\n' ||
		(SELECT string_agg(o::text, E'\n' ORDER BY o.id) FROM document_compilation_outbox o
		  JOIN document_compilation_attempts a ON a.id = o.attempt_id WHERE a.tenant_id = $1)`, confB).Scan(&s))
	return s
}

// confinedConn is a new connection to dbURL: a session of its own, for
// tricks that change session state.
func confinedConn(ctx context.Context, t *testing.T, dbURL string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// requireSeesNoOtherTenant runs probe (a count of confB's rows, however
// the trick reaches them) on conn: zero, or refused by row-level
// security (row_security = off makes a filtered query an error).
func requireSeesNoOtherTenant(ctx context.Context, t *testing.T, conn *pgx.Conn, what, probe string) {
	t.Helper()
	var n int
	err := conn.QueryRow(ctx, probe).Scan(&n)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return
	}
	require.NoError(t, err, "%s: %s", what, probe)
	require.Zero(t, n, "%s: %s saw %d rows of another tenant", what, probe, n)
}

// TestConfinedRoleTricks connects as roles confined to conf-a by
// kfsdb_confine_console and tries every way out of the confinement known
// to have worked against a session setting, or likely to: each reads no
// row of conf-b, and no write changes one. Before issue 39 `SET
// kfsdb.tenant = ”` alone read every tenant.
func TestConfinedRoleTricks(t *testing.T) {
	ctx := context.Background()
	w := newConfinedWorld(ctx, t)
	before := w.snapshotB(ctx, t)
	otherAttempts := `SELECT count(*) FROM document_compilation_attempts WHERE tenant_id <> '` + confA + `'`
	otherOutbox := `SELECT count(*) FROM document_compilation_outbox WHERE attempt_id = ANY(` + w.bIDs + `)`

	// Its own tenant it does see: the probes can see rows at all.
	for _, pool := range []*pgxpool.Pool{w.roPool, w.opPool} {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts`).Scan(&n))
		require.Equal(t, len(w.attempts[confA]), n, "no tenant filter: conf-a's attempts only")
		require.Equal(t, w.aOutbox, w.outboxRows(ctx, t, pool, confA))
	}

	// groupRole stands for the connection's own confined group (SET ROLE
	// is allowed to a group one is a member of).
	const groupRole = "<group>"
	tricks := []struct {
		name   string
		setup  []string
		probes []string
	}{
		{"SetTenantEmpty", []string{`SET kfsdb.tenant = ''`}, nil},
		{"SetTenantOther", []string{`SET kfsdb.tenant = '` + confB + `'`}, nil},
		{"ResetAll", []string{`RESET ALL`}, nil},
		{"SetConfig", []string{`SELECT set_config('kfsdb.tenant', '', false)`}, nil},
		{"SetRoleGroup", []string{`SET ROLE ` + groupRole}, nil},
		{"SetSessionAuthorization", []string{`SET SESSION AUTHORIZATION DEFAULT`}, nil},
		{"RowSecurityOff", []string{`SET row_security = off`}, nil},
		{"TempView", []string{`CREATE TEMP VIEW every_attempt AS SELECT * FROM document_compilation_attempts`,
			`CREATE TEMP VIEW every_outbox AS SELECT * FROM document_compilation_outbox`},
			[]string{`SELECT count(*) FROM every_attempt WHERE tenant_id <> '` + confA + `'`,
				`SELECT count(*) FROM every_outbox WHERE attempt_id = ANY(` + w.bIDs + `)`}},
		{"TempFunction", []string{`CREATE FUNCTION pg_temp.every_attempt() RETURNS bigint LANGUAGE sql SECURITY DEFINER
			AS $$ SELECT count(*) FROM document_compilation_attempts WHERE tenant_id <> '` + confA + `' $$`},
			[]string{`SELECT pg_temp.every_attempt()`}},
		{"PreparedThenSet", []string{`PREPARE every_attempt AS ` + otherAttempts, `SET kfsdb.tenant = ''`},
			[]string{`EXECUTE every_attempt`}},
		{"PreparedThenSetRole", []string{`PREPARE every_attempt AS ` + otherAttempts, `SET ROLE ` + groupRole},
			[]string{`EXECUTE every_attempt`}},
	}
	for _, tc := range tricks {
		t.Run(tc.name, func(t *testing.T) {
			for dbURL, group := range map[string]string{w.roURL: "kfsdb_console_confined", w.opURL: "kfsdb_console_confined_operator"} {
				conn := confinedConn(ctx, t, dbURL)
				for _, sql := range tc.setup {
					sql = strings.ReplaceAll(sql, groupRole, group)
					_, err := conn.Exec(ctx, sql)
					require.NoError(t, err, sql)
				}
				for _, probe := range append([]string{otherAttempts, otherOutbox}, tc.probes...) {
					requireSeesNoOtherTenant(ctx, t, conn, tc.name, probe)
				}
			}
		})
	}

	// A function in the query's WHERE that shows its arguments: row-level
	// security filters before any function that is not leakproof sees a
	// row. And the planner statistics, which hold column values, are not
	// shown for a table whose row-level security applies.
	t.Run("LeakyFunctionAndStatistics", func(t *testing.T) {
		_, err := w.owner.Pool.Exec(ctx, `ANALYZE document_compilation_attempts, document_compilation_outbox`)
		require.NoError(t, err)
		for _, dbURL := range []string{w.roURL, w.opURL} {
			cfg, err := pgx.ParseConfig(dbURL)
			require.NoError(t, err)
			var notices []string
			cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
			conn, err := pgx.ConnectConfig(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = conn.Close(context.Background()) })
			_, err = conn.Exec(ctx, `CREATE FUNCTION pg_temp.leak(text) RETURNS boolean LANGUAGE plpgsql COST 0.0001
				AS $$ BEGIN RAISE NOTICE 'leak %', $1; RETURN true; END $$`)
			require.NoError(t, err)
			var n int
			require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE pg_temp.leak(tenant_id)`).Scan(&n))
			require.Equal(t, len(w.attempts[confA]), n)
			require.NotEmpty(t, notices)
			for _, msg := range notices {
				require.Equal(t, "leak "+confA, msg)
			}
			requireSeesNoOtherTenant(ctx, t, conn, "pg_stats", `SELECT count(*) FROM pg_stats
				WHERE tablename IN ('document_compilation_attempts', 'document_compilation_outbox')`)
		}
	})

	t.Run("Writes", func(t *testing.T) {
		conn := confinedConn(ctx, t, w.opURL)
		_, err := conn.Exec(ctx, `SET kfsdb.tenant = ''`)
		require.NoError(t, err)
		for _, sql := range []string{
			`UPDATE document_compilation_outbox SET payload = '{"forged": true}' WHERE attempt_id = ANY(` + w.bIDs + `)`,
			`UPDATE document_compilation_outbox SET payload = '{"forged": true}'
			  WHERE attempt_id IN (SELECT id FROM document_compilation_attempts WHERE tenant_id = '` + confB + `')`,
			`UPDATE document_compilation_attempts SET run_state = 'canceled', completed_at = now() WHERE tenant_id = '` + confB + `'`,
			`DELETE FROM document_compilation_attempts WHERE tenant_id = '` + confB + `'`,
		} {
			tag, err := conn.Exec(ctx, sql)
			if err != nil {
				requireRefused(t, err, sql)
				continue
			}
			require.Zero(t, tag.RowsAffected(), sql)
		}
		// Its own row may not be moved to, or pointed at, another tenant.
		a := testfactory.FirstInState(t, w.attempts[confA], kfstype.RunStateRunning)
		b := w.attempts[confB][0]
		for _, sql := range []string{
			fmt.Sprintf(`UPDATE document_compilation_attempts SET tenant_id = '%s' WHERE id = '%s'`, confB, a.ID),
			fmt.Sprintf(`UPDATE document_compilation_outbox SET attempt_id = '%s' WHERE attempt_id = '%s'`, b.ID, a.ID),
		} {
			_, err := conn.Exec(ctx, sql)
			requireRefused(t, err, sql)
		}
	})

	t.Run("ReposAndConsole", func(t *testing.T) {
		conn := confinedConn(ctx, t, w.opURL)
		_, err := conn.Exec(ctx, `SET kfsdb.tenant = ''`)
		require.NoError(t, err)
		b := testfactory.FirstInState(t, w.attempts[confB], kfstype.RunStateRunning)
		_, err = w.drv.Repo.GetAttempt(ctx, conn, &repo.GetAttemptParams{TenantID: confB, AttemptID: b.ID})
		require.ErrorIs(t, err, repo.ErrNotFound)
		_, err = ops.Apply(ctx, w.drv.Repo, conn, ops.Cancel, b, "confinement test")
		require.Error(t, err, "cancel another tenant's attempt")
		_, err = w.drv.Repo.Cancel(ctx, conn, &repo.CancelParams{AttemptRef: repo.AttemptRef{TenantID: confB,
			KnowledgeSpaceID: b.KnowledgeSpaceID, AttemptID: b.ID}})
		require.Error(t, err, "cancel another tenant's attempt")
		counts, err := w.drv.Repo.CountAttempts(ctx, conn, &repo.CountAttemptsParams{AllTenants: true})
		require.NoError(t, err)
		var total int64
		for _, c := range counts {
			total += c.N
		}
		require.EqualValues(t, len(w.attempts[confA]), total, "an all-tenant count counts conf-a only")

		// The CLI and an unconfined console served on the confined role.
		out, err := kfsdb(t, w.opURL, "attempts", "cancel", "--tenant", confB, b.ID.String())
		require.Error(t, err, out)
		c := serveConsole(t, w.opPool, false)
		status, _, _ := c.do(http.MethodGet, "/attempts/"+b.ID.String()+"/confirm?action=cancel&tenant="+confB, nil)
		require.NotEqual(t, http.StatusOK, status, "another tenant's attempt through a console on the confined role")
	})

	require.Equal(t, before, w.snapshotB(ctx, t), "conf-b's rows are as they were")
}
