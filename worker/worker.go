// Package worker runs compilation handlers for delivered attempts: it takes
// the attempt's lease, heartbeats it every third of the lease, cancels the
// handler's context the moment the lease is lost, and records the outcome
// (Complete, ScheduleRetry, Fail) before acknowledging the delivery. Stale,
// duplicate and forged deliveries are acknowledged without running the
// handler.
package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/internal/backoff"
	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/internal/testsignal"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/repo"
)

// Message is one delivery from the queue.
type Message interface {
	// Delivery names the attempt and the queue job ids it was published with.
	Delivery() repo.Delivery
	// Ack removes the message from the queue. The worker calls it only
	// after the attempt's database write.
	Ack(ctx context.Context) error
	// Retry hands the message back to be delivered again, not before
	// notBefore.
	Retry(ctx context.Context, notBefore time.Time) error
}

// Source is the queue a worker receives from.
type Source interface {
	// Receive blocks until a message is available or ctx ends.
	Receive(ctx context.Context) (Message, error)
}

// Handler compiles one attempt. It advances the attempt through job's
// checkpoints, binds the candidate publication at projection_built and
// returns nil once smoke_eval_passed is reached; the worker then completes
// the attempt. A handler with nothing to persist in between can instead
// call job.CompleteThrough and return nil: the worker then completes from
// any checkpoint in one write. ctx is canceled the moment the lease is
// lost (context.Cause is repo.ErrLeaseLost) or the worker stops.
type Handler interface {
	Work(ctx context.Context, job *Job) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *Job) error

// Work implements Handler. A nil HandlerFunc returns an error.
func (f HandlerFunc) Work(ctx context.Context, job *Job) error {
	if f == nil {
		return errors.New("worker: nil HandlerFunc")
	}
	return f(ctx, job)
}

// Error is a handler error with the error code the attempt fails with.
type Error struct {
	Code      string
	Retryable bool
	Err       error
}

// Error returns "code: cause". It is safe on a nil *Error and on one
// without a code or cause.
func (e *Error) Error() string {
	switch {
	case e == nil:
		return "worker.Error(nil)"
	case e.Err == nil:
		return cmp.Or(e.Code, "worker.Error without a code or a cause")
	case e.Code == "":
		return e.Err.Error()
	}
	return e.Code + ": " + e.Err.Error()
}

// Unwrap returns the cause (nil for a nil *Error).
func (e *Error) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// Retryable marks err as transient: the attempt is retried after a
// backoff while execution attempts remain (code
// DOCUMENT_COMPILATION_RETRYABLE). Handler errors for which
// repo.IsRetryable is true (a lost database connection, a serialization
// failure, a timeout) are retried the same way without being marked. err
// may be nil: the code is then the message.
func Retryable(err error) error {
	return &Error{Code: kfstype.ErrorCodeCompilationRetryable, Retryable: true, Err: err}
}

// Fatal fails the attempt with code (1..64 characters) and err's text. An
// empty code means DOCUMENT_COMPILATION_FAILED; a longer one is cut to 64
// characters, and invalid UTF-8 and NUL bytes in it are replaced with
// U+FFFD (repo.TruncateErrorCode). err may be nil: the code is then the
// message; an empty message is replaced with one naming the error's type.
func Fatal(code string, err error) error {
	return &Error{Code: code, Err: err}
}

// Defaults, from the upstream platform. LeaseDuration defaults to the
// repo transitions' own default, repo.LeaseDurationDefault, defined there
// once.
const (
	ConcurrencyDefault         = 8
	PendingDeliveryWaitDefault = 20 * time.Millisecond
	RetryBackoffBaseDefault    = 5 * time.Second
	RetryBackoffCapDefault     = 300 * time.Second
	WriteTimeoutDefault        = 10 * time.Second
)

// pendingDeliveryDelay is how soon a delivery that beat its relay's
// MarkDispatched is tried again once handed back.
const pendingDeliveryDelay = 25 * time.Millisecond

