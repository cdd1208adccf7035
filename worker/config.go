package worker

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/internal/runcfg"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/repo"
)

// Defaults, from the upstream platform. LeaseDuration defaults to the
// repo transitions' own default, repo.LeaseDurationDefault, defined there
// once.
const (
	ConcurrencyDefault         = 8
	PendingDeliveryWaitDefault = 20 * time.Millisecond
	RetryBackoffBaseDefault    = 5 * time.Second
	RetryBackoffCapDefault     = 300 * time.Second
	WriteTimeoutDefault        = 10 * time.Second
	StopTimeoutDefault         = 15 * time.Second
	CancelGraceDefault         = 5 * time.Second
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
	// Tracer, when set, traces each delivery's handling (adapters/otel's
	// NewWorkerTracer is one). Defaults to none.
	Tracer Tracer
	// SingleCompletions makes Run complete each attempt in its own
	// statement, in its slot, as Process does. By default Run hands the
	// completions to a completer that records those its slots finish
	// meanwhile in one statement (repo.CompleteMany) and acknowledges each
	// delivery after that commit, while the slot takes the next delivery.
	SingleCompletions bool
	// RetryPlainErrors retries a plain handler error (one that is not a
	// *Error: worker.Fatal, worker.Retryable) like a Retryable one: the
	// attempt goes to retry_wait (DOCUMENT_COMPILATION_RETRYABLE) after
	// the backoff while execution attempts remain, and fails with
	// EXECUTION_ATTEMPTS_EXHAUSTED once they are spent. worker.Fatal, a
	// panic and an unusable error (a nil pointer) still fail the attempt
	// at once. Defaults to false, upstream's rule: a plain error fails the
	// attempt (DOCUMENT_COMPILATION_FAILED), and only Retryable errors and
	// transient database errors (repo.IsRetryable) are retried.
	RetryPlainErrors bool
	// StopTimeout bounds the drain of a graceful Stop: how long running
	// handlers may go on, their leases heartbeated, before their contexts
	// are canceled (cause ErrStopTimeout). Stop's context ends it sooner.
	// Defaults to 15 s (Oban's shutdown grace period).
	StopTimeout time.Duration
	// CancelGrace is how long a handler whose context a stop canceled
	// (Stop after StopTimeout, StopAndCancel, Run's context ending) has to
	// return before it is abandoned: its attempt is handed back for another
	// run (ScheduleRetry, WORKER_SHUTDOWN) under the lease it still holds,
	// and Run returns without waiting for it. Defaults to 5 s.
	CancelGrace time.Duration
	// Events, when set, receives an Event for every outcome the worker
	// records (Run's and Process's). The worker never waits for it: an
	// event that finds the channel full is dropped and counted
	// (EventsDropped, observe.EventsDropped), so give it a buffer and a
	// reader that keeps up. The worker never closes it. Defaults to nil:
	// no events.
	Events chan<- Event
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
	out.StopTimeout = cmp.Or(c.StopTimeout, StopTimeoutDefault)
	out.CancelGrace = cmp.Or(c.CancelGrace, CancelGraceDefault)
	out.ID = runcfg.ID(c.ID, "worker")
	out.Logger = runcfg.Logger(c.Logger)
	out.Metrics = runcfg.Metrics(c.Metrics)
	out.Repo = runcfg.Repo(c.Repo)
	return &out
}

// validate returns a *repo.InputError (see [New]) naming the first field
// that breaks a rule.
func (c *Config) validate() error {
	if err := runcfg.NonNegative("worker", runcfg.Duration{Field: "Config.LeaseDuration", Value: c.LeaseDuration},
		runcfg.Duration{Field: "Config.HeartbeatInterval", Value: c.HeartbeatInterval},
		runcfg.Duration{Field: "Config.RetryBackoffBase", Value: c.RetryBackoffBase},
		runcfg.Duration{Field: "Config.RetryBackoffCap", Value: c.RetryBackoffCap},
		runcfg.Duration{Field: "Config.WriteTimeout", Value: c.WriteTimeout},
		runcfg.Duration{Field: "Config.StopTimeout", Value: c.StopTimeout},
		runcfg.Duration{Field: "Config.CancelGrace", Value: c.CancelGrace}); err != nil {
		return err
	}
	switch {
	case c.Concurrency < 1:
		return runcfg.Invalid("worker", "Config.Concurrency", fmt.Sprintf("must be > 0, got %d", c.Concurrency))
	case c.HeartbeatInterval >= c.LeaseDuration:
		return runcfg.Invalid("worker", "Config.HeartbeatInterval", fmt.Sprintf("%s must be shorter than LeaseDuration %s", c.HeartbeatInterval, c.LeaseDuration))
	case c.RetryBackoffCap < c.RetryBackoffBase:
		return runcfg.Invalid("worker", "Config.RetryBackoffCap", fmt.Sprintf("%s is below RetryBackoffBase %s", c.RetryBackoffCap, c.RetryBackoffBase))
	case nilvalue.Is(c.Metrics):
		return runcfg.Invalid("worker", "Config.Metrics", fmt.Sprintf("is a nil %T", c.Metrics))
	case c.Tracer != nil && nilvalue.Is(c.Tracer):
		return runcfg.Invalid("worker", "Config.Tracer", fmt.Sprintf("is a nil %T", c.Tracer))
	}
	return runcfg.ValidID("worker", "Config.ID", c.ID)
}
