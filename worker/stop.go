package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// A stop has three phases, River's Stop and StopAndCancel and Oban's
// shutdown grace period in one:
//
//  1. Drain. The run stops taking deliveries at once (a LeasingSource
//     stops fetching and hands back what it fetched for no slot), and the
//     running handlers go on, their leases heartbeated, until they return,
//     Config.StopTimeout passes or Stop's context ends. StopAndCancel and
//     Run's context skip it.
//  2. Cancel. The handlers still running have their contexts canceled
//     with a cause that says why (context.Cause: ErrStopTimeout after a
//     drain, ErrStopping otherwise; both errors.Is ErrStopping). A handler
//     that returns now is recorded by the usual rule: nil completes the
//     attempt, its context's error (or the cause) hands it back for
//     another run (WORKER_SHUTDOWN), any other error is judged as always.
//  3. Abandon. A handler that has not returned Config.CancelGrace later
//     (or when StopAndCancel's context ends) is abandoned: its slot hands
//     the attempt back (ScheduleRetry, WORKER_SHUTDOWN) under the lease
//     it still holds and leaves. The handler's goroutine runs on until it
//     returns, but the attempt is no longer its own: each of its writes
//     and the outcome it would return are refused by the lease's fence
//     (repo.ErrLeaseLost) or ignored.
//
// Then the completer records the completions handed to it, and Run
// returns; Stop and StopAndCancel return its StopReport.

// Errors of a stop.
var (
	// ErrStopping is the cause (context.Cause) of a handler's context
	// canceled by a stopping worker: StopAndCancel, or Run's context
	// ending (then the cause also wraps that context's cause). ErrStopTimeout
	// wraps it.
	ErrStopping = errors.New("worker: stopping")
	// ErrStopTimeout is the cause of a handler's context canceled because
	// a graceful stop's deadline passed (Config.StopTimeout, or the end of
	// Stop's context) before the handler returned.
	ErrStopTimeout = fmt.Errorf("%w: the stop's deadline passed before the handler returned", ErrStopping)
	// ErrHandlerAbandoned is the Result.Err (and Event.Err) of an attempt
	// whose handler had not returned Config.CancelGrace after the stop
	// canceled it: the worker handed the attempt back and left the handler.
	ErrHandlerAbandoned = errors.New("worker: handler abandoned: it did not return within CancelGrace of its context's cancellation")
	// ErrNotRunning is what Stop and StopAndCancel return when no Run of
	// the worker is running.
	ErrNotRunning = errors.New("worker: not running")
)

// StopReport says what became of the handlers a stop found running. Each
// handler running as the stop began (or started as it began) is counted
// once, in Finished, Canceled or Abandoned.
type StopReport struct {
	// Finished counts the handlers that returned before the stop canceled
	// their contexts; their outcomes were recorded by the usual rule.
	Finished int
	// Canceled counts the handlers that returned after the stop canceled
	// their contexts, within Config.CancelGrace; their outcomes were
	// recorded by the usual rule (a context error hands the attempt back
	// with WORKER_SHUTDOWN).
	Canceled int
	// Abandoned counts the handlers that had not returned by the end of
	// the grace: their attempts were handed back (ScheduleRetry with
	// WORKER_SHUTDOWN, or failed as exhausted when no execution attempt was
	// left) under their leases.
	Abandoned int
	// AbandonedNotHandedBack counts, of Abandoned, the attempts that
	// could not be handed back: the lease was lost already, or the write
	// failed. Each is run again once its lease expires, like a lost
	// worker's.
	AbandonedNotHandedBack int
	// Unstarted counts the deliveries a slot had received, but not
	// started, as the stop began: each was handed back without running (a
	// LeasingSource's lease by ScheduleRetry with WORKER_SHUTDOWN, a
	// broker's delivery by Retry). Leases a LeasingSource fetched for no
	// slot are its own to hand back (pgsource counts them in
	// observe.LeasesHandedBack).
	Unstarted int
	// Cause is what the handlers' contexts were canceled with, nil when
	// every handler returned in the drain (or none ran).
	Cause error
}

