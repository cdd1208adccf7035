package runtime_test

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
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// latencyBundle is a relay, a worker and a handler that reports when it
// starts, for measuring Start-to-handler latency.
type latencyBundle struct {
	ctx     context.Context
	pool    repo.DBTX
	repo    *repo.Repo
	docs    []testfactory.Document
	started chan uuid.UUID
}

func setupLatency(t *testing.T, n int, relayCfg relay.Config) (*latencyBundle, *relay.Config) {
	t.Helper()
	db := pgtest.NewDB(t)
	pool := newPool(t, db, 8)
	b := &latencyBundle{ctx: context.Background(), pool: pool, repo: repo.New(nil), started: make(chan uuid.UUID, n)}
	b.docs = testfactory.SeedDocuments(b.ctx, t, pool, 1, n)
	cands := testfactory.Candidates(b.docs)
	q := memqueue.New()
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		b.started <- job.Attempt.ID
		return testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], nil)
	})
	relayCfg.TestSignals.Listening.Init()
	rl := newRelay(t, pool, q, relayCfg)
	w := newWorker(t, pool, q, h, worker.Config{Concurrency: 2})
	testfactory.RunAll(context.Background(), t, rl.Run, w.Run)
	return b, &relayCfg
}

// startAndWait starts document i and returns how long it took until the
// handler started, waiting for the attempt to complete before returning.
func (b *latencyBundle) startAndWait(t *testing.T, i int, timeout time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	res, err := b.repo.Start(b.ctx, b.pool, b.docs[i].Scope.StartParams())
	require.NoError(t, err)
	var latency time.Duration
	select {
	case id := <-b.started:
		latency = time.Since(t0)
		require.Equal(t, res.Attempt.ID, id)
	case <-time.After(timeout):
		require.FailNow(t, "handler did not start", "within %s", timeout)
	}
	require.Eventually(t, func() bool {
		return testfactory.ReadRows(b.ctx, t, b.pool, res.Attempt.ID).Attempt.RunState == kfstype.RunStateSucceeded
	}, 10*time.Second, 5*time.Millisecond)
	return latency
}

// TestNotifyWakesRelay measures Start-to-handler latency with LISTEN on and
// a poll interval of 5 s: the notification Start sends in its transaction
// must wake the relay long before the poll would.
func TestNotifyWakesRelay(t *testing.T) {
	// Not parallel: it measures latency, so it runs before the package's
	// parallel load.
	const samples = 20
	const poll = 5 * time.Second
	b, cfg := setupLatency(t, samples+1, relay.Config{PollInterval: poll})
	cfg.TestSignals.Listening.WaitOrTimeout(t, 10*time.Second)

	// A warm-up attempt: the relay's first claim runs at once on start, so
	// the first Start may race it rather than the notification.
	b.startAndWait(t, 0, 2*poll)
	var latencies []time.Duration
	for i := 1; i <= samples; i++ {
		latencies = append(latencies, b.startAndWait(t, i, 2*poll))
	}
	med := median(latencies)
	t.Logf("notify latency Start -> handler start: median %s, min %s, max %s over %d starts (poll interval %s)",
		med.Round(time.Microsecond), latencies[0].Round(time.Microsecond), latencies[len(latencies)-1].Round(time.Microsecond), samples, poll)
	require.Less(t, med, time.Second, "median latency with LISTEN/NOTIFY")
}

// TestPollOnlyStillDelivers runs the relay without LISTEN: attempts are
// still delivered, within the poll interval.
func TestPollOnlyStillDelivers(t *testing.T) {
	t.Parallel()
	const poll = time.Second
	b, cfg := setupLatency(t, 3, relay.Config{PollInterval: poll, PollOnly: true})
	for i := range 3 {
		latency := b.startAndWait(t, i, 10*poll)
		t.Logf("poll-only latency: %s", latency.Round(time.Millisecond))
		// Within one poll interval, plus generous slack for a loaded machine.
		require.Less(t, latency, poll+2*time.Second)
	}
	select {
	case <-cfg.TestSignals.Listening.C():
		require.Fail(t, "a PollOnly relay must not LISTEN")
	default:
	}
}
