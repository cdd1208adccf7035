package runtime_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// latencyBundle is a relay, a worker and a handler that reports when it
// starts, for measuring Start-to-handler latency.
type latencyBundle struct {
	*env
	docs    []testfactory.Document
	started chan uuid.UUID
}

func setupLatency(t *testing.T, n int, relayCfg relay.Config) (*latencyBundle, *relay.TestSignals) {
	t.Helper()
	b := &latencyBundle{env: newEnv(t, 8), started: make(chan uuid.UUID, n)}
	b.docs = testfactory.SeedDocuments(b.ctx, t, b.pool, 1, n)
	cands := testfactory.Candidates(b.docs)
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		b.started <- job.Attempt.ID
		return testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], nil)
	})
	rl := b.relay(t, relayCfg)
	rl.TestSignals().Listening.Init()
	w := b.worker(t, h, worker.Config{Concurrency: 2})
	testfactory.RunAll(context.Background(), t, rl.Run, w.Run)
	return b, rl.TestSignals()
}

// startAndWait starts document i and returns how long it took until the
// handler started, waiting for the attempt to complete before returning.
func (b *latencyBundle) startAndWait(t *testing.T, i int, timeout time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	res, err := b.repo.Start(b.ctx, b.pool, b.docs[i].Scope.StartParams())
	require.NoError(t, err)
	latency := b.awaitHandler(t, res.Attempt.ID, t0, timeout)
	require.Eventually(t, func() bool {
		return testfactory.ReadRows(b.ctx, t, b.pool, res.Attempt.ID).Attempt.RunState == kfstype.RunStateSucceeded
	}, hangAfter, 5*time.Millisecond)
	return latency
}

// TestNotifyWakesRelay: with LISTEN on and a poll interval of an hour, the
// notification each Start sends in its transaction wakes the relay: every
// attempt is delivered, which without it would take the hour. No bound on
// how quickly (a loaded machine is slow, not wrong); the latency is
// logged, and measured by tests/bench BenchmarkWakeup.
func TestNotifyWakesRelay(t *testing.T) {
	// Not parallel: it logs latency, so it runs before the package's
	// parallel load.
	const samples = 20
	b, signals := setupLatency(t, samples+1, relay.Config{PollInterval: noPoll})
	signals.Listening.WaitOrTimeout(t, hangAfter)

	// A warm-up attempt: the relay's first claim runs at once on start, so
	// the first Start may race it rather than the notification.
	b.startAndWait(t, 0, hangAfter)
	var latencies []time.Duration
	for i := 1; i <= samples; i++ {
		latencies = append(latencies, b.startAndWait(t, i, hangAfter))
	}
	med := median(latencies)
	t.Logf("notify latency Start -> handler start: median %s, min %s, max %s over %d starts (poll interval %s)",
		med.Round(time.Microsecond), latencies[0].Round(time.Microsecond), latencies[len(latencies)-1].Round(time.Microsecond), samples, noPoll)
}

// TestPollOnlyStillDelivers runs the relay without LISTEN: attempts are
// still delivered, by its polls (the latency, about a poll interval, is
// logged; bounding it would bound the machine's scheduling).
func TestPollOnlyStillDelivers(t *testing.T) {
	t.Parallel()
	const poll = time.Second
	b, signals := setupLatency(t, 3, relay.Config{PollInterval: poll, PollOnly: true})
	for i := range 3 {
		latency := b.startAndWait(t, i, hangAfter)
		t.Logf("poll-only latency: %s", latency.Round(time.Millisecond))
	}
	select {
	case <-signals.Listening.C():
		require.Fail(t, "a PollOnly relay must not LISTEN")
	default:
	}
}

// awaitHandler waits until the handler starts attempt id and returns how
// long that took since t0. Other attempts' starts are not expected.
func (b *latencyBundle) awaitHandler(t *testing.T, id uuid.UUID, t0 time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	select {
	case got := <-b.started:
		require.Equal(t, id, got, "the handler started another attempt")
		return time.Since(t0)
	case <-time.After(timeout):
		require.FailNow(t, "handler did not start", "attempt %s within %s", id, timeout)
		return 0
	}
}

// settle gives the relay time to drain what it saw, go idle and sleep: the
// state in which a missed wake-up costs a whole poll interval.
func settle() { time.Sleep(300 * time.Millisecond) }

