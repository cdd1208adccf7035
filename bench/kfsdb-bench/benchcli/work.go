package benchcli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/adapters/natsjs"
	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// Work defaults.
const (
	WorkConcurrencyDefault = 2
	WorkDurationDefault    = 30 * time.Second
	WorkStepDelayDefault   = 10 * time.Millisecond
	WorkWorkersDefault     = 4
)

// ErrorCodeInjectedFailure is the error code of the executions `kfsdb-bench work`
// fails on purpose (WorkOpts.FailRate).
const ErrorCodeInjectedFailure = "WORK_INJECTED_FAILURE"

// ErrorCodeNoCandidate is the error code of an attempt whose space has no
// candidate publication to bind at projection_built.
const ErrorCodeNoCandidate = "NO_CANDIDATE_PUBLICATION"

// WorkOpts are the options of Work.
type WorkOpts struct {
	// Concurrency is how many deliveries each worker runs at once
	// (1..64). Defaults to 2.
	Concurrency int
	// DatabaseURL is the database whose attempts to run. Required; the
	// command line defaults it to $DATABASE_URL.
	DatabaseURL string
	// Delivery is how attempts reach the workers: delivery.Postgres (the
	// default; each worker leases straight from the outbox),
	// delivery.Relay (a relay publishes to an in-process queue) or
	// delivery.NATS (a relay publishes to NATS JetStream, NATSURL).
	Delivery delivery.Mode
	// Duration is how long to run; Ctrl-C stops earlier. Required (> 0);
	// the command line defaults it to 30 s.
	Duration time.Duration
	// FailRate is the fraction (0..1) of executions that fail on purpose
	// with ErrorCodeInjectedFailure, to give operators failed attempts to
	// retry. Defaults to 0.
	FailRate float64
	// ID prefixes the relay's and the workers' ids. Defaults to
	// work-<host>-<pid>.
	ID string
	// LeaseDuration is the workers' lease. Defaults to the worker's
	// default (60 s).
	LeaseDuration time.Duration
	// MetricsListen is a host:port to serve Prometheus metrics on, at
	// /metrics, while Work runs: the relay's and workers' counters, the
	// statement latencies and the backlog gauges (module adapters/prom).
	// Defaults to empty: no server.
	MetricsListen string
	// NATSURL is the NATS server (comma-separated URLs of one cluster) of
	// delivery.NATS; required with it, refused without. Work creates the
	// stream and consumer (natsjs.EnsureStream) with their defaults.
	NATSURL string
	// Out receives the counters at the end, and the logs. Required.
	Out io.Writer
	// MaxConns bounds the process's pool (1..10000). Defaults to 0: a
	// connection per handler and per heartbeat, plus the relay's and the
	// listeners' (2*Workers*Concurrency+4). A fleet of processes on one
	// server sets it lower, or goes through PgBouncer.
	MaxConns int
	// PollInterval is the sources' and relay's longest sleep when nothing
	// wakes them (pgsource.Config.PollInterval). Defaults to 0: theirs
	// (1 s for a source, 200 ms for the relay).
	PollInterval time.Duration
	// PollJitter is the sources' pgsource.Config.PollJitter (0..1).
	// Defaults to 0.
	PollJitter float64
	// PollOnly disables LISTEN/NOTIFY (the relay's or the sources').
	// Defaults to false.
	// AsyncProgressCommits is repo.Config.AsyncProgressCommits for the
	// relay and the workers. Defaults to false.
	AsyncProgressCommits bool
	PollOnly             bool
	// StepDelay is how long the handler works on each checkpoint.
	// Defaults to 10 ms.
	StepDelay time.Duration
	// Verbose logs INFO records too. Defaults to false: WARN and above.
	Verbose bool
	// VisibilityTimeout is how long a published message may wait for a
	// worker before the relay publishes it again (relay delivery only).
	// Defaults to the relay's default (60 s).
	VisibilityTimeout time.Duration
	// Workers is how many workers run (1..64), each with Concurrency
	// handler slots. Defaults to 4.
	Workers int
}

