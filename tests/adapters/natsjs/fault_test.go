package natsjs_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/adapters/natsjs"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/tests/natstest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// TestStreamLeaderLossMidRun runs a few hundred attempts through a
// three-node cluster (stream and consumer with three replicas) and, in
// the middle, shuts down the stream leader, then a second node, so that
// the stream has no leader (no quorum) for 2 s until that node comes
// back. A third of the attempts start after each shutdown, so the relay
// publishes them while the leader moves and while there is none. The
// relay dead-letters a row after 3 failed publications with backoffs of
// 50 to 200 ms: the publisher must ride the election out inside one
// Publish. No publication may fail back to the relay, no row may be
// dead-lettered, every attempt must succeed once.
func TestStreamLeaderLossMidRun(t *testing.T) {
	t.Parallel()
	const n = 300
	cl, err := natstest.StartCluster(t.TempDir(), 3)
	require.NoError(t, err)
	t.Cleanup(cl.Shutdown)
	urls := cl.URLs()
	b := setup(t, urls, natsjs.Config{Storage: jetstream.FileStorage, Replicas: 3, LeaseDuration: 3 * time.Second}, n)
	testfactory.InstallStateAudit(b.ctx, t, b.pool)
	h := newCompiler(b.docs)
	var metrics observe.Counts
	stop := testfactory.RunAll(b.ctx, t,
		b.relay(t, relay.Config{MaxDispatchAttempts: 3, BackoffBase: 50 * time.Millisecond, BackoffCap: 200 * time.Millisecond, Metrics: &metrics}).Run,
		b.worker(t, urls, h, worker.Config{Concurrency: 4}).Run,
		b.worker(t, urls, h, worker.Config{Concurrency: 4}).Run,
	)
	ids := b.start(t, b.docs[:n/3])
	b.waitEndedAtLeast(t, ids, n/6, 30*time.Second)

	leader := b.streamLeader(t, cl)
	ended := b.endedCount(t, ids)
	leader.Shutdown()
	ids = append(ids, b.start(t, b.docs[n/3:2*n/3])...)
	// How far the first third got is logged, not required (whether it all
	// ended before the shutdown is a race between the run and this
	// test's look): the thirds started after each shutdown are what the
	// relay publishes while the leader moves and while there is none.
	t.Logf("stream leader %s shut down with %d of %d attempts ended; %d more started", leader.Name, ended, n/3, n/3)

	var second *natstest.Node
	for _, node := range cl.Nodes {
		if node != leader {
			second = node
			break
		}
	}
	second.Shutdown()
	ids = append(ids, b.start(t, b.docs[2*n/3:])...)
	time.Sleep(2 * time.Second)
	require.NoError(t, second.Start())
	t.Logf("%s down for 2 s (no quorum); %d attempts ended when it came back", second.Name, b.endedCount(t, ids))

	b.waitEnded(t, ids, 60*time.Second)
	stop()
	b.requireAllSucceededOnce(t, ids)
	require.Zero(t, metrics.Get(observe.DeadLettered))
	// Within the relay's PublishTimeout (10 s) the publisher retries: the
	// election never even costs a row a dispatch attempt.
	require.Zero(t, metrics.Get(observe.PublishFailed), "publications failed back to the relay during the election")
	t.Logf("published %d (republished %d)", metrics.Get(observe.Published), metrics.Get(observe.Published)-n)
}

// streamLeader returns the node that leads the stream now.
func (b *bundle) streamLeader(t *testing.T, cl *natstest.Cluster) *natstest.Node {
	t.Helper()
	st, err := b.js.Stream(b.ctx, natsjs.StreamDefault)
	require.NoError(t, err)
	info, err := st.Info(b.ctx)
	require.NoError(t, err)
	require.NotNil(t, info.Cluster)
	leader := cl.Node(info.Cluster.Leader)
	require.NotNil(t, leader, "stream leader %q", info.Cluster.Leader)
	return leader
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
// Mid-run and failed publications by construction, not by timing: half
// the attempts start before the outage (a fifth of all ended first), the
// other half during it, and the broker comes back only once the relay
// counted a failed publication, after the outage's length at least.
func TestBrokerOutageLongerThanVisibility(t *testing.T) {
	t.Parallel()
	const n, visibility, outage = 100, time.Second, 3 * time.Second
	node := startNode(t)
	b := setup(t, node.URL, natsjs.Config{Storage: jetstream.FileStorage, LeaseDuration: 3 * time.Second}, n)
	testfactory.InstallStateAudit(b.ctx, t, b.pool)
	ids := b.start(t, b.docs[:n/2])
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
	down := time.Now()
	ids = append(ids, b.start(t, b.docs[n/2:])...)
	time.Sleep(outage)
	require.Eventually(t, func() bool { return metrics.Get(observe.PublishFailed) > 0 }, 2*time.Minute, 10*time.Millisecond,
		"no publication failed while the broker was down")
	require.NoError(t, node.Start())
	t.Logf("broker down for %s with %d of %d attempts ended, %d started meanwhile", time.Since(down).Round(time.Millisecond), ended, n/2, n-n/2)

	b.waitEnded(t, ids, 60*time.Second)
	stop()
	b.requireAllSucceededOnce(t, ids)
	require.Zero(t, metrics.Get(observe.DeadLettered))
	require.Positive(t, metrics.Get(observe.PublishFailed), "the outage never reached the relay")
}
