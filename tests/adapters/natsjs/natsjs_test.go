package natsjs_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/adapters/natsjs"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

func TestLifecycleThroughNATS(t *testing.T) {
	t.Parallel()
	node := startNode(t)
	// A lease (the consumer's ack wait) no stall of a loaded machine
	// outlasts: "every attempt ran once" holds only while leases do not
	// lapse; a 3 s one lapsed at load average 30 and the redelivery ran
	// an attempt twice, as at-least-once delivery should.
	b := setup(t, node.URL, natsjs.Config{Storage: jetstream.FileStorage, LeaseDuration: 30 * time.Second}, 60)
	testfactory.InstallStateAudit(b.ctx, t, b.pool)
	ids := b.startAll(t)
	h := newCompiler(b.docs)
	stop := testfactory.RunAll(b.ctx, t,
		b.relay(t, relay.Config{}).Run,
		b.worker(t, node.URL, h, worker.Config{Concurrency: 4}).Run,
		b.worker(t, node.URL, h, worker.Config{Concurrency: 4}).Run,
	)
	b.waitEnded(t, ids, 30*time.Second)
	stop()
	b.requireAllSucceededOnce(t, ids)
	for _, id := range ids {
		require.Equal(t, 1, h.runsOf(id), "attempt %s ran more than once", id)
	}
	// Every message was acknowledged: nothing pending, nothing left.
	info := consumerInfo(t, b)
	require.Zero(t, info.NumAckPending)
	require.Zero(t, info.NumPending)
	require.Zero(t, info.NumRedelivered)
}

func consumerInfo(t *testing.T, b *bundle) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := b.js.Consumer(b.ctx, cmp.Or(b.cfg.Stream, natsjs.StreamDefault), natsjs.ConsumerDefault)
	require.NoError(t, err)
	info, err := c.Info(b.ctx)
	require.NoError(t, err)
	return info
}

func TestDuplicatePublishIsDeduplicated(t *testing.T) {
	t.Parallel()
	node := startNode(t)
	b := setup(t, node.URL, natsjs.Config{Storage: jetstream.MemoryStorage, Stream: "DEDUP"}, 0)
	pub, err := natsjs.NewPublisher(b.js, b.cfg)
	require.NoError(t, err)
	attempt := uuid.New()
	payload, err := json.Marshal(map[string]string{"attemptId": attempt.String()})
	require.NoError(t, err)
	msg := &relay.Message{ID: uuid.New(), AttemptID: attempt, IdempotencyKey: "compile:" + attempt.String(),
		EventType: kfstype.EventTypeDocumentCompile, SchemaVersion: 1, Payload: payload, DispatchAttempts: 1, LockToken: uuid.New()}

	first, err := pub.Publish(b.ctx, msg)
	require.NoError(t, err)
	again, err := pub.Publish(b.ctx, msg)
	require.NoError(t, err)
	require.Equal(t, first.QueueJobID, again.QueueJobID, "a repeat within the dedup window is the same message")
	require.Equal(t, "DEDUP:1", first.QueueJobID)

	// The row published again by a later claim is a new message.
	later := *msg
	later.LockToken, later.DispatchAttempts = uuid.New(), 2
	republished, err := pub.Publish(b.ctx, &later)
	require.NoError(t, err)
	require.Equal(t, "DEDUP:2", republished.QueueJobID)

	st, err := b.js.Stream(b.ctx, "DEDUP")
	require.NoError(t, err)
	info, err := st.Info(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, info.State.Msgs)
	raw, err := st.GetMsg(b.ctx, 1)
	require.NoError(t, err)
	require.Equal(t, natsjs.MsgID(msg), raw.Header.Get(jetstream.MsgIDHeader))
	require.Equal(t, attempt.String(), raw.Header.Get(natsjs.HeaderAttemptID))
	require.JSONEq(t, string(payload), string(raw.Data))
}

// TestRetriedAttemptIsDeliveredAgain: a handler's retryable error
// schedules a retry; the relay publishes the row again with the same
// idempotency key, and that publication must reach a worker (not be
// swallowed by the stream's deduplication of the first one).
func TestRetriedAttemptIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	node := startNode(t)
	b := setup(t, node.URL, natsjs.Config{Storage: jetstream.MemoryStorage, LeaseDuration: 3 * time.Second}, 10)
	testfactory.InstallStateAudit(b.ctx, t, b.pool)
	ids := b.startAll(t)
	h := newCompiler(b.docs)
	h.first = func(context.Context, *worker.Job) error { return worker.Retryable(errors.New("try again")) }
	testfactory.RunAll(b.ctx, t,
		b.relay(t, relay.Config{PollInterval: 100 * time.Millisecond}).Run,
		b.worker(t, node.URL, h, worker.Config{Concurrency: 4, RetryBackoffBase: 100 * time.Millisecond, RetryBackoffCap: 200 * time.Millisecond}).Run,
	)
	b.waitEnded(t, ids, 20*time.Second)
	b.requireAllSucceededOnce(t, ids)
	for _, id := range ids {
		require.Equal(t, 2, h.runsOf(id), "attempt %s", id)
	}
}