// Validate reports the first missing or invalid field.
func (o *WorkOpts) Validate() error {
	if err := cmdkit.ValidateDatabaseURL(o.DatabaseURL); err != nil {
		return err
	}
	// PollInterval is the relay's too, not only a source's: checked below.
	if _, err := delivery.Check(o.Delivery, o.NATSURL, 0); err != nil {
		return err
	}
	switch {
	case o.Out == nil:
		return errors.New("invalid options: Out is required")
	case o.Duration <= 0:
		return fmt.Errorf("invalid options: Duration must be > 0, got %s", o.Duration)
	case o.Workers < 0 || o.Workers > 64:
		return fmt.Errorf("invalid options: Workers must be 1..64 (or 0 for %d), got %d", WorkWorkersDefault, o.Workers)
	case o.Concurrency < 0 || o.Concurrency > 64:
		return fmt.Errorf("invalid options: Concurrency must be 1..64 (or 0 for %d), got %d", WorkConcurrencyDefault, o.Concurrency)
	case o.FailRate < 0 || o.FailRate > 1:
		return fmt.Errorf("invalid options: FailRate must be 0..1, got %g", o.FailRate)
	case o.LeaseDuration < 0 || o.StepDelay < 0 || o.VisibilityTimeout < 0 || o.PollInterval < 0:
		return errors.New("invalid options: LeaseDuration, StepDelay, VisibilityTimeout and PollInterval must not be negative")
	case !(o.PollJitter >= 0 && o.PollJitter <= 1):
		return fmt.Errorf("invalid options: PollJitter must be 0..1, got %v", o.PollJitter)
	case o.MaxConns < 0 || o.MaxConns > 10000:
		return fmt.Errorf("invalid options: MaxConns must be 1..10000 (or 0 for 2*Workers*Concurrency+4), got %d", o.MaxConns)
	case len(o.ID) > 200:
		return errors.New("invalid options: ID must be at most 200 characters")
	}
	if err := cmdkit.ValidateMetricsListen(o.MetricsListen); err != nil {
		return err
	}
	return nil
}

// withDefaults is o, which Validate accepted, with its zero values
// filled.
func (o *WorkOpts) withDefaults() *WorkOpts {
	out := *o
	out.Delivery = cmp.Or(o.Delivery, delivery.Default)
	if out.Workers == 0 {
		out.Workers = WorkWorkersDefault
	}
	if out.Concurrency == 0 {
		out.Concurrency = WorkConcurrencyDefault
	}
	if out.StepDelay == 0 {
		out.StepDelay = WorkStepDelayDefault
	}
	if out.ID == "" {
		host, _ := os.Hostname()
		out.ID = fmt.Sprintf("work-%s-%d", host, os.Getpid())
	}
	return &out
}

// WorkResult is what Work did.
type WorkResult struct {
	// Counts are the relay's and the workers' counters (observe).
	Counts []observe.Count
	// HandlerRuns counts handler calls, InjectedFailures those failed on
	// purpose.
	HandlerRuns, InjectedFailures int64
	// Published, Acked and Retried are the in-process queue's counts
	// (relay delivery only).
	Published, Acked, Retried int64
}

// Work runs opts.Workers workers against opts.DatabaseURL for
// opts.Duration (or until ctx ends), then prints the counters. With
// delivery.Postgres each worker leases due attempts straight from the
// outbox (pgsource); with delivery.Relay a relay publishes them to an
// in-process queue the workers receive from, with delivery.NATS to a NATS
// JetStream stream. The handler walks each
// attempt's checkpoints, binding the space's oldest candidate publication
// at projection_built, and the worker completes it. Several `kfsdb-bench work`
// processes on one database share the outbox through SKIP LOCKED and the
// attempts through leases. It returns nil when the duration is over or ctx
// ends.
func Work(ctx context.Context, opts *WorkOpts) (*WorkResult, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return runWork(ctx, opts)
}

// runWork is Work on options Validate accepted.
func runWork(ctx context.Context, opts *WorkOpts) (*WorkResult, error) {
	res, err := work(ctx, opts.withDefaults())
	if err != nil {
		return nil, errors.New(redact.Text(err.Error(), opts.DatabaseURL))
	}
	return res, nil
}

