package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

func noEnv(string) string { return "" }

// TestRunsKfsdbBenchOnAThrowawayServer points the harness at an existing
// server (KFS_TEST_DATABASE_URL), as it would start a container otherwise.
func TestRunsKfsdbBenchOnAThrowawayServer(t *testing.T) {
	srv, err := pgtest.StartServer(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	t.Setenv(pgtest.EnvDatabaseURL, srv.AdminURL())

	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"--duration", "1s", "--producers", "2", "--workers", "2", "--rate", "50"}, &stdout, &stderr, noEnv)
	s := stdout.String()
	require.Equal(t, 0, code, "stderr: %s\nstdout: %s", stderr.String(), s)
	// The report itself is TestBenchOnFreshDatabase's (bench/kfsdb-bench/benchcli).
	require.Regexp(t, `(?s)^== starting a throwaway PostgreSQL server for kfsdb bench\n.*`+
		`== created database kfsdb_bench_.*\| lifecycle throughput .*== dropped database kfsdb_bench_`, s)
	require.NotContains(t, s+stderr.String(), "kfsdb-test-password")
}

func TestHelpNeedsNoServer(t *testing.T) {
	t.Setenv(pgtest.EnvDatabaseURL, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(t.Context(), []string{"-h"}, &stdout, &stderr, noEnv))
	require.Contains(t, stdout.String(), "Usage:\n  kfsdb-bench bench [flags]")
	require.NotContains(t, stdout.String(), "throwaway")
}
