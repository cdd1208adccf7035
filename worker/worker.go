// Package worker runs compilation handlers for delivered attempts: it takes
// the attempt's lease, heartbeats it every third of the lease, cancels the
// handler's context the moment the lease is lost, and records the outcome
// (Complete, ScheduleRetry, Fail) before acknowledging the delivery. Stale,
// duplicate and forged deliveries are acknowledged (discarded, for a
// Discarder) without running the handler.
//
// What a handler returns decides the outcome: nil completes the attempt; a
// plain error fails it for good (DOCUMENT_COMPILATION_FAILED), and so do
// [Fatal] with its code and a panic; [Retryable] and transient database
// errors (repo.IsRetryable) retry it after a backoff while execution
// attempts remain. [Config.RetryPlainErrors] retries plain errors too.
//
// [Worker.Stop] stops a running worker gracefully, like River's Stop: no
// more deliveries, running handlers finish until [Config.StopTimeout] or
// Stop's context ends, then their contexts are canceled (cause
// [ErrStopTimeout]); [Worker.StopAndCancel] (and Run's context ending)
// cancels them at once (cause [ErrStopping]). A handler that has not
// returned [Config.CancelGrace] after the cancellation is abandoned: its
// attempt is handed back for another run under the lease it still holds,
// and its late writes are fenced off. Both return a [StopReport].
// [Config.Events] receives an [Event] for every outcome the worker
// records.
//
// Package github.com/knowledgefs/kfsdb/kfsdbtest runs one attempt through a
// handler with [Worker.Process], for tests, and holds a runnable example of
// a worker on pgsource (Example_workerPgsource).
package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/internal/backoff"
	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/internal/runcfg"
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

// Extender is a Message whose queue redelivers it unless it is settled
// or extended within a deadline (a broker's ack wait). The worker calls
// Extend after every heartbeat that renewed the attempt's lease, so a
// handler running past that deadline does not get its message delivered
// to another worker meanwhile. An Extend error is logged only: the lease,
// not the message, fences the attempt.
type Extender interface {
	Message
	Extend(ctx context.Context) error
}

// Discarder is a Message whose queue tells a delivery that is done (Ack)
// from one that should never have come (a broker's terminate). The worker
// calls Discard instead of Ack for a stale delivery (a job id the attempt
// no longer has, an attempt that ended or does not exist, a malformed
// delivery); every other delivery it settles with Ack or Retry.
type Discarder interface {
	Message
	Discard(ctx context.Context) error
}

// Source is the queue a worker receives from.
type Source interface {
	// Receive blocks until a message is available or ctx ends.
	Receive(ctx context.Context) (Message, error)
}

// TracedMessage is a Message that carries its attempt's trace context
// beside the payload: memqueue's messages (relay.Message.TraceContext)
// and pgsource's (with its Config.TraceContexts) are; a broker adapter
// reads it from the message's headers. A Tracer continues that trace.
type TracedMessage interface {
	Message
	// TraceContext is the trace context the message was published (or
	// started) under; zero when it has none.
	TraceContext() kfstype.TraceContext
}

// Tracer traces each delivery's handling; adapters/otel's NewWorkerTracer
// implements it with OpenTelemetry, so that this module needs no tracing
// library. Implementations must be safe for concurrent use.
type Tracer interface {
	// StartProcess is called as a slot takes msg, before the lease. The
	// context it returns carries the whole handling: the lease, the
	// handler, the outcome's write and the acknowledgement. end is called
	// once with the Result when the outcome is recorded (for a completion
	// Run's completer batches, after that statement's commit). A nil
	// context or end is ignored.
	StartProcess(ctx context.Context, msg Message) (_ context.Context, end func(Result))
}

// LeasedMessage is a Message whose attempt the Source already leased to
// this worker as it fetched it (PostgreSQL direct delivery: pgsource). The
// worker runs it under that lease, with no AcquireLease; Ack and Retry
// have nothing to do (the database is the queue: the outcome's write is
// the acknowledgement).
type LeasedMessage interface {
	Message
	// Leased returns the attempt as leased and its lease (both non-nil,
	// the lease held by the worker the source is bound to).
	Leased() (*kfstype.Attempt, *repo.Lease)
}

// LeasingSource is a Source that leases as it fetches: every message it
// returns is a LeasedMessage. New binds it to the worker (its id, lease
// duration and slots), and Run runs it beside the slots until the worker
// stops taking deliveries (a stop's first moment, or Run's ctx ending).
type LeasingSource interface {
	Source
	// Bind names the worker the source leases for. It fails when the
	// source is bound to another worker already.
	Bind(workerID string, leaseDuration time.Duration, slots int) error
	// Run fetches for the slots waiting in Receive until ctx ends; then it
	// hands back (ScheduleRetry, WORKER_SHUTDOWN) any lease no slot took.
	Run(ctx context.Context) error
}

