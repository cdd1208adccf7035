// Package loadgen is kfsdb's lifecycle load driver: P producers call
// repo.Start as fast as they can and a worker with W handler slots runs a
// no-op compilation, for a fixed duration. The worker leases straight from
// the outbox (delivery.Postgres, the default: pgsource), or a relay
// publishes through the in-process memqueue (delivery.Relay). By default the handler is the minimal
// lifecycle (Start → dispatch → lease → Complete): it asks the worker to
// complete through every checkpoint in one write (worker.Job.CompleteThrough).
// With StepCheckpoints it persists every checkpoint on the way (five
// Advance writes, binding a candidate at projection_built) before Complete.
// It reports lifecycle throughput (attempts/s from Start to succeeded),
// p50/p99 of start → succeeded and of every statement, round trips per
// attempt, WAL bytes and (with KFS_BENCH_CPU_FILE) server CPU per attempt,
// and dead tuples after the run. RunNoisyTenant is the fairness scenario.
//
// `kfsdb-bench bench` runs it on a scratch database of the server it is
// given, and tests/bench's TestLoadgen (KFS_LOADGEN=1, `make loadgen`) runs
// it with every knob. It never imports the test harness. It runs a
// stand-in handler, so the deploy binary (cmd/kfsdb) does not carry it.
package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
	"github.com/knowledgefs/kfsdb/repo"
)

// Defaults of Config.
const (
	DrainTimeoutDefault = 2 * time.Minute
	DurationDefault     = 10 * time.Second
	MaxAttemptsDefault  = 100_000
	ProducersDefault    = 8
	WorkersDefault      = 8
)

// Config configures Run.
type Config struct {
	// DatabaseURL is a migrated database; Run adds a tenant of its own.
	// Required.
	DatabaseURL string
	// Delivery is how attempts reach the worker. Defaults to
	// delivery.Postgres.
	Delivery delivery.Mode
	// NATSURL is the NATS server of delivery.NATS (required with it,
	// refused without); the run publishes to a stream of its own and
	// deletes it at the end.
	NATSURL string
	// DrainTimeout bounds the wait, after Duration, for the attempts
	// started to succeed. Defaults to 2 min.
	DrainTimeout time.Duration
	// Duration is how long the producers run. Defaults to 10 s.
	Duration time.Duration
	// Logger receives the relay's and worker's logs. Defaults to discarding.
	Logger *slog.Logger
	// MaxAttempts is how many document assets are created up front: the
	// producers stop early when they have started them all. Defaults to
	// 100,000.
	MaxAttempts int
	// Producers is how many goroutines call Start. Defaults to 8.
	Producers int
	// Rate paces the producers: attempts started per second by all of them
	// together (attempt i is due at i/Rate after the start), so latencies
	// can be compared at one offered load. 0 (the default): unpaced, each
	// producer starts its next attempt as soon as its Start returns.
	Rate float64
	// Spaces is how many knowledge spaces (each with its own candidate
	// publication) the assets are spread over, round robin. With one,
	// every Start's foreign-key check locks the same knowledge_spaces row
	// FOR KEY SHARE, as a bulk import into one space does. Defaults to 1.
	Spaces int
	// Workers is the worker's Concurrency. Defaults to 8.
	Workers int
	// HoldSnapshot keeps a REPEATABLE READ transaction with a snapshot
	// open on another connection for the whole run, as a long report or a
	// forgotten session would: vacuum cannot remove any row version that
	// dies meanwhile. Defaults to false.
	HoldSnapshot bool
	// StepCheckpoints makes the handler write each checkpoint (five
	// Advance calls) before Complete, as a handler that persists progress
	// does; otherwise it completes through them in one write. Defaults to
	// false.
	StepCheckpoints bool
	// AsyncProgressCommits is repo.Config.AsyncProgressCommits for the
	// relay and the worker (the producers' Start is synchronous either
	// way). Defaults to false.
	AsyncProgressCommits bool
	// SingleCompletions is worker.Config.SingleCompletions: each slot
	// completes its attempt itself instead of handing it to the worker's
	// completer. Defaults to false.
	SingleCompletions bool
	// Observe turns on what an application watching kfsdb runs: the
	// Prometheus adapter (counters, statement histogram, backlog
	// collector, gathered every 5 s) and OpenTelemetry tracing (every
	// Start in a request span, its trace context stored; statement,
	// publish and process spans, all sampled, batch-exported to a
	// discarding exporter). For measuring their overhead. Defaults to
	// false.
	Observe bool
	// PendingDeliveryWait is worker.Config.PendingDeliveryWait (0: its
	// default; negative: deliveries that beat their mark are handed back
	// at once).
	PendingDeliveryWait time.Duration
	// SourcePollInterval, when positive, makes the postgres delivery's
	// source poll only, every SourcePollInterval, with no LISTEN/NOTIFY
	// (pgsource.Config PollOnly and PollInterval): the floor's fetcher
	// polls every 1 ms, and this compares the wake-up paths like for like.
	// Zero: LISTEN/NOTIFY, pgsource's default. Other deliveries refuse it.
	SourcePollInterval time.Duration
}

