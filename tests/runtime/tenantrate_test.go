package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// leasesOfTenant is how many leases the tenant's attempts have had: every
// fetch that leases an attempt adds one execution attempt.
func leasesOfTenant(ctx context.Context, t *testing.T, pool *pgxpool.Pool, tenant string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(sum(execution_attempts), 0) FROM document_compilation_attempts WHERE tenant_id = $1`,
		tenant).Scan(&n))
	return n
}

// TestRateLimitHoldsAcrossThreeSources: three PostgreSQL sources, each on
// a pool of its own as three processes would be, serve a tenant limited
// to 2 leases per second (burst 2) and an unlimited tenant. The unlimited
// tenant's 200 attempts all run while the limited one's backlog of 100
// waits its turns, and the limited tenant got at most 2·t + 2 leases,
// where t is read off the database clock: from the bucket's start (the
// rate's tokens_at) to the last fetch that spent from it (the bucket's
// tokens_at now), which no refill passes. That bound is the guarantee,
// whatever the scheduling; how many leases it got is not asserted (at
// least one, which every fetch that walks both tenants offers).
// (The bound stays under the backlog of 100 while the unlimited tenant
// takes less than 49 s, which it does in 2 to 7 s here, so the limit
// bites.) Mutations caught: stamped not spending the tokens (100 leases,
// bound 11.3); quotas treating a row another fetch holds as unlimited
// (concurrent fetches spend the same tokens: 10 leases, bound 9.3, in the
// run tried; it takes two sources fetching at once to show).
func TestRateLimitHoldsAcrossThreeSources(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	admin := newPool(t, db, 4)
	r := repo.New(nil)
	limited := testfactory.SeedDocuments(ctx, t, admin, 1, 100)
	free := testfactory.SeedDocuments(ctx, t, admin, 1, 200)
	limitedTenant, freeTenant := limited[0].Scope.TenantID, free[0].Scope.TenantID
	const rate, burst = 2, 2
	require.NoError(t, r.SetTenantRate(ctx, admin, &repo.SetTenantRateParams{TenantID: limitedTenant, Rate: rate, Burst: burst}))
	var startedAt time.Time
	require.NoError(t, admin.QueryRow(ctx, `SELECT tokens_at FROM document_compilation_tenant_limits WHERE tenant_id = $1`,
		limitedTenant).Scan(&startedAt))
	e := &env{ctx: ctx, pool: admin, repo: r}
	e.startMany(t, limited)
	freeIDs := e.startMany(t, free)

	cands := testfactory.Candidates(append(limited, free...))
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		return testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], nil)
	})
	var runs []func(context.Context) error
	for range 3 {
		w := newDirectWorker(t, newPool(t, db, 8), h, pgsource.Config{PollInterval: 50 * time.Millisecond}, worker.Config{Concurrency: 4})
		runs = append(runs, w.Run)
	}
	stop := testfactory.RunAll(ctx, t, runs...)
	waitAllEnded(ctx, t, admin, freeIDs, 120*time.Second)
	stop()

	leases := leasesOfTenant(ctx, t, admin, limitedTenant)
	var tokensAt time.Time
	var tokens float64
	require.NoError(t, admin.QueryRow(ctx, `SELECT tokens_at, tokens FROM document_compilation_tenant_limits WHERE tenant_id = $1`,
		limitedTenant).Scan(&tokensAt, &tokens))
	elapsed := tokensAt.Sub(startedAt).Seconds()
	bound := rate*elapsed + burst
	t.Logf("limited tenant: %d leases over %.3f s of the database clock (bound %.2f, %.3f tokens left); unlimited tenant: %d leases",
		leases, elapsed, bound, tokens, leasesOfTenant(ctx, t, admin, freeTenant))
	require.GreaterOrEqual(t, leases, 1)
	require.LessOrEqual(t, float64(leases), bound, "the rate limit did not hold across the sources")
	// The bucket's books balance: what it started with, plus what time
	// refilled, less what was spent.
	require.LessOrEqual(t, float64(leases)+tokens, bound+1e-9)
}

// TestPausedTenantResumeWakesIdleSources: a source whose poll interval is
// an hour serves a tenant beside a paused one; the paused tenant's due
// attempts are not leased (their rows unchanged) while the other's run.
// Resumed, they are leased at once, not an hour later: the idle source,
// which cannot tell the paused rows from rows another fetch holds, looks
// once more past its follow-up wait and then sleeps to its poll, an hour
// away (pglisten's LookBeforeRetry), so ResumeTenant's notification is
// what wakes it. Mutations caught: quotas without c.paused and the walk's
// probe without paused_at (the paused rows change); pgsource without
// LookBeforeRetry (it fetches at the follow-up pace while idle).
func TestPausedTenantResumeWakesIdleSources(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 8)
	ctx, pool := e.ctx, e.pool
	paused := testfactory.SeedDocuments(ctx, t, pool, 1, 5)
	other := testfactory.SeedDocuments(ctx, t, pool, 1, 5)
	pausedTenant := paused[0].Scope.TenantID
	_, err := e.repo.PauseTenant(ctx, pool, &repo.PauseTenantParams{TenantID: pausedTenant})
	require.NoError(t, err)
	pausedIDs, otherIDs := e.startMany(t, paused), e.startMany(t, other)
	before := make([]*testfactory.Rows, len(pausedIDs))
	for i, id := range pausedIDs {
		before[i] = testfactory.ReadRows(ctx, t, pool, id)
	}

	cands := testfactory.Candidates(append(paused, other...))
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		return testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], nil)
	})
	counts := &observe.Counts{}
	w := e.directWorker(t, h, pgsource.Config{PollInterval: time.Hour, Metrics: counts}, worker.Config{Concurrency: 4})
	stop := testfactory.RunAll(ctx, t, w.Run)
	defer stop()
	waitAllEnded(ctx, t, pool, otherIDs, 60*time.Second)
	// Idle now, the paused tenant's rows due: after the looks that follow
	// the last completions (a fetch once more past the follow-up wait),
	// the source sleeps to its next poll, an hour away. An upper bound on
	// the fetches of two seconds holds however slow the machine is (a
	// slower one fetches less); at the follow-up pace it would be ~26.
	time.Sleep(200 * time.Millisecond)
	fetches := counts.Get(observe.Fetches)
	time.Sleep(2 * time.Second)
	idleFetches := counts.Get(observe.Fetches) - fetches
	t.Logf("fetches in 2 s while idle beside a paused tenant's due rows: %d", idleFetches)
	require.LessOrEqual(t, idleFetches, int64(3), "an idle source beside a paused tenant's due rows sleeps to its poll")
	for i, id := range pausedIDs {
		require.Equal(t, before[i], testfactory.ReadRows(ctx, t, pool, id), "a paused tenant's rows are not touched")
	}

	require.NoError(t, e.repo.ResumeTenant(ctx, pool, &repo.ResumeTenantParams{TenantID: pausedTenant}))
	waitAllEnded(ctx, t, pool, pausedIDs, 30*time.Second)
	var notSucceeded int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE id = ANY($1) AND run_state <> 'succeeded'`,
		append(append([]uuid.UUID{}, pausedIDs...), otherIDs...)).Scan(&notSucceeded))
	require.Zero(t, notSucceeded)
}
