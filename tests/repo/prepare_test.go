package repo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// preparedNames are the sqlc names of the statements prepared in the
// session of pool's one connection, read without preparing anything.
func preparedNames(ctx context.Context, t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(ctx, "SELECT statement FROM pg_prepared_statements ORDER BY statement",
		pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	names := make([]string, 0, len(texts))
	for _, text := range texts {
		name, ok := queryName(text)
		require.True(t, ok, "a statement prepared without an sqlc name: %.80q", text)
		names = append(names, name)
	}
	return names
}

// preparedPool is a one-connection pool on url whose connections run
// r.Prepare as they connect, in mode.
func preparedPool(ctx context.Context, t *testing.T, url string, r *repo.Repo, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 1
	cfg.ConnConfig.DefaultQueryExecMode = mode
	cfg.AfterConnect = r.Prepare
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestPrepareServesTheHotPathFromConnect: a connection that ran Prepare
// holds the hot path's statements before its first delivery, and a whole
// direct delivery on it (Start, FetchLeases, Heartbeat, CompleteMany,
// CompleteThrough, the idle registration) prepares nothing more: pgx runs
// each as the statement Prepare made.
func TestPrepareServesTheHotPathFromConnect(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	pool := preparedPool(ctx, t, b.db.URL, b.repo, pgx.QueryExecModeCacheStatement)
	hot := []string{"CompleteMany", "CompleteThrough", "FetchLeases", "FetchTableBytes", "Heartbeat",
		"OutboxListenerAwake", "OutboxListenerIdle", "Start"}
	before := preparedNames(ctx, t, pool)
	// FetchLeases is prepared in the tables' current plan class.
	require.Equal(t, hot, uniq(before), "the statements prepared at connect")
	require.Len(t, before, len(hot))

	var cands []rwCandidate // each attempt's candidate, in start order
	for range 3 {
		s := b.scope(t)
		_, err := b.repo.Start(ctx, pool, s.StartParams())
		require.NoError(t, err)
		cands = append(cands, b.rwPub(t, s, "candidate"))
	}
	res, err := b.repo.FetchLeases(ctx, pool, &repo.FetchLeasesParams{WorkerID: "worker-prepared", BatchSize: 3})
	require.NoError(t, err)
	require.Len(t, res.Leased, 3)
	lease, err := b.repo.Heartbeat(ctx, pool, &repo.HeartbeatParams{Lease: res.Leased[0].Lease})
	require.NoError(t, err)
	_, err = b.repo.CompleteMany(ctx, pool, &repo.CompleteManyParams{Entries: []repo.CompleteManyEntry{
		{Lease: lease, Through: true, CandidatePublicationID: cands[0].id, CandidateFingerprint: cands[0].fp},
		{Lease: res.Leased[1].Lease, Through: true, CandidatePublicationID: cands[1].id, CandidateFingerprint: cands[1].fp}}})
	require.NoError(t, err)
	_, err = b.repo.CompleteThrough(ctx, pool, &repo.CompleteThroughParams{Lease: res.Leased[2].Lease,
		CandidatePublicationID: cands[2].id, CandidateFingerprint: cands[2].fp})
	require.NoError(t, err)
	_, err = b.repo.OutboxListenerIdle(ctx, pool, &repo.OutboxListenerIdleParams{ListenerID: "worker-prepared", TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, b.repo.OutboxListenerAwake(ctx, pool, &repo.OutboxListenerAwakeParams{ListenerID: "worker-prepared"}))
	for _, l := range res.Leased {
		require.Equal(t, kfstype.RunStateSucceeded, b.rows(t, l.Attempt.ID).Attempt.RunState)
	}

	require.Equal(t, before, preparedNames(ctx, t, pool),
		"a hot-path statement was prepared again: pgx did not run the one Prepare made")
}

// TestPrepareLeavesSessionlessModesAlone: in the modes for PgBouncer's
// transaction pooling a prepared statement may be on another session, so
// Prepare prepares nothing; and it refuses a nil conn as input.
func TestPrepareLeavesSessionlessModesAlone(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		pool := preparedPool(ctx, t, b.db.URL, b.repo, mode)
		require.Empty(t, preparedNames(ctx, t, pool), "mode %v", mode)
		_, err := b.repo.Start(ctx, pool, b.scope(t).StartParams())
		require.NoError(t, err, "mode %v", mode)
	}
	requireInputError(t, b.repo.Prepare(ctx, nil), "conn")
}

// uniq is names without repeats, in order (names is sorted).
func uniq(names []string) []string {
	var out []string
	for _, n := range names {
		if len(out) == 0 || out[len(out)-1] != n {
			out = append(out, n)
		}
	}
	return out
}

// TestPrepareLeavesTheSessionAsItFoundIt: planning each statement once
// (the warm-up of the catalog caches) keeps the session's own
// plan_cache_mode and leaves no statement of its own; and when it fails
// (a role that may not read the tables: parsing checks no privileges,
// planning for EXPLAIN does) Prepare returns the server's error with the
// statement's name and leaves the connection idle, out of any transaction,
// with no statement of its own left behind.
func TestPrepareLeavesTheSessionAsItFoundIt(t *testing.T) {
	b := setup(t)
	ctx := b.ctx

	cfg, err := pgx.ParseConfig(b.db.URL)
	require.NoError(t, err)
	cfg.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	require.NoError(t, b.repo.Prepare(ctx, conn))
	var mode string
	require.NoError(t, conn.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&mode))
	require.Equal(t, "force_custom_plan", mode, "Prepare changed the session's plan_cache_mode")
	require.Equal(t, byte('I'), conn.PgConn().TxStatus())
	requireNoWarmStatement(ctx, t, conn)

	role := fmt.Sprintf("kfsdb_prepare_%d", time.Now().UnixNano())
	_, err = b.db.Pool.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'pw'", role))
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = b.db.Pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
	cfg.User, cfg.Password = role, "pw"
	limited, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = limited.Close(context.Background()) })
	err = b.repo.Prepare(ctx, limited)
	require.ErrorContains(t, err, "plan it once")
	require.ErrorContains(t, err, "permission denied")
	require.Equal(t, byte('I'), limited.PgConn().TxStatus(), "Prepare left a transaction open")
	require.NoError(t, limited.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&mode))
	require.Equal(t, "force_custom_plan", mode)
	requireNoWarmStatement(ctx, t, limited)
}