// StatementStats are the latencies of one named statement.
type StatementStats struct {
	Count    int
	P50, P99 time.Duration
}

// TableStats are pg_stat_user_tables figures after the run.
type TableStats struct {
	LiveTuples, DeadTuples, Updates, HOTUpdates int64
}

// Result is what Run measured.
type Result struct {
	Producers, Workers, Spaces int
	// Delivery is Config's.
	Delivery delivery.Mode
	// Rate is Config's (0: unpaced).
	Rate float64
	// StepCheckpoints, AsyncProgressCommits and SingleCompletions are
	// Config's.
	StepCheckpoints, AsyncProgressCommits, SingleCompletions bool
	Duration                                                 time.Duration
	// SourcePollInterval is Config's (0: LISTEN/NOTIFY).
	SourcePollInterval time.Duration
	// Started and Completed count attempts over the whole run (window and
	// drain); CompletedInWindow only those that succeeded within Duration.
	Started, Completed, CompletedInWindow int64
	// Throughput is CompletedInWindow / Duration.
	Throughput float64
	// DrainRate is the attempts that succeeded after the window over the
	// time they took (the producers stopped): the worker's rate without
	// producers competing for the cores. 0 when nothing was left.
	DrainRate float64
	// StartToSucceeded are p50 and p99 over every completed attempt, from
	// just before Start to the worker's acknowledgement (after Complete).
	StartToSucceededP50, StartToSucceededP99 time.Duration
	// StartToCommittedP50 and StartToCommittedP99 are the same attempts'
	// times in the database, from created_at to the commit of their
	// completion (pg_xact_commit_timestamp of the succeeded row), as the
	// lifecycle benchmark measures every side; zero unless the server
	// runs with track_commit_timestamp = on.
	StartToCommittedP50, StartToCommittedP99 time.Duration
	// StartToCompletedAtP50 and StartToCompletedAtP99 are the same
	// attempts' completed_at - created_at: the completing statement's
	// now(), before its commit, which is how the seed-schema floor
	// (../shared/bench/lifecyclefloor) measures its own side.
	StartToCompletedAtP50, StartToCompletedAtP99 time.Duration
	// StartToHandlerP50 and StartToHandlerP99 are the waits of the same
	// attempts from just before Start to their handler being called.
	StartToHandlerP50, StartToHandlerP99 time.Duration
	// RoundTrips is the statements sent per completed attempt.
	RoundTrips float64
	// WALBytes is pg_wal_lsn_diff over the run per completed attempt.
	WALBytes float64
	// ServerCPU is the database server's CPU time over the run per
	// completed attempt, read from the file KFS_BENCH_CPU_FILE names; -1
	// when it is unset or unreadable.
	ServerCPU time.Duration
	// Statements are per-statement latencies, by sqlc query name.
	Statements map[string]StatementStats
	// Tables are the two tables' statistics after the run.
	Tables map[string]TableStats
	// Drained is false if DrainTimeout passed with attempts unfinished.
	Drained bool
	// Spans are the spans an observed run (Config.Observe) exported, by
	// name; nil when it was not observed.
	Spans map[string]int64
}

