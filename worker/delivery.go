package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/internal/backoff"
	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/internal/runcfg"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/repo"
)

// One delivery reads top to bottom in this file, in the order it happens:
// process and handle (its whole course), the lease (leasedBySource,
// acquireLease, refused), the heartbeat (runWithHeartbeat, heartbeat), the
// handler (call), the judge (judge), and the outcome (complete, completed,
// retry, fail, abandon, settle, ack, retryDelivery). Only the completions
// of Run's slots leave it: the completer (completer.go) batches their
// writes, then settles each delivery through completed, as a slot would.
// The file stays long on purpose: it is one delivery's path, as River's
// job_executor.go is one job's.

// Outcome says what became of a delivery.
type Outcome string

// Outcomes of Process.
const (
	OutcomeCompleted Outcome = "completed"
	OutcomeFailed    Outcome = "failed"
	OutcomeRetried   Outcome = "retry_scheduled"
	OutcomeExhausted Outcome = "exhausted"
	OutcomeStale     Outcome = "stale"
	OutcomeDeferred  Outcome = "deferred"
	OutcomeLeaseLost Outcome = "lease_lost"
	// OutcomeReleased: the worker was stopping; the attempt was handed
	// back for another run (ScheduleRetry, WORKER_SHUTDOWN) before its
	// handler ran, or after it returned its context's error.
	OutcomeReleased Outcome = "released"
	// OutcomeAbandoned: the stop abandoned the handler, which had not
	// returned within Config.CancelGrace of its context's cancellation;
	// the attempt was handed back (ScheduleRetry, WORKER_SHUTDOWN) under
	// its lease, and the handler's late writes are refused.
	OutcomeAbandoned Outcome = "abandoned"
	// OutcomeRejected: Process was called on a nil Worker, with a nil
	// context or a nil Message; nothing was done.
	OutcomeRejected Outcome = "rejected"
)

// Result is what Process did with one delivery.
type Result struct {
	AttemptID uuid.UUID
	Outcome   Outcome
	// Lease is the lease held while the handler ran, if it ran.
	Lease *repo.Lease
	// TenantID is the attempt's tenant once it was leased, else "".
	TenantID string
	// Err is the handler's error or the error that decided the outcome.
	Err error
	// ErrorCode is the error code the outcome recorded
	// (last_error_code): "" for a completion and for an outcome that
	// recorded nothing.
	ErrorCode string
	// HandlerDuration is how long the handler ran (until it returned, or
	// was abandoned); zero when it did not run.
	HandlerDuration time.Duration
}

// Process handles one delivery: lease, run, record, acknowledge. It never
// returns an error; what it did is in the Result (and the logs, metrics
// and Config.Events). ctx is the handler's: its end cancels the handler,
// whose attempt is then handed back (WORKER_SHUTDOWN) if it returns the
// context's error; Process waits for the handler to return, however long
// it takes (Run's stop abandons a handler that does not).
func (w *Worker) Process(ctx context.Context, msg Message) Result {
	if err := w.usable(ctx); err != nil {
		return Result{Outcome: OutcomeRejected, Err: err}
	}
	if nilvalue.Is(msg) {
		return Result{Outcome: OutcomeRejected, Err: runcfg.Invalid("worker", "msg", "must not be nil")}
	}
	res := w.process(ctx, msg, nil)
	w.finish(res)
	return res
}

// process handles one delivery inside the Tracer's span, when there is a
// Tracer. A completion handed to the completer ends its span there, after
// its commit. r is the Run the delivery came to (nil for Process); ctx is
// the parent of the handler's context.
func (w *Worker) process(ctx context.Context, msg Message, r *run) Result {
	if w.cfg.Tracer == nil {
		return w.handle(ctx, msg, r, nil)
	}
	sctx, end := w.cfg.Tracer.StartProcess(ctx, msg)
	if sctx == nil {
		sctx = ctx
	}
	if end == nil {
		end = func(Result) {}
	}
	res := w.handle(sctx, msg, r, end)
	if res.Outcome != outcomeHandedOff {
		end(res)
	}
	return res
}

