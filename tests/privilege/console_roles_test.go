package privilege_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/console"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/dbroles"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// The roles db/roles/console_roles.sql creates.
const (
	consoleRole  = "kfsdb_console_ro"
	operatorRole = "kfsdb_operator"
	consoleToken = "J_LTrNrsSSCeBtfwDoXGCD09r6cT4SdHHmnxoHR3jyw"
)

// consoleClient drives a console served on pool as a browser with the
// bearer token would.
type consoleClient struct {
	t    *testing.T
	base string
}

func serveConsole(t *testing.T, pool *pgxpool.Pool, readOnly bool) *consoleClient {
	t.Helper()
	srv, err := console.New(console.Config{DB: pool, AuthToken: consoleToken, ReadOnly: readOnly})
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &consoleClient{t: t, base: ts.URL}
}

func (c *consoleClient) do(method, path string, form url.Values) (int, string, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.base+path, body)
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+consoleToken)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", c.base)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	require.NoError(c.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(c.t, err)
	return res.StatusCode, string(raw), res.Header.Get("Location")
}

// act confirms and applies action on a through the console's pages.
func (c *consoleClient) act(a *kfstype.Attempt, action string) (int, string) {
	c.t.Helper()
	status, page, _ := c.do(http.MethodGet, "/attempts/"+a.ID.String()+"/confirm?action="+action+"&tenant="+a.TenantID, nil)
	require.Equal(c.t, http.StatusOK, status, page)
	field := func(name string) string {
		m := regexp.MustCompile(`name="` + name + `" value="([^"]*)"`).FindStringSubmatch(page)
		require.NotNil(c.t, m, name)
		return m[1]
	}
	status, _, loc := c.do(http.MethodPost, "/attempts/"+a.ID.String()+"/act", url.Values{"action": {action}, "tenant": {a.TenantID},
		"version": {field("version")}, "csrf": {field("csrf")}})
	return status, loc
}

// kfsdb runs a kfsdb command line against dbURL.
func kfsdb(t *testing.T, dbURL string, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := cli.RunWithInput(t.Context(), args, strings.NewReader(""), &stdout, &stderr, func(k string) string {
		if k == cli.EnvDatabaseURL {
			return dbURL
		}
		return ""
	})
	return stdout.String() + stderr.String(), err
}

func requireRefused(t *testing.T, err error, what string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.Truef(t, errors.As(err, &pgErr), "%s: want a PostgreSQL error, got %v", what, err)
	require.Equalf(t, "42501", pgErr.Code, "%s: want insufficient_privilege, got %s %s", what, pgErr.Code, pgErr.Message)
}

