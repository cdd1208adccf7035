package faults_test

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// verify checks the end state: every attempt succeeded exactly once and
// nothing is lost, the invariants hold, leases never overlapped, no write
// under an expired lease, no transient error read as a state.
func (lr *loadRun) verify(ctx context.Context, probe *probeTarget, d time.Duration) loadReport {
	t := lr.t
	upfront, during := loadSize()
	total := upfront + during
	lr.mu.Lock()
	ids := append([]uuid.UUID(nil), lr.ids...)
	require.Empty(t, lr.probeWrong, "calls answered wrongly")
	lr.mu.Unlock()
	lr.errs.requireClean(t)

	require.Len(t, ids, total)
	seen := map[uuid.UUID]bool{}
	for _, id := range ids {
		require.False(t, seen[id], "attempt %s started twice", id)
		seen[id] = true
	}
	type pair struct {
		State  kfstype.RunState
		Status kfstype.OutboxStatus
	}
	rows, err := lr.pool.Query(ctx, `SELECT a.run_state, o.status, count(*) FROM document_compilation_attempts a
		LEFT JOIN document_compilation_outbox o ON o.attempt_id = a.id WHERE a.id <> $1 GROUP BY 1, 2`, probe.id)
	require.NoError(t, err)
	got := map[pair]int{}
	for rows.Next() {
		var p pair
		var status *kfstype.OutboxStatus
		var n int
		require.NoError(t, rows.Scan(&p.State, &status, &n))
		if status != nil {
			p.Status = *status
		}
		got[p] = n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[pair]int{{kfstype.RunStateSucceeded, kfstype.OutboxStatusCompleted}: total}, got,
		"every attempt succeeded with its one outbox row completed")
	var outboxRows, dupVersions int
	require.NoError(t, lr.pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_outbox WHERE attempt_id <> $1`, probe.id).Scan(&outboxRows))
	require.Equal(t, total, outboxRows)
	require.NoError(t, lr.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts
		GROUP BY tenant_id, knowledge_space_id, document_asset_id, document_version HAVING count(*) > 1) d`).Scan(&dupVersions))
	require.Zero(t, dupVersions, "document versions with more than one attempt")
	for _, id := range ids {
		testfactory.RequireInvariants(ctx, t, lr.pool, id)
	}

	leases := testfactory.RequireNoLeaseOverlap(ctx, t, lr.pool)
	fw := testfactory.RequireFencedWrites(ctx, t, lr.pool)
	return loadReport{
		Attempts: total, Duration: d, Leases: leases, FencedKept: fw.KeptToken, FencedOutcomes: fw.Outcomes,
		LeasesLost: lr.metrics.Get(observe.LeasesLost), HandlersStopped: lr.stopped.Load(),
		Retried: lr.metrics.Get(observe.Retried), Stale: lr.metrics.Get(observe.StaleDeliveries),
		Transient: lr.errs.n.Load(), ProbeCalls: lr.probeCalls.Load(),
	}
}
