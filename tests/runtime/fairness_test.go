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
// tenant's attempt must be fetched while the flood is still waiting: fewer
// than 1,000 of the flood's were fetched before the last quiet one. The
// count is read off the attempts' started_at (their fetch's statement
// time), not at the moment the test looks, so how long the test takes to
// look does not move it.
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
	stop()
	var floodBefore int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts
		WHERE id = ANY($1) AND started_at <= (SELECT max(started_at) FROM document_compilation_attempts WHERE id = ANY($2))`,
		floodIDs, quietIDs).Scan(&floodBefore))
	t.Logf("flood attempts fetched before the last quiet one: %d", floodBefore)
	// Fetched round by round (FetchLeases walks the tenants with due rows,
	// one each per round, from where the last fetch ended), the flood gets
	// one attempt in each pass of the walk over the 21 tenants, two when
	// the source's two fetches in flight start at the same tenant, and at
	// the tail as many as the last quiet tenant has left: about 20-60 in
	// all, whatever the fetches' sizes. That is the fetch's logic, not
	// timing; 1,000 leaves room for any walk that is still fair.
	require.Less(t, floodBefore, 1000, "the quiet tenants waited behind the flood")
	var notSucceeded int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts
		WHERE id = ANY($1) AND run_state <> 'succeeded'`, quietIDs).Scan(&notSucceeded))
	require.Zero(t, notSucceeded)
}
