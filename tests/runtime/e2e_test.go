package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// TestEndToEndThousandAttempts runs 1,000 attempts through two relays,
// two workers of four goroutines each and the in-process queue, with every
// kind of failure injected by index, a broker outage at the start and
// control-plane cancellations mid-flight. Every attempt must reach its
// expected terminal state, every row its invariants, and no two leases of
// one attempt may ever have been valid at once.
func TestEndToEndThousandAttempts(t *testing.T) {
	t.Parallel()
	const n = 1000
	started := time.Now()
	e := newEnv(t, 24)
	ctx, pool, r, q := e.ctx, e.pool, e.repo, e.q
	testfactory.InstallLeaseAudit(ctx, t, pool)

	docs := testfactory.SeedDocuments(ctx, t, pool, 10, n/10)
	require.Len(t, docs, n)
	attempts := testfactory.StartAllFunc(ctx, t, r, pool, docs, func(i int) int32 {
		if kindOf(i) == kindAlwaysRetry {
			return 2
		}
		return 0
	})
	ids := attemptIDs(attempts)
	kinds := make(map[uuid.UUID]e2eKind, n)
	scopes := make(map[uuid.UUID]testfactory.Scope, n)
	for i, a := range attempts {
		kinds[a.ID] = kindOf(i)
		scopes[a.ID] = docs[i].Scope
	}
	cands := testfactory.Candidates(docs)
	t.Logf("seeded and started %d attempts in %s", n, time.Since(started).Round(time.Millisecond))

	pub := &e2ePublisher{q: q, kinds: kinds, divert: make(chan repo.Delivery, n), diverted: map[uuid.UUID]bool{}}

	// The handler log and the per-attempt run counter.
	var (
		logMu    sync.Mutex
		runs     []handlerRun
		runCount = map[uuid.UUID]int{}
		problems []string
	)
	problem := func(format string, args ...any) {
		logMu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		logMu.Unlock()
	}
	control := make(chan controlRequest, n)
	handler := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		a := job.Attempt
		lease := job.Lease()
		logMu.Lock()
		runCount[a.ID]++
		run := runCount[a.ID]
		runs = append(runs, handlerRun{AttemptID: a.ID, Worker: lease.WorkerID, Token: lease.Token, Acquired: *a.HeartbeatAt})
		logMu.Unlock()
		c := cands[a.KnowledgeSpaceID]

		switch kind := kinds[a.ID]; kind {
		case kindSuccess, kindDying:
			return testfactory.CompileJob(ctx, job, c, nil)
		case kindRetryOnce:
			if run == 1 {
				if err := testfactory.CompileUntil(ctx, job, c, kfstype.CheckpointParsed, nil); err != nil {
					return err
				}
				return worker.Retryable(errors.New("transient: try again"))
			}
			if a.Checkpoint != kfstype.CheckpointParsed {
				problem("attempt %s: retry resumed at %s, want parsed", a.ID, a.Checkpoint)
			}
			return testfactory.CompileJob(ctx, job, c, nil)
		case kindFatal:
			if err := testfactory.CompileUntil(ctx, job, c, kfstype.CheckpointParsed, nil); err != nil {
				return err
			}
			return worker.Fatal(e2eFatalCode, errors.New("the document is unparsable"))
		case kindPanic:
			panic("e2e handler panic for " + a.ID.String())
		case kindAlwaysRetry:
			return worker.Retryable(errors.New("always transient"))
		case kindCancel, kindSupersede:
			if err := testfactory.CompileUntil(ctx, job, c, kfstype.CheckpointParsed, nil); err != nil {
				return err
			}
			done := make(chan struct{})
			control <- controlRequest{AttemptID: a.ID, Kind: kind, Done: done}
			select {
			case <-done:
			case <-ctx.Done():
				problem("attempt %s: handler context ended before the control plane answered: %v", a.ID, context.Cause(ctx))
				return ctx.Err()
			}
			// The attempt is terminal now: the lease is gone and every
			// write through it is refused.
			err := job.Advance(ctx, kfstype.CheckpointOutlineBuilt)
			if !errors.Is(err, repo.ErrLeaseLost) {
				problem("attempt %s: advance after %s returned %v, want ErrLeaseLost", a.ID, kind, err)
			}
			return err
		default:
			problem("attempt %s: handler ran for a %s attempt", a.ID, kind)
			return nil
		}
	})

	// The control plane: ends running attempts on request.
	controlDone := make(chan struct{})
	ctlCtx, stopControl := context.WithCancel(ctx)
	go func() {
		defer close(controlDone)
		for {
			select {
			case <-ctlCtx.Done():
				return
			case req := <-control:
				s := scopes[req.AttemptID]
				reason := "e2e: " + req.Kind.String()
				var err error
				if req.Kind == kindCancel {
					_, err = r.Cancel(ctx, pool, &repo.CancelParams{AttemptRef: s.Ref(req.AttemptID), Reason: &reason})
				} else {
					_, err = r.Supersede(ctx, pool, &repo.SupersedeParams{AttemptRef: s.Ref(req.AttemptID), Reason: &reason})
				}
				if err != nil {
					problem("attempt %s: %s: %v", req.AttemptID, req.Kind, err)
				}
				close(req.Done)
			}
		}
	}()
	defer func() { stopControl(); <-controlDone }()

	// The dying worker: takes the lease of each diverted delivery for one
	// second and is never heard of again.
	type abandoned struct {
		AttemptID         uuid.UUID
		Token             uuid.UUID
		Acquired, Expires time.Time
	}
	var (
		abandonedMu sync.Mutex
		abandonedL  []abandoned
	)
	dyingDone := make(chan struct{})
	go func() {
		defer close(dyingDone)
		for {
			var d repo.Delivery
			select {
			case <-ctlCtx.Done():
				return
			case d = <-pub.divert:
			}
			for {
				a, lease, err := r.AcquireLease(ctx, pool, &repo.AcquireLeaseParams{Delivery: d, WorkerID: "dying-worker", LeaseDuration: time.Second})
				if errors.Is(err, repo.ErrDeliveryPending) {
					// The relay has not recorded the publication yet.
					select {
					case <-ctlCtx.Done():
						return
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				if err != nil {
					problem("dying worker: acquire %s: %v", d.AttemptID, err)
					break
				}
				abandonedMu.Lock()
				abandonedL = append(abandonedL, abandoned{AttemptID: a.ID, Token: lease.Token, Acquired: *a.HeartbeatAt, Expires: lease.ExpiresAt})
				abandonedMu.Unlock()
				break
			}
		}
	}()
	defer func() { stopControl(); <-dyingDone }()

	var relayMetrics, workerMetrics observe.Counts
	relayCfg := relay.Config{
		BackoffBase: 100 * time.Millisecond, BackoffCap: time.Second, MaxDispatchAttempts: 5,
		PollInterval: 100 * time.Millisecond, VisibilityTimeout: time.Minute, Metrics: &relayMetrics,
	}
	workerCfg := worker.Config{
		Concurrency: 4, LeaseDuration: 10 * time.Second,
		RetryBackoffBase: 100 * time.Millisecond, RetryBackoffCap: time.Second, Metrics: &workerMetrics,
	}
	rc1, rc2 := relayCfg, relayCfg
	rc1.ID, rc2.ID = "relay-e2e-1", "relay-e2e-2"
	wc1, wc2 := workerCfg, workerCfg
	wc1.ID, wc2.ID = "worker-e2e-1", "worker-e2e-2"
	r1, r2 := newRelay(t, pool, pub, rc1), newRelay(t, pool, pub, rc2)
	w1, w2 := e.worker(t, handler, wc1), e.worker(t, handler, wc2)

	// A full broker outage from the start: the first publications fail and
	// back off, then the broker recovers.
	pub.setOutage(true)
	runStart := time.Now()
	stop := testfactory.RunAll(context.Background(), t, r1.Run, r2.Run, w1.Run, w2.Run)
	require.Eventually(t, func() bool { return pub.refused.Load() >= 100 }, hangAfter, 5*time.Millisecond)
	pub.setOutage(false)
	t.Logf("outage lifted after %d refused publications", pub.refused.Load())

	require.Eventually(t, func() bool { return liveCount(ctx, t, pool, ids) == 0 }, 90*time.Second, 100*time.Millisecond,
		"attempts still live")
	runDuration := time.Since(runStart)
	stop()
	stopControl()
	<-controlDone
	<-dyingDone

	logMu.Lock()
	defer logMu.Unlock()
	require.Empty(t, problems)

	// Every attempt's terminal state, error code, runs and invariants.
	perAttemptRuns := map[uuid.UUID][]handlerRun{}
	for _, run := range runs {
		perAttemptRuns[run.AttemptID] = append(perAttemptRuns[run.AttemptID], run)
	}
	byKind := map[e2eKind]int{}
	rowsOf := make(map[uuid.UUID]*testfactory.Rows, n)
	for _, id := range ids {
		kind := kinds[id]
		want := e2eExpected[kind]
		rows := testfactory.RequireInvariants(ctx, t, pool, id)
		rowsOf[id] = rows
		a := rows.Attempt
		byKind[kind]++
		require.Equal(t, want.State, a.RunState, "attempt %s (%s)", id, kind)
		if want.Code != "" {
			require.NotNil(t, a.LastErrorCode, "attempt %s (%s)", id, kind)
			require.Equal(t, want.Code, *a.LastErrorCode, "attempt %s (%s): %v", id, kind, a.LastErrorMessage)
		}
		require.Equal(t, want.ExecAttempts, a.ExecutionAttempts, "attempt %s (%s) execution attempts", id, kind)
		require.Len(t, perAttemptRuns[id], want.HandlerRuns, "attempt %s (%s) handler runs", id, kind)
		switch kind {
		case kindPanic:
			require.Contains(t, *a.LastErrorMessage, "e2e handler panic for "+id.String())
		case kindPublishFail:
			require.EqualValues(t, relayCfg.MaxDispatchAttempts, rows.Outbox.DispatchAttempts)
			require.Contains(t, *rows.Outbox.LastError, "injected publish failure")
		case kindSuccess, kindRetryOnce, kindDying:
			require.Equal(t, kfstype.CheckpointPublished, a.Checkpoint)
		}
		// No handler started after the attempt became terminal.
		for _, run := range perAttemptRuns[id] {
			require.True(t, run.Acquired.Before(*a.CompletedAt), "attempt %s: handler run acquired at %s, terminal at %s", id, run.Acquired, *a.CompletedAt)
		}
	}

	// Leases: rebuilt from the database's own audit of lease tokens; every
	// handler run and every abandoned lease is one of them, and no two were
	// ever valid at once.
	intervals := testfactory.ReadLeaseIntervals(ctx, t, pool)
	byToken := map[uuid.UUID]testfactory.LeaseInterval{}
	for _, ivs := range intervals {
		for _, iv := range ivs {
			byToken[iv.Token] = iv
		}
		testfactory.RequireNoOverlap(t, ivs)
	}
	for _, run := range runs {
		iv, ok := byToken[run.Token]
		require.True(t, ok, "handler run under lease %s not in the audit", run.Token)
		require.Equal(t, run.AttemptID, iv.AttemptID)
		require.Equal(t, run.Worker, iv.Worker)
		require.True(t, run.Acquired.Equal(iv.Acquired), "lease %s acquired at %s, audit says %s", run.Token, run.Acquired, iv.Acquired)
		require.False(t, iv.End.IsZero(), "lease %s never ended", run.Token)
	}
	abandonedMu.Lock()
	require.Len(t, abandonedL, byKind[kindDying])
	for _, ab := range abandonedL {
		iv, ok := byToken[ab.Token]
		require.True(t, ok, "abandoned lease %s not in the audit", ab.Token)
		require.True(t, ab.Acquired.Equal(iv.Acquired))
		// Nobody ended it: it lapsed, and the takeover came only after.
		require.True(t, iv.End.Equal(ab.Expires), "abandoned lease %s ended at %s, expired at %s", ab.Token, iv.End, ab.Expires)
		require.Len(t, intervals[ab.AttemptID], 2)
	}
	abandonedMu.Unlock()
	tokens := 0
	for _, ivs := range intervals {
		tokens += len(ivs)
	}
	require.Equal(t, len(runs)+byKind[kindDying], tokens, "lease tokens granted vs handler runs plus abandoned leases")

	// The outage was felt and recovered from: some row that succeeded was
	// published more than once.
	var retriedPublications int
	for _, id := range ids {
		if kinds[id] == kindSuccess && rowsOf[id].Outbox.DispatchAttempts > 1 {
			retriedPublications++
		}
	}
	require.Positive(t, retriedPublications, "no successful row needed a second publication after the outage")
	requireQuiescent(ctx, t, pool)

	published, acked, retried := q.Stats()
	t.Logf("E2E: %d attempts %v settled in %s (total %s incl. seeding); %d handler runs, %d lease tokens, %d successful rows republished after the outage",
		n, kindSummary(byKind), runDuration.Round(time.Millisecond), time.Since(started).Round(time.Millisecond), len(runs), tokens, retriedPublications)
	t.Logf("queue: %d published, %d acked, %d handed back; relay %v; worker %v", published, acked, retried, relayMetrics.Snapshot(), workerMetrics.Snapshot())
}