// handle is process without the span; end goes with a completion handed
// to the completer.
func (w *Worker) handle(ctx context.Context, msg Message, r *run, end func(Result)) Result {
	d := msg.Delivery()
	res := Result{AttemptID: d.AttemptID}
	log := w.log.With("attempt_id", d.AttemptID, "queue_job_id", d.QueueJobID)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.WriteTimeout)
	defer cancel()
	// stopping ends when the worker stops taking deliveries: Run's stop,
	// or Process's ctx.
	stopping, stopErr := ctx, error(nil)
	var c *completer
	if r != nil {
		stopping, stopErr, c = r.taking, ErrStopping, r.c
	}

	attempt, lease, preleased := leasedBySource(msg)
	if !preleased && stopping.Err() == nil {
		// Not on ctx: a cancel arriving while the lease commits would leave
		// the lease taken but unreported, and the attempt stranded until it
		// expires. Once leased, a stopping worker releases it (below).
		var err error
		if attempt, lease, err = w.acquireLease(stopping, wctx, d); err != nil {
			return w.refused(ctx, wctx, log, msg, d, err)
		}
	}
	if stopping.Err() != nil {
		if r != nil {
			r.unstarted.Add(1)
		}
		stopErr = cmp.Or(stopErr, stopping.Err())
		if lease == nil {
			// Stopping before the lease: hand the delivery back untouched.
			res.Outcome, res.Err = OutcomeDeferred, stopErr
			w.retryDelivery(wctx, log, msg, time.Now())
			return res
		}
		// Stopping with a lease (the source's, or one just taken): hand
		// the attempt back for another run at once rather than at the
		// lease's expiry.
		if !preleased {
			w.cfg.Metrics.Add(observe.LeasesAcquired, 1)
		}
		res.Lease, res.TenantID = lease, attempt.TenantID
		v := verdict{shutdown: true, retry: true, code: ErrorCodeWorkerShutdown,
			message: "the worker stopped before running the attempt", err: stopErr}
		werr := w.retry(wctx, lease, attempt, v, time.Second, &res)
		if res.Outcome == OutcomeRetried {
			res.Outcome = OutcomeReleased
		}
		return w.settle(ctx, wctx, log, msg, lease, werr, res)
	}
	w.cfg.Metrics.Add(observe.LeasesAcquired, 1)
	res.Lease, res.TenantID = lease, attempt.TenantID
	log = log.With("tenant_id", attempt.TenantID)
	log.DebugContext(ctx, "attempt running", "execution_attempt", attempt.ExecutionAttempts, "lease_expires_at", lease.ExpiresAt)

	job := &Job{Attempt: attempt, repo: w.cfg.Repo, pool: w.pool}
	job.lease.Store(lease)
	ran := w.runWithHeartbeat(ctx, job, msg, log, r)
	herr := ran.err
	lease = job.Lease()
	res.Lease, res.HandlerDuration = lease, ran.took
	if ran.abandoned {
		// attempt, not job.Attempt: the handler still runs and may write
		// job.Attempt.
		return w.abandon(ctx, wctx, log, msg, lease, attempt, ran.lost, r, res)
	}
	if ran.lost {
		w.cfg.Metrics.Add(observe.LeasesLost, 1)
		var why string
		if herr != nil {
			why = w.judge(herr, false).message // the handler's error may be unusable
		}
		log.WarnContext(ctx, "lease lost; the handler was stopped", "err", why)
		res.Outcome, res.Err = OutcomeLeaseLost, repo.ErrLeaseLost
		// The attempt is someone else's now (or will be redelivered by the
		// relay at lease expiry): this delivery is spent.
		w.ack(wctx, log, msg)
		return res
	}
	if herr == nil {
		done := completionOf(job, lease)
		if c != nil {
			// The completer records it with others in one statement and
			// acknowledges after the commit; this slot moves on.
			c.submit(&pendingCompletion{c: done, msg: msg, log: log, res: res, end: end})
			return Result{AttemptID: d.AttemptID, Outcome: outcomeHandedOff}
		}
		a, err := w.complete(wctx, done)
		return w.completed(ctx, wctx, log, msg, lease, a, err, res)
	}
	v := w.judge(herr, ctx.Err() != nil)
	res.Err = v.err
	var werr error
	switch {
	case v.shutdown:
		// The worker is stopping: hand the attempt back for another run.
		werr = w.retry(wctx, lease, job.Attempt, v, time.Second, &res)
		if res.Outcome == OutcomeRetried {
			res.Outcome = OutcomeReleased
		}
	case v.retry:
		// Marked retryable, or transient (the database connection failed,
		// a conflict, a timeout): not the document's fault.
		n := job.Attempt.ExecutionAttempts
		werr = w.retry(wctx, lease, job.Attempt, v, backoff.Exponential(w.cfg.RetryBackoffBase, w.cfg.RetryBackoffCap, n), &res)
	default:
		werr = w.fail(wctx, lease, v, &res)
	}
	return w.settle(ctx, wctx, log, msg, lease, werr, res)
}

