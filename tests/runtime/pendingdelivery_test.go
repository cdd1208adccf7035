package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// TestPendingDeliveryWaitsInSlot: a delivery that arrives before its
// relay's MarkDispatched commits is leased in the slot once the mark
// lands, within Config.PendingDeliveryWait, and is not handed back; with
// the wait disabled it is handed back at once.
func TestPendingDeliveryWaitsInSlot(t *testing.T) {
	t.Parallel()
	compile := func(b *workerBundle) worker.HandlerFunc {
		return func(ctx context.Context, job *worker.Job) error {
			return testfactory.CompileJob(ctx, job, b.doc.Candidate, nil)
		}
	}

	t.Run("LeasedOnceTheMarkCommits", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		d, tx := b.startWithMarkOpen(t, "job-early")
		b.q.Inject(d)
		var metrics observe.Counts
		// A wait long enough for this test's own commit below.
		w := b.worker(t, compile(b), worker.Config{PendingDeliveryWait: time.Minute, Metrics: &metrics})
		done := make(chan worker.Result, 1)
		go func() { done <- w.Process(b.ctx, b.receive(t)) }()
		require.Eventually(t, func() bool { return metrics.Get(observe.PendingWaits) >= 2 },
			10*time.Second, time.Millisecond, "the slot keeps trying while the mark is uncommitted")
		require.NoError(t, tx.Commit(b.ctx))
		res := <-done
		require.Equal(t, worker.OutcomeCompleted, res.Outcome, "%v", res.Err)
		require.Zero(t, metrics.Get(observe.DeferredDelivery), "never handed back")
		require.Equal(t, int32(1), b.calls.Load())
		require.Equal(t, kfstype.RunStateSucceeded, b.rows(t, res.AttemptID).Attempt.RunState)
	})

	t.Run("HandedBackWhenTheWaitIsOver", func(t *testing.T) {
		t.Parallel()
		for name, wait := range map[string]time.Duration{"Disabled": -1, "Short": 5 * time.Millisecond} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setupWorker(t)
				d, _ := b.startWithMarkOpen(t, "job-early")
				b.q.Inject(d)
				var metrics observe.Counts
				w := b.worker(t, compile(b), worker.Config{PendingDeliveryWait: wait, Metrics: &metrics})
				res := w.Process(b.ctx, b.receive(t))
				require.Equal(t, worker.OutcomeDeferred, res.Outcome)
				require.ErrorIs(t, res.Err, repo.ErrDeliveryPending)
				require.Equal(t, int64(1), metrics.Get(observe.DeferredDelivery))
				if wait < 0 {
					require.Zero(t, metrics.Get(observe.PendingWaits))
				} else {
					// 1, 2 and the 2 ms left of 5 ms.
					require.Equal(t, int64(3), metrics.Get(observe.PendingWaits))
				}
				require.Zero(t, b.calls.Load())
			})
		}
	})
}
