package repo_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestAsyncProgressCommits walks one attempt through its lifecycle, each
// transition in its own transaction, and reads synchronous_commit inside
// that transaction before it commits: with AsyncProgressCommits exactly the
// progress transitions (claim, mark, lease, heartbeat, advance) turn it
// off, without it none does, and the setting never outlives the
// transaction.
func TestAsyncProgressCommits(t *testing.T) {
	t.Parallel()
	for _, async := range []bool{false, true} {
		t.Run(map[bool]string{false: "Off", true: "On"}[async], func(t *testing.T) {
			b := setup(t)
			ctx := b.ctx
			conn, err := b.db.Pool.Acquire(ctx)
			require.NoError(t, err)
			defer conn.Release()
			r := repo.New(&repo.Config{AsyncProgressCommits: async})
			drv := &testfactory.Driver{Repo: r}
			s := b.scope(t)
			candidate, fingerprint := s.Publication(ctx, t, b.db.Pool, "candidate")

			syncCommit := func(db repo.DBTX) string {
				var v string
				require.NoError(t, db.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v))
				return v
			}
			step := func(name string, progress bool, f func(tx pgx.Tx)) {
				tx, err := conn.Begin(ctx)
				require.NoError(t, err)
				drv.DB = tx
				f(tx)
				want := "on"
				if async && progress {
					want = "off"
				}
				require.Equal(t, want, syncCommit(tx), "%s: synchronous_commit inside its transaction", name)
				require.NoError(t, tx.Commit(ctx))
				require.Equal(t, "on", syncCommit(conn), "%s: the setting ended with the transaction", name)
			}

			var (
				a     *kfstype.Attempt
				m     *kfstype.OutboxMessage
				del   *repo.Delivery
				lease *repo.Lease
			)
			step("Start", false, func(pgx.Tx) { a = drv.Start(ctx, t, s, nil) })
			step("ClaimOutbox", true, func(pgx.Tx) { m = drv.Claim(ctx, t, a.ID) })
			step("MarkDispatched", true, func(tx pgx.Tx) {
				del = &repo.Delivery{AttemptID: a.ID, QueueJobID: drv.NextJobID()}
				res, err := r.MarkDispatched(ctx, tx, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{
					OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: del.QueueJobID,
				}}})
				require.NoError(t, err)
				require.Len(t, res.Marked, 1)
			})
			step("AcquireLease", true, func(tx pgx.Tx) {
				_, lease, err = r.AcquireLease(ctx, tx, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-async"})
				require.NoError(t, err)
			})
			step("Heartbeat", true, func(tx pgx.Tx) {
				lease, err = r.Heartbeat(ctx, tx, &repo.HeartbeatParams{Lease: lease})
				require.NoError(t, err)
			})
			step("Advance", true, func(tx pgx.Tx) {
				_, err := r.Advance(ctx, tx, &repo.AdvanceParams{Lease: lease, Checkpoint: kfstype.CheckpointParsed})
				require.NoError(t, err)
			})
			step("AdvanceTo", true, func(tx pgx.Tx) {
				_, err := r.AdvanceTo(ctx, tx, &repo.AdvanceToParams{Lease: lease, Checkpoint: kfstype.CheckpointNodesGenerated})
				require.NoError(t, err)
			})
			step("Heartbeat refused", false, func(tx pgx.Tx) {
				stale := *lease
				stale.WorkerID = "worker-other"
				_, err := r.Heartbeat(ctx, tx, &repo.HeartbeatParams{Lease: &stale})
				require.ErrorIs(t, err, repo.ErrLeaseLost)
			})
			step("CompleteThrough", false, func(tx pgx.Tx) {
				got, err := r.CompleteThrough(ctx, tx, &repo.CompleteThroughParams{Lease: lease,
					CandidatePublicationID: &candidate, CandidateFingerprint: &fingerprint})
				require.NoError(t, err)
				require.Equal(t, kfstype.RunStateSucceeded, got.RunState)
			})
			testfactory.RequireInvariants(context.Background(), t, b.db.Pool, a.ID)
		})
	}
}