// leasedBySource returns a LeasedMessage's attempt and lease.
func leasedBySource(msg Message) (*kfstype.Attempt, *repo.Lease, bool) {
	lm, ok := msg.(LeasedMessage)
	if !ok {
		return nil, nil, false
	}
	a, l := lm.Leased()
	return a, l, a != nil && l != nil
}

// acquireLease takes the delivery's lease (on wctx, see handle). A
// delivery that beat its relay's MarkDispatched is tried again in the slot
// after waits of 1, 2, 4 … ms, up to PendingDeliveryWait in all: handed
// back at once, it would wait pendingDeliveryDelay for a mark that is
// usually a commit away. A refused try writes nothing.
func (w *Worker) acquireLease(ctx, wctx context.Context, d repo.Delivery) (*kfstype.Attempt, *repo.Lease, error) {
	p := &repo.AcquireLeaseParams{Delivery: d, WorkerID: w.cfg.ID, LeaseDuration: w.cfg.LeaseDuration}
	attempt, lease, err := w.cfg.Repo.AcquireLease(wctx, w.pool, p)
	for wait, left := time.Millisecond, w.cfg.PendingDeliveryWait; errors.Is(err, repo.ErrDeliveryPending) && left > 0; wait *= 2 {
		wait = min(wait, left)
		left -= wait
		w.cfg.Metrics.Add(observe.PendingWaits, 1)
		if sleep(ctx, wait); ctx.Err() != nil {
			break // stopping: the caller hands the delivery back
		}
		attempt, lease, err = w.cfg.Repo.AcquireLease(wctx, w.pool, p)
	}
	return attempt, lease, err
}