func work(ctx context.Context, opts *WorkOpts) (*WorkResult, error) {
	out := cmdkit.NewSyncWriter(opts.Out)
	log := cmdkit.NewLogger(out, opts.Verbose)
	// A connection per handler and per heartbeat, the relay's claims and
	// its listener.
	maxConns := int32(2*opts.Workers*opts.Concurrency + 4)
	if opts.MaxConns > 0 {
		maxConns = int32(opts.MaxConns)
	}
	pool, reg, closeAll, err := cmdkit.OpenServedPool(ctx, opts.DatabaseURL, maxConns, opts.MetricsListen, out, log)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	counts := &observe.Counts{}
	var metrics observe.Metrics = counts
	if reg != nil {
		if metrics, err = runtimeMetrics(reg, counts); err != nil {
			return nil, err
		}
	}
	r := repo.New(&repo.Config{AsyncProgressCommits: opts.AsyncProgressCommits})
	h := &workHandler{pool: pool, stepDelay: opts.StepDelay, failRate: opts.FailRate}
	d, err := startDelivery(ctx, opts, pool, r, log, metrics)
	if err != nil {
		return nil, err
	}
	defer d.broker.Close()
	runs := d.runs
	for i := range opts.Workers {
		src, err := d.source(ctx)
		if err != nil {
			return nil, err
		}
		w, err := worker.New(pool, src, h, &worker.Config{
			ID: fmt.Sprintf("%s-w%d", opts.ID, i), Concurrency: opts.Concurrency, LeaseDuration: opts.LeaseDuration,
			Logger: log, Metrics: metrics, RetryBackoffBase: 200 * time.Millisecond, RetryBackoffCap: 2 * time.Second, Repo: r,
		})
		if err != nil {
			return nil, err
		}
		runs = append(runs, w.Run)
	}
	q := d.queue

	fmt.Fprintf(out, "work %s: %s delivery, %d workers x %d running for %s; Ctrl-C stops earlier\n", opts.ID, opts.Delivery, opts.Workers, opts.Concurrency, opts.Duration)
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, opts.Duration)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(runs))
	for i, run := range runs {
		wg.Go(func() {
			if err := run(rctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				errs[i] = err
			}
		})
	}
	wg.Wait()

	res := &WorkResult{Counts: counts.Snapshot(), HandlerRuns: h.runs.Load(), InjectedFailures: h.injected.Load()}
	if q != nil {
		res.Published, res.Acked, res.Retried = q.Stats()
	}
	fmt.Fprintf(out, "work %s: stopped after %s\n", opts.ID, time.Since(start).Round(time.Millisecond))
	for _, c := range res.Counts {
		fmt.Fprintf(out, "  %-28s %d\n", c.Counter, c.N)
	}
	fmt.Fprintf(out, "  %-28s %d\n  %-28s %d\n", "handler_runs", res.HandlerRuns, "handler_injected_failures", res.InjectedFailures)
	if q != nil {
		fmt.Fprintf(out, "  %-28s %d\n  %-28s %d\n  %-28s %d\n", "queue_published", res.Published, "queue_acked", res.Acked, "queue_retried", res.Retried)
	}
	return res, errors.Join(errs...)
}

