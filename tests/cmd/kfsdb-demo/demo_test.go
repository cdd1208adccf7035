package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
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
		"UnknownDelivery": {DemoOpts{Delivery: "nats", Out: &out}, `Delivery: unknown delivery "nats" for the demo: want "postgres" or "relay"`},
		"RelayDelivery":   {DemoOpts{Delivery: delivery.Relay, Out: &out}, ""},
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
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"extra"}, "demo takes no arguments"},
		{[]string{"--attempts", "5"}, "Attempts must be 26..5000"},
		{[]string{"--bogus"}, "unknown flag: --bogus"},
		{[]string{"-attempts", "60"}, "long flags take two dashes: --attempts"},
		{[]string{"--delivery", "nats"}, `unknown delivery "nats" for the demo: want "postgres" or "relay"`},
		{[]string{"--delivery", "kafka"}, `unknown delivery "kafka"`},
	} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 2, Main(t.Context(), tc.args, &stdout, &stderr, noEnv), "args %q: %s", tc.args, stderr.String())
		require.Contains(t, stderr.String(), "kfsdb-demo: usage error")
		require.Contains(t, stderr.String(), tc.wantErr, "args %q", tc.args)
	}
}

// runDemo runs the demo with args on the test server, requires it to pass
// and the output every delivery mode shares, and returns stdout.
func runDemo(t *testing.T, mode delivery.Mode, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), append(args, "--database-url", pgtest.AdminURL(t)), &stdout, &stderr, noEnv)
	s := stdout.String()
	require.Equal(t, 0, code, "stderr: %s\nstdout: %s", stderr.String(), s)
	require.Contains(t, s, "created database kfsdb_demo_")
	require.Contains(t, s, "00006_document_compilation_attempts.sql")
	require.Contains(t, s, "OUTCOMES (expected vs actual terminal state per scenario)")
	run, skipped := scenariosFor(mode)
	for _, sc := range run {
		require.Regexp(t, `(?m)^`+sc.name+`\s+\d+\s+`+string(sc.wantState)+`.*PASS\s*$`, s)
	}
	for _, name := range skipped {
		require.NotRegexp(t, `(?m)^`+name+`\s`, s, "skipped scenario %s has a row", name)
	}
	require.Contains(t, s, "RUNTIME COUNTERS")
	require.Contains(t, s, "STATEMENT LATENCY")
	require.NotRegexp(t, `\bFAIL\b`, s)
	require.Contains(t, s, "dropped database kfsdb_demo_")
	require.Contains(t, s, "== to browse this run in the web console, keep its database: make demo DEMO_ARGS=--keep")
	require.NotContains(t, s, "kfsdb-test-password")
	return s
}

// TestDemoKeepsItsDatabaseForTheConsole: with --keep the database stays,
// its URL is in a file only the user can read (never on the screen), and
// the last lines say how to open it in the console.
func TestDemoKeepsItsDatabaseForTheConsole(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"--attempts", "30", "--keep", "--database-url", pgtest.AdminURL(t)}, &stdout, &stderr, noEnv)
	s := stdout.String()
	require.Equal(t, 0, code, "stderr: %s\nstdout: %s", stderr.String(), s)
	require.NotContains(t, s, "dropped database")
	require.NotContains(t, s, "kfsdb-test-password")
	name := regexp.MustCompile(`== kept database (kfsdb_demo_\w+)`).FindStringSubmatch(s)
	require.NotNil(t, name, s)
	m := regexp.MustCompile(`go run ./cmd/kfsdb console --database-url "\$\(cat (\S+)\)"`).FindStringSubmatch(s)
	require.NotNil(t, m, s)
	file := m[1]
	t.Cleanup(func() { _ = os.Remove(file) })
	info, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	url, err := os.ReadFile(file)
	require.NoError(t, err)
	conn, err := pgx.Connect(t.Context(), string(url))
	require.NoError(t, err)
	var attempts int
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*) FROM document_compilation_attempts").Scan(&attempts))
	require.GreaterOrEqual(t, attempts, 30)
	require.NoError(t, conn.Close(t.Context()))
	admin, err := pgx.Connect(t.Context(), pgtest.AdminURL(t))
	require.NoError(t, err)
	defer admin.Close(context.Background())
	_, err = admin.Exec(t.Context(), "DROP DATABASE "+pgx.Identifier{name[1]}.Sanitize()+" WITH (FORCE)")
	require.NoError(t, err)
}

// The default delivery: workers lease from the outbox, no relay, no broker.
func TestDemoRunsWorkloadOnExistingServer(t *testing.T) {
	t.Parallel()
	s := runDemo(t, delivery.Postgres, "--attempts", "60", "--seed", "7")
	require.Contains(t, s, "== workload: 60 attempts (seed 7)")
	require.Contains(t, s, "4 workers × 4, each leasing from the outbox (pgsource)")
	require.Contains(t, s, "delivery: postgres (workers lease from the outbox); relay-only scenarios skipped: dead_letter_then_retry, dead_letter, broker outage")
	require.NotContains(t, s, "broker outage begins")
	require.Regexp(t, `\| source_fetches \d+  source_fetched_leases \d+`, s)
	require.NotContains(t, s, "| queue ")
	require.Regexp(t, `(?m)^\s+FetchLeases\s+\d+\s+[\d.]+ms`, s)
	require.NotRegexp(t, `(?m)^\s+AcquireLease\s`, s)
	require.Contains(t, s, "demo: PASS (60 attempts)")
}

func TestDemoRelayDelivery(t *testing.T) {
	t.Parallel()
	s := runDemo(t, delivery.Relay, "--delivery", "relay", "--attempts", "60", "--seed", "7")
	require.Contains(t, s, "relay + 4 workers × 4 over memqueue")
	require.Contains(t, s, "delivery: relay")
	require.Contains(t, s, "broker outage begins")
	require.Regexp(t, `\| queue \d+`, s)
	require.Contains(t, s, "MEMQUEUE: published")
	require.Regexp(t, `(?m)^\s+AcquireLease\s+\d+\s+[\d.]+ms`, s)
	require.Contains(t, s, "demo: PASS (60 attempts)")
}