// refused handles a delivery AcquireLease refused.
func (w *Worker) refused(ctx, wctx context.Context, log *slog.Logger, msg Message, d repo.Delivery, err error) Result {
	res := Result{AttemptID: d.AttemptID, Err: err}
	var te *repo.TransitionError
	switch {
	case errors.Is(err, repo.ErrDeliveryMismatch), errors.Is(err, repo.ErrNotFound):
		res.Outcome = OutcomeStale
	case errors.Is(err, repo.ErrInvalidInput):
		// A malformed delivery (zero attempt id, an empty or invalid job
		// id: forged or corrupted), since New checked the worker's own id
		// and lease: it can never be leased, so handing it back would
		// loop. Acknowledge it like a stale one.
		res.Outcome = OutcomeStale
	case errors.Is(err, repo.ErrDeliveryPending):
		// Delivered before the relay recorded the job id: try again soon.
		w.cfg.Metrics.Add(observe.DeferredDelivery, 1)
		res.Outcome = OutcomeDeferred
		w.retryDelivery(wctx, log, msg, time.Now().Add(pendingDeliveryDelay))
		return res
	case errors.Is(err, repo.ErrAttemptsExhausted):
		a, ferr := w.cfg.Repo.FailExhausted(wctx, w.pool, &repo.FailExhaustedParams{Delivery: d})
		if ferr != nil && !errors.Is(ferr, repo.ErrInvalidTransition) && !errors.Is(ferr, repo.ErrDeliveryMismatch) {
			log.ErrorContext(ctx, "fail exhausted attempt", "err", ferr)
			res.Outcome, res.Err = OutcomeDeferred, ferr
			w.retryDelivery(wctx, log, msg, time.Now().Add(time.Second))
			return res
		}
		w.cfg.Metrics.Add(observe.Exhausted, 1)
		res.Outcome = OutcomeExhausted
		if ferr == nil {
			// Failed here, not by another worker first.
			res.ErrorCode, res.TenantID = kfstype.ErrorCodeExecutionAttemptsExhausted, a.TenantID
		}
	case errors.As(err, &te) && te.From.Terminal():
		res.Outcome = OutcomeStale
	case errors.As(err, &te):
		// Leased by another worker: try again once that lease could have
		// lapsed. (A retry_wait attempt has no job id, so its deliveries
		// are mismatches above.)
		notBefore := time.Now().Add(time.Second)
		if a := te.Attempt; a != nil && a.LeaseExpiresAt != nil && a.LeaseExpiresAt.After(notBefore) {
			notBefore = *a.LeaseExpiresAt
		}
		w.cfg.Metrics.Add(observe.DeferredDelivery, 1)
		res.Outcome = OutcomeDeferred
		w.retryDelivery(wctx, log, msg, notBefore)
		return res
	default:
		// Connection trouble and the like: the delivery is still good.
		log.ErrorContext(ctx, "acquire lease failed", "err", err)
		res.Outcome = OutcomeDeferred
		w.retryDelivery(wctx, log, msg, time.Now().Add(time.Second))
		return res
	}
	switch res.Outcome {
	case OutcomeStale:
		w.cfg.Metrics.Add(observe.StaleDeliveries, 1)
		log.DebugContext(ctx, "stale delivery acknowledged", "reason", err)
		if dm, ok := msg.(Discarder); ok {
			if err := dm.Discard(wctx); err != nil {
				log.ErrorContext(ctx, "discard failed; the queue will redeliver", "err", err)
			}
			return res
		}
	case OutcomeExhausted:
		log.WarnContext(ctx, "attempt failed", "outcome", res.Outcome, "error_code", kfstype.ErrorCodeExecutionAttemptsExhausted)
	}
	w.ack(wctx, log, msg)
	return res
}

// handlerRun is what became of one run of the handler.
type handlerRun struct {
	err error
	// lost: the lease was lost while the handler ran.
	lost bool
	// abandoned: the stop abandoned the handler (it has not returned).
	abandoned bool
	// took is how long the handler ran, until it returned or was
	// abandoned.
	took time.Duration
}

// runWithHeartbeat runs the handler while a goroutine extends the lease.
// It reports whether the lease was lost; the handler's context is canceled
// with cause repo.ErrLeaseLost the moment it is. Each renewal also extends
// msg when it is an Extender. Under Run (r not nil) the handler runs on a
// goroutine of its own, so that the stop can abandon it.
func (w *Worker) runWithHeartbeat(ctx context.Context, job *Job, msg Message, log *slog.Logger, r *run) handlerRun {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var lostFlag atomic.Bool
	beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		ext, _ := msg.(Extender)
		w.heartbeat(beatCtx, job, ext, log, func(cause error) {
			lostFlag.Store(true)
			cancel(cause)
		})
	}()
	start := time.Now()
	var ran handlerRun
	if r == nil {
		ran.err = w.call(hctx, job)
	} else {
		ran = w.callUnderStop(hctx, job, r)
	}
	ran.took = time.Since(start)
	// Stopped before an abandoned attempt is handed back: a renewal after
	// the hand-back would only be refused.
	stopBeat()
	<-done
	ran.lost = lostFlag.Load()
	return ran
}

// returned is a handler's return, with what its Run's stop had done by
// then.
type returned struct {
	err error
	// stopping: the Run had stopped taking deliveries; canceled: it had
	// canceled the handlers' contexts.
	stopping, canceled bool
}

