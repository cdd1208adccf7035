package runtime_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// scripted is a handler whose behaviour is chosen per attempt; it reports
// each attempt it starts on started (buffered by the test).
type scripted struct {
	started chan uuid.UUID
	by      map[uuid.UUID]worker.HandlerFunc
}

func (s *scripted) Work(ctx context.Context, job *worker.Job) error {
	s.started <- job.Attempt.ID
	return s.by[job.Attempt.ID](ctx, job)
}

// stopFixture is a direct worker over attempts started in one space, each
// run by its own script.
type stopFixture struct {
	e        *env
	attempts []*kfstype.Attempt
	cand     testfactory.Candidate
	h        *scripted
	events   chan worker.Event
	w        *worker.Worker
	runDone  chan error
}

// newStopFixture starts n attempts; script(i) is attempt i's handler.
// The worker is built (cfg with the fixture's Events) but not run.
func newStopFixture(t *testing.T, n int, cfg worker.Config, script func(f *stopFixture, i int) worker.HandlerFunc) *stopFixture {
	t.Helper()
	e := newEnv(t, 16)
	docs, attempts := e.start(t, 1, n, 0)
	f := &stopFixture{e: e, attempts: attempts, cand: docs[0].Candidate,
		h:      &scripted{started: make(chan uuid.UUID, n), by: map[uuid.UUID]worker.HandlerFunc{}},
		events: make(chan worker.Event, 100), runDone: make(chan error, 1)}
	for i, a := range attempts {
		f.h.by[a.ID] = script(f, i)
	}
	cfg.Events = f.events
	f.w = e.directWorker(t, f.h, pgsource.Config{}, cfg)
	f.w.TestSignals().Stopping.Init()
	return f
}

// run runs the worker until the test ends (a stop ends it first).
func (f *stopFixture) run(t *testing.T, ctx context.Context) {
	go func() { f.runDone <- f.w.Run(ctx) }()
	t.Cleanup(func() {
		_, _ = f.w.StopAndCancel(context.Background())
		<-f.runDone
	})
}

// waitStarted waits for n handlers to start and returns their attempts.
func (f *stopFixture) waitStarted(t *testing.T, n int) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	for range n {
		select {
		case id := <-f.h.started:
			ids = append(ids, id)
		case <-time.After(hangAfter):
			t.Fatalf("%d of %d handlers started", len(ids), n)
		}
	}
	return ids
}

// event waits for the next outcome event.
func (f *stopFixture) event(t *testing.T) worker.Event {
	t.Helper()
	select {
	case ev := <-f.events:
		return ev
	case <-time.After(hangAfter):
		t.Fatal("no outcome event")
		return worker.Event{}
	}
}

// runReturned waits for Run to return and returns its error.
func (f *stopFixture) runReturned(t *testing.T) error {
	t.Helper()
	select {
	case err := <-f.runDone:
		f.runDone <- err // for the cleanup
		return err
	case <-time.After(hangAfter):
		t.Fatal("Run did not return")
		return nil
	}
}

type stopResult struct {
	rep worker.StopReport
	err error
}

// stopAsync calls stop (w.Stop or w.StopAndCancel) on a goroutine.
func stopAsync(ctx context.Context, stop func(context.Context) (worker.StopReport, error)) <-chan stopResult {
	ch := make(chan stopResult, 1)
	go func() {
		rep, err := stop(ctx)
		ch <- stopResult{rep, err}
	}()
	return ch
}

func waitStop(t *testing.T, ch <-chan stopResult) worker.StopReport {
	t.Helper()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		return r.rep
	case <-time.After(hangAfter):
		t.Fatal("the stop did not return")
		return worker.StopReport{}
	}
}

// requireHandedBack requires that the attempt is waiting for another run,
// handed back by a stopping worker after one execution.
func requireHandedBack(ctx context.Context, t *testing.T, f *stopFixture, id uuid.UUID) *testfactory.Rows {
	t.Helper()
	rows := testfactory.RequireInvariants(ctx, t, f.e.pool, id)
	require.Equal(t, kfstype.RunStateRetryWait, rows.Attempt.RunState)
	require.Equal(t, new(worker.ErrorCodeWorkerShutdown), rows.Attempt.LastErrorCode)
	require.Nil(t, rows.Attempt.LeaseToken, "handed back under the lease, not left to expire")
	require.EqualValues(t, 1, rows.Attempt.ExecutionAttempts)
	require.Equal(t, kfstype.OutboxStatusPending, rows.Outbox.Status)
	return rows
}