// Worker processes deliveries. Create it with New. Safe for concurrent use.
type Worker struct {
	cfg     *Config
	pool    *pgxpool.Pool
	src     Source
	handler Handler
	log     *slog.Logger
	// durations is cfg.Metrics when it also takes durations, else nil.
	durations observe.Durations
	// testSignals are for tests (TestSignals); they do nothing until a
	// test initializes them.
	testSignals TestSignals
	// events counts what Config.Events dropped.
	eventsDropped atomic.Int64
	// runs are the Runs running, for Stop.
	runsMu   sync.Mutex
	runs     map[*run]struct{}
	lastStop StopReport
}

// New returns a worker. cfg may be nil. Bad arguments and Config fields
// are refused with a *repo.InputError naming them ("pool", "src", "h",
// "Config.Concurrency", …; errors.Is repo.ErrInvalidInput), as is a
// LeasingSource that refuses to bind (a pgsource.Source bound to another
// worker already).
func New(pool *pgxpool.Pool, src Source, h Handler, cfg *Config) (*Worker, error) {
	switch {
	case pool == nil:
		return nil, runcfg.Invalid("worker", "pool", "must not be nil")
	case nilvalue.Is(src):
		return nil, runcfg.Invalid("worker", "src", "must not be nil")
	case nilvalue.Is(h):
		return nil, runcfg.Invalid("worker", "h", "must not be nil")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if ls, ok := src.(LeasingSource); ok {
		if err := ls.Bind(c.ID, c.LeaseDuration, c.Concurrency); err != nil {
			return nil, fmt.Errorf("worker: bind source: %w", err)
		}
	}
	w := &Worker{cfg: c, pool: pool, src: src, handler: h, log: c.Logger.With("worker", c.ID)}
	w.durations, _ = c.Metrics.(observe.Durations)
	return w, nil
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
	return runcfg.Usable(ctx, "worker", "Worker", w != nil && w.cfg != nil)
}

// Run receives and processes deliveries with Concurrency goroutines until
// it is stopped, then records the outcomes and returns. Stop and
// StopAndCancel stop it (see them: a bounded drain, then the handlers'
// contexts canceled, then handlers that still run abandoned, their
// attempts handed back), and Run then returns nil; ctx's end stops it like
// StopAndCancel, and Run returns ctx.Err() (LastStopReport has that
// stop's report). Either way it returns within
// Config.CancelGrace of the handlers' cancellation plus the final writes,
// whatever the handlers do. A handler's context carries ctx's values, not
// its cancellation: the stop cancels it, with a cause that says why
// (ErrStopping, ErrStopTimeout).
//
// A worker may run several Runs at once (Stop stops them all); a
// LeasingSource runs once at a time.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.usable(ctx); err != nil {
		return err
	}
	r := w.newRun(ctx)
	defer r.end()
	if !w.cfg.SingleCompletions {
		r.c = w.startCompleter(ctx)
	}
	var source, slots sync.WaitGroup
	if ls, ok := w.src.(LeasingSource); ok {
		// The source stops as the run stops taking deliveries, like the
		// slots, and hands back what it fetched for slots that stopped
		// meanwhile.
		source.Go(func() {
			if err := ls.Run(r.taking); err != nil && r.taking.Err() == nil {
				w.log.ErrorContext(ctx, "source stopped", "err", err)
			}
		})
	}
	for range w.cfg.Concurrency {
		slots.Go(func() {
			var down slotBackoff
			for r.taking.Err() == nil {
				msg, err := w.src.Receive(r.taking)
				if err != nil {
					if r.taking.Err() == nil {
						w.log.ErrorContext(ctx, "receive failed", "err", err)
						sleep(r.taking, time.Second)
					}
					continue
				}
				res := w.process(r.handlers, msg, r)
				if res.Outcome != outcomeHandedOff {
					w.finish(res)
				}
				sleep(r.taking, down.next(res))
			}
		})
	}
	slotsDone := make(chan struct{})
	go func() { slots.Wait(); close(slotsDone) }()
	r.supervise(ctx, slotsDone)
	source.Wait()
	if r.c != nil {
		r.c.close() // records and acknowledges what the slots handed off
	}
	return ctx.Err()
}

// Bounds of a slot's wait after a delivery it could not lease because the
// database did not answer.
const (
	slotBackoffBase = 10 * time.Millisecond
	slotBackoffCap  = time.Second
)

// slotBackoff paces a slot while the database does not answer. A delivery
// whose lease could not be taken for a connection error is handed back to
// the queue for a second later, but the slot would take the next one at
// once: with a backlog in the queue, every slot would cycle through it as
// fast as connections are refused (about 1,500 refused leases and as many
// logged errors a second for 8 slots and a backlog of 1,500, all through a
// 30 s outage). The slot waits 10 ms, doubling to 1 s, after each such
// delivery, and not at all after any other outcome.
type slotBackoff struct{ failures int32 }

// next returns the wait after res.
func (b *slotBackoff) next(res Result) time.Duration {
	if res.Outcome != OutcomeDeferred || !repo.IsRetryable(res.Err) {
		b.failures = 0
		return 0
	}
	b.failures++
	return backoff.Exponential(slotBackoffBase, slotBackoffCap, b.failures)
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
