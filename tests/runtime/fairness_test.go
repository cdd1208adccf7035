package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// startMany starts every document in batches of repo.MaxBatchSize.
func (e *env) startMany(t *testing.T, docs []testfactory.Document) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	for i := 0; i < len(docs); i += repo.MaxBatchSize {
		var ps []*repo.StartParams
		for _, d := range docs[i:min(i+repo.MaxBatchSize, len(docs))] {
			ps = append(ps, d.Scope.StartParams())
		}
		res, err := e.repo.StartMany(e.ctx, e.pool, &repo.StartManyParams{Starts: ps})
		require.NoError(t, err)
		for _, s := range res {
			require.NoError(t, s.Err)
			ids = append(ids, s.Attempt.ID)
		}
	}
	return ids
}

// TestNoisyTenantDoesNotStarveQuietOnes: one tenant's backlog of 5,000
// attempts is started first, then 20 tenants start 20 each. Every quiet
// tenant's attempt must finish while the flood is still draining: most of
// it is still waiting when the last quiet attempt ends.
func TestNoisyTenantDoesNotStarveQuietOnes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 16)
	ctx, pool := e.ctx, e.pool
	flood := testfactory.SeedDocuments(ctx, t, pool, 1, 5000)
	quiet := testfactory.SeedDocuments(ctx, t, pool, 20, 20)
	floodIDs := e.startMany(t, flood)
	quietIDs := e.startMany(t, quiet)
	require.Len(t, floodIDs, 5000)
	require.Len(t, quietIDs, 400)

	cands := testfactory.Candidates(append(flood, quiet...))
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		c := cands[job.Attempt.KnowledgeSpaceID]
		job.CompleteThrough(c.ID, c.Fingerprint)
		return nil
	})
	w := e.directWorker(t, h, pgsource.Config{}, worker.Config{Concurrency: 8})
	stop := testfactory.RunAll(ctx, t, w.Run)
	waitAllEnded(ctx, t, pool, quietIDs, 120*time.Second)
	var floodLeft, floodDone int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE completed_at IS NULL), count(*) FILTER (WHERE run_state = 'succeeded')
		FROM document_compilation_attempts WHERE id = ANY($1)`, floodIDs).Scan(&floodLeft, &floodDone))
	stop()
	t.Logf("when the last quiet attempt ended: flood %d done, %d still waiting", floodDone, floodLeft)
	// Served round by round, the 400 quiet attempts go with about as many
	// of the flood's (21 tenants, one each per round).
	require.Greater(t, floodLeft, 4000, "the quiet tenants waited behind the flood")
	var notSucceeded int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts
		WHERE id = ANY($1) AND run_state <> 'succeeded'`, quietIDs).Scan(&notSucceeded))
	require.Zero(t, notSucceeded)
}