// requireNoWarmStatement: the warm-up's statement is gone from conn.
func requireNoWarmStatement(ctx context.Context, t *testing.T, conn *pgx.Conn) {
	t.Helper()
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE name = 'kfsdb_prepare_warm'",
		pgx.QueryExecModeSimpleProtocol).Scan(&n))
	require.Zero(t, n, "the warm-up's statement was left behind")
}

// TestPrepareOnGrownTables: once the attempts and the outbox are past four
// pages, FetchLeases is prepared in a plan class whose text ends in a line
// comment ("-- plan class N"); Prepare must still plan every statement
// and leave the session idle. It failed before: the comment swallowed the
// rest of the warm-up's message, its transaction stayed open, and the
// next statement's warm-up found kfsdb_prepare_warm already there, so
// every connection an application's pool opened on a database of more
// than a few dozen attempts failed in AfterConnect.
func TestPrepareOnGrownTables(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	for i := 0; ; i++ {
		var size int64
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT pg_relation_size('document_compilation_attempts')
			+ pg_relation_size('document_compilation_outbox')`).Scan(&size))
		if size >= 4*8192 {
			break
		}
		require.Less(t, i, 2000, "the tables did not grow past four pages")
		_, err := b.repo.Start(ctx, b.db.Pool, b.scope(t).StartParams())
		require.NoError(t, err)
	}
	conn, err := pgx.Connect(ctx, b.db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	require.NoError(t, b.repo.Prepare(ctx, conn))
	require.Equal(t, byte('I'), conn.PgConn().TxStatus(), "Prepare left a transaction open")
	requireNoWarmStatement(ctx, t, conn)
}
