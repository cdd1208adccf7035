package cli

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// noEnv is an environment with nothing set. The tests in this package run
// the command line through Main and need no database and no harness; those
// that do are in the tests module (tests/cli), so that cmd/kfsdb, which is
// released, never requires it.
func noEnv(string) string { return "" }

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
