package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Main(m)
}

func noEnv(string) string { return "" }

func TestDemoOptsValidate(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	for name, tc := range map[string]struct {
		opts    DemoOpts
		wantErr string
	}{
		"BadURL":          {DemoOpts{DatabaseURL: "postgres://u@h:notaport/db", Out: &out}, "DatabaseURL is not a valid"},
		"TooFewAttempts":  {DemoOpts{Attempts: 5, Out: &out}, "Attempts must be 26..5000"},
		"TooManyAttempts": {DemoOpts{Attempts: 5001, Out: &out}, "Attempts must be"},
		"NegativeTimeout": {DemoOpts{Timeout: -time.Second, Out: &out}, "Timeout must not be negative"},
		"MissingOut":      {DemoOpts{}, "Out is required"},
		"Defaults":        {DemoOpts{Out: &out}, ""},
		"Valid":           {DemoOpts{DatabaseURL: "postgres://u@h/db", Attempts: 60, Seed: 3, Timeout: time.Minute, Out: &out}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := tc.opts.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"extra"}, {"--attempts", "5"}, {"--bogus"}} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 2, Main(t.Context(), args, &stdout, &stderr, noEnv), "args %q: %s", args, stderr.String())
		require.Contains(t, stderr.String(), "kfsdb-demo: usage error")
	}
}

func TestDemoRunsWorkloadOnExistingServer(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"--attempts", "60", "--seed", "7", "--database-url", pgtest.AdminURL(t)}, &stdout, &stderr, noEnv)
	s := stdout.String()
	require.Equal(t, 0, code, "stderr: %s\nstdout: %s", stderr.String(), s)
	require.Contains(t, s, "created database kfsdb_demo_")
	require.Contains(t, s, "00006_document_compilation_attempts.sql")
	require.Contains(t, s, "== workload: 60 attempts (seed 7)")
	require.Contains(t, s, "broker outage begins")
	require.Contains(t, s, "OUTCOMES (expected vs actual terminal state per scenario)")
	for _, sc := range scenarios {
		require.Regexp(t, `(?m)^`+sc.name+`\s+\d+\s+`+string(sc.wantState)+`.*PASS\s*$`, s)
	}
	require.Contains(t, s, "RUNTIME COUNTERS")
	require.Contains(t, s, "STATEMENT LATENCY")
	require.Regexp(t, `(?m)^\s+AcquireLease\s+\d+\s+[\d.]+ms`, s)
	require.NotRegexp(t, `\bFAIL\b`, s)
	require.Contains(t, s, "demo: PASS (60 attempts)")
	require.Contains(t, s, "dropped database kfsdb_demo_")
	require.NotContains(t, s, "kfsdb-test-password")
}
