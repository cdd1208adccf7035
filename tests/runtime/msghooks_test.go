package runtime_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// hookedMsg is a memqueue message that also implements worker.Extender
// and worker.Discarder, the hooks a broker adapter (natsjs) implements,
// and counts every call.
type hookedMsg struct {
	worker.Message
	acks, extends, discards atomic.Int32
}

func (m *hookedMsg) Ack(ctx context.Context) error {
	m.acks.Add(1)
	return m.Message.Ack(ctx)
}

func (m *hookedMsg) Extend(context.Context) error {
	m.extends.Add(1)
	return nil
}

func (m *hookedMsg) Discard(ctx context.Context) error {
	m.discards.Add(1)
	return m.Message.Ack(ctx) // memqueue has no terminate: settle it
}

var (
	_ worker.Extender  = (*hookedMsg)(nil)
	_ worker.Discarder = (*hookedMsg)(nil)
)

func TestMessageHooks(t *testing.T) {
	t.Parallel()

	t.Run("HeartbeatsExtendTheDelivery", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		// The handler runs until the delivery has been extended twice (it
		// waits for that, not for time to pass). Heartbeats every 20 ms on a
		// 30 s lease: a loaded machine delays them, but cannot let the lease
		// lapse before they come.
		var msg *hookedMsg
		w := b.worker(t, func(ctx context.Context, job *worker.Job) error {
			for msg.extends.Load() < 2 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(5 * time.Millisecond):
				}
			}
			return testfactory.CompileJob(ctx, job, b.doc.Candidate, nil)
		}, worker.Config{LeaseDuration: 30 * time.Second, HeartbeatInterval: 20 * time.Millisecond})
		a := b.start(t, 0)
		b.publish(t, 1)
		msg = &hookedMsg{Message: b.receive(t)}
		res := w.Process(b.ctx, msg)
		require.Equal(t, worker.OutcomeCompleted, res.Outcome, "%v", res.Err)
		require.GreaterOrEqual(t, msg.extends.Load(), int32(2), "one Extend per renewal")
		require.EqualValues(t, 1, msg.acks.Load())
		require.Zero(t, msg.discards.Load())
		require.Equal(t, kfstype.RunStateSucceeded, b.rows(t, a.ID).Attempt.RunState)
	})

	t.Run("StaleDeliveryIsDiscardedNotAcked", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		w := b.worker(t, func(ctx context.Context, job *worker.Job) error {
			return testfactory.CompileJob(ctx, job, b.doc.Candidate, nil)
		}, worker.Config{})
		a := b.start(t, 0)
		b.publish(t, 1)
		legit := b.receive(t)
		stale := repo.Delivery{AttemptID: a.ID, QueueJobID: "not-the-job-id"}
		unknown := repo.Delivery{AttemptID: uuid.New(), QueueJobID: legit.Delivery().QueueJobID}
		for _, d := range []repo.Delivery{stale, unknown} {
			b.q.Inject(d)
			msg := &hookedMsg{Message: b.receive(t)}
			res := w.Process(b.ctx, msg)
			require.Equal(t, worker.OutcomeStale, res.Outcome, "%+v: %v", d, res.Err)
			require.EqualValues(t, 1, msg.discards.Load(), "%+v", d)
			require.Zero(t, msg.acks.Load(), "%+v", d)
		}
		require.Zero(t, b.calls.Load(), "the handler ran for a stale delivery")

		// The real delivery still runs, and is acknowledged, not discarded.
		msg := &hookedMsg{Message: legit}
		res := w.Process(b.ctx, msg)
		require.Equal(t, worker.OutcomeCompleted, res.Outcome, "%v", res.Err)
		require.EqualValues(t, 1, msg.acks.Load())
		require.Zero(t, msg.discards.Load())
	})
}