// TestStartInCallerTxWakesIdleRelay: a Start inside the caller's
// transaction becomes visible only at the caller's commit. Here another
// row is due by the Start's statement clock (so a statement-time "is a
// relay already busy" test skips the notify), the relay drains that row and
// goes idle, and only then the caller commits: the commit itself must wake
// the relay, whose poll is an hour. Failed before migration 0007 (with a
// 5 s poll: ≈ 3.7 s, the poll's wake-up).
func TestStartInCallerTxWakesIdleRelay(t *testing.T) {
	const samples = 3
	b, signals := setupLatency(t, 2*samples+1, relay.Config{PollInterval: noPoll})
	signals.Listening.WaitOrTimeout(t, hangAfter)
	b.startAndWait(t, 0, hangAfter)

	var latencies []time.Duration
	for i := range samples {
		first, inTx := b.docs[1+2*i], b.docs[2+2*i]
		p := first.Scope.StartParams()
		p.AvailableAt = new(time.Now().Add(200 * time.Millisecond))
		res, err := b.repo.Start(b.ctx, b.pool, p)
		require.NoError(t, err)

		// The caller's transaction runs a second ahead: by its clock the
		// first row is already due when its Start runs.
		dueAt := time.Now().Add(time.Second)
		clock := testfactory.NewClock()
		clock.Advance(dueAt.Sub(clock.Now()))
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		late, err := repo.New(&repo.Config{Clock: clock}).Start(b.ctx, tx, inTx.Scope.StartParams())
		require.NoError(t, err)

		b.awaitHandler(t, res.Attempt.ID, time.Now(), hangAfter)
		time.Sleep(time.Until(dueAt))
		settle()
		t0 := time.Now()
		require.NoError(t, tx.Commit(b.ctx))
		latencies = append(latencies, b.awaitHandler(t, late.Attempt.ID, t0, hangAfter))
	}
	med := median(latencies)
	t.Logf("caller-tx Start: commit -> handler start median %s over %d, poll %s", med.Round(time.Microsecond), samples, noPoll)
}

// TestLockedDueRowDoesNotStallRelay: a due row whose outbox row another
// transaction holds locked (a control-plane call in a caller's
// transaction does) is skipped by the relay's SKIP LOCKED claim. A Start
// committed meanwhile must still wake the relay, and the locked row must go
// out after its lock is released (the relay's follow-up claims), not a poll
// later: the poll is an hour. Failed before migration 0007 (with a 5 s
// poll, the second Start waited ≈ 4.9 s).
func TestLockedDueRowDoesNotStallRelay(t *testing.T) {
	b, signals := setupLatency(t, 3, relay.Config{PollInterval: noPoll})
	signals.Listening.WaitOrTimeout(t, hangAfter)
	b.startAndWait(t, 0, hangAfter)
	settle()

	// Due in 300 ms, and locked before then: the relay's timer claim finds
	// it locked and skips it.
	p := b.docs[1].Scope.StartParams()
	p.AvailableAt = new(time.Now().Add(300 * time.Millisecond))
	locked, err := b.repo.Start(b.ctx, b.pool, p)
	require.NoError(t, err)
	holder, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(context.WithoutCancel(b.ctx)) }()
	_, err = holder.Exec(b.ctx, `SELECT 1 FROM document_compilation_outbox WHERE attempt_id = $1 FOR UPDATE`, locked.Attempt.ID)
	require.NoError(t, err)
	time.Sleep(600 * time.Millisecond)

	t0 := time.Now()
	res, err := b.repo.Start(b.ctx, b.pool, b.docs[2].Scope.StartParams())
	require.NoError(t, err)
	second := b.awaitHandler(t, res.Attempt.ID, t0, hangAfter)
	t.Logf("Start while a due row is locked: Start -> handler start %s (poll %s)", second.Round(time.Microsecond), noPoll)

	t0 = time.Now()
	require.NoError(t, holder.Commit(b.ctx))
	released := b.awaitHandler(t, locked.Attempt.ID, t0, hangAfter)
	t.Logf("locked due row: unlock -> handler start %s (poll %s)", released.Round(time.Microsecond), noPoll)
}