// add sums o into r (a worker with several Runs at once).
func (r *StopReport) add(o StopReport) {
	r.Finished += o.Finished
	r.Canceled += o.Canceled
	r.Abandoned += o.Abandoned
	r.AbandonedNotHandedBack += o.AbandonedNotHandedBack
	r.Unstarted += o.Unstarted
	if r.Cause == nil {
		r.Cause = o.Cause
	}
}

// Stop stops the worker gracefully and returns what became of the handlers
// it found running: every Run of the worker stops taking deliveries at
// once, lets its running handlers finish until Config.StopTimeout passes
// or ctx ends (whichever comes first), then cancels their contexts
// (cause ErrStopTimeout), abandons those that have not returned
// Config.CancelGrace later (handing their attempts back under their
// leases), records the outcomes and returns. Stop returns once every Run
// has returned, so it takes at most the drain, the grace and the final
// writes (each bounded by Config.WriteTimeout); Run returns nil. A Stop
// while another is under way joins it (an earlier end of its ctx ends the
// drain); StopAndCancel during a Stop cancels the handlers at once.
//
// It returns ErrNotRunning when no Run is running (a Run started after
// Stop is not stopped by it).
func (w *Worker) Stop(ctx context.Context) (StopReport, error) {
	return w.stop(ctx, false)
}

// StopAndCancel stops the worker at once: every Run stops taking
// deliveries and cancels its running handlers' contexts (cause
// ErrStopping), abandons those that have not returned Config.CancelGrace
// later, or when ctx ends if that is sooner (handing their attempts back
// under their leases), records the outcomes and returns what became of
// the handlers once every Run has returned. Run's context ending does the
// same (without the per-call ctx).
//
// It returns ErrNotRunning when no Run is running.
func (w *Worker) StopAndCancel(ctx context.Context) (StopReport, error) {
	return w.stop(ctx, true)
}

// LastStopReport returns the StopReport of the Run that returned last
// (the zero report before any did): what Run's context ending, which
// returns no report, did to the handlers. Stop and StopAndCancel return
// theirs.
func (w *Worker) LastStopReport() StopReport {
	if w == nil {
		return StopReport{}
	}
	w.runsMu.Lock()
	defer w.runsMu.Unlock()
	return w.lastStop
}

func (w *Worker) stop(ctx context.Context, cancelNow bool) (StopReport, error) {
	if err := w.usable(ctx); err != nil {
		return StopReport{}, err
	}
	w.runsMu.Lock()
	runs := make([]*run, 0, len(w.runs))
	for r := range w.runs {
		runs = append(runs, r)
	}
	w.runsMu.Unlock()
	if len(runs) == 0 {
		return StopReport{}, ErrNotRunning
	}
	for _, r := range runs {
		r.beginStop()
		if cancelNow {
			r.cancel(ErrStopping)
		}
	}
	var rep StopReport
	for _, r := range runs {
		select {
		case <-r.done:
		case <-ctx.Done():
			if cancelNow {
				r.abandonNow()
			} else {
				r.cancel(fmt.Errorf("%w (Stop's context ended: %w)", ErrStopTimeout, context.Cause(ctx)))
			}
			<-r.done
		}
		rep.add(r.report())
	}
	return rep, nil
}