func TestStop(t *testing.T) {
	t.Parallel()

	// Mutation: Stop cancelling the handlers at once (no drain): they
	// still finish when released, but their writes on the canceled
	// context fail and the report says Canceled.
	t.Run("HandlersThatFinishWithinTheDrainAreRecorded", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		f := newStopFixture(t, 3, worker.Config{Concurrency: 2, StopTimeout: hangAfter, CancelGrace: hangAfter},
			func(f *stopFixture, _ int) worker.HandlerFunc {
				return func(ctx context.Context, job *worker.Job) error {
					<-release
					return testfactory.CompileJob(ctx, job, f.cand, nil)
				}
			})
		ctx := f.e.ctx
		f.run(t, ctx)
		ran := f.waitStarted(t, 2)
		stopped := stopAsync(ctx, f.w.Stop)
		f.w.TestSignals().Stopping.WaitOrTimeout(t, hangAfter)
		close(release)
		require.Equal(t, worker.StopReport{Finished: 2}, waitStop(t, stopped))
		require.NoError(t, f.runReturned(t), "Run returns nil after Stop")

		for _, id := range ran {
			rows := testfactory.RequireInvariants(ctx, t, f.e.pool, id)
			require.Equal(t, kfstype.RunStateSucceeded, rows.Attempt.RunState)
		}
		// Fetching stopped as the stop began: the third attempt, due all
		// along, was never leased.
		for _, a := range f.attempts {
			if a.ID != ran[0] && a.ID != ran[1] {
				rows := testfactory.RequireInvariants(ctx, t, f.e.pool, a.ID)
				require.Equal(t, kfstype.RunStateDispatchPending, rows.Attempt.RunState)
				require.Zero(t, rows.Attempt.ExecutionAttempts)
			}
		}
		for range 2 {
			ev := f.event(t)
			require.Equal(t, worker.OutcomeCompleted, ev.Outcome)
			require.Contains(t, ran, ev.AttemptID)
		}
		_, err := f.w.Stop(ctx)
		require.ErrorIs(t, err, worker.ErrNotRunning)
	})

	// Mutations: judge without its stop rule (the context's error fails
	// the attempt instead of handing it back); the handlers' contexts
	// canceled without a cause.
	t.Run("HandlersThatHonourCancellationAreRecordedByTheErrorRule", func(t *testing.T) {
		t.Parallel()
		causes := make(chan error, 1)
		scripts := []func(f *stopFixture) worker.HandlerFunc{
			func(*stopFixture) worker.HandlerFunc { // the context's error
				return func(ctx context.Context, _ *worker.Job) error {
					<-ctx.Done()
					causes <- context.Cause(ctx)
					return ctx.Err()
				}
			},
			func(*stopFixture) worker.HandlerFunc { // the cause, wrapped
				return func(ctx context.Context, _ *worker.Job) error {
					<-ctx.Done()
					return fmt.Errorf("stopped: %w", context.Cause(ctx))
				}
			},
			func(f *stopFixture) worker.HandlerFunc { // finishes its work anyway
				return func(ctx context.Context, job *worker.Job) error {
					<-ctx.Done()
					return testfactory.CompileJob(context.WithoutCancel(ctx), job, f.cand, nil)
				}
			},
			func(*stopFixture) worker.HandlerFunc { // a failure of its own
				return func(ctx context.Context, _ *worker.Job) error {
					<-ctx.Done()
					return worker.Fatal("STOPPED_BADLY", errors.New("gave up"))
				}
			},
		}
		f := newStopFixture(t, len(scripts), worker.Config{Concurrency: len(scripts), StopTimeout: hangAfter, CancelGrace: hangAfter},
			func(f *stopFixture, i int) worker.HandlerFunc { return scripts[i](f) })
		ctx := f.e.ctx
		f.run(t, ctx)
		f.waitStarted(t, len(scripts))
		stopCtx, endDrain := context.WithCancel(ctx)
		stopped := stopAsync(stopCtx, f.w.Stop)
		f.w.TestSignals().Stopping.WaitOrTimeout(t, hangAfter)
		endDrain() // Stop's context ends the drain

		rep := waitStop(t, stopped)
		require.ErrorIs(t, rep.Cause, worker.ErrStopTimeout)
		rep.Cause = nil
		require.Equal(t, worker.StopReport{Canceled: 4}, rep)
		cause := <-causes
		require.ErrorIs(t, cause, worker.ErrStopTimeout, "the handler's context says why it was canceled")
		require.ErrorIs(t, cause, worker.ErrStopping)

		requireHandedBack(ctx, t, f, f.attempts[0].ID)
		requireHandedBack(ctx, t, f, f.attempts[1].ID)
		rows := testfactory.RequireInvariants(ctx, t, f.e.pool, f.attempts[2].ID)
		require.Equal(t, kfstype.RunStateSucceeded, rows.Attempt.RunState)
		rows = testfactory.RequireInvariants(ctx, t, f.e.pool, f.attempts[3].ID)
		require.Equal(t, kfstype.RunStateFailed, rows.Attempt.RunState)
		require.Equal(t, new("STOPPED_BADLY"), rows.Attempt.LastErrorCode)
	})

	// Each handler running as the stop began is counted once: one
	// finishes in the drain, one returns when canceled, one ignores it
	// and is abandoned when StopAndCancel's context ends (the grace is
	// far away, so nothing here depends on how soon a handler returns).
	// Mutation: callUnderStop not preferring a return that is ready as
	// the grace ends, or counting by the time of the count instead of the
	// return: the counts move.
	t.Run("TheReportCountsWhatFinishedWasCanceledAndWasAbandoned", func(t *testing.T) {
		t.Parallel()
		releaseFinisher, releaseIgnorer := make(chan struct{}), make(chan struct{})
		scripts := []func(f *stopFixture) worker.HandlerFunc{
			func(f *stopFixture) worker.HandlerFunc {
				return func(ctx context.Context, job *worker.Job) error {
					<-releaseFinisher
					return testfactory.CompileJob(ctx, job, f.cand, nil)
				}
			},
			func(*stopFixture) worker.HandlerFunc {
				return func(ctx context.Context, _ *worker.Job) error {
					<-ctx.Done()
					return ctx.Err()
				}
			},
			func(*stopFixture) worker.HandlerFunc {
				return func(context.Context, *worker.Job) error {
					<-releaseIgnorer
					return nil
				}
			},
		}
		f := newStopFixture(t, len(scripts), worker.Config{Concurrency: len(scripts), StopTimeout: hangAfter, CancelGrace: hangAfter},
			func(f *stopFixture, i int) worker.HandlerFunc { return scripts[i](f) })
		defer close(releaseIgnorer)
		ctx := f.e.ctx
		f.run(t, ctx)
		f.waitStarted(t, len(scripts))
		stopCtx, endDrain := context.WithCancel(ctx)
		stopped := stopAsync(stopCtx, f.w.Stop)
		f.w.TestSignals().Stopping.WaitOrTimeout(t, hangAfter)

		close(releaseFinisher)
		ev := f.event(t)
		require.Equal(t, f.attempts[0].ID, ev.AttemptID)
		require.Equal(t, worker.OutcomeCompleted, ev.Outcome)

		endDrain()
		ev = f.event(t)
		require.Equal(t, f.attempts[1].ID, ev.AttemptID)
		require.Equal(t, worker.OutcomeReleased, ev.Outcome)
		require.Equal(t, worker.ErrorCodeWorkerShutdown, ev.ErrorCode)

		abandonNow, abandon := context.WithCancel(ctx)
		abandon()
		escalated := stopAsync(abandonNow, f.w.StopAndCancel)
		ev = f.event(t)
		require.Equal(t, f.attempts[2].ID, ev.AttemptID)
		require.Equal(t, worker.OutcomeAbandoned, ev.Outcome)

		for _, rep := range []worker.StopReport{waitStop(t, stopped), waitStop(t, escalated)} {
			require.ErrorIs(t, rep.Cause, worker.ErrStopTimeout, "the first cause stays")
			rep.Cause = nil
			require.Equal(t, worker.StopReport{Finished: 1, Canceled: 1, Abandoned: 1}, rep)
		}
		require.NoError(t, f.runReturned(t))
		requireHandedBack(ctx, t, f, f.attempts[1].ID)
		requireHandedBack(ctx, t, f, f.attempts[2].ID)
	})

	// Run's context ending is StopAndCancel: bounded by CancelGrace
	// whatever the handler does, and its report kept for LastStopReport.
	// Mutation: Run waiting for every handler (no abandonment) hangs here.
	t.Run("RunsContextEndingAbandonsAfterTheGrace", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		defer close(release)
		f := newStopFixture(t, 1, worker.Config{Concurrency: 1, CancelGrace: time.Millisecond},
			func(*stopFixture, int) worker.HandlerFunc {
				return func(context.Context, *worker.Job) error {
					<-release
					return nil
				}
			})
		ctx, cancel := context.WithCancel(f.e.ctx)
		f.run(t, ctx)
		f.waitStarted(t, 1)
		cancel()
		require.ErrorIs(t, f.runReturned(t), context.Canceled)
		rep := f.w.LastStopReport()
		require.ErrorIs(t, rep.Cause, worker.ErrStopping)
		require.ErrorIs(t, rep.Cause, context.Canceled, "the cause wraps Run's context's")
		rep.Cause = nil
		require.Equal(t, worker.StopReport{Abandoned: 1}, rep)
		requireHandedBack(f.e.ctx, t, f, f.attempts[0].ID)
	})
}

