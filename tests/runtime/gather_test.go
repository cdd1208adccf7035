package runtime_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestDirectFetchGathersTheSlotsItServed: after a fetch that filled its
// batch, the source's next fetch waits (pgsource.Config.GatherWindow) for
// the slots that fetch served to ask again, then fetches once for all of
// them, however their asking is spread out.
//
// The test is the worker: it binds the source and calls Receive itself,
// one goroutine per slot, each holding the lease it got until the test
// releases it, so it decides when each slot asks again. Nothing here
// depends on scheduling: the window (an hour) is never waited out, and
// the source does nothing between a full fetch and the next but gather
// (pgsource/run.go), so with every slot holding a lease the next fetch can
// only start once all eight have asked, and then asks for eight; no
// second fetch can start while it is in flight (every slot is waiting for
// it). Fetch sizes are read off the FetchLeases statements (fetchTracer).
//
// Rounds release the slots one by one, each once the one before has asked:
// a source that does not wait (GatherWindow -1) fetches for the first slot
// as it asks (a fetch of 1) and fails. The figure (fetches per lease under
// a backlog, with and without the window) is tests/bench
// BenchmarkFetchesPerLease's, not a test's.
func TestDirectFetchGathersTheSlotsItServed(t *testing.T) {
	t.Parallel()
	const slots, rounds = 8, 3
	e := newEnv(t, 8)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	docs := testfactory.SeedDocuments(ctx, t, e.pool, 1, slots*(rounds+1))
	tr := newFetchTracer()
	src, err := pgsource.New(e.tracedPool(t, tr), &pgsource.Config{
		Logger: discardLog, GatherWindow: time.Hour,
		// Polls while idle, so the source fetches for every slot that
		// asked before the backlog is there (below).
		PollInterval: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, src.Bind("gather-test", time.Hour, slots))
	ran := make(chan error, 1)
	go func() { ran <- src.Run(ctx) }()
	defer func() {
		cancel()
		require.ErrorIs(t, recv(t, ran, "Run to stop"), context.Canceled)
	}()

	// Slot i asks (Receive), reports the lease it got on served and holds
	// it until release[i].
	asked, served := make(chan int, slots), make(chan int, slots)
	release := make([]chan struct{}, slots)
	for i := range slots {
		release[i] = make(chan struct{})
		go func() {
			for {
				asked <- i
				if _, err := src.Receive(ctx); err != nil {
					return // ctx ended
				}
				served <- i
				select {
				case <-release[i]:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for range slots {
		recv(t, asked, "a slot to ask")
	}

	// The queue is empty: the source fetches, finds nothing and polls.
	// Once it has asked for eight, all eight requests are pending; then
	// the backlog, committed at once, is fetched for all of them: the
	// first full fetch, whoever asked first.
	require.Eventually(t, func() bool { return slices.Contains(tr.batchSizes(0), int32(slots)) },
		hangAfter, 5*time.Millisecond, "the idle source fetched for all %d slots", slots)
	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	for _, d := range docs {
		_, err := e.repo.Start(ctx, tx, d.Scope.StartParams())
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))
	for range slots {
		recv(t, served, "a slot to be served")
	}

	// Each round: every slot holds a lease from the last fetch, which was
	// full (the backlog outlasts the rounds). Release them one at a time,
	// in an order of the round's own, each once the one before has asked;
	// then every slot is served again, by one fetch of eight.
	for r := range rounds {
		before := len(tr.batchSizes(0))
		for k := range slots {
			i := (k*3 + r) % slots // 3 is prime to 8: a permutation per round
			release[i] <- struct{}{}
			require.Equal(t, i, recv(t, asked, "the released slot to ask"))
		}
		for range slots {
			recv(t, served, "a slot to be served")
		}
		require.Equal(t, []int32{slots}, tr.batchSizes(before),
			"round %d: the fetches after a full one, once every slot it served had asked", r+1)
	}
}

// recv receives from ch, failing t if nothing comes within hangAfter.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangAfter):
		t.Fatalf("gave up waiting for %s after %s: a hang", what, hangAfter)
		var zero T
		return zero
	}
}
