package cli_test

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// auditLog reads the audit lines a command appended to an --audit-file.
type auditLog struct {
	path string
	seen int
}

// next returns the lines appended since the last call.
func (l *auditLog) next(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(l.path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		lines = nil
	}
	fresh := lines[l.seen:]
	l.seen = len(lines)
	return fresh
}

// requireOneLine runs a changing command with --audit-file and
// --reason and requires exactly one audit line in the file, also on
// stderr, with who (the OS user and the database role), the tenant, the
// action, the result and the reason; it returns the line.
func (l *auditLog) requireOneLine(t *testing.T, url string, wantCode int, tenant, action, result, reason string, args ...string) string {
	t.Helper()
	code, _, stderr := runCmd(t, url, "", append(append([]string{"--audit-file", l.path}, args...), "--reason", reason)...)
	require.Equal(t, wantCode, code, "%q: %s", args, stderr)
	lines := l.next(t)
	require.Len(t, lines, 1, "%q: %s", args, stderr)
	line := lines[0]
	u, err := user.Current()
	require.NoError(t, err)
	tenantField := `tenant=""`
	if tenant != "" {
		tenantField = "tenant=" + regexp.QuoteMeta(tenant)
	}
	require.Regexp(t, `^time=\S+ level=INFO msg=audit at=\S+ session=cli:`+regexp.QuoteMeta(u.Username)+` remote=\S+ forwarded_claim="" `+tenantField+
		` attempt=\S* action=`+action+` from=(?:"[^"]*"|\S*) to=(?:"[^"]*"|\S*) result=`+result+` reason=.* operator_reason="`+regexp.QuoteMeta(reason)+`" db_role=\S+ detail=.*$`, line)
	require.NotContains(t, line, `db_role=""`, "the database role is read")
	require.Equal(t, 1, strings.Count(stderr, "msg=audit"), "stderr gets the line too: %s", stderr)
	return line
}

// TestEveryChangeIsAudited: purge, migrate up and down, and each attempt
// action write exactly one audit line, applied, refused or failed, with
// who, the tenant and the operator's --reason, to stderr and to the
// --audit-file, created 0600.
func TestEveryChangeIsAudited(t *testing.T) {
	t.Parallel()
	log := &auditLog{path: filepath.Join(t.TempDir(), "audit.log")}

	t.Run("Migrate", func(t *testing.T) {
		db := pgtest.NewEmptyDB(t)
		up := log.requireOneLine(t, db.URL, 0, "", "migrate-up", "applied", "release 1.2", "migrate", "up")
		require.Regexp(t, ` from=0 to=[1-9]\d* .* detail="applied 1, 2, `, up)
		fi, err := os.Stat(log.path)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
		down := log.requireOneLine(t, db.URL, 0, "", "migrate-down", "applied", "roll back the release", "migrate", "down")
		require.Regexp(t, ` detail="rolled back \d+"`, down)
	})

	f := newOperatorFixture(t)
	t.Run("Actions", func(t *testing.T) {
		line := log.requireOneLine(t, f.db.URL, 0, f.tenant, "cancel", "applied", "bad upload", "attempts", "cancel", "--tenant", f.tenant, f.pendingA.ID.String())
		require.Contains(t, line, " attempt="+f.pendingA.ID.String()+" action=cancel from=dispatch_pending to=canceled ")
		log.requireOneLine(t, f.db.URL, 0, f.tenant, "retry", "applied", "handler fixed", "attempts", "retry", "--tenant", f.tenant, f.failed.ID.String())
		log.requireOneLine(t, f.db.URL, 0, f.tenant, "supersede", "applied", "newer version", "attempts", "supersede", "--tenant", f.tenant, f.queued.ID.String())
		// A refusal names its tenant and the operator's reason too.
		line = log.requireOneLine(t, f.db.URL, 1, f.tenant, "cancel", "refused", "try again", "attempts", "cancel", "--tenant", f.tenant, f.pendingA.ID.String())
		require.Contains(t, line, "from=canceled to=canceled result=refused")
		line = log.requireOneLine(t, f.db.URL, 1, f.tenant, "cancel", "refused", "not mine", "attempts", "cancel", "--tenant", f.tenant, f.other.ID.String())
		require.Contains(t, line, `reason="no such attempt for this tenant"`)
	})

	t.Run("Purge", func(t *testing.T) {
		line := log.requireOneLine(t, f.db.URL, 0, f.tenant, "purge", "applied", "retention policy", "purge", "--tenant", f.tenant, "--older-than", "0s")
		require.Regexp(t, ` detail="purged [1-9]\d* terminal attempts completed before \S+ \(1 batches of up to 1000\)"$`, line)
	})
}

// TestTablesEscapeForgedLines: a tenant id and error texts holding a
// newline and an escape sequence print, in every text output, as one
// escaped value: no line starts with the forged text and no escape
// sequence reaches the terminal.
func TestTablesEscapeForgedLines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	const forged = "ops\nFORGED 1 2 3\x1b[31m"
	const escaped = `ops\x0aFORGED 1 2 3\x1b[31m`
	drv := &testfactory.Driver{Repo: repo.New(nil), DB: db.Pool}
	running := drv.InState(ctx, t, testfactory.NewScope(ctx, t, db.Pool, &testfactory.ScopeOpts{TenantID: new(forged)}), kfstype.RunStateRunning)
	_, err := db.Pool.Exec(ctx, `UPDATE document_compilation_attempts
		SET last_error_code = $2::text, last_error_message = $2::text, lease_expires_at = now() - interval '1 minute' WHERE id = $1`, running.ID, forged)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE document_compilation_outbox SET available_at = now() - interval '1 minute' WHERE attempt_id = $1`, running.ID)
	require.NoError(t, err)

	for _, args := range [][]string{
		{"stuck"},
		{"stuck", "--tenant", forged},
		{"attempts", "list", "--tenant", forged},
		{"attempts", "show", "--tenant", forged, running.ID.String()},
		{"outbox", "stats", "--tenant", forged},
	} {
		code, out, stderr := runCmd(t, db.URL, "", args...)
		require.Equal(t, 0, code, "%q: %s", args, stderr)
		require.Contains(t, out, escaped, "%q", args)
		require.NotContains(t, out, "\x1b", "%q", args)
		for _, line := range strings.Split(out, "\n") {
			require.False(t, strings.HasPrefix(line, "FORGED"), "%q forged a line:\n%s", args, out)
		}
	}
	// An error that quotes the tenant is one line too.
	code, _, stderr := runCmd(t, db.URL, "", "attempts", "show", "--tenant", forged, "00000000-0000-0000-0000-000000000001")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, escaped)
	require.NotContains(t, stderr, "\nFORGED")
}