// newWorkCommand is `kfsdb-bench work`, on the root's database URL.
func newWorkCommand(databaseURL *string) *cobra.Command {
	opts := &WorkOpts{}
	cmd := &cobra.Command{
		Use:   "work",
		Short: "run workers on a database's attempts for a while (--delivery postgres|relay|nats), then print counters",
		Args:  cmdkit.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.DatabaseURL, opts.Out = *databaseURL, cmd.OutOrStdout()
			return cmdkit.RunCommand(cmd.Context(), opts, func(ctx context.Context, opts *WorkOpts) error {
				_, err := runWork(ctx, opts)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.Var(&opts.Delivery, "delivery", delivery.Usage)
	f.StringVar(&opts.NATSURL, "nats-url", "", natsURLUsage+" (--delivery nats only)")
	f.DurationVar(&opts.Duration, "duration", WorkDurationDefault, "how long to run (Ctrl-C stops earlier)")
	f.IntVar(&opts.Workers, "workers", WorkWorkersDefault, "workers to run (1..64)")
	f.IntVar(&opts.Concurrency, "concurrency", WorkConcurrencyDefault, "deliveries each worker runs at once (1..64)")
	f.DurationVar(&opts.LeaseDuration, "lease", 0, "worker lease (default: the worker's, 60s)")
	f.DurationVar(&opts.VisibilityTimeout, "visibility", 0, "relay delivery: republish a message no worker took within this (default: the relay's, 60s)")
	f.DurationVar(&opts.StepDelay, "step-delay", WorkStepDelayDefault, "time the handler spends on each checkpoint")
	f.Float64Var(&opts.FailRate, "fail-rate", 0, "fraction (0..1) of executions that fail on purpose ("+ErrorCodeInjectedFailure+")")
	f.StringVar(&opts.ID, "id", "", "prefix of the workers' (and relay's) ids (default work-<host>-<pid>)")
	f.IntVar(&opts.MaxConns, "max-conns", 0, "bound the process's pool (default 2*workers*concurrency+4)")
	f.DurationVar(&opts.PollInterval, "poll-interval", 0, "longest sleep of an idle source or relay (default: theirs, 1s and 200ms)")
	f.Float64Var(&opts.PollJitter, "poll-jitter", 0, "postgres delivery: shorten each idle poll by a random part of up to this fraction (0..1) of the interval")
	f.BoolVar(&opts.PollOnly, "poll-only", false, "poll only, no LISTEN/NOTIFY (PgBouncer in transaction pooling mode)")
	f.BoolVar(&opts.Verbose, "verbose", false, "log INFO records too (default: WARN and above)")
	f.BoolVar(&opts.AsyncProgressCommits, "async-progress", false, asyncProgressUsage)
	f.StringVar(&opts.MetricsListen, "metrics-listen", "", cmdkit.MetricsListenUsage)
	return cmd
}

// workDelivery is how Work's attempts reach its workers: nothing to run
// for delivery.Postgres (each worker's pgsource leases from the outbox), a
// relay into the in-process queue for delivery.Relay, a relay into NATS
// JetStream for delivery.NATS.
type workDelivery struct {
	runs   []func(context.Context) error
	queue  *memqueue.Queue
	broker *delivery.Broker
	// source returns a worker's source.
	source func(ctx context.Context) (worker.Source, error)
}

func startDelivery(ctx context.Context, opts *WorkOpts, pool *pgxpool.Pool, r *repo.Repo, log *slog.Logger, metrics observe.Metrics) (*workDelivery, error) {
	d := &workDelivery{}
	var pub relay.Publisher
	switch opts.Delivery {
	case delivery.Postgres:
		d.source = func(context.Context) (worker.Source, error) {
			return pgsource.New(pool, &pgsource.Config{Logger: log, Metrics: metrics, PollOnly: opts.PollOnly, PollInterval: opts.PollInterval, PollJitter: opts.PollJitter, Repo: r})
		}
		return d, nil
	case delivery.Relay:
		d.queue = memqueue.New()
		pub = d.queue
		d.source = func(context.Context) (worker.Source, error) { return d.queue, nil }
	case delivery.NATS:
		b, err := delivery.DialNATS(ctx, opts.NATSURL, opts.ID, &natsjs.Config{LeaseDuration: opts.LeaseDuration})
		if err != nil {
			return nil, err
		}
		d.broker = b
		if pub, err = b.Publisher(); err != nil {
			b.Close()
			return nil, err
		}
		d.source = func(ctx context.Context) (worker.Source, error) { return b.Source(ctx) }
	}
	rl, err := relay.New(pool, pub, &relay.Config{
		ID: opts.ID + "-relay", Logger: log, Metrics: metrics, PollOnly: opts.PollOnly, Repo: r,
		PollInterval: cmp.Or(opts.PollInterval, 200*time.Millisecond), VisibilityTimeout: opts.VisibilityTimeout,
	})
	if err != nil {
		d.broker.Close()
		return nil, err
	}
	d.runs = append(d.runs, rl.Run)
	return d, nil
}

// workHandler compiles an attempt: one StepDelay per checkpoint, the
// space's candidate publication bound at projection_built.
type workHandler struct {
	pool      *pgxpool.Pool
	stepDelay time.Duration
	failRate  float64
	runs      atomic.Int64
	injected  atomic.Int64
}

func (h *workHandler) Work(ctx context.Context, job *worker.Job) error {
	h.runs.Add(1)
	if h.failRate > 0 && rand.Float64() < h.failRate {
		h.injected.Add(1)
		return worker.Fatal(ErrorCodeInjectedFailure, errors.New("failed on purpose (--fail-rate)"))
	}
	cps := kfstype.Checkpoints()
	for i := job.Attempt.Checkpoint.Rank() + 1; i <= kfstype.CheckpointSmokeEvalPassed.Rank(); i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.stepDelay):
		}
		cp := cps[i]
		if cp != kfstype.CheckpointProjectionBuilt || job.Attempt.CandidatePublicationID != nil {
			if err := job.Advance(ctx, cp); err != nil {
				return err
			}
			continue
		}
		id, fp, err := h.candidate(ctx, job.Attempt)
		if err != nil {
			return err
		}
		if err := job.BindCandidate(ctx, cp, id, fp); err != nil {
			return err
		}
	}
	return nil
}

// candidate finds the oldest candidate publication of the attempt's
// tenant and space.
func (h *workHandler) candidate(ctx context.Context, a *kfstype.Attempt) (uuid.UUID, string, error) {
	var id uuid.UUID
	var fp string
	err := h.pool.QueryRow(ctx, `
		SELECT id, fingerprint FROM projection_set_publications
		 WHERE tenant_id = $1 AND knowledge_space_id = $2 AND status = 'candidate'
		 ORDER BY created_at, id LIMIT 1`, a.TenantID, a.KnowledgeSpaceID).Scan(&id, &fp)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, "", worker.Fatal(ErrorCodeNoCandidate, fmt.Errorf("space %s of tenant %s has no candidate publication", a.KnowledgeSpaceID, a.TenantID))
	}
	if err != nil {
		return uuid.Nil, "", fmt.Errorf("look up candidate publication: %w", err)
	}
	return id, fp, nil
}
