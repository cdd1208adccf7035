// Package docsnippets holds, as compiled Go, every snippet the README and
// the guides in docs/ show (but the quick start and the test kit's
// example, which kfsdbtest/quickstart compiles and runs). Its test fails
// when a document shows Go that is not in one of these files, so no
// snippet can drift from an API that compiles. The functions are never
// called: each only gives its snippet the names it uses.
package docsnippets

import (
	"context"
	"log"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/knowledgefs/kfsdb/adapters/otel"
	"github.com/knowledgefs/kfsdb/adapters/prom"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/outcomes"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// compile stands for the application's handler.
func compile(context.Context, *worker.Job) error { return nil }

// StartInTransaction: docs/ADOPTING.md, "Using repo".
func StartInTransaction(ctx context.Context, pool *pgxpool.Pool, tenant string, space, asset uuid.UUID, rowVersion int32) error {
	var attemptID uuid.UUID
	r := repo.New(nil) // the database clock; repo.Config{Clock: …} for tests

	// Start inside your own transaction (the outbox pattern): your rows and the
	// attempt with its outbox row commit together.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// … insert the document asset …
		head, err := r.HeadRevision(ctx, tx, &repo.HeadRevisionParams{TenantID: tenant, KnowledgeSpaceID: space}) // what the attempt compiles against
		if err != nil {
			return err
		}
		res, err := r.Start(ctx, tx, &repo.StartParams{
			TenantID: tenant, KnowledgeSpaceID: space, DocumentAssetID: asset,
			DocumentVersion: 1, PublicationGenerationID: uuid.New(), BaseHeadRevision: head,
		})
		if err != nil {
			return err // *repo.HeadConflictError: the head moved on; read it again
		}
		attemptID = res.Attempt.ID // res.Created is false when a live attempt already existed
		return nil
	})
	if err != nil {
		return err
	}

	// Control plane, tenant-scoped, optional optimistic concurrency:
	_, err = r.Cancel(ctx, pool, &repo.CancelParams{AttemptRef: repo.AttemptRef{
		TenantID: tenant, KnowledgeSpaceID: space, AttemptID: attemptID, ExpectedRowVersion: &rowVersion}})
	return err
}

// DirectDelivery: docs/ADOPTING.md, "Running workers: direct delivery".
func DirectDelivery(ctx context.Context, pool *pgxpool.Pool, m observe.Metrics) error {
	src, err := pgsource.New(pool, &pgsource.Config{Metrics: m}) // LISTEN kfsdb_outbox + polling
	if err != nil {
		return err
	}
	w, err := worker.New(pool, src, worker.HandlerFunc(compile), &worker.Config{Concurrency: 8})
	if err != nil {
		return err
	}
	return w.Run(ctx) // runs the source too; returns once ctx ends and outcomes are recorded
}

// Stop: docs/ADOPTING.md, "Stopping a worker".
func Stop(w *worker.Worker) {
	// On SIGTERM: drain for up to 20 s (Config.StopTimeout, 15 s by default,
	// bounds it too), then cancel; abandon what has not returned 5 s later.
	stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rep, err := w.Stop(stopCtx) // Run returns nil
	log.Printf("stopped: %d finished, %d canceled, %d abandoned (%v)", rep.Finished, rep.Canceled, rep.Abandoned, err)
}

// ListenOutcomes: docs/ADOPTING.md, "Outcome events".
func ListenOutcomes(ctx context.Context, pool *pgxpool.Pool) error {
	err := outcomes.Listen(ctx, pool, func(o outcomes.Outcome) {
		log.Printf("attempt %s of %s ended %s %s", o.AttemptID, o.TenantID, o.RunState, o.ErrorCode)
	}, &outcomes.ListenConfig{Listening: func() { /* read what you wait for: earlier ends are not delivered */ }})
	return err
}

// WithBroker: docs/ADOPTING.md, "Running the relay and workers".
func WithBroker(ctx context.Context, pool *pgxpool.Pool, m observe.Metrics, myBroker *memqueue.Queue) {
	q := myBroker                                          // implements relay.Publisher and worker.Source (memqueue does both)
	rl, _ := relay.New(pool, q, &relay.Config{Metrics: m}) // LISTEN kfsdb_outbox + polling
	w, _ := worker.New(pool, q, worker.HandlerFunc(compile), &worker.Config{Concurrency: 8})
	go rl.Run(ctx)
	go w.Run(ctx)
}

// Prepared: docs/ADOPTING.md, "Connections that arrive warm".
func Prepared(url string, r *repo.Repo) {
	cfg, _ := pgxpool.ParseConfig(url)
	cfg.AfterConnect = r.Prepare // r := repo.New(nil)
}

// PgBouncer: docs/ADOPTING.md and docs/RELIABILITY.md, PgBouncer.
func PgBouncer(url string) {
	cfg, _ := pgxpool.ParseConfig(url) // url points at PgBouncer
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error { repo.RegisterTypes(c.TypeMap()); return nil }
}

// PgBouncerSimple: docs/RELIABILITY.md's form of the same.
func PgBouncerSimple(url string) {
	cfg, _ := pgxpool.ParseConfig(url)                          // url points at PgBouncer
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec // or QueryExecModeSimpleProtocol
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error { repo.RegisterTypes(c.TypeMap()); return nil }
	// relay.Config{PollOnly: true}: LISTEN does not survive transaction pooling
}

// MigrateUp: docs/MIGRATIONS.md.
func MigrateUp(ctx context.Context, databaseURL string) error {
	res, err := migrate.Up(ctx, databaseURL) // res.Mode, res.Applied, res.Version
	_ = res
	return err
}

// Metrics: docs/OPERATING.md, "Metrics (Prometheus)".
func Metrics(pool *pgxpool.Pool) {
	reg := prometheus.NewRegistry()
	m, _ := prom.New(reg, nil)           // relay / worker / pgsource Config.Metrics: kfsdb_*_total, start→succeeded histogram
	tr, _ := prom.NewTracer(reg, nil)    // pgxCfg.ConnConfig.Tracer = tr: kfsdb_statement_duration_seconds{query}
	c, _ := prom.NewCollector(pool, nil) // reg.MustRegister(c): attempts by state, outbox due, oldest due age (sampled ≤ every 15 s, capped)
	_, _, _ = m, tr, c
}

// Tracing: docs/OPERATING.md, "Tracing (OpenTelemetry)".
func Tracing(ctx context.Context, pool *pgxpool.Pool, tx pgx.Tx, tp trace.TracerProvider, p *repo.StartParams, r *repo.Repo, q *memqueue.Queue, h worker.Handler) {
	tr, _ := otel.NewTracer(tp, nil)        // pgxCfg.ConnConfig.Tracer = tr: a CLIENT span per statement, named Start, AcquireLease, …
	p.TraceContext = otel.TraceContext(ctx) // repo.StartParams, inside your request's span
	r.Start(ctx, tx, p)

	// relay path: a PRODUCER span "publish document.compile" per publication
	pub, _ := otel.WrapPublisher(q, tp)
	rl, _ := relay.New(pool, pub, &relay.Config{TraceContexts: true})
	// direct delivery: the source reads the Start's trace context with the leases
	src, _ := pgsource.New(pool, &pgsource.Config{TraceContexts: true})
	// either way: a CONSUMER span "process document.compile" per delivery
	wt, _ := otel.NewWorkerTracer(tp)
	w, _ := worker.New(pool, src, h, &worker.Config{Tracer: wt})
	_, _, _ = tr, rl, w
}
