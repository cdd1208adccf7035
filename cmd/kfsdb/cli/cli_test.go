package cli

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

	"github.com/knowledgefs/kfsdb/db/migrations"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestMain(m *testing.M) {
	pgtest.Main(m)
}

func noEnv(string) string { return "" }

// requireValidateErr is testfactory.RequireValidateErr.
var requireValidateErr = testfactory.RequireValidateErr

func TestMigrateOptsValidate(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	for name, tc := range map[string]struct {
		opts    MigrateOpts
		wantErr string
	}{
		"MissingCommand": {MigrateOpts{DatabaseURL: "postgres://u@h/db", Out: &out}, "Command is required"},
		"UnknownCommand": {MigrateOpts{Command: "sideways", DatabaseURL: "postgres://u@h/db", Out: &out}, `Command "sideways"`},
		"MissingURL":     {MigrateOpts{Command: MigrateUp, Out: &out}, "DatabaseURL is required"},
		"MissingOut":     {MigrateOpts{Command: MigrateUp, DatabaseURL: "postgres://u@h/db"}, "Out is required"},
		"Valid":          {MigrateOpts{Command: MigrateStatus, DatabaseURL: "postgres://u@h/db", Out: &out}, ""},
		"NegativeLockTimeout": {MigrateOpts{Command: MigrateUp, DatabaseURL: "postgres://u@h/db", Out: &out, LockTimeout: -time.Second},
			"LockTimeout must be zero or at least 1ms"},
		"SubMillisecondLockTimeout": {MigrateOpts{Command: MigrateUp, DatabaseURL: "postgres://u@h/db", Out: &out, LockTimeout: time.Microsecond},
			"LockTimeout must be zero or at least 1ms"},
		"LockTimeout": {MigrateOpts{Command: MigrateUp, DatabaseURL: "postgres://u@h/db", Out: &out, LockTimeout: 2 * time.Second}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requireValidateErr(t, tc.opts.Validate(), tc.wantErr)
		})
	}
}

func TestMainUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"frobnicate"}, {"migrate"}, {"migrate", "up"}, {"migrate", "--bogus", "up"}, {"demo", "extra"},
		{"demo", "--attempts", "5"}, {"relay"}, {"relay", "extra"}, {"purge", "--database-url", "postgres://u@h/db", "--older-than", "1h"},
		{"purge", "--database-url", "postgres://u@h/db", "--tenant", "t"}, {"purge", "--database-url", "postgres://u@h/db", "--tenant", "t", "--older-than", "1h", "--batch", "20000"},
		{"migrate", "--database-url", "postgres://u@h/db", "up", "--lock-timeout", "-1s"}, {"migrate", "--database-url", "postgres://u@h/db", "--lock-timeout", "500us", "up"},
		{"migrate", "--database-url", "postgres://u@h/db", "up", "--bogus"}, {"migrate", "--database-url", "postgres://u@h/db", "up", "down"}} {
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), args, &stdout, &stderr, noEnv)
		require.Equal(t, 2, code, "args %q: %s", args, stderr.String())
	}
}

func TestMigrateCommandsOnFreshDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmptyDB(t)
	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		env := func(k string) string {
			if k == EnvDatabaseURL {
				return db.URL
			}
			return ""
		}
		code := Main(t.Context(), append([]string{"migrate"}, args...), &stdout, &stderr, env)
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

func TestErrorsNeverShowPassword(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-pa55word"
	var stdout, stderr bytes.Buffer
	// Nothing listens on port 1, so the connection fails and is reported.
	url := "postgres://kfs:" + secret + "@127.0.0.1:1/kfs?connect_timeout=2&sslmode=disable"
	code := Main(t.Context(), []string{"migrate", "--database-url", url, "status"}, &stdout, &stderr, noEnv)
	require.Equal(t, 1, code)
	require.NotContains(t, stderr.String()+stdout.String(), secret)
	require.Contains(t, stderr.String(), "xxxxx")
}

// TestDemoNamesMakeDemo: the demo needs a throwaway server, so it is not in
// the deploy binary; `kfsdb demo` says where it went.
func TestDemoNamesMakeDemo(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, Main(t.Context(), []string{"demo"}, &stdout, &stderr, noEnv))
	require.Contains(t, stderr.String(), "`make demo`")
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
		code := Main(ctx, args, &stdout, &stderr, envWith(db.URL))
		cancel()
		require.Equal(t, 2, code, "args %q", args)
		require.Contains(t, stderr.String(), "is not part of the deploy binary", "args %q", args)
		require.Contains(t, stderr.String(), "run `kfsdb-bench "+args[0]+"`", "args %q", args)
		require.Empty(t, stdout.String(), "args %q", args)
	}
	require.Equal(t, before, snapshot(), "a moved command changed the attempt or its outbox row")
}

// TestHelpSaysWhatTheBinaryIsFor: `kfsdb --help` says the binary is for
// operators on a production database, lists no command that runs a
// handler or a relay, and says where work, relay and bench went.
func TestHelpSaysWhatTheBinaryIsFor(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, Main(t.Context(), []string{"--help"}, &stdout, &stderr, noEnv))
	help := stdout.String()
	require.Contains(t, help, "the binary operators deploy against a production database")
	require.Contains(t, help, "It runs no handler and publishes nothing.")
	require.Contains(t, help, "work, relay and bench moved to kfsdb-bench")
	for _, cmd := range []string{"work", "relay", "bench"} {
		require.NotContains(t, help, "\n  "+cmd+" ", "kfsdb --help lists %s as a command", cmd)
	}
	for _, cmd := range []string{"migrate", "purge", "attempts", "outbox", "stuck", "console"} {
		require.Contains(t, help, "\n  "+cmd+" ")
	}
}

// TestHelpAndCompletionFromCobra: every command answers --help on stdout
// with its flags, the persistent --database-url among them, and `kfsdb
// completion SHELL` prints a completion script.
func TestHelpAndCompletionFromCobra(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"migrate", "up", "--help"}, []string{"--lock-timeout", "--database-url", "$DATABASE_URL"}},
		{[]string{"attempts", "cancel", "-h"}, []string{"--tenant", "--dry-run", "--state", "--database-url"}},
		{[]string{"help", "console"}, []string{"--auth-token-file", "--trusted-proxy", "--metrics-listen"}},
		{[]string{"completion", "bash"}, []string{"bash completion", "kfsdb"}},
		{[]string{"completion", "zsh"}, []string{"#compdef kfsdb"}},
	} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, Main(t.Context(), tc.args, &stdout, &stderr, noEnv), "args %q: %s", tc.args, stderr.String())
		for _, want := range tc.want {
			require.Contains(t, stdout.String(), want, "args %q", tc.args)
		}
	}
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
		require.Equal(t, 0, Main(t.Context(), args, &stdout, &stderr, envWith(unreachable)), "args %q: %s", args, stderr.String())
		require.Equal(t, "nothing stuck\n", stdout.String(), "args %q", args)
	}
}