// ErrorCodeWorkerShutdown is stored when a stopping worker hands an
// attempt back for another execution.
const ErrorCodeWorkerShutdown = "WORKER_SHUTDOWN"

// Config configures a Worker. Zero values take the defaults.
type Config struct {
	// Concurrency is how many deliveries Run processes at once. Defaults to 8.
	Concurrency int
	// HeartbeatInterval is how often a lease is extended. Defaults to a
	// third of LeaseDuration.
	HeartbeatInterval time.Duration
	// ID names the worker in the lease (worker_id). Defaults to
	// worker-<host>-<pid>-<random>.
	ID string
	// LeaseDuration is the lease taken and renewed. Defaults to
	// repo.LeaseDurationDefault (60 s).
	LeaseDuration time.Duration
	// Logger receives structured logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Metrics receives counts. Defaults to observe.Discard.
	Metrics observe.Metrics
	// Repo runs the transitions. Defaults to repo.New(nil).
	Repo *repo.Repo
	// RetryBackoffBase and RetryBackoffCap shape retries of retryable
	// errors: min(cap, base·2^(n−1)), n = execution attempts. Default to
	// 5 s and 300 s.
	RetryBackoffBase time.Duration
	RetryBackoffCap  time.Duration
	// WriteTimeout bounds the outcome write after the handler returned
	// (it runs even when the worker is stopping). Defaults to 10 s.
	WriteTimeout time.Duration
	// PendingDeliveryWait is how long a slot keeps trying to lease a
	// delivery that arrived before its relay's MarkDispatched committed
	// (the relay publishes first, so the mark is usually one commit
	// behind), waiting 1, 2, 4 … ms in between, before it hands the
	// delivery back to be tried again 25 ms later. Defaults to 20 ms;
	// negative hands it back at once.
	PendingDeliveryWait time.Duration
	// SingleCompletions makes Run complete each attempt in its own
	// statement, in its slot, as Process does. By default Run hands the
	// completions to a completer that records those its slots finish
	// meanwhile in one statement (repo.CompleteMany) and acknowledges each
	// delivery after that commit, while the slot takes the next delivery.
	SingleCompletions bool

	// TestSignals are for tests; they do nothing until initialized.
	TestSignals TestSignals
}

// TestSignals report worker events to tests.
type TestSignals struct {
	// Processed carries each delivery's result once it was acknowledged or
	// handed back.
	Processed testsignal.Signal[Result]
}

func (c *Config) withDefaults() *Config {
	out := *c
	out.Concurrency = cmp.Or(c.Concurrency, ConcurrencyDefault)
	out.LeaseDuration = cmp.Or(c.LeaseDuration, repo.LeaseDurationDefault)
	out.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, out.LeaseDuration/3)
	out.RetryBackoffBase = cmp.Or(c.RetryBackoffBase, RetryBackoffBaseDefault)
	out.RetryBackoffCap = cmp.Or(c.RetryBackoffCap, RetryBackoffCapDefault)
	out.WriteTimeout = cmp.Or(c.WriteTimeout, WriteTimeoutDefault)
	out.PendingDeliveryWait = cmp.Or(c.PendingDeliveryWait, PendingDeliveryWaitDefault)
	if out.ID == "" {
		host, _ := os.Hostname()
		out.ID = fmt.Sprintf("worker-%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8])
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.Metrics == nil {
		out.Metrics = observe.Discard{}
	}
	if out.Repo == nil {
		out.Repo = repo.New(nil)
	}
	return &out
}

func (c *Config) validate() error {
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("worker: Concurrency must be > 0, got %d", c.Concurrency)
	case c.LeaseDuration < 0 || c.HeartbeatInterval < 0 || c.RetryBackoffBase < 0 || c.RetryBackoffCap < 0 || c.WriteTimeout < 0:
		return errors.New("worker: durations must not be negative")
	case c.HeartbeatInterval >= c.LeaseDuration:
		return fmt.Errorf("worker: HeartbeatInterval %s must be shorter than LeaseDuration %s", c.HeartbeatInterval, c.LeaseDuration)
	case c.RetryBackoffCap < c.RetryBackoffBase:
		return fmt.Errorf("worker: RetryBackoffCap %s is below RetryBackoffBase %s", c.RetryBackoffCap, c.RetryBackoffBase)
	case repo.ValidateWorkerID(c.ID) != nil:
		return fmt.Errorf("worker: ID: %w", repo.ValidateWorkerID(c.ID))
	case nilvalue.Is(c.Metrics):
		return fmt.Errorf("worker: Metrics is a nil %T", c.Metrics)
	}
	return nil
}