// callUnderStop runs the handler on a goroutine of its own and waits for
// it to return, or for r's stop to abandon it; a handler that returns
// after the stop began is counted in r's report. An abandoned handler's
// goroutine ends when the handler returns; its return goes to nobody.
func (w *Worker) callUnderStop(ctx context.Context, job *Job, r *run) handlerRun {
	ch := make(chan returned, 1)
	go func() {
		err := w.call(ctx, job)
		ch <- returned{err: err, stopping: r.stopping(), canceled: r.handlers.Err() != nil}
	}()
	var got returned
	select {
	case got = <-ch:
	case <-r.abandoned:
		select {
		case got = <-ch: // returned as the grace ended: not abandoned
		default:
			r.abandonedN.Add(1)
			return handlerRun{abandoned: true}
		}
	}
	switch {
	case !got.stopping:
	case got.canceled:
		r.canceled.Add(1)
	default:
		r.finished.Add(1)
	}
	return handlerRun{err: got.err}
}

// heartbeat extends the lease every HeartbeatInterval until ctx ends. A
// refusal means the lease is lost; other errors are retried until the
// lease would have expired. Expiry is read on this process's clock
// (Lease.StopBy), so a host whose clock runs behind the database's still
// stops in time. Each call is bounded by the lease's expiry, so
// a call stuck on an unresponsive server ends the lease on time, and so
// does a timer between calls: calls that fail at once (no route to the
// database) would otherwise leave the handler running until the first
// tick after the expiry, up to a HeartbeatInterval into another worker's
// lease. After a renewal it extends ext (may be nil), the message's
// redelivery deadline.
func (w *Worker) heartbeat(ctx context.Context, job *Job, ext Extender, log *slog.Logger, lose func(error)) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	expiry := time.NewTimer(time.Until(job.Lease().StopBy()))
	defer expiry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-expiry.C:
			lose(fmt.Errorf("%w: not renewed before it expired at %s", repo.ErrLeaseLost, job.Lease().ExpiresAt))
			return
		case <-t.C:
		}
		cur := job.Lease()
		// A heartbeat that has not returned by the lease's expiry is too
		// late (a frozen server or a hung connection): giving up then stops
		// the handler when the lease ends instead of whenever the call does.
		callCtx, cancelCall := context.WithDeadline(ctx, cur.StopBy())
		renewed, err := w.cfg.Repo.Heartbeat(callCtx, w.pool, &repo.HeartbeatParams{Lease: cur, LeaseDuration: w.cfg.LeaseDuration})
		cancelCall()
		switch {
		case err == nil:
			job.lease.Store(renewed)
			expiry.Reset(time.Until(renewed.StopBy()))
			if ext != nil {
				if err := ext.Extend(ctx); err != nil {
					log.WarnContext(ctx, "extending the delivery's deadline failed; the queue may redeliver it (the lease still fences the attempt)", "err", err)
				}
			}
		case ctx.Err() != nil:
			return
		case errors.Is(err, repo.ErrLeaseLost), errors.Is(err, repo.ErrNotFound):
			lose(fmt.Errorf("%w: %w", repo.ErrLeaseLost, err))
			return
		case !time.Now().Before(cur.StopBy()):
			lose(fmt.Errorf("%w: could not heartbeat before expiry: %w", repo.ErrLeaseLost, err))
			return
		default:
			log.WarnContext(ctx, "heartbeat failed; retrying", "err", err)
		}
	}
}

// call runs the handler, turning a panic into an error.
func (w *Worker) call(ctx context.Context, job *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			w.cfg.Metrics.Add(observe.Panicked, 1)
			w.log.ErrorContext(ctx, "handler panicked", "attempt_id", job.Attempt.ID, "panic", p, "stack", string(debug.Stack()))
			err = Fatal(kfstype.ErrorCodeHandlerPanic, fmt.Errorf("panic: %v", p))
		}
	}()
	return w.handler.Work(ctx, job)
}