// TestNoWakeupLostUnderChurn: with an hour's poll, only wake-ups deliver.
// In each of many rounds four producers start attempts at once, on the
// pool and in transactions held open for random times, racing the relay
// as it drains, goes idle and registers; then they wait, so the round's
// last commit has no later Start to rescue a lost wake-up. Every round's
// rows must be claimed; a lost wake-up costs the hour (hangAfter fails it
// long before).
func TestNoWakeupLostUnderChurn(t *testing.T) {
	t.Parallel()
	const producers, rounds = 4, 30
	b, signals := setupLatency(t, producers*rounds, relay.Config{PollInterval: noPoll})
	signals.Listening.WaitOrTimeout(t, hangAfter)
	rng := rand.New(rand.NewPCG(1, 7))
	var worst time.Duration
	for r := range rounds {
		ids := make([]uuid.UUID, producers)
		holds := make([]time.Duration, producers) // < 0: on the pool
		for p := range holds {
			holds[p] = time.Duration(rng.IntN(4000)-1000) * time.Microsecond
		}
		var wg sync.WaitGroup
		for p := range producers {
			wg.Go(func() { ids[p] = b.startHolding(t, b.docs[r*producers+p].Scope.StartParams(), holds[p]) })
		}
		wg.Wait()
		committed := time.Now()
		require.Eventually(t, func() bool {
			var pending int
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM document_compilation_outbox WHERE attempt_id = ANY($1) AND status = 'pending'`, ids).Scan(&pending))
			return pending == 0
		}, hangAfter, time.Millisecond, "round %d: a committed row was not claimed: its wake-up was lost", r)
		worst = max(worst, time.Since(committed))
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond) // the relay goes idle at a different moment each round
	}
	for range producers * rounds {
		<-b.started
	}
	t.Logf("%d rounds of %d Starts: worst last commit -> claimed %s (poll %s)", rounds, producers, worst.Round(time.Millisecond), noPoll)
}

// startHolding starts an attempt on the pool (hold < 0) or in a
// transaction committed after hold, and returns its id (the zero id after
// a failure, which it reports); goroutine-safe.
func (e *env) startHolding(t *testing.T, params *repo.StartParams, hold time.Duration) uuid.UUID {
	if hold < 0 {
		res, err := e.repo.Start(e.ctx, e.pool, params)
		if !assert.NoError(t, err) {
			return uuid.Nil
		}
		return res.Attempt.ID
	}
	tx, err := e.pool.Begin(e.ctx)
	if !assert.NoError(t, err) {
		return uuid.Nil
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(e.ctx)) }()
	res, err := e.repo.Start(e.ctx, tx, params)
	if !assert.NoError(t, err) {
		return uuid.Nil
	}
	time.Sleep(hold)
	if !assert.NoError(t, tx.Commit(e.ctx)) {
		return uuid.Nil
	}
	return res.Attempt.ID
}

// TestNoNamedWakeupLostUnderChurn: several direct sources, each woken by
// name (one idle listener per row made due, migration 0010 and after),
// an hour's poll, and producers racing them as TestNoWakeupLostUnderChurn
// races the relay: each commit takes one registration out and names its
// source, which fetches, registers again and looks once more, while other
// commits check. Every round's rows must be fetched; a lost wake-up costs
// the hour (hangAfter fails it long before). Mutations caught: a source
// that does not register again after a named wake-up (the registrations
// run out, commits name nobody, a round stalls), a source that ignores
// its own name, a registration that skips the look once more (a commit
// that checked just before it named nobody: a stall, in some rounds).
func TestNoNamedWakeupLostUnderChurn(t *testing.T) {
	t.Parallel()
	const sources, producers, rounds = 4, 4, 30
	e := newEnv(t, 40)
	docs := testfactory.SeedDocuments(e.ctx, t, e.pool, 1, producers*rounds)
	cands := testfactory.Candidates(docs)
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		return testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], nil)
	})
	var counts observe.Counts
	runs := make([]func(context.Context) error, sources)
	for i := range runs {
		runs[i] = e.directWorker(t, h, pgsource.Config{PollInterval: noPoll, Metrics: &counts}, worker.Config{Concurrency: 8}).Run
	}
	testfactory.RunAll(e.ctx, t, runs...)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM document_compilation_outbox_idle_listeners`).Scan(&n))
		return n == sources
	}, hangAfter, 5*time.Millisecond, "every source registers idle")
	rng := rand.New(rand.NewPCG(2, 9))
	for r := range rounds {
		ids := make([]uuid.UUID, producers)
		var wg sync.WaitGroup
		for p := range producers {
			hold := time.Duration(rng.IntN(4000)-1000) * time.Microsecond // < 0: on the pool
			wg.Go(func() { ids[p] = e.startHolding(t, docs[r*producers+p].Scope.StartParams(), hold) })
		}
		wg.Wait()
		require.Eventually(t, func() bool {
			var pending int
			require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM document_compilation_outbox WHERE attempt_id = ANY($1) AND status = 'pending'`, ids).Scan(&pending))
			return pending == 0
		}, hangAfter, time.Millisecond, "round %d: a committed row was not fetched: its wake-up was lost", r)
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond) // the sources go idle at a different moment each round
	}
	t.Logf("counts: %v", counts.Snapshot())
	require.Positive(t, counts.Get(observe.SourceWokenNamed), "the sources were woken by name")
}
