package pgbouncer_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// TestDirectDeliveryThroughPgBouncer runs two workers on PostgreSQL
// sources in poll-only mode (LISTEN needs a session) through PgBouncer in
// transaction pooling mode: every attempt succeeds, once.
func TestDirectDeliveryThroughPgBouncer(t *testing.T) {
	b := startBouncer(t)
	ctx := context.Background()
	db := pgtest.NewDB(t)
	app := appPool(t, b, db, pgx.QueryExecModeExec)
	docs := testfactory.SeedDocuments(ctx, t, db.Pool, 4, 25)
	started := testfactory.StartAll(ctx, t, repo.New(nil), app, docs, 0)
	cands := testfactory.Candidates(docs)
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		return testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], nil)
	})
	log := slog.New(slog.DiscardHandler)
	var runs []func(context.Context) error
	for range 2 {
		src, err := pgsource.New(app, &pgsource.Config{PollOnly: true, PollInterval: 50 * time.Millisecond, Logger: log})
		require.NoError(t, err)
		w, err := worker.New(app, src, h, &worker.Config{Concurrency: 3, Logger: log})
		require.NoError(t, err)
		runs = append(runs, w.Run)
	}
	stop := testfactory.RunAll(ctx, t, runs...)
	require.Eventually(t, func() bool {
		var live int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE completed_at IS NULL`).Scan(&live))
		return live == 0
	}, 60*time.Second, 20*time.Millisecond)
	stop()
	for _, a := range started {
		rows := testfactory.RequireInvariants(ctx, t, db.Pool, a.ID)
		require.Equal(t, kfstype.RunStateSucceeded, rows.Attempt.RunState)
		require.EqualValues(t, 1, rows.Attempt.ExecutionAttempts)
	}
}