// verdict is what the worker records for a handler's error.
type verdict struct {
	// shutdown: the handler stopped because the worker is stopping; the
	// attempt is handed back (ScheduleRetry, WORKER_SHUTDOWN).
	shutdown bool
	// retry: ScheduleRetry while attempts remain; otherwise Fail.
	retry bool
	// code and message are what is stored: never empty, valid UTF-8
	// without NUL, the code at most 64 characters, so that Fail and
	// ScheduleRetry accept them.
	code    string
	message string
	// err is Result.Err: the handler's error, or one describing it when
	// the handler's error itself is unusable (a nil pointer, a panicking
	// method).
	err error
}

// judge works out the verdict on a handler's error once, and under
// recover: the error is the handler's code, and its Error, Is, As and
// Unwrap methods may panic, or it may be a nil pointer in a non-nil
// error. A nil pointer fails the attempt (DOCUMENT_COMPILATION_FAILED)
// without calling its methods; a method that panics fails it with
// DOCUMENT_COMPILATION_PANIC, like a handler that panicked. stopping
// says the stop canceled the handler's context: its context's error, or
// the cause (ErrStopping, ErrStopTimeout), hands the attempt back.
func (w *Worker) judge(herr error, stopping bool) (v verdict) {
	defer func() {
		if p := recover(); p != nil {
			w.cfg.Metrics.Add(observe.Panicked, 1)
			v = failedVerdict(kfstype.ErrorCodeHandlerPanic, fmt.Sprintf("panic in a method of the handler's error (%T): %v", herr, p))
		}
	}()
	if nilvalue.Is(herr) {
		return failedVerdict(kfstype.ErrorCodeCompilationFailed, fmt.Sprintf("the handler returned a nil %T as its error", herr))
	}
	v.err = herr
	var e *Error
	marked := errors.As(herr, &e) && e != nil
	switch {
	case stopping && (errors.Is(herr, context.Canceled) || errors.Is(herr, ErrStopping)):
		v.shutdown, v.retry, v.code = true, true, ErrorCodeWorkerShutdown
		v.message = repo.TruncateMessage("the worker stopped while the handler ran: " + herr.Error())
		return v
	case marked && e.Retryable, repo.IsRetryable(herr), !marked && w.cfg.RetryPlainErrors:
		v.retry, v.code = true, kfstype.ErrorCodeCompilationRetryable
	default:
		v.code = kfstype.ErrorCodeCompilationFailed
	}
	if marked {
		// Cut to 64 characters at a rune boundary; invalid UTF-8 and NUL
		// (which PostgreSQL's text refuses) become U+FFFD.
		v.code = cmp.Or(repo.TruncateErrorCode(e.Code), v.code)
	}
	text := herr.Error()
	if marked {
		text = withoutCode(text, e)
	}
	v.message = cmp.Or(repo.TruncateMessage(text), fmt.Sprintf("the handler returned a %T with an empty message", herr))
	return v
}

// withoutCode is text, the Error of a handler's error that is or wraps e,
// without the "code: " that e's Error puts before its cause: the code is
// stored in its own column (last_error_code), so the stored message says
// it once. An *Error without a cause keeps its code as the message.
func withoutCode(text string, e *Error) string {
	if e.Code == "" || e.Err == nil {
		return text
	}
	own, cause := e.Error(), e.Err.Error()
	i := strings.LastIndex(text, own)
	if i < 0 {
		return text // a wrapper that does not show e's text
	}
	return text[:i] + cause + text[i+len(own):]
}

// failedVerdict fails the attempt with code and message, which also make
// up Result.Err.
func failedVerdict(code, message string) verdict {
	return verdict{code: code, message: message, err: Fatal(code, errors.New(message))}
}

// completion is the write that completes an attempt under lease:
// Complete, or CompleteThrough when the handler asked for it
// (job.CompleteThrough left its candidate in through). The worker makes
// that choice here, for one completion (complete) and for a batch's
// entries (entry, in completer.go).
type completion struct {
	lease   *repo.Lease
	through *repo.CompleteThroughParams
}

// completionOf is job's completion under lease.
func completionOf(job *Job, lease *repo.Lease) completion {
	return completion{lease: lease, through: job.through}
}

