// Package cli_test runs the deploy binary's commands (cmd/kfsdb/cli)
// through cli.Main, cli.RunWithInput and the option types' Validate, as
// main.go and an operator would, on databases from the harness (pgtest,
// testfactory). They live in the tests module so that cmd/kfsdb, which is
// released, never requires it; the command-line tests that need no
// database and no harness stay in cmd/kfsdb/cli.
package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
	"github.com/knowledgefs/kfsdb/db/migrations"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestMain(m *testing.M) {
	pgtest.Main(m)
}

// requireValidateErr is testfactory.RequireValidateErr.
var requireValidateErr = testfactory.RequireValidateErr

func TestMigrateOptsValidate(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	for name, tc := range map[string]struct {
		opts    cli.MigrateOpts
		wantErr string
	}{
		"MissingCommand": {cli.MigrateOpts{DatabaseURL: "postgres://u@h/db", Out: &out}, "Command is required"},
		"UnknownCommand": {cli.MigrateOpts{Command: "sideways", DatabaseURL: "postgres://u@h/db", Out: &out}, `Command "sideways"`},
		"MissingURL":     {cli.MigrateOpts{Command: cli.MigrateUp, Out: &out}, "DatabaseURL is required"},
		"MissingOut":     {cli.MigrateOpts{Command: cli.MigrateUp, DatabaseURL: "postgres://u@h/db"}, "Out is required"},
		"Valid":          {cli.MigrateOpts{Command: cli.MigrateStatus, DatabaseURL: "postgres://u@h/db", Out: &out}, ""},
		"NegativeLockTimeout": {cli.MigrateOpts{Command: cli.MigrateUp, DatabaseURL: "postgres://u@h/db", Out: &out, LockTimeout: -time.Second},
			"LockTimeout must be zero or at least 1ms"},
		"SubMillisecondLockTimeout": {cli.MigrateOpts{Command: cli.MigrateUp, DatabaseURL: "postgres://u@h/db", Out: &out, LockTimeout: time.Microsecond},
			"LockTimeout must be zero or at least 1ms"},
		"LockTimeout": {cli.MigrateOpts{Command: cli.MigrateUp, DatabaseURL: "postgres://u@h/db", Out: &out, LockTimeout: 2 * time.Second}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requireValidateErr(t, tc.opts.Validate(), tc.wantErr)
		})
	}
}

func TestMigrateCommandsOnFreshDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmptyDB(t)
	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		env := func(k string) string {
			if k == cli.EnvDatabaseURL {
				return db.URL
			}
			return ""
		}
		code := cli.Main(t.Context(), append([]string{"migrate"}, args...), &stdout, &stderr, env)
		require.Equal(t, 0, code, "stderr: %s", stderr.String())
		return stdout.String()
	}

	// The expected versions come from the embedded files, so adding a
	// migration does not silently break this test.
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(names), 2)
	sort.Strings(names)
	version := func(name string) string {
		n, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		require.NoError(t, err, name)
		return fmt.Sprintf("version: %d\n", n)
	}

	require.Contains(t, run("version"), "version: 0")
	up := run("up")
	require.Contains(t, up, "00006_document_compilation_attempts.sql")
	for _, name := range names {
		require.Contains(t, up, name)
	}
	require.Contains(t, up, version(names[len(names)-1]))
	require.Contains(t, run("up"), "no migrations to apply")
	status := run("status")
	require.Contains(t, status, "applied")
	require.NotContains(t, status, "pending")
	require.Contains(t, run("down"), version(names[len(names)-2]))
	require.Contains(t, run("status"), "pending")
}

// TestMovedCommandsNameKfsdbBench: work, relay and bench left the deploy
// binary. Each, given a database with a due attempt and every flag it used
// to take, exits 2 naming kfsdb-bench, and the attempt and its outbox row
// are as they were: nothing was leased, published or completed.
func TestMovedCommandsNameKfsdbBench(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	s := testfactory.NewScope(t.Context(), t, db.Pool, nil)
	res, err := repo.New(nil).Start(t.Context(), db.Pool, s.StartParams())
	require.NoError(t, err)
	snapshot := func() string {
		t.Helper()
		var row string
		require.NoError(t, db.Pool.QueryRow(t.Context(), `
			SELECT a::text || o::text FROM document_compilation_attempts a
			  JOIN document_compilation_outbox o ON o.attempt_id = a.id WHERE a.id = $1`, res.Attempt.ID).Scan(&row))
		return row
	}
	before := snapshot()
	for _, args := range [][]string{
		{"work", "--database-url", db.URL, "--duration", "1s", "--delivery", "postgres"},
		{"relay", "--database-url", db.URL},
		{"bench", "--database-url", db.URL, "--duration", "1s"},
		{"work"}, {"relay", "-h"}, {"bench", "--help"},
	} {
		var stdout, stderr bytes.Buffer
		// A bound, should a command run again (the relay would until
		// canceled): it then exits 0 and the snapshot tells what it did.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		code := cli.Main(ctx, args, &stdout, &stderr, envWith(db.URL))
		cancel()
		require.Equal(t, 2, code, "args %q", args)
		require.Contains(t, stderr.String(), "is not part of the deploy binary", "args %q", args)
		require.Contains(t, stderr.String(), "run `kfsdb-bench "+args[0]+"`", "args %q", args)
		require.Empty(t, stdout.String(), "args %q", args)
	}
	require.Equal(t, before, snapshot(), "a moved command changed the attempt or its outbox row")
}

// TestDatabaseURLFlagAnywhere: the persistent --database-url may stand
// before or after the command, and wins over $DATABASE_URL.
func TestDatabaseURLFlagAnywhere(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	const unreachable = "postgres://kfs@127.0.0.1:1/kfs?connect_timeout=2&sslmode=disable"
	for _, args := range [][]string{
		{"--database-url", db.URL, "stuck", "--tenant", "nobody"},
		{"stuck", "--database-url", db.URL, "--tenant", "nobody"},
		{"stuck", "--tenant", "nobody", "--database-url", db.URL},
	} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, cli.Main(t.Context(), args, &stdout, &stderr, envWith(unreachable)), "args %q: %s", args, stderr.String())
		require.Equal(t, "nothing stuck\n", stdout.String(), "args %q", args)
	}
}
