package repo_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestFetchLeasesPlanCachedOnEmptyTables: a worker that starts on empty
// tables must not keep the plan its connection cached on them once a
// backlog arrives (pgx prepares statements; PostgreSQL keeps the generic
// plan built at the sixth execution until ANALYZE invalidates it, and a
// plan for one-page tables scans them per row: 18,000-19,000 buffers for
// 8 of 800 due rows, before repo/plan_class.go). Each fetch after the
// backlog arrived, the custom plans and the generic one, stays cheap.
func TestFetchLeasesPlanCachedOnEmptyTables(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	// No autovacuum: its ANALYZE would invalidate the cached plan.
	require.NoError(t, testfactory.FreezeStatistics(ctx, b.db.Pool))
	cfg, err := pgxpool.ParseConfig(b.db.URL)
	require.NoError(t, err)
	cfg.MaxConns, cfg.MinConns = 1, 1
	var plans testfactory.PlanNotices
	texts := newStatementRecorder()
	cfg.ConnConfig.OnNotice = plans.OnNotice
	cfg.ConnConfig.Tracer = texts
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "LOAD 'auto_explain'")
		return err
	}
	fetcher, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(fetcher.Close)
	r := repo.New(nil)
	// Ten fetches on empty tables: five custom plans, then the generic one.
	for range 10 {
		res, err := r.FetchLeases(ctx, fetcher, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 8})
		require.NoError(t, err)
		require.Empty(t, res.Leased)
	}
	emptyText := texts.sql("FetchLeases")
	testfactory.StartAll(ctx, t, b.repo, b.db.Pool, testfactory.SeedDocuments(ctx, t, b.db.Pool, 20, 40), 0)

	for _, s := range testfactory.AutoExplainToNotices {
		_, err := fetcher.Exec(ctx, s)
		require.NoError(t, err)
	}
	// Eight fetches: the new class's five custom plans, then its generic one.
	for i := range 8 {
		buffers, _ := fetchEightExplained(ctx, t, r, fetcher, &plans)
		t.Logf("fetch %d on 800 due rows of 20 tenants after 10 fetches on empty tables: %d buffers for 8 leases", i+1, buffers)
		require.Less(t, buffers, int64(3_000), "fetch %d read %d buffers for 8 leases: a plan cached on empty tables", i+1, buffers)
	}
	backlogText := texts.sql("FetchLeases")
	require.NotEqual(t, emptyText, backlogText, "the fetch on the backlog is another prepared statement")
	var class int
	_, err = fmt.Sscanf(backlogText[strings.LastIndex(backlogText, "\n-- plan class "):], "\n-- plan class %d", &class)
	require.NoError(t, err, "the fetch on the backlog names its class")
	var tableBytes int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT pg_relation_size('document_compilation_attempts') + pg_relation_size('document_compilation_outbox')`).Scan(&tableBytes))
	t.Logf("plan class %d for %d pages", class, tableBytes/8192)
	// 800 attempts and their outbox rows are 16-63 pages (class 2) or more.
	require.GreaterOrEqual(t, class, 2)
}

// TestFetchLeasesReadsTableSizeAfterEmptyFetch pins the round trips of the
// plan class: a fetch after one that leased sends only itself (the sizes
// came back with the leases); the first fetch and one after an empty
// fetch read the sizes first (FetchTableBytes).
func TestFetchLeasesReadsTableSizeAfterEmptyFetch(t *testing.T) {
	b := setup(t)
	pool, texts := recordingPool(t, b.ctx, b.db.URL)
	r := repo.New(nil)
	fetch := func(leases int) []string {
		t.Helper()
		before := len(texts.names())
		res, err := r.FetchLeases(b.ctx, pool, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 1})
		require.NoError(t, err)
		require.Len(t, res.Leased, leases)
		return texts.names()[before:]
	}
	require.Equal(t, []string{"FetchTableBytes", "FetchLeases"}, fetch(0), "the first fetch")
	require.Equal(t, []string{"FetchTableBytes", "FetchLeases"}, fetch(0), "after an empty fetch")
	b.drv.Start(b.ctx, t, b.scope(t), nil)
	b.drv.Start(b.ctx, t, b.scope(t), nil)
	require.Equal(t, []string{"FetchTableBytes", "FetchLeases"}, fetch(1), "after an empty fetch")
	require.Equal(t, []string{"FetchLeases"}, fetch(1), "after a fetch that leased")
	require.Equal(t, []string{"FetchLeases"}, fetch(0), "after a fetch that leased")
	require.Equal(t, []string{"FetchTableBytes", "FetchLeases"}, fetch(0), "after an empty fetch")
}

// TestFetchLeasesProbesOutboxByAttempt: with one tenant's backlog, a
// fetch finds each walked attempt's outbox row by attempt_id and reads no
// due-row index at all. The due test is one boolean test (IS TRUE): as
// separate clauses the planner, estimating few due rows, ANDed a bitmap of
// delivery_due_idx's whole due range into every attempt's outbox probe
// (about 100 buffers per attempt walked, seen in a drain: 740-1,922
// buffers per fetch). The walk came back to its only tenant, so the probe
// for a tenant it missed (delivery_due_idx's first due row) is not run
// either. Statistics are those of empty tables (no column statistics, as
// after the benches' VACUUM ANALYZE), and a thousand attempts have gone
// through, as in a drain.
func TestFetchLeasesProbesOutboxByAttempt(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	require.NoError(t, testfactory.FreezeStatistics(ctx, b.db.Pool))
	docs := testfactory.SeedDocuments(ctx, t, b.db.Pool, 1, 3_000)
	testfactory.StartAll(ctx, t, b.repo, b.db.Pool, docs, 0)
	c := docs[0].Candidate
	for range 10 {
		res, err := b.repo.FetchLeases(ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "churn", BatchSize: 100})
		require.NoError(t, err)
		var entries []repo.CompleteManyEntry
		for _, l := range res.Leased {
			entries = append(entries, repo.CompleteManyEntry{Lease: l.Lease, Through: true, CandidatePublicationID: &c.ID, CandidateFingerprint: &c.Fingerprint})
		}
		_, err = b.repo.CompleteMany(ctx, b.db.Pool, &repo.CompleteManyParams{Entries: entries})
		require.NoError(t, err)
	}
	fetcher, plans := explainingFetcher(t, b)
	r := repo.New(nil)
	// Eight fetches: five custom plans, then the generic one. Leases are
	// kept, so each fetch walks past the running attempts of the ones
	// before it, as a worker's fetch does while its slots run.
	for i := range 8 {
		buffers, loops := fetchEightExplained(ctx, t, r, fetcher, plans)
		t.Logf("fetch %d, one tenant's 2,000 due rows after 1,000 done: %d buffers for 8 leases; index scans %v", i+1, buffers, loops)
		require.NotZero(t, loops["document_compilation_outbox_attempt_event_uq"], "fetch %d: outbox rows found by attempt_id", i+1)
		for _, idx := range []string{"document_compilation_outbox_delivery_due_idx", "document_compilation_outbox_lock_recovery_idx"} {
			require.Zero(t, loops[idx], "fetch %d scanned %s %d times", i+1, idx, loops[idx])
		}
	}
}

// TestFetchLeasesProbesAttemptsFirstWhateverTheStatistics: a fetch
// walks each tenant's live attempts and probes their outbox rows by
// attempt_id, whatever the statistics say of the outbox. With the two
// joined, the planner chose the order: in an hour of churn, after the
// autoanalyze that followed a held snapshot, it scanned the whole outbox
// per tenant walked and sorted the join, three minutes at half the rate
// until the next ANALYZE. Here the statistics are pushed to the extreme
// of that state: taken while every live attempt was leased (none due),
// then the outbox's row count set to 1, as an ANALYZE of pages that are
// nearly all dead versions would leave it. The leases then expire (lost
// workers) without an ANALYZE, so the fetch has 3,000 due rows. Mutation
// caught: the walk's probe as a join (49,768 buffers for 8 leases, the
// outbox walked by its index before the attempts, against about 900).
func TestFetchLeasesProbesAttemptsFirstWhateverTheStatistics(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	require.NoError(t, testfactory.FreezeStatistics(ctx, b.db.Pool))
	testfactory.StartAll(ctx, t, b.repo, b.db.Pool, testfactory.SeedDocuments(ctx, t, b.db.Pool, 2, 1_500), 0)
	leased := 0
	for {
		res, err := b.repo.FetchLeases(ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "burst", BatchSize: 100, LeaseDuration: time.Hour})
		require.NoError(t, err)
		if len(res.Leased) == 0 {
			break
		}
		leased += len(res.Leased)
	}
	require.Equal(t, 3_000, leased)
	for _, s := range []string{
		`ANALYZE document_compilation_attempts, document_compilation_outbox`,
		`UPDATE pg_class SET reltuples = 1 WHERE oid = 'document_compilation_outbox'::regclass`,
		// The workers are lost: every lease has expired, unknown to the
		// statistics.
		`UPDATE document_compilation_attempts SET lease_expires_at = now() - interval '1 minute' WHERE run_state = 'running'`,
		`UPDATE document_compilation_outbox SET available_at = now() - interval '1 minute' WHERE status = 'leased'`,
	} {
		_, err := b.db.Pool.Exec(ctx, s)
		require.NoError(t, err)
	}
	fetcher, plans := explainingFetcher(t, b)
	r := repo.New(nil)
	// Eight fetches: five custom plans, then the generic one.
	for i := range 8 {
		buffers, loops := fetchEightExplained(ctx, t, r, fetcher, plans)
		t.Logf("fetch %d of 3,000 expired leases, the outbox believed empty: %d buffers for 8 leases; index scans %v", i+1, buffers, loops)
		require.Less(t, buffers, int64(5_000), "fetch %d read %d buffers for 8 leases: the outbox walked before the attempts", i+1, buffers)
	}
}

// explainingFetcher is a one-connection pool on b's database whose every
// statement's plan auto_explain sends to the returned PlanNotices.
func explainingFetcher(t *testing.T, b *testBundle) (*pgxpool.Pool, *testfactory.PlanNotices) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.db.URL)
	require.NoError(t, err)
	cfg.MaxConns, cfg.MinConns = 1, 1
	plans := &testfactory.PlanNotices{}
	testfactory.ExplainOnConnect(cfg, plans)
	fetcher, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(fetcher.Close)
	return fetcher, plans
}

// fetchEightExplained runs one FetchLeases of 8 on fetcher, requires 8
// leases and auto_explain's plan of it, and returns the plan's shared
// buffers and the executions of each index it scans (PlanNotices).
func fetchEightExplained(ctx context.Context, t *testing.T, r *repo.Repo, fetcher *pgxpool.Pool, plans *testfactory.PlanNotices) (int64, map[string]int64) {
	t.Helper()
	plans.Reset()
	res, err := r.FetchLeases(ctx, fetcher, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 8})
	require.NoError(t, err)
	require.Len(t, res.Leased, 8)
	buffers, ok := plans.Buffers("-- name: FetchLeases ")
	require.True(t, ok, "auto_explain sent FetchLeases' plan")
	return buffers, plans.IndexLoops("-- name: FetchLeases ")
}
