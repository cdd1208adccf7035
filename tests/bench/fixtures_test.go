package bench

import (
	"context"
	"fmt"
	"reflect"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

const (
	benchTenant = "bench-tenant"
	benchWorker = "bench-worker"
	benchRelay  = "bench-relay"
)

// fixture is one attempt (or, for Start, one document asset to start)
// prepared for one benchmark operation.
type fixture struct {
	AssetID    uuid.UUID
	AttemptID  uuid.UUID
	OutboxID   uuid.UUID
	JobID      string
	LeaseToken uuid.UUID
}

func (f *fixture) lease() *repo.Lease {
	return &repo.Lease{AttemptID: f.AttemptID, WorkerID: benchWorker, Token: f.LeaseToken}
}

// fixtureSet is a fresh space holding the fixtures of one benchmark run.
type fixtureSet struct {
	SpaceID      uuid.UUID
	GenerationID uuid.UUID
	CandidateID  uuid.UUID
	Fingerprint  string
	Items        []fixture
}

// state is what a fixture's attempt looks like before the operation.
type state struct {
	// RunState is "" for no attempt at all (only the document asset: Start),
	// else dispatch_pending, queued or running.
	RunState   string
	Checkpoint string
}

// makeFixtures empties the tables and inserts n fixtures in state st with
// three statements (generate_series-style unnest, no transitions), then
// ANALYZEs and CHECKPOINTs so every run starts alike.
func makeFixtures(ctx context.Context, db *pgx.Conn, n int, st state) (*fixtureSet, error) {
	fs := &fixtureSet{SpaceID: uuid.New(), GenerationID: uuid.New(), CandidateID: uuid.New(), Items: make([]fixture, n)}
	fs.Fingerprint = testfactory.Fingerprint(fs.CandidateID.String())
	assets, attempts, outboxes, leases := make([]uuid.UUID, n), make([]uuid.UUID, n), make([]uuid.UUID, n), make([]uuid.UUID, n)
	jobs := make([]string, n)
	for i := range fs.Items {
		// UUIDv7 like repo.Start, so index locality matches production.
		f := fixture{AssetID: uuid.New(), AttemptID: uuid.Must(uuid.NewV7()), OutboxID: uuid.Must(uuid.NewV7()), LeaseToken: uuid.New()}
		f.JobID = "job-" + f.AttemptID.String()
		fs.Items[i] = f
		assets[i], attempts[i], outboxes[i], leases[i], jobs[i] = f.AssetID, f.AttemptID, f.OutboxID, f.LeaseToken, f.JobID
	}
	stmts := []struct {
		sql  string
		args []any
	}{
		{`TRUNCATE knowledge_spaces, document_assets, projection_set_publications, projection_set_publication_heads,
			document_compilation_attempts, document_compilation_outbox CASCADE`, nil},
		{`INSERT INTO knowledge_spaces (id, tenant_id, slug, name) VALUES ($1, $2, 'bench', 'Bench')`, []any{fs.SpaceID, benchTenant}},
		{`INSERT INTO projection_set_publications (id, tenant_id, knowledge_space_id, fingerprint, projection_version, status)
			VALUES ($1, $2, $3, $4, 1, 'candidate')`, []any{fs.CandidateID, benchTenant, fs.SpaceID, fs.Fingerprint}},
		{`INSERT INTO document_assets (id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
			SELECT a, $2, 'doc.pdf', 'application/pdf', 'objects/' || a, md5(a::text) || md5(a::text), 1024, 1
			  FROM unnest($1::uuid[]) AS a`, []any{assets, fs.SpaceID}},
	}
	if st.RunState != "" {
		stmts = append(stmts, struct {
			sql  string
			args []any
		}{`INSERT INTO document_compilation_attempts (
				id, tenant_id, knowledge_space_id, document_asset_id, document_version,
				publication_generation_id, base_head_revision, candidate_publication_id, candidate_fingerprint,
				checkpoint, run_state, active_slot, execution_attempts, max_execution_attempts,
				queue_job_id, worker_id, lease_token, lease_expires_at, heartbeat_at,
				row_version, created_at, updated_at, started_at)
			SELECT f.id, $1, $2, f.asset, 1, $3, 0,
			       CASE WHEN $5::text IN ('projection_built', 'smoke_eval_passed') THEN $11::uuid END,
			       CASE WHEN $5::text IN ('projection_built', 'smoke_eval_passed') THEN $12::text END,
			       $5::text, $4::text, 1, CASE WHEN $4::text = 'running' THEN 1 ELSE 0 END, 5,
			       CASE WHEN $4::text IN ('queued', 'running') THEN f.job END,
			       CASE WHEN $4::text = 'running' THEN $6::text END,
			       CASE WHEN $4::text = 'running' THEN f.lease END,
			       CASE WHEN $4::text = 'running' THEN now() + interval '1 hour' END,
			       CASE WHEN $4::text = 'running' THEN now() END,
			       0, now(), now(),
			       CASE WHEN $4::text = 'running' THEN now() END
			  FROM unnest($7::uuid[], $8::uuid[], $9::text[], $10::uuid[]) AS f(id, asset, job, lease)`,
			[]any{benchTenant, fs.SpaceID, fs.GenerationID, st.RunState, st.Checkpoint, benchWorker, attempts, assets, jobs, leases, fs.CandidateID, fs.Fingerprint}},
			struct {
				sql  string
				args []any
			}{`INSERT INTO document_compilation_outbox (
				id, attempt_id, event_type, schema_version, payload, idempotency_key, status,
				dispatch_attempts, available_at, queue_job_id, delivered_at, created_at, updated_at)
			SELECT f.oid, f.id, 'document.compile', 1, jsonb_build_object('attemptId', f.id),
			       'document.compile:' || f.id::text,
			       CASE $1::text WHEN 'dispatch_pending' THEN 'pending' WHEN 'queued' THEN 'dispatched' ELSE 'leased' END,
			       CASE WHEN $1::text = 'dispatch_pending' THEN 0 ELSE 1 END,
			       CASE WHEN $1::text = 'dispatch_pending' THEN now() ELSE now() + interval '1 hour' END,
			       CASE WHEN $1::text <> 'dispatch_pending' THEN f.job END,
			       CASE WHEN $1::text <> 'dispatch_pending' THEN now() END,
			       now(), now()
			  FROM unnest($2::uuid[], $3::uuid[], $4::text[]) AS f(oid, id, job)`,
				[]any{st.RunState, outboxes, attempts, jobs}})
	}
	for _, s := range stmts {
		if _, err := db.Exec(ctx, s.sql, s.args...); err != nil {
			return nil, fmt.Errorf("fixtures (%s): %w", st.RunState, err)
		}
	}
	if _, err := db.Exec(ctx, `ANALYZE knowledge_spaces, document_assets, projection_set_publications,
		document_compilation_attempts, document_compilation_outbox`); err != nil {
		return nil, fmt.Errorf("fixtures: analyze: %w", err)
	}
	// Best effort: needs superuser or pg_checkpoint.
	_, _ = db.Exec(ctx, "CHECKPOINT")
	return fs, nil
}

// captured is one statement as pgx received it.
type captured struct {
	SQL  string
	Args []any
}

// captureTracer records the statements of one call.
type captureTracer struct{ stmts []captured }

func (c *captureTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.stmts = append(c.stmts, captured{SQL: d.SQL, Args: append([]any(nil), d.Args...)})
	return ctx
}

func (c *captureTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// capture runs call inside a transaction that is rolled back, on its own
// traced connection, and returns the statements it sent: the SQL text and
// arguments the raw variant replays.
func capture(ctx context.Context, call func(tx pgx.Tx) error) ([]captured, error) {
	return captureOn(ctx, env.url, call)
}

// captureOn is capture on the database at url.
func captureOn(ctx context.Context, url string, call func(tx pgx.Tx) error) ([]captured, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	tr := &captureTracer{}
	cfg.Tracer = tr
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // rollback of a capture
	tr.stmts = nil
	if err := call(tx); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	return tr.stmts, nil
}

// swap is one substitution of a captured argument.
type swap struct{ from, to any }

// substitute returns args with every argument equal (reflect.DeepEqual) to
// some swap's from replaced by its to. It reports how many it replaced.
func substitute(args []any, swaps []swap) ([]any, int) {
	out := make([]any, len(args))
	n := 0
	for i, a := range args {
		out[i] = a
		for _, s := range swaps {
			if reflect.DeepEqual(a, s.from) {
				out[i] = s.to
				n++
				break
			}
		}
	}
	return out, n
}

// identity maps the captured fixture's identifying values to f's.
func identity(c, f *fixture) []swap {
	var out []swap
	for _, p := range [][2]any{
		{c.AttemptID, f.AttemptID}, {c.OutboxID, f.OutboxID}, {c.AssetID, f.AssetID},
		{c.JobID, f.JobID}, {c.LeaseToken, f.LeaseToken},
	} {
		if !reflect.ValueOf(p[0]).IsZero() {
			out = append(out, swap{p[0], p[1]})
		}
	}
	return out
}
