package faultload

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/worker"
)

// TestFinishCountsWhatWentWrong damages a finished load the ways a fault
// could and requires the report to count each, without failing the test
// itself: an acknowledged attempt deleted (lost), a completion
// acknowledged twice, two leases of one attempt valid at once and an
// outcome written after its lease expired (audit rows), an app write
// without its attempt.
func TestFinishCountsWhatWentWrong(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t)
	r := Start(ctx, t, &Config{Path: RelayMemqueue, URL: db.URL, Upfront: 10, Documents: 10, InTxFraction: 1})
	require.NoError(t, r.WaitCompleted(ctx, 20))

	var lost, twice, inTx *docState
	for _, d := range r.docs {
		switch {
		case lost == nil:
			lost = d
		case twice == nil:
			twice = d
		case d.inTx:
			inTx = d
		}
	}
	_, err := db.Pool.Exec(ctx, `DELETE FROM document_compilation_outbox WHERE attempt_id = $1`, lost.id)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `DELETE FROM document_compilation_attempts WHERE id = $1`, lost.id)
	require.NoError(t, err)
	r.outcome(worker.Result{AttemptID: twice.id, Outcome: worker.OutcomeCompleted}, time.Now())
	_, err = db.Pool.Exec(ctx, `UPDATE faultload_app_writes SET document_version = document_version + 100
		WHERE tenant_id = $1 AND document_asset_id = $2`, inTx.params.TenantID, inTx.params.DocumentAssetID)
	require.NoError(t, err)
	// Lease a granted at T, b at T+1s while a is valid until T+2s, and a
	// completion under a at T+3s.
	_, err = db.Pool.Exec(ctx, `
		INSERT INTO test_lease_audit (attempt_id, old_token, old_worker, old_expires, old_state, old_checkpoint,
		                              new_token, new_worker, new_expires, new_state, new_checkpoint, changed_at)
		VALUES ($1, NULL, NULL, NULL, 'queued', 'queued', $2, 'w1', now() + '2 s', 'running', 'queued', now()),
		       ($1, NULL, NULL, NULL, 'queued', 'queued', $3, 'w2', now() + '3 s', 'running', 'queued', now() + '1 s'),
		       ($1, $2, 'w1', now() + '2 s', 'running', 'smoke_eval_passed', NULL, NULL, NULL, 'succeeded', 'published', now() + '3 s')`,
		uuid.New(), uuid.New(), uuid.New())
	require.NoError(t, err)

	rep := r.Finish(ctx)
	t.Log(rep)
	require.Equal(t, 20, rep.Attempts)
	require.Equal(t, 1, rep.Missing)
	require.Equal(t, 1, rep.Lost)
	require.Equal(t, 1, rep.CompletedTwice)
	require.Equal(t, 1, rep.OverlappingLeases)
	require.Equal(t, 1, rep.UnfencedWrites)
	require.Equal(t, 1, rep.AppWriteMismatches)
	require.Equal(t, map[kfstype.RunState]int{kfstype.RunStateSucceeded: 19}, rep.Terminal)
	require.Len(t, rep.Failures(), 6, "lost, completed twice, overlap, unfenced, app write, and the problems listed: %v", rep.Failures())
	require.Contains(t, rep.Summary("sync"), "attempts=20 lost=1 completed_twice=1 overlapping_leases=1")
}

// TestRetriedStartFindsEndedAttempt shows why a retry reads first: Start
// returns a live attempt of the version by itself, but once that attempt
// ended, a second Start would make a second attempt. The retry finds the
// ended one instead.
func TestRetriedStartFindsEndedAttempt(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t)
	r := Start(ctx, t, &Config{Path: DirectPoll, URL: db.URL, Upfront: 1, Documents: 0, Workers: 1})
	require.NoError(t, r.WaitCompleted(ctx, 1))
	rep := r.Finish(ctx)
	rep.Require(t)
	d := r.docs[0]

	id, called, err := r.tryStart(ctx, d, true)
	require.NoError(t, err)
	require.False(t, called, "the retry found the attempt and did not call Start")
	require.Equal(t, d.id, id)

	res, err := r.cfg.Repo.Start(ctx, r.pool, d.params)
	require.NoError(t, err)
	require.True(t, res.Created, "Start alone makes a second attempt of an ended version")
	as, err := r.cfg.Repo.ListDocumentVersionAttempts(ctx, r.pool, &repo.ListDocumentVersionAttemptsParams{
		TenantID: d.params.TenantID, KnowledgeSpaceID: d.params.KnowledgeSpaceID, DocumentAssetID: d.params.DocumentAssetID, DocumentVersion: d.params.DocumentVersion,
	})
	require.NoError(t, err)
	require.Len(t, as, 2)
}