// TestConsoleRoles runs the console and the operator commands as the two
// roles of db/roles/console_roles.sql: the read-only role serves every
// page and read command and is refused every write; the operator role
// applies cancel, retry and supersede from the console and the CLI, and
// sets the tenants' limits, and is refused INSERT and DELETE on the
// attempts and the outbox and every other table.
func TestConsoleRoles(t *testing.T) {
	ctx := context.Background()
	owner := dbroles.Install(ctx, t, "console_roles.sql", dbroles.ConsoleRoles...)
	drv := &testfactory.Driver{Repo: repo.New(nil), DB: owner.Pool}
	attempts := testfactory.Workload(ctx, t, drv, []string{"roles-a", "roles-b"}, 14, nil)
	ro, roURL := dbroles.LoginAs(ctx, t, owner, consoleRole)
	op, opURL := dbroles.LoginAs(ctx, t, owner, operatorRole)
	first := func(tenant string, st kfstype.RunState) *kfstype.Attempt {
		return testfactory.FirstInState(t, attempts[tenant], st)
	}

	t.Run("Grants", func(t *testing.T) {
		rows, err := owner.Pool.Query(ctx, `SELECT grantee || ':' || table_name || ':' || privilege_type FROM information_schema.role_table_grants
			WHERE grantee IN ($1, $2) ORDER BY 1`, consoleRole, operatorRole)
		require.NoError(t, err)
		grants, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{
			"kfsdb_console_ro:document_compilation_attempts:SELECT", "kfsdb_console_ro:document_compilation_outbox:SELECT",
			"kfsdb_console_ro:document_compilation_tenant_limits:SELECT",
			"kfsdb_operator:document_compilation_attempts:SELECT", "kfsdb_operator:document_compilation_attempts:UPDATE",
			"kfsdb_operator:document_compilation_outbox:SELECT", "kfsdb_operator:document_compilation_outbox:UPDATE",
			"kfsdb_operator:document_compilation_tenant_limits:DELETE", "kfsdb_operator:document_compilation_tenant_limits:INSERT",
			"kfsdb_operator:document_compilation_tenant_limits:SELECT", "kfsdb_operator:document_compilation_tenant_limits:UPDATE",
		}, grants)
	})

	t.Run("ReadOnlyRole", func(t *testing.T) {
		c := serveConsole(t, ro, true)
		a := first("roles-a", kfstype.RunStateRunning)
		for _, path := range []string{"/", "/attempts?tenant=roles-a", "/attempts?tenant=roles-a&state=failed", "/attempts/" + a.ID.String() + "?tenant=roles-a"} {
			status, body, _ := c.do(http.MethodGet, path, nil)
			require.Equal(t, http.StatusOK, status, "%s: %s", path, body)
		}
		for _, args := range [][]string{
			{"attempts", "list", "--tenant", "roles-a"},
			{"attempts", "show", "--tenant", "roles-a", a.ID.String()},
			{"outbox", "stats"},
			{"stuck"},
			{"tenant", "limits"},
		} {
			out, err := kfsdb(t, roURL, args...)
			require.NoError(t, err, "%v: %s", args, out)
			require.NotContains(t, out, "not shown", "%v: the role reads the tenants' limits", args)
		}
		// The role cannot write, whoever asks.
		out, err := kfsdb(t, roURL, "attempts", "cancel", "--tenant", "roles-a", a.ID.String())
		require.ErrorContains(t, err, "permission denied", out)
		out, err = kfsdb(t, roURL, "tenant", "pause", "roles-a")
		require.ErrorContains(t, err, "permission denied", out)
		status, _ := serveConsole(t, ro, false).act(a, "cancel")
		require.Equal(t, http.StatusInternalServerError, status, "a console on the read-only role cannot apply")
		st, err := drv.Repo.GetAttempt(ctx, owner.Pool, &repo.GetAttemptParams{TenantID: "roles-a", AttemptID: a.ID})
		require.NoError(t, err)
		require.Equal(t, kfstype.RunStateRunning, st.RunState)
		for _, sql := range []string{
			`UPDATE document_compilation_attempts SET updated_at = now()`,
			`UPDATE document_compilation_outbox SET updated_at = now()`,
			`DELETE FROM document_compilation_attempts`,
			`DELETE FROM document_compilation_tenant_limits`,
			`SELECT count(*) FROM document_compilation_trace_contexts`,
			`SELECT count(*) FROM knowledge_spaces`,
		} {
			_, err := ro.Exec(ctx, sql)
			requireRefused(t, err, sql)
		}
	})

	t.Run("OperatorRole", func(t *testing.T) {
		c := serveConsole(t, op, false)
		for action, a := range map[string]*kfstype.Attempt{
			"cancel":    first("roles-a", kfstype.RunStateRunning),
			"retry":     first("roles-a", kfstype.RunStateFailed),
			"supersede": first("roles-a", kfstype.RunStateDispatchPending),
		} {
			status, loc := c.act(a, action)
			require.Equal(t, http.StatusSeeOther, status, action)
			require.Contains(t, loc, "flash="+action+"-applied", action)
		}
		b := first("roles-b", kfstype.RunStateRunning)
		out, err := kfsdb(t, opURL, "attempts", "cancel", "--tenant", "roles-b", b.ID.String())
		require.NoError(t, err, out)
		require.Contains(t, out, "applied: running → canceled")
		// The tenants' limits: set, paused, resumed, lifted.
		for _, args := range [][]string{
			{"tenant", "set-limit", "roles-b", "--max-running", "2", "--rate", "5"},
			{"tenant", "pause", "roles-b", "--reason", "privilege test"},
			{"tenant", "resume", "roles-b"},
			{"tenant", "clear-limit", "roles-b"},
		} {
			out, err := kfsdb(t, opURL, args...)
			require.NoError(t, err, "%v: %s", args, out)
		}
		for _, sql := range []string{
			`DELETE FROM document_compilation_attempts`,
			`DELETE FROM document_compilation_outbox`,
			`INSERT INTO document_compilation_outbox (id) VALUES (gen_random_uuid())`,
			`TRUNCATE document_compilation_tenant_limits`,
			`UPDATE knowledge_spaces SET name = 'x'`,
			`TRUNCATE document_compilation_attempts CASCADE`,
		} {
			_, err := op.Exec(ctx, sql)
			requireRefused(t, err, sql)
		}
	})
}