// complete records one completion in its own statement.
func (w *Worker) complete(ctx context.Context, c completion) (*kfstype.Attempt, error) {
	if c.through == nil {
		return w.cfg.Repo.Complete(ctx, w.pool, &repo.CompleteParams{Lease: c.lease})
	}
	p := *c.through
	p.Lease = c.lease
	return w.cfg.Repo.CompleteThrough(ctx, w.pool, &p)
}

// completed records the outcome of a handler that returned nil, given what
// its completion returned (the completed attempt, or werr), and settles
// the delivery.
func (w *Worker) completed(ctx, wctx context.Context, log *slog.Logger, msg Message, lease *repo.Lease, a *kfstype.Attempt, werr error, res Result) Result {
	switch {
	case errors.Is(werr, repo.ErrInvalidTransition) || errors.Is(werr, repo.ErrCandidateRejected) || errors.Is(werr, repo.ErrInvalidInput):
		// The handler returned without reaching smoke_eval_passed, or
		// left a candidate (job.CompleteThrough) that cannot be bound:
		// running it again would end the same way.
		v := w.judge(Fatal(kfstype.ErrorCodeCompilationFailed, fmt.Errorf("completing the attempt was refused: %w", werr)), false)
		res.Err = v.err
		werr = w.fail(wctx, lease, v, &res)
	case werr == nil:
		res.Outcome = OutcomeCompleted
		w.cfg.Metrics.Add(observe.Completed, 1)
		if w.durations != nil && a != nil && a.CompletedAt != nil {
			w.durations.Observe(observe.StartToSucceeded, a.CompletedAt.Sub(a.CreatedAt))
		}
	}
	return w.settle(ctx, wctx, log, msg, lease, werr, res)
}

// retry schedules another execution after delay (ScheduleRetry), or fails
// the attempt once its execution attempts are spent, and says which in
// res.Outcome.
func (w *Worker) retry(ctx context.Context, lease *repo.Lease, a *kfstype.Attempt, v verdict, delay time.Duration, res *Result) error {
	if a.ExecutionAttempts >= a.MaxExecutionAttempts {
		w.cfg.Metrics.Add(observe.Exhausted, 1)
		_, err := w.cfg.Repo.Fail(ctx, w.pool, &repo.FailParams{
			Lease: lease, ErrorCode: kfstype.ErrorCodeExecutionAttemptsExhausted,
			ErrorMessage: fmt.Sprintf("execution attempts exhausted (%d of %d); last error: %s: %s", a.ExecutionAttempts, a.MaxExecutionAttempts, v.code, v.message),
		})
		res.Outcome, res.ErrorCode = OutcomeExhausted, kfstype.ErrorCodeExecutionAttemptsExhausted
		return err
	}
	_, err := w.cfg.Repo.ScheduleRetry(ctx, w.pool, &repo.ScheduleRetryParams{
		Lease: lease, RetryDelay: delay, ErrorCode: v.code, ErrorMessage: v.message,
	})
	if err == nil {
		w.cfg.Metrics.Add(observe.Retried, 1)
	}
	res.Outcome, res.ErrorCode = OutcomeRetried, v.code
	return err
}

// fail ends the attempt as failed with the verdict's code and message.
func (w *Worker) fail(ctx context.Context, lease *repo.Lease, v verdict, res *Result) error {
	_, err := w.cfg.Repo.Fail(ctx, w.pool, &repo.FailParams{Lease: lease, ErrorCode: v.code, ErrorMessage: v.message})
	if err == nil {
		w.cfg.Metrics.Add(observe.Failed, 1)
	}
	res.Outcome, res.ErrorCode = OutcomeFailed, v.code
	return err
}

