package natsjs_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/natsjs"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/tests/natstest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// TestStreamLeaderLossMidRun kills the stream leader of a three-node
// cluster (stream and consumer with three replicas) while a few hundred
// attempts run; half of them start right after the kill, so the relay
// publishes them during the election. The relay is set to dead-letter a row after 3 failed
// publications with backoffs of 50 to 200 ms, so the publisher must ride
// the election out inside one Publish: no row may be dead-lettered, every
// attempt must succeed exactly once.
func TestStreamLeaderLossMidRun(t *testing.T) {
	t.Parallel()
	const n = 300
	cl, err := natstest.StartCluster(t.TempDir(), 3)
	require.NoError(t, err)
	t.Cleanup(cl.Shutdown)
	urls := cl.URLs()
	b := setup(t, urls, natsjs.Config{Storage: jetstream.FileStorage, Replicas: 3, LeaseDuration: 3 * time.Second}, n)
	testfactory.InstallStateAudit(b.ctx, t, b.pool)
	first := testfactory.StartAll(b.ctx, t, b.repo, b.pool, b.docs[:n/2], 0)
	h := newCompiler(b.docs)
	var metrics observe.Counts
	stop := testfactory.RunAll(b.ctx, t,
		b.relay(t, relay.Config{MaxDispatchAttempts: 3, BackoffBase: 50 * time.Millisecond, BackoffCap: 200 * time.Millisecond, Metrics: &metrics}).Run,
		b.worker(t, urls, h, worker.Config{Concurrency: 4}).Run,
		b.worker(t, urls, h, worker.Config{Concurrency: 4}).Run,
	)

	ids := attemptIDs(first)
	b.waitEndedAtLeast(t, ids, n/4, 30*time.Second)
	st, err := b.js.Stream(b.ctx, natsjs.StreamDefault)
	require.NoError(t, err)
	info, err := st.Info(b.ctx)
	require.NoError(t, err)
	require.NotNil(t, info.Cluster)
	leader := cl.Node(info.Cluster.Leader)
	require.NotNil(t, leader, "stream leader %q", info.Cluster.Leader)
	ended := b.endedCount(t, ids)
	leader.Shutdown()
	ids = append(ids, attemptIDs(testfactory.StartAll(b.ctx, t, b.repo, b.pool, b.docs[n/2:], 0))...)
	t.Logf("stream leader %s shut down with %d of %d attempts ended; %d more started", leader.Name, ended, n/2, n-n/2)
	require.Less(t, ended, n/2, "the first half ended before the leader was lost")

	b.waitEnded(t, ids, 60*time.Second)
	stop()
	b.requireAllSucceededOnce(t, ids)
	require.Zero(t, metrics.Get(observe.DeadLettered))
	t.Logf("publish failures returned to the relay: %d; published %d", metrics.Get(observe.PublishFailed), metrics.Get(observe.Published))
}

func attemptIDs(as []*kfstype.Attempt) []uuid.UUID {
	ids := make([]uuid.UUID, len(as))
	for i, a := range as {
		ids[i] = a.ID
	}
	return ids
}

// TestBrokerOutageLongerThanVisibility stops the broker (every node) for
// three times the relay's visibility timeout in the middle of a run, and
// starts it again on the same store: every attempt must still succeed
// once, none dead-lettered, although publications failed meanwhile.
func TestBrokerOutageLongerThanVisibility(t *testing.T) {
	t.Parallel()
	const n, visibility, outage = 100, time.Second, 3 * time.Second
	node := startNode(t)
	b := setup(t, node.URL, natsjs.Config{Storage: jetstream.FileStorage, LeaseDuration: 3 * time.Second}, n)
	testfactory.InstallStateAudit(b.ctx, t, b.pool)
	ids := b.startAll(t)
	h := newCompiler(b.docs)
	var metrics observe.Counts
	stop := testfactory.RunAll(b.ctx, t,
		b.relay(t, relay.Config{VisibilityTimeout: visibility, PublishTimeout: 500 * time.Millisecond,
			BackoffBase: 100 * time.Millisecond, BackoffCap: 500 * time.Millisecond, Metrics: &metrics}).Run,
		b.worker(t, node.URL, h, worker.Config{Concurrency: 4}).Run,
	)
	b.waitEndedAtLeast(t, ids, n/5, 30*time.Second)
	node.Shutdown()
	ended := b.endedCount(t, ids)
	time.Sleep(outage)
	require.NoError(t, node.Start())
	t.Logf("broker down for %s with %d of %d attempts ended", outage, ended, n)
	require.Less(t, ended, n, "the run ended before the outage")

	b.waitEnded(t, ids, 60*time.Second)
	stop()
	b.requireAllSucceededOnce(t, ids)
	require.Zero(t, metrics.Get(observe.DeadLettered))
	require.Positive(t, metrics.Get(observe.PublishFailed), "the outage never reached the relay")
}