// TestMeasureRowLevelSecurityCost times the console's queries (a confined
// overview's reads, a list page, an attempt) on 100,000 attempts of 50
// tenants as the owner (no row-level security), as kfsdb_console_ro
// (every tenant) and as a role confined to one tenant. A measurement, not a check: it
// runs only with KFS_MEASURE_RLS=1.
func TestMeasureRowLevelSecurityCost(t *testing.T) {
	if os.Getenv("KFS_MEASURE_RLS") != "1" {
		t.Skip("set KFS_MEASURE_RLS=1 to measure")
	}
	ctx := context.Background()
	owner := dbroles.Install(ctx, t, "console_roles.sql", dbroles.ConsoleRoles...)
	require.NoError(t, testfactory.InsertHistory(ctx, owner.Pool, 100_000))
	const tenant = "history-7"
	ro, _ := dbroles.LoginAs(ctx, t, owner, consoleRole)
	confined, _ := dbroles.Confine(ctx, t, owner, "kfsdb_console_measure", tenant, false)
	r := repo.New(nil)
	page, err := r.ListAttempts(ctx, owner.Pool, &repo.ListAttemptsParams{TenantID: tenant, States: kfstype.RunStates(), Limit: 50})
	require.NoError(t, err)
	one := page.Attempts[0]
	queries := map[string]func(db repo.DBTX) error{
		"CountAttempts": func(db repo.DBTX) error {
			_, err := r.CountAttempts(ctx, db, &repo.CountAttemptsParams{TenantID: tenant})
			return err
		},
		"Throughput": func(db repo.DBTX) error {
			_, err := r.Throughput(ctx, db, &repo.ThroughputParams{TenantID: tenant})
			return err
		},
		"ListStuck": func(db repo.DBTX) error {
			_, err := r.ListStuck(ctx, db, &repo.ListStuckParams{TenantID: tenant, Limit: repo.MaxListLimit})
			return err
		},
		"ListAttempts": func(db repo.DBTX) error {
			_, err := r.ListAttempts(ctx, db, &repo.ListAttemptsParams{TenantID: tenant, States: kfstype.RunStates(), Limit: 50})
			return err
		},
		"GetAttemptWithOutbox": func(db repo.DBTX) error {
			_, _, err := r.GetAttemptWithOutbox(ctx, db, &repo.GetAttemptWithOutboxParams{TenantID: tenant, AttemptID: one.ID})
			return err
		},
	}
	for _, side := range []struct {
		name string
		db   *pgxpool.Pool
	}{{"owner (no RLS)", owner.Pool}, {"console_ro unconfined", ro}, {"confined role", confined}} {
		for _, name := range []string{"CountAttempts", "Throughput", "ListStuck", "ListAttempts", "GetAttemptWithOutbox"} {
			const runs = 200
			took := make([]time.Duration, runs)
			for i := range took {
				start := time.Now()
				require.NoError(t, queries[name](side.db), name)
				took[i] = time.Since(start)
			}
			slices.Sort(took)
			t.Logf("%-22s %-22s median %8s p90 %8s", side.name, name, took[runs/2].Round(time.Microsecond), took[runs*9/10].Round(time.Microsecond))
		}
	}
}
