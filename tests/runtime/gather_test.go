package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// TestDirectFetchGathersTheSlotsItServed: under a backlog, a fetch after
// one that filled its batch waits (pgsource.Config.GatherWindow) for the
// slots that one served, so each fetch serves every slot. 160 attempts, 8
// slots, a handler that returns at once and a window no machine's slots
// outlast: 20 full fetches, the first ones smaller (the slots that asked
// first) and the idle handshake's at the end, 23-26 seen; at most 30.
// Without the wait a fetch went out for the slots waiting as the last
// came back, about half of them: 43 fetches with GatherWindow -1.
func TestDirectFetchGathersTheSlotsItServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 16)
	docs, attempts := e.start(t, 1, 160, 0)
	c := docs[0].Candidate
	h := worker.HandlerFunc(func(_ context.Context, job *worker.Job) error {
		job.CompleteThrough(c.ID, c.Fingerprint)
		return nil
	})
	var counts observe.Counts
	w := e.directWorker(t, h, pgsource.Config{Metrics: &counts, GatherWindow: 5 * time.Second}, worker.Config{Concurrency: 8})
	stop := testfactory.RunAll(e.ctx, t, w.Run)
	waitAllEnded(e.ctx, t, e.pool, attemptIDs(attempts), 60*time.Second)
	stop()
	fetches, leases := counts.Get(observe.Fetches), counts.Get(observe.FetchedLeases)
	t.Logf("%d leases in %d fetches", leases, fetches)
	require.EqualValues(t, 160, leases)
	require.LessOrEqual(t, fetches, int64(30))
}