// TestStopAbandonsAHandlerThatIgnoresCancellation is not parallel: its
// last check is that no goroutine of the worker or the source outlives
// the abandoned handler, which only holds while no other test runs one
// (parallel tests start after the sequential ones end).
//
// Mutations: abandon not handing the attempt back (it stays running
// until its lease expires); the slot recording the late return (Run does
// not return); the handler's goroutine not ending with it.
func TestStopAbandonsAHandlerThatIgnoresCancellation(t *testing.T) {
	release := make(chan struct{})
	late := make(chan error, 1)
	f := newStopFixture(t, 1, worker.Config{Concurrency: 1, CancelGrace: time.Millisecond},
		func(*stopFixture, int) worker.HandlerFunc {
			return func(_ context.Context, job *worker.Job) error {
				<-release
				// Too late: the attempt is no longer this lease's.
				late <- job.Advance(context.Background(), kfstype.CheckpointParsed)
				return nil
			}
		})
	ctx := f.e.ctx
	testfactory.InstallLeaseAudit(ctx, t, f.e.pool)
	f.run(t, ctx)
	f.waitStarted(t, 1)

	rep, err := f.w.StopAndCancel(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, rep.Cause, worker.ErrStopping)
	rep.Cause = nil
	require.Equal(t, worker.StopReport{Abandoned: 1}, rep)
	require.NoError(t, f.runReturned(t))

	ev := f.event(t)
	require.Equal(t, worker.Event{AttemptID: f.attempts[0].ID, TenantID: f.attempts[0].TenantID, Outcome: worker.OutcomeAbandoned,
		ErrorCode: worker.ErrorCodeWorkerShutdown, HandlerDuration: ev.HandlerDuration, Err: worker.ErrHandlerAbandoned}, ev)
	rows := requireHandedBack(ctx, t, f, f.attempts[0].ID)
	require.Contains(t, *rows.Attempt.LastErrorMessage, "abandoned the handler")
	require.Equal(t, kfstype.CheckpointQueued, rows.Attempt.Checkpoint)

	// The handler returns at last: its write is fenced off, and its
	// outcome goes nowhere.
	close(release)
	require.ErrorIs(t, <-late, repo.ErrLeaseLost)
	requireNoRuntimeGoroutines(t)
	after := testfactory.RequireInvariants(ctx, t, f.e.pool, f.attempts[0].ID)
	require.Equal(t, rows.Attempt, after.Attempt, "the late handler changed nothing")
	require.Empty(t, f.events, "no event for the late return")
	testfactory.RequireFencedWrites(ctx, t, f.e.pool)
}

// requireNoRuntimeGoroutines waits until no goroutine runs code of the
// worker or the PostgreSQL source (it fails on a hang, never on how long
// that takes).
func requireNoRuntimeGoroutines(t *testing.T) {
	t.Helper()
	var stacks []byte
	leaked := func() bool {
		buf := make([]byte, 1<<22)
		stacks = buf[:runtime.Stack(buf, true)]
		return bytes.Contains(stacks, []byte("kfsdb/worker.")) || bytes.Contains(stacks, []byte("kfsdb/pgsource."))
	}
	deadline := time.Now().Add(hangAfter)
	for leaked() {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines of the worker or the source are still running:\n%s", stacks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
