package faults_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/capability"
	"github.com/knowledgefs/kfsdb/tests/faultload"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// soak reports whether the long form runs (KFS_SOAK=1).
func soak() bool { return os.Getenv("KFS_SOAK") == "1" }

// Load shape: CI-sized unless KFS_SOAK=1. The CI size is smaller than
// the soak's by far: every fault runs on four paths.
const (
	leaseDuration = 2 * time.Second
	workers       = 8
)

func loadSize() (upfront, during int) {
	if soak() {
		return 1500, 500
	}
	return 120, 60
}

// requireContainer skips tests that restart or pause the server when the
// package runs against KFS_TEST_DATABASE_URL.
func requireContainer(t *testing.T) *pgtest.Server {
	t.Helper()
	srv := pgtest.CurrentServer(t)
	if !srv.IsContainer() {
		capability.Missing(t, capability.Container, "faults: %s is set, so there is no container to restart or pause; run without it (pgtest starts %s) for this test",
			pgtest.EnvDatabaseURL, pgtest.DefaultImage)
	}
	return srv
}

// eachPath runs f as a subtest per delivery path. The paths share the
// package's server, so they run one after another.
func eachPath(t *testing.T, f func(t *testing.T, path faultload.Path)) {
	for _, p := range faultload.Paths() {
		t.Run(string(p), func(t *testing.T) { f(t, p) })
	}
}

// runLoad runs a load on path in a database of its own: 8 workers of one
// slot, lease 2 s, 25 ms per checkpoint, a producer starting a quarter of
// its attempts inside the app's own transaction, and a probe. Once a
// fifth of the upfront attempts completed it marks the fault and calls
// inject, which returns when its faults are over; then it drains and
// requires the strict outcome: every attempt succeeded exactly once, no
// two valid leases overlapped, no write under an expired lease, every row
// consistent, every error the callers saw retryable and none read as a
// state, every probe answer right. rcfg configures the Repo (nil: the
// defaults).
func runLoad(t *testing.T, path faultload.Path, rcfg *repo.Config, fault string, inject func(ctx context.Context, db *pgtest.DB, run *faultload.Run)) *faultload.Report {
	t.Helper()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	upfront, during := loadSize()
	run := faultload.Start(ctx, t, &faultload.Config{
		Path: path, URL: db.URL, Repo: repo.New(rcfg), Upfront: upfront, Documents: during,
		Producers: 1, InTxFraction: 0.25, Workers: workers, Concurrency: 1, LeaseDuration: leaseDuration,
		Probe: true,
	})
	require.NoError(t, run.WaitCompleted(ctx, upfront/5))
	run.MarkFault(fault)
	inject(ctx, db, run)
	rep := run.Finish(ctx)
	rep.Require(t)
	require.Equal(t, upfront+during, rep.Attempts)
	return rep
}