// Worker processes deliveries. Create it with New. Safe for concurrent use.
type Worker struct {
	cfg     *Config
	pool    *pgxpool.Pool
	src     Source
	handler Handler
	log     *slog.Logger
}

// New returns a worker. cfg may be nil.
func New(pool *pgxpool.Pool, src Source, h Handler, cfg *Config) (*Worker, error) {
	switch {
	case pool == nil:
		return nil, errors.New("worker: pool is nil")
	case nilvalue.Is(src):
		return nil, errors.New("worker: source is nil")
	case nilvalue.Is(h):
		return nil, errors.New("worker: handler is nil")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Worker{cfg: c, pool: pool, src: src, handler: h, log: c.Logger.With("worker", c.ID)}, nil
}

// ID returns the worker's id ("" for a nil Worker).
func (w *Worker) ID() string {
	if w == nil || w.cfg == nil {
		return ""
	}
	return w.cfg.ID
}

// usable refuses a Worker not made by New and a nil context.
func (w *Worker) usable(ctx context.Context) error {
	switch {
	case w == nil || w.cfg == nil:
		return errors.New("worker: the Worker is nil or was not made by worker.New")
	case nilvalue.Is(ctx):
		return errors.New("worker: ctx is nil")
	}
	return nil
}

// Run receives and processes deliveries with Concurrency goroutines until
// ctx ends, then waits for them and returns ctx.Err(). Handlers see ctx's
// cancellation; their outcome is still recorded.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.usable(ctx); err != nil {
		return err
	}
	var c *completer
	if !w.cfg.SingleCompletions {
		c = w.startCompleter(ctx)
	}
	var wg sync.WaitGroup
	for range w.cfg.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				msg, err := w.src.Receive(ctx)
				if err != nil {
					if ctx.Err() == nil {
						w.log.ErrorContext(ctx, "receive failed", "err", err)
						sleep(ctx, time.Second)
					}
					continue
				}
				if res := w.process(ctx, msg, c); res.Outcome != outcomeHandedOff {
					w.cfg.TestSignals.Processed.Signal(res)
				}
			}
		})
	}
	wg.Wait()
	if c != nil {
		c.close() // records and acknowledges what the slots handed off
	}
	return ctx.Err()
}

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
	OutcomeReleased  Outcome = "released"
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
	// Err is the handler's error or the error that decided the outcome.
	Err error
}

// Process handles one delivery: lease, run, record, acknowledge. It never
// returns an error; what it did is in the Result (and the logs and metrics).
func (w *Worker) Process(ctx context.Context, msg Message) Result {
	if err := w.usable(ctx); err != nil {
		return Result{Outcome: OutcomeRejected, Err: err}
	}
	if nilvalue.Is(msg) {
		return Result{Outcome: OutcomeRejected, Err: errors.New("worker: msg is nil")}
	}
	res := w.process(ctx, msg, nil)
	w.cfg.TestSignals.Processed.Signal(res)
	return res
}