// Run drives the lifecycle load described in the package documentation.
func Run(ctx context.Context, cfg *Config) (*Result, error) {
	if cfg == nil || cfg.DatabaseURL == "" {
		return nil, errors.New("loadgen: DatabaseURL is required")
	}
	mode, err := delivery.Check(cfg.Delivery, cfg.NATSURL, cfg.SourcePollInterval)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	c := cfg.withDefaults(mode)
	pcfg, err := pgxpool.ParseConfig(c.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	tr := &tracer{lat: map[string][]time.Duration{}}
	pcfg.ConnConfig.Tracer = tr
	pcfg.MaxConns = int32(c.Producers + c.Workers + 4)
	// As a service would run: every connection prepares the hot path's
	// statements as it connects (repo.Repo.Prepare), as the floor's and
	// River's drivers prepare theirs.
	pcfg.AfterConnect = repo.New(nil).Prepare
	var in *instruments
	if c.Observe {
		if in, err = newInstruments(pcfg); err != nil {
			return nil, fmt.Errorf("loadgen: %w", err)
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("loadgen: connect: %w", err)
	}
	defer pool.Close()
	if in != nil {
		if err := in.run(pool); err != nil {
			return nil, fmt.Errorf("loadgen: %w", err)
		}
		defer in.stop()
	}

	sc, err := setup(ctx, pool, c.MaxAttempts, c.Spaces)
	if err != nil {
		return nil, err
	}
	if c.HoldSnapshot {
		release, err := holdSnapshot(ctx, c.DatabaseURL)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	if err := warmPool(ctx, pool); err != nil {
		return nil, err
	}
	l := newLoad(c, pool, sc, tr, in)
	defer l.stop()
	if err := l.startRuntime(ctx); err != nil {
		return nil, err
	}
	if err := l.warmUp(ctx); err != nil {
		return nil, err
	}
	walBefore, err := walPosition(ctx, pool)
	if err != nil {
		return nil, err
	}
	cpuBefore := serverCPUTime()
	m, err := l.drive(ctx)
	if err != nil {
		return nil, err
	}
	walAfter, err := walPosition(ctx, pool)
	if err != nil {
		return nil, err
	}
	m.cpu = -1
	if cpuAfter := serverCPUTime(); cpuBefore >= 0 && cpuAfter >= cpuBefore {
		m.cpu = cpuAfter - cpuBefore
	}
	l.stop()
	m.spans = in.stop()
	return l.result(ctx, m, walBefore, walAfter)
}

// withDefaults is c with its zero values filled and mode, checked, as
// its Delivery.
func (c *Config) withDefaults(mode delivery.Mode) *Config {
	out := *c
	out.Delivery = mode
	out.DrainTimeout = cmp.Or(c.DrainTimeout, DrainTimeoutDefault)
	out.Duration = cmp.Or(c.Duration, DurationDefault)
	out.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	out.Producers = cmp.Or(c.Producers, ProducersDefault)
	out.Spaces = max(c.Spaces, 1)
	out.Workers = cmp.Or(c.Workers, WorkersDefault)
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return &out
}

// holdSnapshot opens a REPEATABLE READ transaction and takes its snapshot,
// held until release: the long-transaction what-if.
func holdSnapshot(ctx context.Context, url string) (release func(), err error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("loadgen: connect snapshot holder: %w", err)
	}
	// Not the named result: the closure returned below calls it, and would
	// call itself once returned.
	closeConn := func() { _ = conn.Close(context.WithoutCancel(ctx)) }
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		closeConn()
		return nil, fmt.Errorf("loadgen: begin snapshot holder: %w", err)
	}
	var n int64
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM document_compilation_outbox").Scan(&n); err != nil {
		closeConn()
		return nil, fmt.Errorf("loadgen: take snapshot: %w", err)
	}
	return func() { _ = tx.Rollback(context.WithoutCancel(ctx)); closeConn() }, nil
}

func walPosition(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var lsn string
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return "", fmt.Errorf("loadgen: wal position: %w", err)
	}
	return lsn, nil
}

// warmPool opens every connection pool may hold before a measured window,
// as a service that has been running has them: otherwise the window's
// first few hundred milliseconds pay for connecting and authenticating
// them all at once, which on two cores dominates a p99. bench/river does
// the same.
func warmPool(ctx context.Context, pool *pgxpool.Pool) error {
	conns := make([]*pgxpool.Conn, 0, pool.Config().MaxConns)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("loadgen: warm the pool: %w", err)
		}
		conns = append(conns, c)
		if err := c.Ping(ctx); err != nil {
			return fmt.Errorf("loadgen: warm the pool: %w", err)
		}
	}
	return nil
}
