package repo_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

func TestLifecycleHappyPath(t *testing.T) {
	b := setup(t)
	s := b.scope(t)
	a := b.drv.Start(b.ctx, t, s, nil)
	r := b.rows(t, a.ID)
	require.Equal(t, kfstype.RunStateDispatchPending, r.Attempt.RunState)
	require.Equal(t, kfstype.OutboxStatusPending, r.Outbox.Status)
	require.Equal(t, *a, r.Attempt)

	del := b.drv.Dispatch(b.ctx, t, a.ID, nil)
	r = b.rows(t, a.ID)
	require.Equal(t, kfstype.RunStateQueued, r.Attempt.RunState)
	require.Equal(t, kfstype.OutboxStatusDispatched, r.Outbox.Status)

	a, lease, err := b.repo.AcquireLease(b.ctx, b.db.Pool, repoAcquire{Delivery: *del, WorkerID: "w1"}.p())
	require.NoError(t, err)
	r = b.rows(t, a.ID)
	require.Equal(t, kfstype.RunStateRunning, r.Attempt.RunState)
	require.Equal(t, *a, r.Attempt)

	b.clock.Advance(10)
	a = b.drv.AdvanceTo(b.ctx, t, s, lease, kfstype.CheckpointSmokeEvalPassed)
	require.Equal(t, *a, b.rows(t, a.ID).Attempt)
	a, err = b.repo.Complete(b.ctx, b.db.Pool, &repo.CompleteParams{Lease: lease})
	require.NoError(t, err)
	r = b.rows(t, a.ID)
	require.Equal(t, kfstype.RunStateSucceeded, r.Attempt.RunState)
	require.Equal(t, kfstype.OutboxStatusCompleted, r.Outbox.Status)
	require.Equal(t, *a, r.Attempt)
}
