package multiproc_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// waitNoneLive waits until no attempt holds its document's active slot:
// every attempt has ended. It fails the test after timeout.
func waitNoneLive(ctx context.Context, t *testing.T, db *pgtest.DB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var live int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE active_slot IS NOT NULL`).Scan(&live))
		if live == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d attempts still live after %s", live, timeout)
		time.Sleep(100 * time.Millisecond)
	}
}

// waitSessionsEnded waits until the database has no session whose
// application_name is name (startWork names a process's sessions after
// it). A backend that was running a statement when its client died
// finishes that statement, and may commit it, before it notices; once the
// session is gone, the process can change nothing more.
func waitSessionsEnded(ctx context.Context, t *testing.T, db *pgtest.DB, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, name).Scan(&n))
		return n == 0
	}, 30*time.Second, 20*time.Millisecond, "the sessions of %s did not end", name)
}

// requireEndPairs requires that the table holds exactly started attempts,
// each terminal with its active slot free and its one outbox row in the
// matching terminal status. It returns the count of each
// run_state/outbox status pair.
func requireEndPairs(ctx context.Context, t *testing.T, db *pgtest.DB, started int) map[string]int {
	t.Helper()
	var rowsTotal, outboxTotal int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts`).Scan(&rowsTotal))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_outbox`).Scan(&outboxTotal))
	require.Equal(t, started, rowsTotal, "attempts in the table vs attempts started")
	require.Equal(t, started, outboxTotal, "one outbox row per attempt")

	pairs := map[string]int{}
	rows, err := db.Pool.Query(ctx, `SELECT a.run_state || '/' || o.status, count(*) FROM document_compilation_attempts a
		JOIN document_compilation_outbox o ON o.attempt_id = a.id WHERE a.active_slot IS NULL AND a.completed_at IS NOT NULL GROUP BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	terminal := 0
	for rows.Next() {
		var pair string
		var c int
		require.NoError(t, rows.Scan(&pair, &c))
		pairs[pair] = c
		terminal += c
	}
	require.NoError(t, rows.Err())
	require.Equal(t, started, terminal, "terminal rows: %v", pairs)
	for pair := range pairs {
		require.Contains(t, []string{"succeeded/completed", "failed/dead", "canceled/canceled", "superseded/canceled"}, pair)
	}
	return pairs
}

// requireNoDeadlocks requires that no process printed a deadlock (SQLSTATE
// 40P01) and that PostgreSQL counted none in the database. Backends flush
// their counts when they exit, so it first waits until only db.Pool's
// sessions are left: call it after every other pool and process is done.
func requireNoDeadlocks(ctx context.Context, t *testing.T, db *pgtest.DB, procs []*process) {
	t.Helper()
	for _, p := range procs {
		require.NotContains(t, p.out.String(), "40P01", "kfsdb-bench work %s", p.id)
	}
	require.Eventually(t, func() bool {
		var sessions int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()`).Scan(&sessions))
		return sessions <= int(db.Pool.Stat().TotalConns())
	}, 10*time.Second, 50*time.Millisecond, "the other sessions did not end")
	var deadlocks int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocks))
	require.Zero(t, deadlocks, "pg_stat_database.deadlocks")
}