// abandon hands back the attempt of a handler the stop abandoned (r's
// third phase), under the lease it still holds: ScheduleRetry with
// WORKER_SHUTDOWN, or Fail as exhausted with no execution attempt left.
// Its fence (the lease token and worker id) is what keeps the handler's
// late writes out, since the handler runs on. With the lease lost
// already, there is nothing to hand back.
func (w *Worker) abandon(ctx, wctx context.Context, log *slog.Logger, msg Message, lease *repo.Lease, a *kfstype.Attempt, lost bool, r *run, res Result) Result {
	w.cfg.Metrics.Add(observe.HandlersAbandoned, 1)
	res.Err = ErrHandlerAbandoned
	if lost {
		r.notHandedBack.Add(1)
		w.cfg.Metrics.Add(observe.LeasesLost, 1)
		log.WarnContext(ctx, "handler abandoned after its lease was lost", "cancel_grace", w.cfg.CancelGrace)
		res.Outcome = OutcomeLeaseLost
		w.ack(wctx, log, msg)
		return res
	}
	v := verdict{shutdown: true, retry: true, code: ErrorCodeWorkerShutdown, err: ErrHandlerAbandoned,
		message: fmt.Sprintf("the worker stopped and abandoned the handler: it had not returned %s after its context was canceled", w.cfg.CancelGrace)}
	werr := w.retry(wctx, lease, a, v, time.Second, &res)
	if res.Outcome == OutcomeRetried {
		res.Outcome = OutcomeAbandoned
	}
	res = w.settle(ctx, wctx, log, msg, lease, werr, res)
	if werr != nil {
		r.notHandedBack.Add(1)
	}
	return res
}

// settle acknowledges the delivery once its outcome is recorded (werr ==
// nil) or the lease is lost, and otherwise hands it back for after the
// lease.
func (w *Worker) settle(ctx, wctx context.Context, log *slog.Logger, msg Message, lease *repo.Lease, werr error, res Result) Result {
	if werr != nil {
		res.ErrorCode = "" // nothing was recorded
		if errors.Is(werr, repo.ErrLeaseLost) {
			w.cfg.Metrics.Add(observe.LeasesLost, 1)
			res.Outcome, res.Err = OutcomeLeaseLost, werr
			w.ack(wctx, log, msg)
			return res
		}
		// The outcome is not recorded: deliver again after the lease, when
		// this or another worker can take it over.
		log.ErrorContext(ctx, "recording the outcome failed; will be redelivered", "err", werr)
		res.Outcome, res.Err = OutcomeDeferred, werr
		w.retryDelivery(wctx, log, msg, lease.ExpiresAt)
		return res
	}
	logOutcome(ctx, log, res)
	w.ack(wctx, log, msg)
	return res
}

// logOutcome writes the one line of a recorded outcome: DEBUG for a
// success or an attempt handed back by a stopping worker, WARN for a
// failure (retried or final). The error is the handler's, as recorded.
func logOutcome(ctx context.Context, log *slog.Logger, res Result) {
	switch res.Outcome {
	case OutcomeCompleted:
		log.DebugContext(ctx, "attempt succeeded")
	case OutcomeReleased:
		log.DebugContext(ctx, "attempt handed back", "outcome", res.Outcome)
	case OutcomeAbandoned:
		log.WarnContext(ctx, "handler abandoned; attempt handed back", "outcome", res.Outcome)
	case OutcomeRetried:
		log.WarnContext(ctx, "attempt failed; retry scheduled", "outcome", res.Outcome, "err", res.Err)
	case OutcomeFailed, OutcomeExhausted:
		log.WarnContext(ctx, "attempt failed", "outcome", res.Outcome, "err", res.Err)
	}
}

// ack acknowledges the delivery; a failed Ack is logged only (the queue
// redelivers it).
func (w *Worker) ack(ctx context.Context, log *slog.Logger, msg Message) {
	if err := msg.Ack(ctx); err != nil {
		log.ErrorContext(ctx, "ack failed; the queue will redeliver", "err", err)
	}
}

// retryDelivery hands the delivery back to the queue, to come again not
// before notBefore; a failure is logged only.
func (w *Worker) retryDelivery(ctx context.Context, log *slog.Logger, msg Message, notBefore time.Time) {
	if err := msg.Retry(ctx, notBefore); err != nil {
		log.ErrorContext(ctx, "handing the delivery back failed", "err", err)
	}
}
