package repo_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// requireLocalDeadline checks a lease granted by a statement sent between
// before and after for d: its LocalDeadline is that send time plus d on
// this process's clock, and never after ExpiresAt, which the database
// computed from a later reading of its clock (the container shares this
// host's clock).
func requireLocalDeadline(t *testing.T, l *repo.Lease, before, after time.Time, d time.Duration) {
	t.Helper()
	require.False(t, l.LocalDeadline.Before(before.Add(d)), "LocalDeadline %s is before the call began + %s", l.LocalDeadline, d)
	require.False(t, l.LocalDeadline.After(after.Add(d)), "LocalDeadline %s is after the call returned + %s", l.LocalDeadline, d)
	require.False(t, l.LocalDeadline.After(l.ExpiresAt), "LocalDeadline %s is after ExpiresAt %s", l.LocalDeadline, l.ExpiresAt)
	require.Equal(t, l.LocalDeadline, l.StopBy())
}

// TestLeaseLocalDeadline: every lease the Repo grants or renews carries
// its end on this process's clock, so a worker whose clock runs behind the
// database's stops its handler in time (worker.TestHandlerStopsAtLeaseExpiry
// checks the worker keeps to it). Under a test clock override there is no
// local deadline and StopBy is ExpiresAt.
func TestLeaseLocalDeadline(t *testing.T) {
	b := setup(t)
	r := repo.New(nil) // the database's own clock
	drv := &testfactory.Driver{Repo: r, DB: b.db.Pool}

	a := drv.Start(b.ctx, t, b.scope(t), nil)
	del := drv.Dispatch(b.ctx, t, a.ID, nil)
	before := time.Now()
	_, lease := drv.Acquire(b.ctx, t, del, nil)
	requireLocalDeadline(t, lease, before, time.Now(), repo.LeaseDurationDefault)

	before = time.Now()
	renewed, err := r.Heartbeat(b.ctx, b.db.Pool, &repo.HeartbeatParams{Lease: lease, LeaseDuration: 90 * time.Second})
	require.NoError(t, err)
	requireLocalDeadline(t, renewed, before, time.Now(), 90*time.Second)

	drv.Start(b.ctx, t, b.scope(t), nil)
	before = time.Now()
	res, err := r.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "worker-local", BatchSize: 1, LeaseDuration: 45 * time.Second})
	require.NoError(t, err)
	require.Len(t, res.Leased, 1)
	requireLocalDeadline(t, res.Leased[0].Lease, before, time.Now(), 45*time.Second)

	// b.repo runs on the test clock: ExpiresAt is on no real clock.
	_, overridden, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
	require.True(t, overridden.LocalDeadline.IsZero(), "a lease under a clock override has no local deadline")
	require.Equal(t, overridden.ExpiresAt, overridden.StopBy())
}
