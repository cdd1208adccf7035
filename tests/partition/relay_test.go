package partition_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/partition"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

const (
	// cutLock is the cut-off relay's claim: short, so that the takeover
	// comes soon.
	cutLock    = 3 * time.Second
	relayRows  = 3
	cutRelayID = "cut-relay"
)

// TestRelayCutOffBetweenClaimAndMark cuts a relay process (its own
// container) off from PostgreSQL after it claimed outbox rows and before
// it marks them: its publisher holds the publications at a gate, so the
// relay stands between the two steps for as long as the test wants. A
// relay in the test process claims the rows once the claim expired,
// publishes them to a queue and marks them. The route comes back, with
// another address (the connections the relay had are dead), the gate
// opens: the cut-off relay publishes (late) and marks, and every mark
// must be refused, its rows being another relay's. Its publications reach
// the queue too (at least once), and the worker refuses them as stale:
// every attempt succeeds exactly once, under the second relay's
// publication.
func TestRelayCutOffBetweenClaimAndMark(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t)
	r := repo.New(nil)
	testfactory.InstallLeaseAudit(ctx, t, db.Pool)
	testfactory.InstallStateAudit(ctx, t, db.Pool)
	docs := testfactory.SeedDocuments(ctx, t, db.Pool, 1, relayRows+1)
	ids := map[uuid.UUID]bool{}
	for _, a := range testfactory.StartAll(ctx, t, r, db.Pool, docs[:relayRows], 10) {
		ids[a.ID] = true
	}

	cut := startProgram(t, cutRelayID, "relay", "--database-url", programURL(t, db),
		"--id", cutRelayID, "--lock", cutLock.String())
	for _, ev := range cut.waitEvents(partition.EventPublishing, relayRows, "the relay claims every row and holds its publication") {
		require.True(t, ids[ev.Attempt], "the relay claimed a row of attempt %s, not one of the test's", ev.Attempt)
	}
	cut.cut()

	// The second relay takes the rows over once the claim has expired by
	// the database's clock; until then its claims find nothing.
	q := memqueue.New()
	takeover, err := relay.New(db.Pool, q, &relay.Config{ID: "takeover-relay", LockDuration: time.Minute})
	require.NoError(t, err)
	claimed := 0
	for deadline := time.Now().Add(waitFor); claimed < relayRows; {
		n, err := takeover.RunOnce(ctx)
		require.NoError(t, err)
		claimed += n
		require.False(t, time.Now().After(deadline), "the second relay claimed %d of %d rows within %s of the cut", claimed, relayRows, waitFor)
		if n == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	require.Equal(t, relayRows, q.Len(), "the second relay's publications")

	// The route comes back; the held publications return and the cut-off
	// relay marks them, late: its claim is no longer the rows'.
	before, after := cut.reconnect(true)
	t.Logf("%s: back on the network, address %s (was %s)", cutRelayID, after, before)
	cut.openGate()
	report := cut.waitEvents(partition.EventReport, 1, "the late marks, once the route is back")[0]
	require.EqualValues(t, relayRows, report.Counts["relay_mark_refused"], "late marks refused; counts: %v", report.Counts)
	require.Zero(t, report.Counts["relay_published"], "late marks accepted; counts: %v", report.Counts)
	// What it published reaches the queue all the same (at least once).
	late := cut.waitEvents(partition.EventPublished, relayRows, "the late publications")
	for _, ev := range late {
		q.Inject(repo.Delivery{AttemptID: ev.Attempt, QueueJobID: ev.JobID})
	}

	// With its route back the cut-off relay relays again: a new attempt's
	// row is published and marked by it, so no connection of its pool is
	// left hanging on the dead route.
	next := testfactory.StartAll(ctx, t, r, db.Pool, docs[relayRows:], 10)[0]
	ids[next.ID] = true
	pub := cut.waitEvents(partition.EventPublished, relayRows+1, "the cut-off relay, its route back, publishes a new attempt")[relayRows]
	require.Equal(t, next.ID, pub.Attempt)
	requireMarked(ctx, t, db, next.ID, pub.JobID)
	q.Inject(repo.Delivery{AttemptID: next.ID, QueueJobID: pub.JobID})

	outcomes := runQueue(t, db, q, docs, 2*relayRows+1)
	require.Equal(t, map[worker.Outcome]int{worker.OutcomeCompleted: relayRows + 1, worker.OutcomeStale: relayRows}, outcomes,
		"one completion per attempt, the cut-off relay's late deliveries stale")
	for id := range ids {
		rows := testfactory.RequireInvariants(ctx, t, db.Pool, id)
		require.Equal(t, kfstype.RunStateSucceeded, rows.Attempt.RunState)
		require.EqualValues(t, 1, rows.Attempt.ExecutionAttempts, "attempt %s ran more than once", id)
		require.NotNil(t, rows.Outbox.QueueJobID)
		if id != next.ID {
			require.NotContains(t, *rows.Outbox.QueueJobID, cutRelayID, "attempt %s's outbox row holds the cut-off relay's late job id", id)
		}
	}
	testfactory.RequireTerminalOnce(ctx, t, db.Pool, keys(ids))
	require.Equal(t, relayRows+1, testfactory.RequireNoLeaseOverlap(ctx, t, db.Pool))
	require.Equal(t, relayRows+1, testfactory.RequireFencedWrites(ctx, t, db.Pool).Outcomes)
}

// requireMarked waits until the attempt's outbox row is dispatched with
// jobID: the relay that published it marked it.
func requireMarked(ctx context.Context, t *testing.T, db *pgtest.DB, id uuid.UUID, jobID string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		rows := testfactory.ReadRows(ctx, t, db.Pool, id)
		if rows.Outbox.Status == kfstype.OutboxStatusDispatched && rows.Outbox.QueueJobID != nil && *rows.Outbox.QueueJobID == jobID {
			return
		}
		require.False(t, time.Now().After(deadline), "attempt %s's outbox row is %s with job id %v after %s, not marked dispatched with %s",
			id, rows.Outbox.Status, rows.Outbox.QueueJobID, waitFor, jobID)
		time.Sleep(100 * time.Millisecond)
	}
}

// runQueue runs a worker on q until it has settled n deliveries, and
// returns their outcomes.
func runQueue(t *testing.T, db *pgtest.DB, q *memqueue.Queue, docs []testfactory.Document, n int) map[worker.Outcome]int {
	t.Helper()
	cands := testfactory.Candidates(docs)
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		return testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], nil)
	})
	w, err := worker.New(db.Pool, q, h, &worker.Config{ID: "queue-worker", LeaseDuration: time.Minute, Concurrency: 2})
	require.NoError(t, err)
	w.TestSignals().Processed.Init()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	out := map[worker.Outcome]int{}
	for range n {
		out[w.TestSignals().Processed.WaitOrTimeout(t, waitFor).Outcome]++
	}
	return out
}

func keys(m map[uuid.UUID]bool) []uuid.UUID {
	out := make([]uuid.UUID, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