func (w *Worker) process(ctx context.Context, msg Message, c *completer) Result {
	d := msg.Delivery()
	res := Result{AttemptID: d.AttemptID}
	log := w.log.With("attempt_id", d.AttemptID, "queue_job_id", d.QueueJobID)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.WriteTimeout)
	defer cancel()

	if ctx.Err() != nil {
		// Stopping before the lease: hand the delivery back untouched.
		res.Outcome, res.Err = OutcomeDeferred, ctx.Err()
		w.retryDelivery(wctx, log, msg, time.Now())
		return res
	}
	// Not on ctx: a cancel arriving while the lease commits would leave
	// the lease taken but unreported, and the attempt stranded until it
	// expires. Once leased, a stopping worker releases it (below).
	attempt, lease, err := w.acquireLease(ctx, wctx, d)
	if err != nil {
		return w.refused(ctx, wctx, log, msg, d, err)
	}
	w.cfg.Metrics.Add(observe.LeasesAcquired, 1)
	res.Lease = lease

	job := &Job{Attempt: attempt, repo: w.cfg.Repo, pool: w.pool}
	job.lease.Store(lease)
	herr, lost := w.runWithHeartbeat(ctx, job, log)
	lease = job.Lease()
	res.Lease = lease
	if lost {
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
			c.submit(&pendingCompletion{c: done, msg: msg, log: log, res: res})
			return Result{AttemptID: d.AttemptID, Outcome: outcomeHandedOff}
		}
		return w.completed(ctx, wctx, log, msg, lease, w.complete(wctx, done), res)
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

// acquireLease takes the delivery's lease (on wctx, see process). A
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

// completed records the outcome of a handler that returned nil, given what
// its completion returned, and settles the delivery.
func (w *Worker) completed(ctx, wctx context.Context, log *slog.Logger, msg Message, lease *repo.Lease, werr error, res Result) Result {
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
	}
	return w.settle(ctx, wctx, log, msg, lease, werr, res)
}

// settle acknowledges the delivery once its outcome is recorded (werr ==
// nil) or the lease is lost, and otherwise hands it back for after the
// lease.
func (w *Worker) settle(ctx, wctx context.Context, log *slog.Logger, msg Message, lease *repo.Lease, werr error, res Result) Result {
	if werr != nil {
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
	w.ack(wctx, log, msg)
	return res
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
		if _, ferr := w.cfg.Repo.FailExhausted(wctx, w.pool, &d); ferr != nil && !errors.Is(ferr, repo.ErrInvalidTransition) && !errors.Is(ferr, repo.ErrDeliveryMismatch) {
			log.ErrorContext(ctx, "fail exhausted attempt", "err", ferr)
			res.Outcome, res.Err = OutcomeDeferred, ferr
			w.retryDelivery(wctx, log, msg, time.Now().Add(time.Second))
			return res
		}
		w.cfg.Metrics.Add(observe.Exhausted, 1)
		res.Outcome = OutcomeExhausted
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
	if res.Outcome == OutcomeStale {
		w.cfg.Metrics.Add(observe.StaleDeliveries, 1)
		log.DebugContext(ctx, "stale delivery acknowledged", "reason", err)
	}
	w.ack(wctx, log, msg)
	return res
}

// runWithHeartbeat runs the handler while a goroutine extends the lease.
// It reports whether the lease was lost; the handler's context is canceled
// with cause repo.ErrLeaseLost the moment it is.
func (w *Worker) runWithHeartbeat(ctx context.Context, job *Job, log *slog.Logger) (err error, lost bool) {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var lostFlag atomic.Bool
	beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.heartbeat(beatCtx, job, log, func(cause error) {
			lostFlag.Store(true)
			cancel(cause)
		})
	}()
	err = w.call(hctx, job)
	stopBeat()
	<-done
	return err, lostFlag.Load()
}