// TestDeferredDeliveryComesBack: a delivery that beats its relay's
// MarkDispatched is handed back (Retry: a delayed nak) and the broker
// delivers it again, under the same queue job id, after the delay.
func TestDeferredDeliveryComesBack(t *testing.T) {
	t.Parallel()
	node := startNode(t)
	b := setup(t, node.URL, natsjs.Config{Storage: jetstream.MemoryStorage}, 1)
	a := testfactory.StartAll(b.ctx, t, b.repo, b.pool, b.docs, 0)[0]
	claimed, err := b.repo.ClaimOutbox(b.ctx, b.pool, &repo.ClaimOutboxParams{RelayID: "relay-test", BatchSize: 1})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	m := claimed[0]
	pub, err := natsjs.NewPublisher(b.js, b.cfg)
	require.NoError(t, err)
	p, err := pub.Publish(b.ctx, &relay.Message{ID: m.ID, AttemptID: m.AttemptID, IdempotencyKey: m.IdempotencyKey,
		EventType: m.EventType, SchemaVersion: m.SchemaVersion, Payload: m.Payload, DispatchAttempts: m.DispatchAttempts, LockToken: *m.LockToken})
	require.NoError(t, err)

	h := newCompiler(b.docs)
	w := b.worker(t, node.URL, h, worker.Config{PendingDeliveryWait: -1})
	_, js := connect(t, node.URL)
	src, err := natsjs.NewSource(b.ctx, js, b.cfg)
	require.NoError(t, err)
	receive := func() worker.Message {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		msg, err := src.Receive(ctx)
		require.NoError(t, err)
		return msg
	}
	msg := receive()
	require.Equal(t, repo.Delivery{AttemptID: a.ID, QueueJobID: p.QueueJobID}, msg.Delivery())
	res := w.Process(b.ctx, msg)
	require.Equal(t, worker.OutcomeDeferred, res.Outcome, "%v", res.Err)

	// The relay's record commits; the nak'd message comes back.
	_, err = b.repo.MarkDispatched(b.ctx, b.pool, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{
		OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: p.QueueJobID}}})
	require.NoError(t, err)
	again := receive()
	require.Equal(t, msg.Delivery(), again.Delivery())
	res = w.Process(b.ctx, again)
	require.Equal(t, worker.OutcomeCompleted, res.Outcome, "%v", res.Err)
	require.Equal(t, 1, h.runsOf(a.ID))
	info := consumerInfo(t, b)
	require.EqualValues(t, 2, info.Delivered.Consumer, "one message, delivered twice")
	require.EqualValues(t, 1, info.AckFloor.Stream, "and acknowledged")
	require.Zero(t, info.NumAckPending)
}

// TestStaleDeliveryIsTerminated: a message naming an attempt under a job
// id the attempt does not have is terminated (a terminated-message
// advisory, no redelivery), and the handler never runs for it.
func TestStaleDeliveryIsTerminated(t *testing.T) {
	t.Parallel()
	node := startNode(t)
	b := setup(t, node.URL, natsjs.Config{Storage: jetstream.MemoryStorage, Stream: "STALE"}, 1)
	nc, _ := connect(t, node.URL)
	terms, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.STALE." + natsjs.ConsumerDefault)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	ids := b.startAll(t)
	// A forged publication of the same attempt, before the relay's.
	payload, err := json.Marshal(map[string]string{"attemptId": ids[0].String()})
	require.NoError(t, err)
	_, err = b.js.Publish(b.ctx, b.cfg.Subject(), payload)
	require.NoError(t, err)

	h := newCompiler(b.docs)
	w := b.worker(t, node.URL, h, worker.Config{Concurrency: 2})
	testfactory.RunAll(b.ctx, t, b.relay(t, relay.Config{}).Run, w.Run)
	b.waitEnded(t, ids, 20*time.Second)

	adv, err := terms.NextMsg(10 * time.Second)
	require.NoError(t, err)
	var ev struct {
		StreamSeq uint64 `json:"stream_seq"`
		Reason    string `json:"reason"`
	}
	require.NoError(t, json.Unmarshal(adv.Data, &ev))
	require.EqualValues(t, 1, ev.StreamSeq, "the forged message is the one terminated")
	require.Contains(t, ev.Reason, "stale")
	_, err = terms.NextMsg(300 * time.Millisecond)
	require.ErrorIs(t, err, nats.ErrTimeout, "only the forged message is terminated")
	require.Equal(t, 1, h.runsOf(ids[0]))
	states, _ := b.outcomes(t, ids)
	require.Equal(t, map[kfstype.RunState]int{kfstype.RunStateSucceeded: 1}, states)
}

// TestTraceContextRidesInHeaders: a message's trace context is published
// as W3C traceparent/tracestate headers and read back by the source as a
// worker.TracedMessage; a message without one carries no such header.
func TestTraceContextRidesInHeaders(t *testing.T) {
	t.Parallel()
	node := startNode(t)
	b := setup(t, node.URL, natsjs.Config{Storage: jetstream.MemoryStorage, Stream: "TRACE"}, 0)
	pub, err := natsjs.NewPublisher(b.js, b.cfg)
	require.NoError(t, err)
	src, err := natsjs.NewSource(b.ctx, b.js, b.cfg)
	require.NoError(t, err)
	tc := kfstype.TraceContext{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "vendor=1"}
	for _, want := range []kfstype.TraceContext{tc, {}} {
		attempt := uuid.New()
		payload, err := json.Marshal(map[string]string{"attemptId": attempt.String()})
		require.NoError(t, err)
		_, err = pub.Publish(b.ctx, &relay.Message{ID: uuid.New(), AttemptID: attempt, IdempotencyKey: "compile:" + attempt.String(),
			EventType: kfstype.EventTypeDocumentCompile, SchemaVersion: 1, Payload: payload, DispatchAttempts: 1,
			LockToken: uuid.New(), TraceContext: want})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		got, err := src.Receive(ctx)
		cancel()
		require.NoError(t, err)
		require.Equal(t, attempt, got.Delivery().AttemptID)
		traced, ok := got.(worker.TracedMessage)
		require.True(t, ok, "a natsjs message is a worker.TracedMessage")
		require.Equal(t, want, traced.TraceContext())
		require.NoError(t, got.Ack(b.ctx))
	}
}
