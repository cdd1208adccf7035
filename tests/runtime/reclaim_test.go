package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// offsetClock is the real clock shifted by a fixed offset.
type offsetClock time.Duration

func (c offsetClock) NowOrNil() *time.Time { return new(time.Now().Add(time.Duration(c))) }

// TestReclaimedLeaseStopsHandler: the relay's statements run a second
// ahead of the worker's (as a claim does whose transaction began after a
// heartbeat's), so the relay reclaims the outbox row of a lease that the
// worker's next heartbeat, before the expiry by its own clock, still finds
// live. That heartbeat must be refused (issue 13, defect 1): the handler's
// context ends at once with cause ErrLeaseLost and the worker counts a lost
// lease. Before the fix the heartbeat renewed the attempt's lease, the
// relay's republication was refused, and the handler ran on.
func TestReclaimedLeaseStopsHandler(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 8)
	ctx, pool := e.ctx, e.pool
	docs := testfactory.SeedDocuments(ctx, t, pool, 1, 1)

	stopped := make(chan error, 1)
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return ctx.Err()
	})
	var metrics observe.Counts
	w := e.worker(t, h, worker.Config{Concurrency: 1,
		LeaseDuration: 2 * time.Second, HeartbeatInterval: 1500 * time.Millisecond, Metrics: &metrics})
	rl := e.relay(t, relay.Config{PollInterval: 100 * time.Millisecond,
		Repo: repo.New(&repo.Config{Clock: offsetClock(time.Second)})})
	testfactory.RunAll(ctx, t, rl.Run, w.Run)

	res, err := e.repo.Start(ctx, pool, docs[0].Scope.StartParams())
	require.NoError(t, err)
	select {
	case cause := <-stopped:
		require.ErrorIs(t, cause, repo.ErrLeaseLost)
	case <-time.After(hangAfter):
		require.FailNow(t, "the handler kept running after the relay reclaimed its lease")
	}
	require.Eventually(t, func() bool { return metrics.Get(observe.LeasesLost) >= 1 }, hangAfter, 10*time.Millisecond)
	rows := testfactory.RequireInvariants(ctx, t, pool, res.Attempt.ID)
	require.NotEqual(t, kfstype.OutboxStatusLeased, rows.Outbox.Status, "the relay holds the row for redelivery")
}