// heartbeat extends the lease every HeartbeatInterval until ctx ends. A
// refusal means the lease is lost; other errors are retried until the
// lease would have expired. Each call is bounded by the lease's expiry, so
// a call stuck on an unresponsive server ends the lease on time.
func (w *Worker) heartbeat(ctx context.Context, job *Job, log *slog.Logger, lose func(error)) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := job.Lease()
		// A heartbeat that has not returned by the lease's expiry is too
		// late (a frozen server or a hung connection): giving up then stops
		// the handler when the lease ends instead of whenever the call does.
		callCtx, cancelCall := context.WithDeadline(ctx, cur.ExpiresAt)
		renewed, err := w.cfg.Repo.Heartbeat(callCtx, w.pool, &repo.HeartbeatParams{Lease: cur, LeaseDuration: w.cfg.LeaseDuration})
		cancelCall()
		switch {
		case err == nil:
			job.lease.Store(renewed)
		case ctx.Err() != nil:
			return
		case errors.Is(err, repo.ErrLeaseLost), errors.Is(err, repo.ErrNotFound):
			lose(fmt.Errorf("%w: %w", repo.ErrLeaseLost, err))
			return
		case !time.Now().Before(cur.ExpiresAt):
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
// says the worker's context has ended.
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
	case stopping && errors.Is(herr, context.Canceled):
		v.shutdown, v.retry, v.code = true, true, ErrorCodeWorkerShutdown
		v.message = repo.TruncateMessage(ErrorCodeWorkerShutdown + ": " + herr.Error())
		return v
	case marked && e.Retryable, repo.IsRetryable(herr):
		v.retry, v.code = true, kfstype.ErrorCodeCompilationRetryable
	default:
		v.code = kfstype.ErrorCodeCompilationFailed
	}
	if marked {
		// Cut to 64 characters at a rune boundary; invalid UTF-8 and NUL
		// (which PostgreSQL's text refuses) become U+FFFD.
		v.code = cmp.Or(repo.TruncateErrorCode(e.Code), v.code)
	}
	v.message = cmp.Or(repo.TruncateMessage(herr.Error()), fmt.Sprintf("the handler returned a %T with an empty message", herr))
	return v
}

// failedVerdict fails the attempt with code and message, which also make
// up Result.Err.
func failedVerdict(code, message string) verdict {
	return verdict{code: code, message: message, err: Fatal(code, errors.New(message))}
}

func (w *Worker) retry(ctx context.Context, lease *repo.Lease, a *kfstype.Attempt, v verdict, delay time.Duration, res *Result) error {
	if a.ExecutionAttempts >= a.MaxExecutionAttempts {
		w.cfg.Metrics.Add(observe.Exhausted, 1)
		_, err := w.cfg.Repo.Fail(ctx, w.pool, &repo.FailParams{
			Lease: lease, ErrorCode: kfstype.ErrorCodeExecutionAttemptsExhausted,
			ErrorMessage: fmt.Sprintf("execution attempts exhausted (%d of %d); last error: %s", a.ExecutionAttempts, a.MaxExecutionAttempts, v.message),
		})
		res.Outcome = OutcomeExhausted
		return err
	}
	_, err := w.cfg.Repo.ScheduleRetry(ctx, w.pool, &repo.ScheduleRetryParams{
		Lease: lease, RetryDelay: delay, ErrorCode: v.code, ErrorMessage: v.message,
	})
	if err == nil {
		w.cfg.Metrics.Add(observe.Retried, 1)
	}
	res.Outcome = OutcomeRetried
	return err
}

func (w *Worker) fail(ctx context.Context, lease *repo.Lease, v verdict, res *Result) error {
	_, err := w.cfg.Repo.Fail(ctx, w.pool, &repo.FailParams{Lease: lease, ErrorCode: v.code, ErrorMessage: v.message})
	if err == nil {
		w.cfg.Metrics.Add(observe.Failed, 1)
	}
	res.Outcome = OutcomeFailed
	return err
}

func (w *Worker) ack(ctx context.Context, log *slog.Logger, msg Message) {
	if err := msg.Ack(ctx); err != nil {
		log.ErrorContext(ctx, "ack failed; the queue will redeliver", "err", err)
	}
}

func (w *Worker) retryDelivery(ctx context.Context, log *slog.Logger, msg Message, notBefore time.Time) {
	if err := msg.Retry(ctx, notBefore); err != nil {
		log.ErrorContext(ctx, "handing the delivery back failed", "err", err)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