// run is one call of Run: its contexts, its stop's phases and its report.
type run struct {
	w *Worker
	// taking ends when the run stops taking deliveries: the slots' and
	// the LeasingSource's context.
	taking     context.Context
	stopTaking context.CancelFunc
	// handlers is the parent of the handlers' contexts: Run's values, not
	// its cancellation, canceled in the stop's second phase.
	handlers       context.Context
	cancelHandlers context.CancelCauseFunc
	// abandoned is closed in the third phase: a slot whose handler still
	// runs hands the attempt back and leaves it.
	abandoned chan struct{}
	// c is the completer, nil with Config.SingleCompletions.
	c *completer

	mu          sync.Mutex
	stopBegun   chan struct{} // closed by beginStop
	cancelReq   chan struct{} // closed by cancel, with cause set
	abandonReq  chan struct{} // closed by abandonNow
	cause       error
	stopOnce    sync.Once
	abandonOnce sync.Once
	// done is closed once Run has recorded everything and is returning.
	done chan struct{}

	finished, canceled, abandonedN, notHandedBack, unstarted atomic.Int64
}

func (w *Worker) newRun(ctx context.Context) *run {
	r := &run{w: w, abandoned: make(chan struct{}), stopBegun: make(chan struct{}),
		cancelReq: make(chan struct{}), abandonReq: make(chan struct{}), done: make(chan struct{})}
	r.taking, r.stopTaking = context.WithCancel(ctx)
	r.handlers, r.cancelHandlers = context.WithCancelCause(context.WithoutCancel(ctx))
	w.runsMu.Lock()
	if w.runs == nil {
		w.runs = make(map[*run]struct{})
	}
	w.runs[r] = struct{}{}
	w.runsMu.Unlock()
	return r
}

// end unregisters the run and releases its Stop callers.
func (r *run) end() {
	r.stopTaking()
	r.cancelHandlers(context.Canceled)
	r.w.runsMu.Lock()
	delete(r.w.runs, r)
	r.w.lastStop = r.report()
	r.w.runsMu.Unlock()
	close(r.done)
}

func (r *run) beginStop() { r.stopOnce.Do(func() { close(r.stopBegun) }) }

// cancel asks for the second phase now, with cause (the first cause
// asked for wins).
func (r *run) cancel(cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cause == nil {
		r.cause = cause
		close(r.cancelReq)
	}
}

func (r *run) abandonNow() { r.abandonOnce.Do(func() { close(r.abandonReq) }) }

func (r *run) stopCause() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cause
}

// supervise runs the stop's phases once it begins (Stop, StopAndCancel or
// ctx's end) and returns when every slot has left (slotsDone).
func (r *run) supervise(ctx context.Context, slotsDone <-chan struct{}) {
	runEnded := func() {
		r.cancel(fmt.Errorf("%w (Run's context ended: %w)", ErrStopping, context.Cause(ctx)))
	}
	select {
	case <-ctx.Done():
		runEnded()
	case <-r.stopBegun:
	case <-r.cancelReq:
	}
	r.stopTaking()
	r.w.testSignals.Stopping.Signal(struct{}{})

	// Phase 1: drain, unless a cancel was asked for already.
	drain := time.NewTimer(r.w.cfg.StopTimeout)
	defer drain.Stop()
	select {
	case <-slotsDone:
		return
	case <-r.cancelReq:
	case <-drain.C:
		r.cancel(ErrStopTimeout)
	case <-ctx.Done():
		runEnded()
	}

	// Phase 2: cancel, and wait out the grace.
	r.cancelHandlers(r.stopCause())
	grace := time.NewTimer(r.w.cfg.CancelGrace)
	defer grace.Stop()
	select {
	case <-slotsDone:
		return
	case <-grace.C:
	case <-r.abandonReq:
	}

	// Phase 3: abandon. Each slot hands its attempt back (one write,
	// bounded by WriteTimeout) and leaves.
	close(r.abandoned)
	<-slotsDone
}

// stopping reports whether the run has stopped taking deliveries.
func (r *run) stopping() bool { return r.taking.Err() != nil }

func (r *run) report() StopReport {
	return StopReport{
		Finished: int(r.finished.Load()), Canceled: int(r.canceled.Load()), Abandoned: int(r.abandonedN.Load()),
		AbandonedNotHandedBack: int(r.notHandedBack.Load()), Unstarted: int(r.unstarted.Load()), Cause: r.stopCause(),
	}
}
